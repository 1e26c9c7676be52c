package sink

import "fmt"

// Mode is how a stream's rows are written. The pipeline sets it per
// stream (etl.Builder.Mode); package delivery names it delivery.Mode.
type Mode uint8

const (
	// Append adds every version of every record as a row (the default).
	Append Mode = iota
	// Merge upserts by primary key: the latest version of each key wins,
	// and deletes remove (or soft-delete, see Deletes) the key's row.
	Merge
	// Overwrite replaces the table's contents with each full refresh:
	// the rows a completed Sync wrote replace the table's in one step,
	// at Finish.
	Overwrite
)

// String returns "append", "merge" or "overwrite".
func (m Mode) String() string {
	switch m {
	case Append:
		return "append"
	case Merge:
		return "merge"
	case Overwrite:
		return "overwrite"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Deletes is what a Merge stream's deletes do to the key's row. The
// pipeline sets it per stream (etl.Builder.Deletes).
type Deletes uint8

const (
	// SoftDeletes keeps the key's row with ColumnDeleted true and the
	// delete's _openetl_op and _openetl_seq (the default).
	SoftDeletes Deletes = iota
	// HardDeletes removes the key's row.
	HardDeletes
)

// String returns "soft" or "hard".
func (d Deletes) String() string {
	switch d {
	case SoftDeletes:
		return "soft"
	case HardDeletes:
		return "hard"
	}
	return fmt.Sprintf("deletes(%d)", uint8(d))
}

// StreamSpec is what the pipeline decides about one stream, which its
// destination's writers must honour. The runner makes it once per
// attempt, from the builder's settings and the source's catalog, and
// hands it to every writer (WriterConfig.Streams); a destination's own
// configuration holds only physical options (partitioning, ordering,
// file sizes).
type StreamSpec struct {
	// Stream is the source's stream name.
	Stream string
	// Table is the stream's destination table name under the
	// destination's naming rules (Capabilities), the name Write gets.
	// It is given before the attempt's first batch and never changes
	// once given.
	Table string
	// Mode is the stream's write mode; default Append.
	Mode Mode
	// Key is the stream's primary key, in key order, each column under
	// the destination's naming rules (as the batches name it); empty
	// when the source declares none.
	Key []string
	// Deletes is what a Merge stream's deletes do; SoftDeletes unless the
	// pipeline says otherwise. Ignored for Append and Overwrite, which
	// write a delete as a row like any other version.
	Deletes Deletes
	// Columns is the stream's declared schema, in the source's order,
	// when the source declares one (a table of a SQL database); nil when
	// the schema is inferred from the data (JSON documents). The batches
	// Write gets may leave out columns the destination can't take
	// (Capabilities.Unsupported, SchemaChecker) and add the metadata
	// columns after these.
	Columns []Column
	// Types names the type system of Columns' Type: "postgres" or
	// "mysql" (the source's catalog says which).
	Types string
}

// Column is one column of a stream's declared schema.
type Column struct {
	// Name is the column's destination name, under the destination's
	// naming rules (as the batches name it).
	Name string
	// Type is the source's type name, as its catalog spells it
	// ("int4", "numeric(10,2)", "bigint unsigned"); package engine's doc
	// lists the Arrow type each becomes.
	Type string
	// Nullable is false when the source forbids nulls in the column.
	Nullable bool
}

// WriterConfig is what Destination.Writer gets: which writer of which
// pipeline, and every stream the attempt writes.
type WriterConfig struct {
	// Pipeline names the pipeline, so a destination shared by several
	// can keep them apart.
	Pipeline string
	// Lane is the writer's lane, from 0.
	Lane int
	// Streams holds the spec of every stream the attempt reads, the same
	// for every lane of the attempt, each with its table name resolved.
	// A stream's rows reach Write under its Table.
	Streams []StreamSpec
}

// Spec returns the spec of the stream written to table (Write's stream
// argument), or false when no stream of the attempt is written there.
func (c WriterConfig) Spec(table string) (StreamSpec, bool) {
	for _, s := range c.Streams {
		if s.Table == table {
			return s, true
		}
	}
	return StreamSpec{}, false
}

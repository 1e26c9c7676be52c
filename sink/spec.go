package sink

import "fmt"

// Mode is how a stream's rows are written. The pipeline sets it per
// stream (etl.Builder.Mode); package delivery names it delivery.Mode.
type Mode uint8

const (
	// Append adds every version of every record as a row (the default).
	Append Mode = iota
	// Merge upserts by primary key: the latest version of each key wins,
	// and deletes remove (or soft-delete) the row.
	Merge
	// Overwrite replaces the table's contents with each full refresh.
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

// StreamSpec is what the pipeline decides about one stream that its
// destination must honour.
type StreamSpec struct {
	// Stream is the source's stream name.
	Stream string
	// Table is the stream's destination table name under the
	// destination's naming rules (Capabilities), the name Write gets.
	// It is exact unless two streams' names fold to the same name (the
	// later one then gets a suffix _2, _3, ... at its first batch).
	Table string
	// Mode is the stream's write mode.
	Mode Mode
	// Key is the stream's primary key, in key order, each column under
	// the destination's naming rules (as Table); empty when the source
	// declares none.
	Key []string
}

// SpecChecker may be implemented by a Destination whose own
// configuration must agree with the pipeline's streams (a table it was
// told to merge, a partition spec that needs the key). The runner asks
// it about each selected stream when the pipeline is built and before
// each attempt claims the pipeline; an error fails Build (or the
// attempt, before anything is claimed or written), named by the
// stream. It must not change anything, and should be cheap: no I/O.
type SpecChecker interface {
	CheckStream(spec StreamSpec) error
}

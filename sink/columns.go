package sink

// The metadata columns the engine adds to every stream's batches, after
// the stream's own columns, and the names a destination may add of its
// own. Source fields whose names start with ReservedPrefix, compared
// without regard to case, never reach a destination under that name (see
// package engine for what the engine does with them).
//
//	_openetl_id        utf8: the record version's ID, stable across replays
//	_openetl_op        utf8: OpInsert, OpUpdate or OpDelete
//	_openetl_seq       int64: the record's position in its source (seq)
//	_openetl_synced_at timestamp[us, UTC]: when the pipeline read it
//
// A table that several streams are routed into (etl.Builder.Route) has,
// after those, ColumnStream:
//
//	_openetl_stream    utf8, never null: the source stream the row came from
//
// A merge destination that keeps deleted rows as tombstones marks them
// with a boolean ColumnDeleted.
const (
	ReservedPrefix = "_openetl_"

	ColumnID       = "_openetl_id"
	ColumnOp       = "_openetl_op"
	ColumnSeq      = "_openetl_seq"
	ColumnSyncedAt = "_openetl_synced_at"
	ColumnDeleted  = "_openetl_deleted"
	ColumnStream   = "_openetl_stream"
)

// The values of ColumnOp.
const (
	OpInsert = "insert"
	OpUpdate = "update"
	OpDelete = "delete"
)

// Arrow field metadata the engine sets where a column's Arrow type does
// not say all: LogicalTypeKey = LogicalTypeEnum on a utf8 column holding
// the label of a declared enum (a Postgres enum type, a MySQL ENUM), which
// a destination may store as a dictionary (ClickHouse
// LowCardinality(String)). No other field has metadata.
const (
	LogicalTypeKey  = "openetl.logical_type"
	LogicalTypeEnum = "enum"
)

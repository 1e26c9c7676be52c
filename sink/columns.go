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

// PatchMetadataKey marks a patch batch: Arrow schema metadata whose
// value is PatchMetadataValue. Only a destination whose Capabilities
// declare Patches gets one, in a normal epoch, through Write, from the
// runner releasing held values. Its fields are one or more of the
// table's columns (by their destination names, of the column's current
// type), then ColumnID and ColumnSeq: each row says "set these columns
// of the row whose ColumnID is this one, where the row holds a null
// there" — a null in the batch sets nothing. A patch adds no row: one
// whose ColumnID matches no row (a merge table's row replaced by a newer
// version, or deleted) changes nothing. It is staged and applied with
// the epoch's other rows, under the epoch's fence, exactly once with
// it. ColumnSeq is the seq of the row version the value was held from,
// for the destination's own checks and logs; it is not written.
const (
	PatchMetadataKey   = "openetl.patch"
	PatchMetadataValue = "true"
)

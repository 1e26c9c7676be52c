// Package source defines the contract every source connector implements:
// the built-in ones (source/faker, source/postgres, source/mysql,
// source/kafka) and any a user writes. Built-in connectors use nothing but
// this package, so a user's connector can do everything they do.
//
// A Source describes its streams (Discover), says how exactly it can replay
// (Replay) and opens splits (Open). The runner calls Split.Read on one
// goroutine per split; the split emits records and, between them, resume
// points: opaque states from which it can restart. Checkpoints are placed
// right after resume points, so a pipeline restarted from a checkpoint
// calls Open again with the states saved there and the split continues from
// exactly that place.
//
// # Optional capabilities
//
// Beyond the required methods a connector may implement optional
// capabilities; the runner asserts each on the value it applies to and
// uses what it finds, and a value that implements none works the same,
// with less reported about it or done for it:
//
//	Source   Acker             acknowledges committed positions upstream
//	         Closer            holds resources between attempts
//	         Classifier        tells failures no retry fixes (Run stops)
//	         Resnapshotter     reads a stream's table again on request
//	         Sharder           deals its splits into fixed shards
//	Split    LagReporter       how far it is behind the source's end
//	         SnapshotReporter  how far its copy of a table is
//	         PauseReporter     whether it stopped fetching (backpressure)
//	Emitter  Reporter          the runner's: a split's notices (a reset,
//	                           a schema change)
//
// Each built-in connector asserts the ones it implements at compile time
// (var _ source.Acker = (*Source)(nil)). A wrapper of a Source, Split or
// Emitter (a test kit's, a user's middleware) implements every one and
// forwards it, whether the value it wraps has it or not: each is written
// so that forwarding to a value without it means the same as not
// implementing it. Its Ack or Close returns nil, its Resnapshot an
// error wrapping errors.ErrUnsupported, its Shard one wrapping
// ErrUnshardable, its Lag,
// SnapshotProgress or Paused returns ok false, and its Report drops the
// notice, when the wrapped value lacks the method.
// sourcetest.CheckWrapper tests a wrapper for that.
//
// # A lost position
//
// When the data at a resume state is gone from the source for good (a
// replication slot dropped, a binlog purged, a Kafka offset removed by
// retention), Open or Read return an error matching ErrPositionLost. The
// SQL connectors can instead start over from a new snapshot, as their
// Config.OnPositionLost (a PositionLostPolicy) says, and report it
// (NoticeReset).
package source

import (
	"context"
	"errors"
	"fmt"
)

// Op is the kind of change a record carries.
type Op uint8

// The operations a record can carry. Only change-data-capture streams emit
// OpUpdate and OpDelete; snapshot rows and documents are OpInsert.
const (
	OpInsert Op = 1
	OpUpdate Op = 2
	OpDelete Op = 3
)

// String returns the name written to the _openetl_op column.
func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Valid reports whether o is one of the defined operations.
func (o Op) Valid() bool { return o >= OpInsert && o <= OpDelete }

// Replay is the class of replay a source offers after a restart from a
// saved resume state. It decides, with the destination, the stream's
// delivery guarantee (package delivery).
type Replay uint8

const (
	// ReplayNone: the source cannot replay; records read but not committed
	// may be lost after a crash.
	ReplayNone Replay = iota
	// ReplaySuperset: a replay yields every record after the resume state,
	// possibly with some before it again (a cursor on a timestamp, say).
	ReplaySuperset
	// ReplayExact: a replay yields exactly the records after the resume
	// state, in the same order, with the same seq values.
	ReplayExact
)

// String returns "none", "superset" or "exact".
func (r Replay) String() string {
	switch r {
	case ReplayNone:
		return "none"
	case ReplaySuperset:
		return "superset"
	case ReplayExact:
		return "exact"
	}
	return fmt.Sprintf("replay(%d)", uint8(r))
}

// Format says how a stream's payloads are encoded.
type Format uint8

const (
	// FormatJSON: each payload is one JSON object, a document whose schema
	// the engine infers, only ever widening it.
	FormatJSON Format = iota
	// FormatRow: each payload is one row of the stream's declared Columns,
	// encoded with AppendRow; the engine coerces each value, given in the
	// source's text form, to the column's exact Arrow type.
	FormatRow
)

// The type systems a declared column's Type is named in (Stream.Types).
const (
	TypesPostgres = "postgres" // Postgres type names: int4, numeric(10,2), timestamptz, _int4 ...
	TypesMySQL    = "mysql"    // MySQL type names: bigint unsigned, decimal(20,4), datetime ...
)

// Column is one declared column of a FormatRow stream.
type Column struct {
	// Name is the column's name at the source.
	Name string
	// Type is the source's type name as the source's catalog spells it,
	// with modifiers: "int4", "numeric(10,2)", "timestamptz", "_int4" or
	// "int4[]", "bigint unsigned", "decimal(20,4)", "enum('a','b')". The
	// engine package doc lists how each maps to Arrow.
	Type string
	// Nullable is false when the source forbids nulls in the column.
	Nullable bool
}

// Stream describes one table or topic.
type Stream struct {
	// Name identifies the stream within its source; it becomes the
	// destination table's name. It must be non-empty and unique in the
	// catalog, at most 200 bytes, without '/', '\\' or control characters,
	// not starting with '.' or '_' and not ending in ".lock" (it names
	// directories and objects).
	Name string
	// Format of the stream's payloads.
	Format Format
	// PrimaryKey lists the key's field names, in key order; empty when the
	// stream has none. A keyed stream's records carry the encoded key;
	// one that comes without a key is quarantined missing_key.
	PrimaryKey []string
	// CDC is true when the stream emits updates and deletes as well as
	// inserts.
	CDC bool
	// Columns is the declared schema of a FormatRow stream, in the order
	// its row payloads list values; empty for FormatJSON.
	Columns []Column
	// Types names the type system of Columns' types: TypesPostgres
	// (default when empty) or TypesMySQL.
	Types string
}

// Catalog is what a source reports it can read.
type Catalog struct {
	Streams []Stream
}

// Stream returns the stream named name, or false.
func (c Catalog) Stream(name string) (Stream, bool) {
	for _, s := range c.Streams {
		if s.Name == name {
			return s, true
		}
	}
	return Stream{}, false
}

// SplitID names a split. It must stay the same across restarts for the
// same unit of reading, because resume states are saved under it. It must be
// non-empty.
type SplitID string

// Source is a connector that reads data. Its methods may be called from
// different goroutines, but never concurrently with each other.
type Source interface {
	// Discover reports the streams the source can read. The runner calls
	// it once per attempt before Open, and Build may call it too; it must
	// be cheap enough to call on every sync and must not start reading.
	Discover(ctx context.Context) (Catalog, error)

	// Replay reports the source's replay class. It must not change over the
	// life of the source.
	Replay() Replay

	// Open prepares reading the named streams (a subset of the catalog) and
	// returns the splits to read, once per attempt. resume holds the states
	// saved at the checkpoint the attempt resumes from, by split ID; a
	// split without a saved state starts from the beginning. A split ID in
	// resume that no longer exists may be ignored. The states are only
	// valid for the duration of the call: copy what you keep.
	Open(ctx context.Context, streams []string, resume map[SplitID][]byte) ([]Split, error)
}

// Split is one unit of parallel reading.
type Split interface {
	// ID names the split; stable across restarts.
	ID() SplitID

	// Read emits records and resume points through e until ctx is
	// cancelled, an error occurs, or, when bounded is true (a scheduled
	// sync), the split reaches the source's end as it was when Read began;
	// it then returns nil. The runner calls Read once per attempt, on a
	// goroutine of its own. Read must return promptly once ctx is done or
	// an Emitter method returns an error, returning that error (or
	// ctx.Err()).
	//
	// Before returning nil, Read must call e.ResumePoint with the state
	// after its last record, so the end is a place to resume from.
	Read(ctx context.Context, e Emitter, bounded bool) error
}

// Emitter receives what a split reads. It is only valid during Read, and
// only from the goroutine that called Read.
type Emitter interface {
	// Record emits one record of stream (a name from the catalog). seq is
	// the record's position in the source's order; a later version of the
	// same row has a higher one. key is the encoded primary key (empty for
	// a stream without one). The runner copies key and payload before
	// Record returns, so the split may reuse their memory. Record may
	// block while downstream queues are full (backpressure); it returns an
	// error when the pipeline is stopping, which Read must return.
	Record(stream string, op Op, seq int64, key, payload []byte) error

	// ResumePoint declares that every record emitted so far is reflected
	// in state, and that a split reopened with state continues right after
	// them. The runner copies state. Checkpoints are placed only after
	// resume points, so a split that never calls it never checkpoints. It
	// returns an error when the pipeline is stopping, which Read must
	// return.
	ResumePoint(state []byte) error
}

// Errors returned by the runner to splits and by helpers in this package.
var (
	// ErrStopping is returned by Emitter methods once the runner has all it
	// needs from the split (the final checkpoint is placed, or the attempt
	// failed). Read must return it.
	ErrStopping = errors.New("source: pipeline is stopping")

	// ErrReopen, wrapped in the error a split's Read returns, says that
	// the source's catalog changed under a running attempt (a column or
	// a table appeared) and that a new attempt, which discovers and
	// opens it again, will read on. The runner then ends the attempt as
	// a failed one (what was read after the last checkpoint is read
	// again, so nothing is lost or repeated) and starts the next itself:
	// Run and Sync go on without returning, and the host sees a Warn log
	// line and sync events. After a few reopens in a row that committed
	// nothing, the runner returns the error instead.
	ErrReopen = errors.New("source: the catalog changed; reopen")

	// ErrPositionLost is matched (errors.Is) by the error a connector's
	// Open or Read returns when the data at a split's resume position is
	// gone from the source for good: a replication slot dropped or past
	// its WAL, a binlog purged, a Kafka offset removed by retention.
	// Going on from the checkpoint would lose changes, so the attempt
	// fails, and etl.IsPermanent reports it: the connector's own error
	// says what to do (start over from a new snapshot, or let the
	// connector re-snapshot by itself: see PositionLostPolicy). Each
	// built-in connector's position-lost error matches it.
	ErrPositionLost = errors.New("source: resume position lost")

	// ErrUnknownStream is wrapped by the error a Resnapshotter returns
	// for a stream it doesn't have (and by etl.Pipeline.Resnapshot's for
	// a stream the pipeline doesn't read).
	ErrUnknownStream = errors.New("source: no such stream")
	// ErrNoKey is wrapped by the error a Resnapshotter returns for a
	// stream without a primary key: its rows read again can't be
	// matched to the changes streamed meanwhile.
	ErrNoKey = errors.New("source: stream has no primary key")

	// ErrUnshardable is wrapped by the error a Sharder returns when it
	// can't read the shard asked for (one MySQL binlog is one shard; a
	// Kafka shard that owns no partition), and by etl.Builder.Build's
	// for a sharded pipeline whose source is no Sharder.
	ErrUnshardable = errors.New("source: can't be sharded so")
)

// PositionLostPolicy says what a connector does when the data at a
// split's resume position is gone from the source for good (what
// ErrPositionLost stands for). The SQL connectors take it as
// Config.OnPositionLost (source/postgres: a replication slot dropped,
// past its WAL or advanced past the position; source/mysql: a binlog
// purged). A connector of your own with a way to start over can take it
// the same way.
type PositionLostPolicy uint8

const (
	// PositionLostFail, the default, fails Open (or Read) with the
	// connector's error, which matches ErrPositionLost and which
	// etl.IsPermanent reports: the host decides, by starting the
	// pipeline over from a new snapshot (a new name, or its checkpoints
	// removed) or by setting PositionLostResnapshot.
	PositionLostFail PositionLostPolicy = iota
	// PositionLostResnapshot starts over as a first sync does, from a
	// new snapshot of every stream opened, and says so: the split whose
	// position was lost reports a NoticeReset (a source.reset event,
	// whose Err is the connector's position-lost error) when its Read
	// starts, and the connector logs a Warn line. The new snapshot's rows
	// have higher seqs than anything read before, so a merge destination
	// converges on the source again, except that rows deleted while the
	// position was lost stay at the destination (no change reports their
	// deletion); an append destination receives every row again. If the
	// new snapshot fails before its first checkpoint, the next attempt
	// (resuming from the same checkpoint, whose position is still lost)
	// starts over again.
	PositionLostResnapshot
)

// String returns "fail" or "resnapshot".
func (p PositionLostPolicy) String() string {
	switch p {
	case PositionLostFail:
		return "fail"
	case PositionLostResnapshot:
		return "resnapshot"
	}
	return fmt.Sprintf("position-lost-policy(%d)", uint8(p))
}

// Valid reports whether p is one of the defined policies.
func (p PositionLostPolicy) Valid() bool { return p <= PositionLostResnapshot }

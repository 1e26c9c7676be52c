package source

import (
	"context"
	"time"
)

// The optional capabilities of the source contract, listed in the
// package doc, with the rule for wrappers.

// Acker may be implemented by a Source that acknowledges positions
// upstream (Kafka group offsets, a Postgres slot's confirmed LSN).
type Acker interface {
	// Ack tells the source that the records up to these resume states are
	// committed at the destination and will never be read again by this
	// pipeline. The runner calls it once per committed epoch, one
	// checkpoint behind (after epoch N is applied it acknowledges the
	// states of epoch N-1), from the commit goroutine, never concurrently
	// with itself. A failed Ack is logged and retried with the next epoch;
	// it never fails the sync.
	Ack(ctx context.Context, states map[SplitID][]byte) error
}

// Closer may be implemented by a Source that holds resources between
// attempts (connections, a client). The runner never calls it: the host
// that made the source closes it, after the last attempt returned.
type Closer interface {
	Close(ctx context.Context) error
}

// LagReporter may be implemented by a Split to report how far it
// is behind the source's end. The runner calls Lag about once a second
// and when an epoch commits, from a goroutine of its own, concurrently
// with Read: it must be safe for concurrent use, cheap, and must not do
// I/O (keep the numbers Read and a background poll update, in atomics).
type LagReporter interface {
	// Lag returns how far the split is behind the source's end: behind in
	// the source's own unit, named by unit ("message" for Kafka offsets,
	// "byte" for a Postgres WAL position), and age, how old the oldest
	// record not yet read is (negative when the source can't tell). ok
	// is false when the split can't tell now; the split is then left out
	// of the lag.
	Lag() (behind int64, unit string, age time.Duration, ok bool)
}

// SnapshotReporter may be implemented by a Split that reads a
// snapshot of a table (a first copy before streaming changes, or a
// chunk of one), to report how far it is. Same calling rules as
// LagReporter.
type SnapshotReporter interface {
	// SnapshotProgress returns the stream the split is copying, the rows
	// copied so far (over all attempts, when the split resumes a copy)
	// and the rows the source estimates the copy holds (0 when unknown;
	// an estimate such as Postgres's reltuples may be off either way).
	// ok is false when the split is not copying a snapshot (never did,
	// or is done and streams changes now).
	SnapshotProgress() (stream string, done, estimated int64, ok bool)
}

// PauseReporter may be implemented by a Split that stops fetching
// from its source when the runner's queues are full (backpressure), as
// a Kafka partition's split does when its fetch buffer is full. Same
// calling rules as LagReporter. The runner emits a stream.paused event when
// a poll finds the split paused after finding it not paused (or at the
// first poll), and stream.resumed when a later poll finds it
// resumed; a pause shorter than the poll interval (about a second) may go
// unseen.
//
// For splits that don't implement it, or whose Paused returns ok false,
// the runner reports the pauses it causes itself: a split is paused
// while its records have waited on the runner's full engine queue, or
// for the alignment of a barrier it placed (which the engine stage
// reaches only after the batches queued before it), for at least
// PauseAfter without a break (while it waits, its Read is blocked in
// the Emitter, so it reads nothing from its source). Shorter
// waits — the ordinary throttling of a source faster than the engine or
// the destination — are only counted (etl.SplitStatus.Backpressure, the
// openetl.backpressure.duration metric).
type PauseReporter interface {
	// Paused returns whether the split has stopped fetching from its
	// source because the runner's queues are full, and since when (the
	// zero time when not paused). ok is false when the split can't tell
	// (a wrapper of a split without Paused); the runner then judges by
	// what it sees itself.
	Paused() (paused bool, since time.Time, ok bool)
}

// Reporter is implemented by the Emitter the runner hands to Split.Read.
// A split asserts it (e.(source.Reporter)) to report what the host should
// know and no record shows: that it could not go on from its resume state
// and started over, or that a schema change left rows at the destination
// different from the source's, or how reading a table again goes. The
// runner logs each Notice at Warn (Info for a re-snapshot's) and
// delivers it to the pipeline's OnEvent callback as an event of the
// notice's Kind. Like the Emitter's other methods, Report is only called
// from the goroutine that called Read; it does not block.
type Reporter interface {
	Report(Notice)
}

// Notice is one thing a split reports through a Reporter.
type Notice struct {
	// Kind is NoticeReset, NoticeSchemaChanged, NoticeResnapshotStarted
	// or NoticeResnapshotDone.
	Kind string
	// Stream is the stream concerned; empty for every stream of the
	// split.
	Stream string
	// Column, Change and To describe a schema change: the column, what
	// happened to it ("added") and its type.
	Column, Change, To string
	// Detail says what happened and what it means for the destination,
	// without row data.
	Detail string
	// Err is the cause, when there is one (the error a reset recovered
	// from).
	Err error
}

// The kinds of Notice: the runner's event kinds of the same names.
const (
	// NoticeReset: the split could not go on from its resume state (a
	// replication slot or binlog gone) and started over from a new
	// snapshot of its streams.
	NoticeReset = "source.reset"
	// NoticeSchemaChanged: a stream's schema changed in a way its records
	// alone don't carry to the destination (a column added with a
	// default that rows not changed since read).
	NoticeSchemaChanged = "schema.changed"
	// NoticeResnapshotStarted: the split began reading Stream's table
	// again on request (see Resnapshotter), while it goes on streaming.
	NoticeResnapshotStarted = "resnapshot.started"
	// NoticeResnapshotDone: the split has read Stream's table again;
	// Detail says how many rows.
	NoticeResnapshotDone = "resnapshot.done"
)

// Resnapshotter may be implemented by a Source that can read one
// stream's table again while it streams changes (source/postgres and
// source/mysql do),
// for a destination that lost or mangled rows, or a stream whose
// transform changed. etl.Pipeline.Resnapshot calls it.
type Resnapshotter interface {
	// Resnapshot asks for stream to be read again. It returns once the
	// request is durable at the source (it may be carried out by a
	// later attempt); progress is reported as the SnapshotProgress of
	// the split that reads it, and by NoticeResnapshotStarted and
	// NoticeResnapshotDone. A stream the source doesn't have fails with
	// an error wrapping ErrUnknownStream, one without a primary key with
	// ErrNoKey. A wrapper of a Source without it returns an error
	// wrapping errors.ErrUnsupported.
	Resnapshot(ctx context.Context, stream string) error
}

// Classifier may be implemented by a Source that can tell a failure no
// retry will fix: credentials the server refuses, a database or user
// that does not exist, a privilege the source's user lacks. When an
// attempt fails, the runner asks the pipeline's source (and its
// destination, see sink.Classifier) about the error; if either says
// Permanent, the error is marked so (etl.IsPermanent reports true, the
// error itself is unchanged for errors.Is and As) and Run returns it at
// once instead of retrying for its budget. Permanent must be cheap and
// must not do I/O; it sees every failure of the attempt, the
// destination's included, so it answers only for errors it recognizes.
type Classifier interface {
	Permanent(err error) bool
}

// Sharder may be implemented by a Source whose splits can be dealt into
// a fixed number of shards, each read by a pipeline of its own (possibly
// on another host): etl.Builder.Shard calls it. source/kafka deals
// partitions (partition p is shard p mod count's); source/postgres is
// sharded by configuration (each shard's Source has its own tables,
// publication and slot, and Shard returns it as it is); source/mysql
// refuses (one binlog is one shard).
type Sharder interface {
	// Shard returns a Source that reads shard index (0 <= index < count)
	// of count: a fixed share of the receiver's splits, such that shards
	// 0..count-1 together read every split once and no split twice,
	// whatever host runs which. Which splits a shard reads must depend
	// only on index, count and the splits' identity, never on timing or
	// on which other shards run: etl.Reshard hands each split's resume
	// state to the shard of the new count that reads it. It returns the
	// receiver itself when its configuration already is the shard
	// (etl.Reshard refuses such a source); otherwise a new Source that
	// the caller closes (Closer) when done, and that stays valid after
	// the receiver is closed. An error wraps ErrUnshardable when the
	// source can't be read as that shard.
	Shard(index, count int) (Source, error)
}

package source

import "time"

// The optional capabilities of a Split. The runner asserts each on every
// split it opens and uses what it finds; a split that implements none
// works the same, with less reported about it. (The optional
// capabilities of a Source are Acker and Closer, and of the Emitter the
// runner hands to Read, Reporter.)

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
// For splits that don't implement it, the runner reports the pauses it
// causes itself: a split is paused while its records have waited on the
// runner's full engine queue for at least PauseAfter without a break
// (while it waits, its Read is blocked in the Emitter, so it reads
// nothing from its source). Shorter waits — the ordinary throttling of a
// source faster than the engine or the destination — are only counted
// (etl.SplitStatus.Backpressure, the openetl.backpressure.duration
// metric).
type PauseReporter interface {
	// Paused returns whether the split has stopped fetching from its
	// source because the runner's queues are full, and since when (the
	// zero time when not paused).
	Paused() (paused bool, since time.Time)
}

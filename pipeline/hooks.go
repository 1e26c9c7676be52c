package pipeline

import (
	"sync/atomic"
	"time"
)

// LagReporter may be implemented by a source.Split to report how far it
// is behind the source's end. The runner calls Lag about once a second
// and when an epoch commits, from a goroutine of its own, concurrently
// with Read: it must be safe for concurrent use, cheap, and must not do
// I/O (keep the numbers Read and a background poll update, in atomics).
//
// The interface uses only standard types, so a connector implements it
// without importing this package (connectors import only the
// contracts).
type LagReporter interface {
	// Lag returns how far the split is behind the source's end: behind in
	// the source's own unit, named by unit ("message" for Kafka offsets,
	// "byte" for a Postgres WAL position), and age, how old the oldest
	// record not yet read is (negative when the source can't tell). ok
	// is false when the split can't tell now; the split is then left out
	// of the lag.
	Lag() (behind int64, unit string, age time.Duration, ok bool)
}

// SnapshotReporter may be implemented by a source.Split that reads a
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

// PauseReporter may be implemented by a source.Split that stops fetching
// from its source when the runner's queues are full (backpressure), as
// a Kafka partition's split does when its fetch buffer is full. Same
// calling rules as LagReporter. The runner emits EventStreamPaused when
// a poll finds the split paused after finding it not paused (or at the
// first poll), and EventStreamResumed when a later poll finds it
// resumed; a pause shorter than the poll interval (about a second) may go
// unseen.
//
// For splits that don't implement it, the runner reports the pauses it
// causes itself: a split is paused while its records have waited on the
// runner's full engine queue for at least PauseAfter without a break
// (while it waits, its Read is blocked in the Emitter, so it reads
// nothing from its source). Shorter waits — the ordinary throttling of a
// source faster than the engine or the destination — are only counted
// (SplitStatus.Backpressure, the openetl.backpressure.duration metric).
type PauseReporter interface {
	// Paused returns whether the split has stopped fetching from its
	// source because the runner's queues are full, and since when (the
	// zero time when not paused).
	Paused() (paused bool, since time.Time)
}

// PauseAfter is how long a split that doesn't implement PauseReporter
// must wait on the runner's full engine queue, without a break, before
// the runner reports it paused.
const PauseAfter = time.Second

// SplitStatus is what is known of one split at the last poll (about once
// a second, and at each commit): what it reported about itself, and the
// backpressure the runner put on it. Every split of the attempt appears,
// in the order Open returned them.
type SplitStatus struct {
	ID string
	// Streams are the streams the split has emitted records of in this
	// attempt, in the order they first reached the engine.
	Streams []string
	// Behind, Unit and Age are from LagReporter; LagKnown is its ok
	// (false for splits without it).
	LagKnown bool
	Behind   int64
	Unit     string
	Age      time.Duration
	// Snapshot, Stream, Done and Estimated are from SnapshotReporter;
	// Snapshot is its ok.
	Snapshot  bool
	Stream    string
	Done      int64
	Estimated int64
	// Paused is true while the split has stopped reading from its source
	// because the runner's queues are full, since PausedSince: as the
	// split reports it (PauseReporter), or else as the runner sees it (its
	// records waited on the full engine queue for PauseAfter or longer).
	Paused      bool
	PausedSince time.Time
	// Backpressure is how long, in total over this attempt, the split's
	// records waited on the runner's full engine queue.
	Backpressure time.Duration
}

// splitObs is what the runner observes of one split's pump.
type splitObs struct {
	// waitSince is when the pump started waiting on the full engine
	// queue (Unix nanoseconds), 0 when it doesn't wait; waited sums its
	// waits (nanoseconds).
	waitSince atomic.Int64
	waited    atomic.Int64
	// streams is append-only, guarded by attemptState.mu: a Status may
	// share a prefix of it.
	streams []string
}

// waitStart records that split's pump found the engine queue full and
// waits; it returns the time it started, for waitEnd.
func (r *runner) waitStart(split int) time.Time {
	t0 := time.Now()
	if split < len(r.state.splits) {
		r.state.splits[split].waitSince.Store(t0.UnixNano())
	}
	return t0
}

// waitEnd records the end of a wait waitStart began: backpressure time
// for the split and the pipeline.
func (r *runner) waitEnd(split int, t0 time.Time) {
	d := int64(time.Since(t0))
	r.mon.backpressNs.Add(d)
	if split < len(r.state.splits) {
		o := &r.state.splits[split]
		o.waitSince.Store(0)
		o.waited.Add(d)
	}
}

// pollSplits asks every split how far it is and whether it is paused, at
// now.
func (r *runner) pollSplits(now time.Time) []SplitStatus {
	out := make([]SplitStatus, 0, len(r.splits))
	for i, sp := range r.splits {
		s := SplitStatus{ID: string(r.pumps[i].id)}
		if lr, ok := sp.(LagReporter); ok {
			s.Behind, s.Unit, s.Age, s.LagKnown = lr.Lag()
		}
		if sr, ok := sp.(SnapshotReporter); ok {
			s.Stream, s.Done, s.Estimated, s.Snapshot = sr.SnapshotProgress()
		}
		if i < len(r.state.splits) {
			o := &r.state.splits[i]
			s.Backpressure = time.Duration(o.waited.Load())
			if _, ok := sp.(PauseReporter); !ok {
				if ns := o.waitSince.Load(); ns != 0 && now.Sub(time.Unix(0, ns)) >= PauseAfter {
					s.Paused, s.PausedSince = true, time.Unix(0, ns)
				}
			}
		}
		if pr, ok := sp.(PauseReporter); ok {
			s.Paused, s.PausedSince = pr.Paused()
		}
		if !s.Paused {
			s.PausedSince = time.Time{}
		}
		out = append(out, s)
	}
	return out
}

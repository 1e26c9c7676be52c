package runner

import (
	"github.com/openetl/etl/source"

	"sync/atomic"
	"time"
)

// PauseAfter is how long a split that doesn't implement
// source.PauseReporter (or whose Paused says ok false) must wait on the
// runner (its full engine queue, or the alignment of a barrier it
// placed), without a break, before the runner reports it paused.
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
	// Behind, Unit and Age are from source.LagReporter; LagKnown is its ok
	// (false for splits without it).
	LagKnown bool
	Behind   int64
	Unit     string
	Age      time.Duration
	// Snapshot, Stream, Done and Estimated are from source.SnapshotReporter;
	// Snapshot is its ok.
	Snapshot  bool
	Stream    string
	Done      int64
	Estimated int64
	// Paused is true while the split has stopped reading from its source
	// because the runner's queues are full, since PausedSince: as the
	// split reports it (source.PauseReporter), or else as the runner sees
	// it (its records waited on the full engine queue, or for the
	// alignment of a barrier it placed behind queued batches, for
	// PauseAfter or longer).
	Paused      bool
	PausedSince time.Time
	// Backpressure is how long, in total over this attempt, the split's
	// records waited on the runner: on its full engine queue, or for the
	// alignment of a barrier the split placed.
	Backpressure time.Duration
}

// splitObs is what the runner observes of one split's pump.
type splitObs struct {
	// waitSince is when the pump started waiting on the runner (the
	// full engine queue, a barrier's alignment; Unix nanoseconds), 0
	// when it doesn't wait; waited sums its waits (nanoseconds).
	waitSince atomic.Int64
	waited    atomic.Int64
	// streams is append-only, guarded by attemptState.mu: a Status may
	// share a prefix of it.
	streams []string
}

// waitStart records that split's pump waits on the runner (the engine
// queue is full, or its barrier is not aligned yet); it returns the time
// it started, for waitEnd.
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
		if lr, ok := sp.(source.LagReporter); ok {
			s.Behind, s.Unit, s.Age, s.LagKnown = lr.Lag()
		}
		if sr, ok := sp.(source.SnapshotReporter); ok {
			s.Stream, s.Done, s.Estimated, s.Snapshot = sr.SnapshotProgress()
		}
		told := false // the split says whether it is paused
		if pr, ok := sp.(source.PauseReporter); ok {
			if paused, since, ok := pr.Paused(); ok {
				s.Paused, s.PausedSince, told = paused, since, true
			}
		}
		if i < len(r.state.splits) {
			o := &r.state.splits[i]
			s.Backpressure = time.Duration(o.waited.Load())
			if !told {
				if ns := o.waitSince.Load(); ns != 0 && now.Sub(time.Unix(0, ns)) >= PauseAfter {
					s.Paused, s.PausedSince = true, time.Unix(0, ns)
				}
			}
		}
		if !s.Paused {
			s.PausedSince = time.Time{}
		}
		out = append(out, s)
	}
	return out
}

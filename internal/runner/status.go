package runner

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/openetl/etl/checkpoint"
)

// Phase is where a pipeline's latest attempt is.
type Phase string

// The phases of an attempt, in order; an attempt ends in succeeded,
// stopped, failed or fenced. PhaseRetrying comes between two attempts.
const (
	PhaseIdle      Phase = "idle"      // no attempt has run in this process yet
	PhaseStarting  Phase = "starting"  // discovering, claiming, recovering, opening splits
	PhaseRunning   Phase = "running"   // reading and committing epochs
	PhaseStopping  Phase = "stopping"  // the final barrier is requested; committing the last epochs
	PhaseSteps     Phase = "steps"     // a Sync committed to the source's end; its after-sync steps run
	PhaseSucceeded Phase = "succeeded" // a Sync read to the source's end and committed it
	PhaseStopped   Phase = "stopped"   // a Run stopped cleanly, or a Sync was abandoned by its context
	PhaseFailed    Phase = "failed"    // the attempt failed (Status.LastError)
	PhaseFenced    Phase = "fenced"    // a newer attempt took the pipeline over
	// PhaseRetrying: the latest attempt failed with a transient error and
	// the next starts after a backoff (RetryPolicy); Status.LastError
	// says why.
	PhaseRetrying Phase = "retrying"
)

// Status is a snapshot of a pipeline's latest attempt in this process.
// Maps and slices in it belong to the caller.
type Status struct {
	Pipeline string
	Phase    Phase
	// Bounded is true for a Sync, false for a Run.
	Bounded    bool
	Generation checkpoint.Generation
	// Started is when the attempt started; Ended when it ended (zero
	// while it runs).
	Started, Ended time.Time
	// Epoch is the last committed epoch (this attempt's, or the one it
	// resumed after) and EpochTime when it was committed (zero when the
	// pipeline never committed).
	Epoch     uint64
	EpochTime time.Time
	// Epochs counts the epochs this attempt committed.
	Epochs int
	// Read counts the records this attempt read, committed or not.
	Read int64
	// Step is the after-sync step running (PhaseSteps), or the last one
	// that ran.
	Step string
	// Streams holds per-stream counts and snapshot progress.
	Streams map[string]StreamStatus
	// Splits holds what is known of each split at the last poll (about
	// once a second): lag and snapshot progress from splits implementing
	// source.LagReporter or source.SnapshotReporter, pauses and backpressure.
	Splits []SplitStatus
	// Paused counts the splits paused at the last poll (see
	// SplitStatus.Paused).
	Paused int
	// Lag is the largest age a split reported (LagKnown false when none
	// could tell); Backlog sums the splits' Behind per unit.
	Lag      time.Duration
	LagKnown bool
	Backlog  map[string]int64
	// LastError is the error of the last attempt that failed in this
	// process, redacted (no passwords), and LastErrorTime when; a later
	// success does not clear it.
	LastError     string
	LastErrorTime time.Time
	// Retries counts the attempts retried in a row after transient
	// failures (RetryPolicy), since the last committed epoch.
	Retries int
	// EventsDropped counts the events dropped because the event queue
	// was full (the OnEvent callback was too slow), over the life of the
	// pipeline value.
	EventsDropped int64
}

// StreamStatus is one stream's part of a Status.
type StreamStatus struct {
	// Read counts the records of the stream this attempt read, committed
	// or not.
	Read int64
	// Committed counts this attempt's committed records; Totals the
	// pipeline's over its life, as of the last committed epoch.
	Committed checkpoint.Counts
	Totals    checkpoint.Counts
	// Snapshotting is true while a split copies the stream's snapshot;
	// SnapshotDone and SnapshotEstimated sum what such splits report
	// (source.SnapshotReporter).
	Snapshotting      bool
	SnapshotDone      int64
	SnapshotEstimated int64
	// Table is the destination table the stream is written to, under
	// the destination's naming rules: for a routed stream
	// (Builder.Route) the table it shares with the others routed there.
	// Set once the attempt's writers are open; empty before.
	Table string
}

// attemptState is one attempt's Status, updated by the runner's
// goroutines (per batch, per epoch, per poll; never per record).
type attemptState struct {
	mu       sync.Mutex
	st       Status
	toEngine []chan pumpMsg // by engine worker
	toLanes  []chan laneMsg
	// splits is indexed like the runner's splits; set before they start
	// reading, never resized.
	splits []splitObs
	// readingSince is when the attempt began reading (wall clock, for
	// RetryPolicy); zero before.
	readingSince time.Time
	// pollMu makes polls (from the coordinator and at commits) one at a
	// time, so that pause transitions are seen in order.
	pollMu sync.Mutex
}

func newAttemptState(name string, bounded bool, now time.Time) *attemptState {
	return &attemptState{st: Status{Pipeline: name, Phase: PhaseStarting, Bounded: bounded, Started: now,
		Streams: map[string]StreamStatus{}, Backlog: map[string]int64{}}}
}

func (a *attemptState) update(f func(*Status)) {
	a.mu.Lock()
	f(&a.st)
	a.mu.Unlock()
}

// addRead counts a batch of n records of stream from split.
func (a *attemptState) addRead(split int, stream string, n int64) {
	a.mu.Lock()
	if split >= 0 && split < len(a.splits) {
		o := &a.splits[split]
		if len(o.streams) == 0 || o.streams[len(o.streams)-1] != stream && !slices.Contains(o.streams, stream) {
			o.streams = append(o.streams, stream)
		}
	}
	s := a.st.Streams[stream]
	s.Read += n
	a.st.Streams[stream] = s
	a.st.Read += n
	a.mu.Unlock()
}

// snapshot returns a deep copy.
func (a *attemptState) snapshot() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.st
	s.Streams = maps.Clone(a.st.Streams)
	s.Splits = slices.Clone(a.st.Splits)
	for i := range s.Splits {
		s.Splits[i].Streams = slices.Clone(s.Splits[i].Streams)
	}
	s.Backlog = maps.Clone(a.st.Backlog)
	return s
}

// pauseChange is a split's pause starting or ending between two polls.
type pauseChange struct {
	split   SplitStatus
	resumed bool
}

// setSplits records a poll of the splits made at now; it returns the lag
// and the splits that paused or resumed since the previous poll. A
// split paused at both polls stays in the same pause (the earlier
// PausedSince), even if it resumed briefly in between.
func (a *attemptState) setSplits(ss []SplitStatus, now time.Time) (lag time.Duration, known bool, changes []pauseChange) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.st.Splits
	a.st.Paused = 0
	for i := range ss {
		s := &ss[i]
		if i < len(a.splits) {
			st := a.splits[i].streams
			s.Streams = st[:len(st):len(st)]
		}
		wasPaused := i < len(prev) && prev[i].ID == s.ID && prev[i].Paused
		switch {
		case s.Paused && wasPaused:
			s.PausedSince = prev[i].PausedSince
		case s.Paused:
			if s.PausedSince.IsZero() || s.PausedSince.After(now) {
				s.PausedSince = now
			}
			changes = append(changes, pauseChange{split: *s})
		case wasPaused:
			p := prev[i]
			p.Streams, p.Paused = s.Streams, false
			changes = append(changes, pauseChange{split: p, resumed: true})
		}
		if s.Paused {
			a.st.Paused++
		}
	}
	a.st.Splits = ss
	clear(a.st.Backlog)
	for name, s := range a.st.Streams {
		s.Snapshotting, s.SnapshotDone, s.SnapshotEstimated = false, 0, 0
		a.st.Streams[name] = s
	}
	for _, sp := range ss {
		if sp.LagKnown {
			a.st.Backlog[sp.Unit] += sp.Behind
			if sp.Age >= 0 && (!known || sp.Age > lag) {
				lag, known = sp.Age, true
			}
		}
		if sp.Snapshot {
			s := a.st.Streams[sp.Stream]
			s.Snapshotting = true
			s.SnapshotDone += sp.Done
			s.SnapshotEstimated += sp.Estimated
			a.st.Streams[sp.Stream] = s
		}
	}
	a.st.Lag, a.st.LagKnown = lag, known
	return lag, known, changes
}

// committed records a committed epoch: this attempt's cumulative counts
// and the totals.
func (a *attemptState) committed(epoch uint64, at time.Time, counts, totals map[string]checkpoint.Counts) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Epoch, a.st.EpochTime = epoch, at
	a.st.Epochs++
	for name, c := range counts {
		s := a.st.Streams[name]
		s.Committed = c
		a.st.Streams[name] = s
	}
	for name, c := range totals {
		s := a.st.Streams[name]
		s.Totals = c
		a.st.Streams[name] = s
	}
}

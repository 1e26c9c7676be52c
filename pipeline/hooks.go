package pipeline

import "time"

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

// SplitStatus is what a split reported about itself at the last poll;
// only splits implementing LagReporter or SnapshotReporter appear.
type SplitStatus struct {
	ID string
	// Behind, Unit and Age are from LagReporter; LagKnown is its ok.
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
}

// pollSplits asks every split that can tell how far it is.
func (r *runner) pollSplits() []SplitStatus {
	var out []SplitStatus
	for i, sp := range r.splits {
		lr, isLag := sp.(LagReporter)
		sr, isSnap := sp.(SnapshotReporter)
		if !isLag && !isSnap {
			continue
		}
		s := SplitStatus{ID: string(r.pumps[i].id)}
		if isLag {
			s.Behind, s.Unit, s.Age, s.LagKnown = lr.Lag()
		}
		if isSnap {
			s.Stream, s.Done, s.Estimated, s.Snapshot = sr.SnapshotProgress()
		}
		out = append(out, s)
	}
	return out
}

package etl

import (
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
)

// Result is what a Sync did: per-stream counts (read = written +
// quarantined), the epochs it committed and the last epoch.
type Result struct {
	Generation checkpoint.Generation
	// Epoch is the last committed epoch, from this attempt or, when it
	// committed nothing, the one it resumed from.
	Epoch uint64
	// Epochs is how many epochs this attempt committed.
	Epochs int
	// Streams counts this attempt's committed rows per stream.
	Streams map[string]checkpoint.Counts
	// Totals counts committed rows per stream over the pipeline's life.
	Totals map[string]checkpoint.Counts
}

// Progress is a snapshot of a running attempt, passed to the OnProgress
// callback (Builder.OnProgress). Its
// maps and slices belong to the callback.
type Progress struct {
	Generation checkpoint.Generation
	// Phase is PhaseRunning, or PhaseStopping once the final barrier is
	// requested.
	Phase Phase
	// Epoch is the last committed epoch (the one resumed after, before
	// this attempt commits one; 0 when none).
	Epoch uint64
	// Read counts records read in this attempt so far, committed or not.
	Read int64
	// Committed counts this attempt's committed rows per stream.
	Committed map[string]checkpoint.Counts
	// Totals counts committed rows per stream over the pipeline's life.
	Totals map[string]checkpoint.Counts
	// Streams holds per-stream reads, counts and snapshot progress
	// (rows copied and estimated, from splits implementing
	// source.SnapshotReporter).
	Streams map[string]StreamStatus
	// Lag is the largest age of unread data the splits report (LagKnown
	// false when none implements source.LagReporter or none can tell), and
	// Backlog the splits' distance to the source's end, summed per unit.
	Lag      time.Duration
	LagKnown bool
	Backlog  map[string]int64
	// Elapsed since the attempt started.
	Elapsed time.Duration
}

func progressOf(p runner.Progress) Progress {
	return Progress{Generation: p.Generation, Phase: Phase(p.Phase), Epoch: p.Epoch, Read: p.Read,
		Committed: p.Committed, Totals: p.Totals, Streams: streamsOf(p.Streams), Lag: p.Lag, LagKnown: p.LagKnown,
		Backlog: p.Backlog, Elapsed: p.Elapsed}
}

package etl

import (
	"github.com/openetl/etl/pipeline"
)

// Status is a snapshot of a pipeline's latest attempt; see
// Pipeline.Status.
type Status = pipeline.Status

// StreamStatus is one stream's counts and snapshot progress in a Status
// or Progress.
type StreamStatus = pipeline.StreamStatus

// SplitStatus is what is known of one split: its lag and snapshot
// progress (LagReporter, SnapshotReporter), whether it is paused by
// backpressure (PauseReporter, or the runner's own view) and how long it
// waited on the runner.
type SplitStatus = pipeline.SplitStatus

// Phase is where an attempt is; see the Phase constants.
type Phase = pipeline.Phase

// The phases of an attempt, in order; an attempt ends in one of the last
// four.
const (
	PhaseIdle      = pipeline.PhaseIdle      // no attempt has run in this process yet
	PhaseStarting  = pipeline.PhaseStarting  // discovering, claiming, recovering, opening splits
	PhaseRunning   = pipeline.PhaseRunning   // reading and committing epochs
	PhaseStopping  = pipeline.PhaseStopping  // the final barrier is requested
	PhaseSucceeded = pipeline.PhaseSucceeded // a Sync read to the source's end and committed it
	PhaseStopped   = pipeline.PhaseStopped   // a Run stopped cleanly, or a Sync was abandoned by its context
	PhaseFailed    = pipeline.PhaseFailed    // the attempt failed (Status.LastError)
	PhaseFenced    = pipeline.PhaseFenced    // a newer attempt took the pipeline over
)

// LagReporter may be implemented by a source's splits to report how far
// behind the source's end they are; it feeds Status.Lag, the
// openetl.job.lag metrics and the lag events. It uses only standard
// types, so a connector implements it without importing this package.
type LagReporter = pipeline.LagReporter

// SnapshotReporter may be implemented by a source's splits that copy a
// table's snapshot, to report rows done and estimated; it feeds
// StreamStatus's snapshot fields and Progress.
type SnapshotReporter = pipeline.SnapshotReporter

// PauseReporter may be implemented by a source's splits that stop
// fetching when the pipeline's queues are full, to report it: it feeds
// SplitStatus.Paused and the stream.paused / stream.resumed events. For
// splits without it the pipeline reports a split paused once its records
// have waited on a full queue for PauseAfter. It uses only standard
// types.
type PauseReporter = pipeline.PauseReporter

// PauseAfter is how long a split without PauseReporter must wait on the
// pipeline's full queue, without a break, to be reported paused.
const PauseAfter = pipeline.PauseAfter

// RedactSecrets returns s with passwords and similar secrets replaced by
// "xxxxx": URL passwords (postgres://user:secret@host), password=/pwd=/
// secret=/token=/api_key= pairs, and Password: fields. Logs, events and
// Status pass through it; use it where you print connector configs.
func RedactSecrets(s string) string { return pipeline.RedactSecrets(s) }

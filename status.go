package etl

import (
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
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
	PhaseSteps     Phase = "steps"     // a Sync committed to the source's end; its AfterSync steps run
	PhaseSucceeded Phase = "succeeded" // a Sync read to the source's end and committed it
	PhaseStopped   Phase = "stopped"   // a Run stopped cleanly, or a Sync was abandoned by its context
	PhaseFailed    Phase = "failed"    // the attempt failed (Status.LastError)
	PhaseFenced    Phase = "fenced"    // a newer attempt took the pipeline over
	// PhaseRetrying: the latest attempt failed with a transient error
	// and the next one starts after a backoff (see Retry); LastError
	// says why, Retries how many in a row.
	PhaseRetrying Phase = "retrying"
)

// Status is a snapshot of a pipeline's latest attempt in this process.
// Maps and slices in it belong to the caller.
type Status struct {
	// Pipeline is the pipeline's name (Pipeline.Name: a shard's key).
	Pipeline string
	// Shard is which shard the pipeline is (Builder.Shard); zero when
	// unsharded.
	Shard Shard
	Phase Phase
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
	// Step is the AfterSync step running (PhaseSteps), or the last one
	// that ran; empty when none did.
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
	// Retries counts the attempts Run (or a retrying Sync) retried in a
	// row after transient failures (see Retry), since the last committed
	// epoch: 0 once an attempt commits again.
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

// PauseAfter is how long a split that doesn't implement
// source.PauseReporter (or whose Paused says ok false) must wait on the
// runner (its full engine queue, or the alignment of a barrier it
// placed), without a break, before the runner reports it paused.
const PauseAfter = runner.PauseAfter

// RedactSecrets returns s with passwords and similar secrets replaced by
// "xxxxx": URL passwords (postgres://user:secret@host), password=/pwd=/
// secret=/token=/api_key= pairs, and Password: fields. Logs, events and
// Status pass through it; use it where you print connector configs.
func RedactSecrets(s string) string { return runner.RedactSecrets(s) }

func statusOf(s runner.Status) Status {
	return Status{Pipeline: s.Pipeline, Phase: Phase(s.Phase), Bounded: s.Bounded, Generation: s.Generation,
		Started: s.Started, Ended: s.Ended, Epoch: s.Epoch, EpochTime: s.EpochTime, Epochs: s.Epochs, Read: s.Read, Step: s.Step,
		Streams: streamsOf(s.Streams), Splits: splitsOf(s.Splits), Paused: s.Paused, Lag: s.Lag, LagKnown: s.LagKnown,
		Backlog: s.Backlog, LastError: s.LastError, LastErrorTime: s.LastErrorTime, Retries: s.Retries, EventsDropped: s.EventsDropped}
}

func streamsOf(m map[string]runner.StreamStatus) map[string]StreamStatus {
	if m == nil {
		return nil
	}
	out := make(map[string]StreamStatus, len(m))
	for k, v := range m {
		out[k] = StreamStatus(v)
	}
	return out
}

func splitsOf(l []runner.SplitStatus) []SplitStatus {
	if l == nil {
		return nil
	}
	out := make([]SplitStatus, len(l))
	for i, v := range l {
		out[i] = SplitStatus(v)
	}
	return out
}

// QuarantineName is where the quarantined records of a committed epoch
// are published, relative to the pipeline's directory in the checkpoint
// store (read them with the store's ReadFile):
// _quarantine/{stream}/{epoch:020d}.jsonl, JSON lines with the stream,
// split, epoch, generation, seq, op, reason, detail, key and the raw
// payload (payload, or payload_base64 when it is not UTF-8). The
// quarantine.added event names the file of each epoch that has one.
func QuarantineName(stream string, epoch uint64) string { return runner.QuarantineName(stream, epoch) }

// HeldName is where the values held back in a committed epoch (cells of
// columns the destination can't take) are published, relative to the
// pipeline's directory: _held/{stream}/{epoch:020d}.jsonl, JSON lines
// with the stream, destination table, split, epoch, generation, seq, op,
// key, column, the value's text (value, or value_base64) and the row's
// _openetl_id (id).
//
// Held values are released once the destination takes their column: its
// Capabilities.Unsupported no longer names the column's type class (a
// later version of it), or its sink.SchemaChecker accepts the column (the
// host changed the table's column). The next Sync or Run then writes
// each held value to its row in its first epoch, as a patch (the column
// is set where the row with that _openetl_id has a null; no row is
// added, and a merge table's row replaced by a newer version since is
// left as it is), exactly once: the checkpoint record keeps which lines
// were released (checkpoint.Record.Released). Result and Status count
// them (checkpoint.Counts.Released) and an EventHeldReleased per column
// reports them. Only destinations that apply patches
// (sink.Capabilities.Patches: sink/postgres, sink/clickhouse,
// sink/parquet, sink/iceberg) release; with the others the values stay
// held. Not
// released: cells held out_of_range (no destination type makes the
// column hold them), values of a stream with a Transform or in
// Overwrite mode, and lines held before lines carried the row's id, of a
// stream without a key (the row can't be found). The held files are
// never rewritten.
func HeldName(stream string, epoch uint64) string { return runner.HeldName(stream, epoch) }

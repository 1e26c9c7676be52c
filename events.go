package etl

import (
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
)

// EventKind names an event. Its string is stable: hosts may store it or
// route on it.
type EventKind string

// The events an attempt reports. Every attempt ends with exactly one of
// EventSyncSucceeded, EventSyncStopped and EventSyncFailed, also one that
// fails before it claims the pipeline (then without EventSyncStarted and
// with Generation 0).
const (
	// EventSyncStarted: an attempt claimed the pipeline. Generation is
	// its generation, Epoch the epoch it resumes after (0: none), Bounded
	// tells Sync (true) from Run.
	EventSyncStarted EventKind = "sync.started"
	// EventSyncSucceeded: a Sync read to the source's end and committed.
	// Epoch is the last committed epoch, Epochs how many the attempt
	// committed, Streams its per-stream counts.
	EventSyncSucceeded EventKind = "sync.succeeded"
	// EventSyncStopped: a Run stopped cleanly after its context was
	// cancelled (the final checkpoint is committed; Err nil), or a Sync
	// was abandoned by its context (Err is the context's cause).
	EventSyncStopped EventKind = "sync.stopped"
	// EventSyncFailed: the attempt failed with Err (redacted: no
	// passwords). After EventPipelineFenced, Err wraps
	// checkpoint.ErrFenced or sink.ErrFenced.
	EventSyncFailed EventKind = "sync.failed"
	// EventSyncRetrying: the attempt failed with Err, a transient error
	// (see Retry), and a new attempt starts after Wait. Retry is its
	// number in a row since the last committed epoch; Cause names the
	// part that failed: "source", "destination", "checkpoints",
	// "engine", "transform" or "other". It follows the attempt's
	// EventSyncFailed.
	EventSyncRetrying EventKind = "sync.retrying"
	// EventSchemaChanged: a stream's schema gained a column or widened
	// one: Stream, Column, Change ("added", "widened"), From, To (type
	// names). Epoch is the epoch the change is committed with. A source
	// reports one too (source.Reporter) when a change leaves rows at the
	// destination different from the source's, with Split and Detail.
	EventSchemaChanged EventKind = "schema.changed"
	// EventSchemaBlocked: the stream's schema policy refused a change
	// ("blocked": the record is quarantined) or dropped a new field
	// ("discarded"); fields as EventSchemaChanged. Change "held": values
	// of Column are held back under _held/ — the destination can't take
	// the column (its sink.SchemaChecker or Capabilities.Unsupported), or
	// cells of it hold values its type can't (the rows land with a null
	// there); once per attempt for each, with Detail saying which.
	EventSchemaBlocked EventKind = "schema.blocked"
	// EventSourceReset: split Split could not go on from its resume
	// state and started over from a new snapshot of its streams (as the
	// source reports it through source.Reporter: a Postgres slot or a
	// binlog gone, with the source's policy set to take a new snapshot).
	// Detail says what that means for the destination; Err is the cause.
	EventSourceReset EventKind = "source.reset"
	// EventResnapshotStarted: split Split began reading Stream's table
	// again, as Pipeline.Resnapshot (or the source's own signal) asked,
	// while it streams changes; its progress shows in Status as the
	// stream's snapshot.
	EventResnapshotStarted EventKind = "resnapshot.started"
	// EventResnapshotDone: split Split has read Stream's table again;
	// Detail says how many rows.
	EventResnapshotDone EventKind = "resnapshot.done"
	// EventStreamPaused: split Split stopped reading from its source
	// because the runner's queues are full (backpressure: the engine or
	// the destination is the bottleneck), as the split reports it
	// (source.PauseReporter) or, for splits without it, as the runner sees it
	// (its records waited on the full engine queue, or for the alignment
	// of a barrier it placed, for PauseAfter).
	// Paused is how long it had been paused when a poll noticed it (about
	// once a second); Stream is the split's stream when it emitted one
	// only (a Kafka partition, a table's snapshot), else empty (every
	// stream of the split is held up; Status().Splits lists them).
	EventStreamPaused EventKind = "stream.paused"
	// EventStreamResumed: after EventStreamPaused, the split reads again;
	// Paused is how long the pause lasted (up to a poll interval more).
	// A pause still open when the attempt ends gets no EventStreamResumed:
	// the attempt's last event ends it.
	EventStreamResumed EventKind = "stream.resumed"
	// EventPipelineLagging: the largest lag a split reports (see
	// source.LagReporter) exceeded Builder.LagAlert; Lag is that lag.
	EventPipelineLagging EventKind = "pipeline.lagging"
	// EventPipelineRecovered: after EventPipelineLagging, the lag fell
	// back to or below Builder.LagAlert; Lag is the lag now.
	EventPipelineRecovered EventKind = "pipeline.recovered"
	// EventPipelineFenced: a newer attempt claimed the pipeline; this one
	// stops without committing anything more (EventSyncFailed follows).
	// A host should not restart it. Err says where it noticed.
	EventPipelineFenced EventKind = "pipeline.fenced"
	// EventQuarantineAdded: a committed epoch set records of Stream
	// aside: Rows of them, in the file Path (relative to the pipeline's
	// directory in the checkpoint store; the quarantine file of the stream and epoch).
	EventQuarantineAdded EventKind = "quarantine.added"
	// EventHeldReleased: a committed epoch wrote Rows held values of
	// Column of Stream to their rows (see HeldName): the destination
	// takes the column now. One per column; Epoch is the epoch that
	// released them, an attempt's first.
	EventHeldReleased EventKind = "held.released"
	// EventEpochCommitted: epoch Epoch is committed (HEAD moved and the
	// destination applied it); Streams holds its per-stream counts.
	EventEpochCommitted EventKind = "epoch.committed"
	// EventEpochRecovered: on start, the attempt found HEAD's epoch Epoch
	// not applied at the destination: Outcome sink.Recoverable (it was
	// applied now) or sink.Lost (the log was rewound to the epoch before).
	EventEpochRecovered EventKind = "epoch.recovered"
	// EventStagingCollected: after recovery, the attempt removed what
	// failed attempts had staged and no checkpoint record names:
	// SideFiles counts the runner's staged side files (quarantined
	// records and held values under _staging/ in the checkpoint store),
	// Collected the destination's staged data (when it is a
	// sink.Collector: files, staging partitions, old manifest versions).
	// Epoch is the epoch the attempt resumes after. Sent only when
	// something was found; the counts are logged at Info every time.
	EventStagingCollected EventKind = "staging.collected"
	// EventStepStarted: a Sync committed to the source's end and runs
	// its after-sync step Step (Builder.AfterSync); Epoch is the last
	// committed epoch.
	EventStepStarted EventKind = "step.started"
	// EventStepSucceeded: step Step returned nil after Took.
	EventStepSucceeded EventKind = "step.succeeded"
	// EventStepFailed: step Step failed after Took with Err (a
	// *StepError); the Sync fails with it (EventSyncFailed follows) and
	// the steps after it don't run. What the Sync copied stays committed.
	EventStepFailed EventKind = "step.failed"
)

// Event is one thing that happened to a pipeline, delivered to
// the OnEvent callback (Builder.OnEvent). Which fields are set depends on Kind (see the
// EventKind constants); the others are zero. Maps in an event belong to
// the receiver.
type Event struct {
	Kind     EventKind
	Time     time.Time
	Pipeline string
	// Shard is the pipeline's shard (Builder.Shard); zero when unsharded.
	Shard      Shard
	Generation checkpoint.Generation
	Epoch      uint64
	Bounded    bool
	Epochs     int
	Streams    map[string]checkpoint.Counts
	Stream     string
	Column     string
	Change     string
	From, To   string
	Rows       int64
	Path       string
	Lag        time.Duration
	Outcome    sink.Outcome
	// SideFiles and Collected are set on EventStagingCollected.
	SideFiles, Collected sink.Collected
	// Split and Paused are set on EventStreamPaused and
	// EventStreamResumed; Split also on the events a source reports.
	Split  string
	Paused time.Duration
	// Detail is set on the events a source reports: what happened, in
	// the source's words, without row data.
	Detail string
	// Step and Took are set on the step events: the step's name and,
	// once it returned, how long it ran.
	Step string
	Took time.Duration
	// Retry, Wait and Cause are set on EventSyncRetrying.
	Retry int
	Wait  time.Duration
	Cause string
	// Err is the attempt's error, its message redacted (RedactSecrets);
	// errors.Is and errors.As see the original.
	Err error
}

func eventOf(e runner.Event) Event {
	return Event{Kind: EventKind(e.Kind), Time: e.Time, Pipeline: e.Pipeline, Generation: e.Generation,
		Epoch: e.Epoch, Bounded: e.Bounded, Epochs: e.Epochs, Streams: e.Streams, Stream: e.Stream,
		Column: e.Column, Change: e.Change, From: e.From, To: e.To, Rows: e.Rows, Path: e.Path, Lag: e.Lag,
		Outcome: e.Outcome, Split: e.Split, Paused: e.Paused, Detail: e.Detail, Step: e.Step,
		Took: e.Took, Retry: e.Retry, Wait: e.Wait, Cause: e.Cause, Err: e.Err,
		SideFiles: e.SideFiles, Collected: e.Collected}
}

package etl

import "github.com/openetl/etl/pipeline"

// Event is one thing that happened to a pipeline, delivered to the
// OnEvent callback; which fields are set depends on Kind (see the
// EventKind constants).
type Event = pipeline.Event

// EventKind names an event; its string ("sync.started", ...) is stable.
type EventKind = pipeline.EventKind

// The events a pipeline reports; the pipeline package documents each
// one's fields. Every attempt ends with exactly one of
// EventSyncSucceeded, EventSyncStopped and EventSyncFailed.
const (
	EventSyncStarted       = pipeline.EventSyncStarted       // sync.started: claimed; Generation, Epoch resumed after
	EventSyncSucceeded     = pipeline.EventSyncSucceeded     // sync.succeeded: a Sync committed to the source's end; Epoch, Epochs, Streams
	EventSyncStopped       = pipeline.EventSyncStopped       // sync.stopped: a Run stopped cleanly, or a Sync was cancelled (Err)
	EventSyncFailed        = pipeline.EventSyncFailed        // sync.failed: Err (redacted)
	EventSchemaChanged     = pipeline.EventSchemaChanged     // schema.changed: Stream, Column, Change, From, To
	EventSchemaBlocked     = pipeline.EventSchemaBlocked     // schema.blocked: the schema policy refused or dropped a change
	EventSourceReset       = pipeline.EventSourceReset       // source.reset: Split started over from a new snapshot; Detail, Err
	EventStreamPaused      = pipeline.EventStreamPaused      // stream.paused: Split (Stream) stopped reading: backpressure; Paused so far
	EventStreamResumed     = pipeline.EventStreamResumed     // stream.resumed: Split reads again; Paused is how long it paused
	EventPipelineLagging   = pipeline.EventPipelineLagging   // pipeline.lagging: Lag above LagAlert
	EventPipelineRecovered = pipeline.EventPipelineRecovered // pipeline.recovered: Lag back at or below LagAlert
	EventPipelineFenced    = pipeline.EventPipelineFenced    // pipeline.fenced: a newer attempt took over; do not restart
	EventQuarantineAdded   = pipeline.EventQuarantineAdded   // quarantine.added: Stream, Rows, Path in a committed Epoch
	EventEpochCommitted    = pipeline.EventEpochCommitted    // epoch.committed: Epoch, Streams (its counts)
	EventEpochRecovered    = pipeline.EventEpochRecovered    // epoch.recovered: HEAD's Epoch applied (Recoverable) or rewound (Lost) on start
)

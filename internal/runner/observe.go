package runner

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// This file is the runner's side of observability: status updates,
// events, spans and metrics at the points the runner reaches per
// attempt, per epoch and per batch — never per record.

// epochSpan is an epoch's span, from its barrier request to its commit.
type epochSpan struct {
	span  trace.Span
	start time.Time
}

// streamOpts are a stream's precomputed metric options, in the slices
// the instruments' variadic parameters take, so that a batch's
// measurements allocate nothing.
type streamOpts struct {
	add     []metric.AddOption    // openetl.pipeline, openetl.stream
	addDest []metric.AddOption    // ... and openetl.destination
	rec     []metric.RecordOption // openetl.pipeline, openetl.stream
}

func newStreamOpts(pipeline, stream, dest string) streamOpts {
	s := metric.WithAttributeSet(attribute.NewSet(AttrPipeline.String(pipeline), AttrStream.String(stream)))
	d := metric.WithAttributeSet(attribute.NewSet(AttrPipeline.String(pipeline), AttrStream.String(stream),
		AttrDestination.String(dest)))
	return streamOpts{add: []metric.AddOption{s}, addDest: []metric.AddOption{d}, rec: []metric.RecordOption{s}}
}

// optsFor returns stream's options, for the engine workers: those made
// for the selected streams before they started.
func (r *runner) optsFor(stream string) streamOpts {
	if o, ok := r.streamOpts[stream]; ok {
		return o
	}
	return newStreamOpts(r.cfg.Name, stream, r.mon.dest)
}

// claimed records a successful claim: generation and the epoch resumed
// after.
func (r *runner) claimed() {
	r.syncSpan.SetAttributes(AttrGeneration.Int64(int64(r.gen)), attribute.Int64("openetl.resume_epoch", int64(headEpoch(r.head))))
	r.state.update(func(s *Status) {
		s.Generation = r.gen
		if r.head != nil {
			s.Epoch, s.EpochTime = r.head.Epoch, r.head.Time
			for name, c := range r.head.Totals {
				st := s.Streams[name]
				st.Totals = c
				s.Streams[name] = st
			}
		}
	})
	r.mon.emit(Event{Kind: EventSyncStarted, Generation: r.gen, Epoch: headEpoch(r.head), Bounded: r.bounded})
}

// recoverSpan runs recover in a span of its own.
func (r *runner) recoverSpan(ctx context.Context) (err error) {
	ctx, span := r.mon.tracer.Start(ctx, "openetl.recover", trace.WithAttributes(
		AttrGeneration.Int64(int64(r.gen)), AttrEpoch.Int64(int64(headEpoch(r.head)))))
	defer func() {
		span.SetAttributes(attribute.Int64("openetl.resume_epoch", int64(headEpoch(r.head))))
		endSpan(span, err)
	}()
	return r.recover(ctx)
}

// epochRecovered reports what recover found of HEAD's epoch: applied
// now (sink.Recoverable) or lost, the log rewound to epoch to.
func (r *runner) epochRecovered(out sink.Outcome, epoch, to uint64) {
	if out == sink.Lost {
		r.log.Warn("rewinding past a lost epoch", "epoch", epoch, "to", to)
	} else {
		r.log.Info("applying the last committed epoch", "epoch", epoch)
	}
	r.mon.emit(Event{Kind: EventEpochRecovered, Generation: r.gen, Epoch: epoch, Outcome: out})
}

// running marks the attempt as reading, with its queues for the
// queue-depth gauge.
func (r *runner) running() {
	r.laneOpts = make([]metric.MeasurementOption, r.cfg.Lanes)
	for i := range r.laneOpts {
		r.laneOpts[i] = metric.WithAttributeSet(attribute.NewSet(AttrPipeline.String(r.cfg.Name),
			AttrLane.Int(i), AttrDestination.String(r.mon.dest)))
	}
	r.state.mu.Lock()
	r.state.st.Phase = PhaseRunning
	r.state.readingSince = time.Now()
	r.state.toEngine, r.state.toLanes = r.toEngine, r.toLanes
	r.state.splits = make([]splitObs, len(r.pumps))
	r.state.mu.Unlock()
}

func (r *runner) stopping() {
	r.state.update(func(s *Status) {
		if s.Phase == PhaseRunning {
			s.Phase = PhaseStopping
		}
	})
}

// startEpoch opens epoch's span when its barrier is requested.
func (r *runner) startEpoch(epoch uint64, final bool) {
	ctx := trace.ContextWithSpan(context.Background(), r.syncSpan)
	_, span := r.mon.tracer.Start(ctx, "openetl.epoch", trace.WithAttributes(
		AttrEpoch.Int64(int64(epoch)), AttrGeneration.Int64(int64(r.gen)), attribute.Bool("openetl.final", final)))
	r.spanMu.Lock()
	r.epochSpans[epoch] = epochSpan{span: span, start: time.Now()}
	r.spanMu.Unlock()
}

// epochContext returns ctx carrying epoch's span, when it has one.
func (r *runner) epochContext(ctx context.Context, epoch uint64) context.Context {
	r.spanMu.Lock()
	es, ok := r.epochSpans[epoch]
	r.spanMu.Unlock()
	if !ok {
		return ctx
	}
	return trace.ContextWithSpan(ctx, es.span)
}

// epochCommitted records a committed epoch: metrics, the epoch's span,
// status, events. counts are the epoch's own; cum and totals this
// attempt's and the pipeline's so far.
func (r *runner) epochCommitted(ctx context.Context, rec *checkpoint.Record, cum map[string]checkpoint.Counts) {
	in, epoch := r.mon.inst, rec.Epoch
	for stream, c := range rec.Counts {
		o := r.epochOpts(stream)
		in.rowsWritten.Add(ctx, c.Written, o.addDest...)
		in.rowsQuarantined.Add(ctx, c.Quarantined, o.add...)
		in.rowsHeld.Add(ctx, c.Held, o.add...)
		if c.Released > 0 {
			in.rowsReleased.Add(ctx, c.Released, o.add...)
		}
		if r.cfg.Transforms[stream] != nil || r.cfg.Filters[stream] != nil {
			in.rowsFiltered.Add(ctx, c.Filtered, o.add...)
		}
	}
	in.epochs.Add(ctx, 1, r.mon.pipeAttr)
	r.spanMu.Lock()
	es, ok := r.epochSpans[epoch]
	delete(r.epochSpans, epoch)
	r.spanMu.Unlock()
	if ok {
		in.epochDur.Record(ctx, time.Since(es.start).Seconds(), r.mon.pipeAttr)
		var read, written, quarantined int64
		for _, c := range rec.Counts {
			read, written, quarantined = read+c.Read, written+c.Written, quarantined+c.Quarantined
		}
		es.span.SetAttributes(attribute.Int64("openetl.rows.read", read), attribute.Int64("openetl.rows.written", written),
			attribute.Int64("openetl.rows.quarantined", quarantined))
		es.span.End()
	}
	r.state.committed(epoch, rec.Time, cum, rec.Totals)
	r.mon.progressed()
	r.mon.rec.Load().committed(epoch)
	r.poll()
	for _, f := range rec.Files {
		if f.Kind == kindQuarantine {
			r.mon.emit(Event{Kind: EventQuarantineAdded, Generation: r.gen, Epoch: epoch, Stream: f.Stream,
				Rows: f.Rows, Path: QuarantineName(f.Stream, epoch)})
		}
	}
	if r.mon.events != nil {
		r.mon.emit(Event{Kind: EventEpochCommitted, Generation: r.gen, Epoch: epoch, Streams: maps.Clone(rec.Counts)})
	}
}

// epochOpts is optsFor for goroutines other than the engine stage's: it
// builds the options each time (once per epoch and stream).
func (r *runner) epochOpts(stream string) streamOpts {
	return newStreamOpts(r.cfg.Name, stream, r.mon.dest)
}

// poll asks the splits how far they are and whether they are paused,
// and updates status, lag and pause events.
func (r *runner) poll() {
	if len(r.pumps) == 0 {
		return
	}
	r.state.pollMu.Lock()
	defer r.state.pollMu.Unlock()
	now := time.Now()
	ss := r.pollSplits(now)
	lag, known, changes := r.state.setSplits(ss, now)
	r.mon.rec.Load().sample(now, ss)
	for _, c := range changes {
		e := Event{Kind: EventStreamPaused, Generation: r.gen, Split: c.split.ID, Paused: now.Sub(c.split.PausedSince)}
		if c.resumed {
			e.Kind = EventStreamResumed
		}
		if len(c.split.Streams) == 1 {
			e.Stream = c.split.Streams[0]
		}
		if c.resumed {
			r.log.Info("split resumed", "split", c.split.ID, "paused", e.Paused)
		} else {
			r.log.Info("split paused by backpressure", "split", c.split.ID, "since", c.split.PausedSince)
		}
		r.mon.emit(e)
	}
	r.mon.lag(r.state, r.gen, lag, known)
}

// progressNow is the Progress passed to OnProgress.
func (r *runner) progressNow(res Result) Progress {
	s := r.state.snapshot()
	return Progress{Generation: r.gen, Phase: s.Phase, Epoch: res.Epoch, Read: r.recordsRead(),
		Committed: maps.Clone(res.Streams), Totals: maps.Clone(res.Totals), Streams: s.Streams,
		Lag: s.Lag, LagKnown: s.LagKnown, Backlog: s.Backlog, Elapsed: r.cfg.Now().Sub(r.start)}
}

// end records how the attempt ended: status, span, metric, events.
func (r *runner) end(ctx context.Context, res Result, err error) {
	now := r.cfg.Now()
	phase, kind := PhaseSucceeded, EventSyncSucceeded
	fenced := errors.Is(err, checkpoint.ErrFenced) // sink.ErrFenced is the same error
	switch {
	case err == nil && !r.bounded:
		phase, kind = PhaseStopped, EventSyncStopped
	case err == nil:
	case fenced:
		phase, kind = PhaseFenced, EventSyncFailed
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Cause(ctx))):
		phase, kind = PhaseStopped, EventSyncStopped
	default:
		phase, kind = PhaseFailed, EventSyncFailed
	}
	if err != nil && phase != PhaseStopped {
		r.mon.failed(err, now)
	}
	log := r.log
	if log == nil {
		log = r.cfg.Logger.With("pipeline", r.cfg.Name)
	}
	switch {
	case err == nil:
		log.Info("attempt finished", "epoch", res.Epoch, "epochs", res.Epochs, "outcome", phase)
	case fenced:
		log.Warn("attempt fenced by a newer generation", "err", err)
	case phase == PhaseStopped:
		log.Info("attempt abandoned", "err", err)
	default:
		log.Warn("attempt failed", "err", err)
	}
	r.state.update(func(s *Status) {
		s.Phase, s.Ended = phase, now
		if s.Generation == 0 {
			s.Generation = r.gen
		}
	})
	r.mon.inst.attempts.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(AttrPipeline.String(r.cfg.Name),
		AttrOutcome.String(string(phase))))

	// Epochs whose barrier was requested but that never committed.
	r.spanMu.Lock()
	for epoch, es := range r.epochSpans {
		es.span.SetStatus(codes.Error, "not committed")
		es.span.End()
		delete(r.epochSpans, epoch)
	}
	r.spanMu.Unlock()
	var read, written int64
	for _, c := range res.Streams {
		read, written = read+c.Read, written+c.Written
	}
	r.syncSpan.SetAttributes(AttrEpoch.Int64(int64(res.Epoch)), attribute.Int("openetl.epochs", res.Epochs),
		attribute.Int64("openetl.rows.read", read), attribute.Int64("openetl.rows.written", written),
		AttrOutcome.String(string(phase)))
	if phase == PhaseStopped {
		endSpan(r.syncSpan, nil)
	} else {
		endSpan(r.syncSpan, err)
	}

	if fenced {
		r.mon.emit(Event{Kind: EventPipelineFenced, Time: now, Generation: r.gen, Epoch: res.Epoch, Bounded: r.bounded, Err: redactErr(err)})
	}
	r.mon.emit(Event{Kind: kind, Time: now, Generation: r.gen, Epoch: res.Epoch, Epochs: res.Epochs,
		Bounded: r.bounded, Streams: maps.Clone(res.Streams), Err: redactErr(err)})
}

// endSpan ends span, recording err (redacted) when there is one.
func endSpan(span trace.Span, err error) {
	if err != nil {
		err = redactErr(err)
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// recordBytes sums the lengths of rec's buffers, without allocating.
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		n += dataBytes(c.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	return n
}

// commitCheckpoint writes rec and moves HEAD to it — the commit point —
// in a span of its own.
func (r *runner) commitCheckpoint(ctx context.Context, rec *checkpoint.Record) (err error) {
	ctx, span := r.mon.tracer.Start(ctx, "openetl.checkpoint.commit", trace.WithAttributes(
		AttrEpoch.Int64(int64(rec.Epoch)), AttrGeneration.Int64(int64(r.gen))))
	t0 := time.Now()
	err = r.cfg.Store.Commit(ctx, r.gen, rec)
	r.mon.inst.checkpointDur.Record(ctx, time.Since(t0).Seconds(), r.mon.pipeAttr)
	endSpan(span, err)
	if err == nil {
		r.log.Debug("epoch committed", "epoch", rec.Epoch)
	}
	return err
}

// observeCommit opens the span of lane 0's Commit of epoch (with its
// retries); end closes it and records openetl.commit.duration.
func (r *runner) observeCommit(ctx context.Context, epoch uint64) (_ context.Context, end func(error)) {
	ctx, span := r.mon.tracer.Start(ctx, "openetl.commit", trace.WithAttributes(
		AttrEpoch.Int64(int64(epoch)), AttrGeneration.Int64(int64(r.gen)), AttrDestination.String(r.mon.dest)))
	t0 := time.Now()
	return ctx, func(err error) {
		r.mon.inst.commitDur.Record(ctx, time.Since(t0).Seconds(), r.mon.destAttr)
		endSpan(span, err)
	}
}

// commitRetried reports a failed Commit of epoch that is retried: try is
// the attempt that failed, from 1.
func (r *runner) commitRetried(ctx context.Context, epoch uint64, try int, err error) {
	r.log.Warn("destination commit failed; retrying", "epoch", epoch, "try", try, "err", err)
	trace.SpanFromContext(ctx).AddEvent("retry", trace.WithAttributes(attribute.Int("try", try)))
}

// observeFinish opens the span of lane 0's Finish of epoch.
func (r *runner) observeFinish(ctx context.Context, epoch uint64) (_ context.Context, end func(error)) {
	ctx, span := r.mon.tracer.Start(ctx, "openetl.finish", trace.WithAttributes(
		AttrEpoch.Int64(int64(epoch)), AttrGeneration.Int64(int64(r.gen)), AttrDestination.String(r.mon.dest)))
	return ctx, func(err error) { endSpan(span, err) }
}

// ackFailed reports a failed acknowledgement of epoch's positions (they
// go again with the next epoch's).
func (r *runner) ackFailed(epoch uint64, err error) {
	r.log.Warn("source ack failed; retried with the next epoch", "epoch", epoch, "err", err)
}

// collected reports what collect removed: a log line with the counts,
// always, and an EventStagingCollected when anything was found.
func (r *runner) collected(side, dest sink.Collected) {
	r.log.Info("collected what failed attempts staged",
		"side_files_removed", side.Removed, "side_files_kept", side.Kept,
		"staged_removed", dest.Removed, "staged_bytes_removed", dest.Bytes, "staged_kept", dest.Kept,
		"versions_removed", dest.Versions)
	if side == (sink.Collected{}) && dest == (sink.Collected{}) {
		return
	}
	r.mon.emit(Event{Kind: EventStagingCollected, Generation: r.gen, Epoch: headEpoch(r.head),
		SideFiles: side, Collected: dest})
}

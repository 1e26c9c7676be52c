package runner

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// runSteps runs the after-sync steps (Config.Steps) of a Sync that read
// to the source's end and committed, in order, each in a span of its
// own under the attempt's, and stops at the first that fails: its error
// is the attempt's, as the step returned it. Nothing here touches the
// checkpoint log or the destination: what the Sync committed stays
// committed whatever a step does, and the next Sync, which has nothing
// new to copy, runs the steps again.
func (r *runner) runSteps(ctx context.Context, res Result) error {
	for _, st := range r.cfg.Steps {
		r.state.update(func(s *Status) { s.Phase, s.Step = PhaseSteps, st.Name })
		r.log.Info("after-sync step started", "step", st.Name, "epoch", res.Epoch)
		r.mon.emit(Event{Kind: EventStepStarted, Generation: r.gen, Epoch: res.Epoch, Bounded: true, Step: st.Name})
		sctx, span := r.mon.tracer.Start(ctx, "openetl.step", trace.WithAttributes(AttrStep.String(st.Name),
			AttrEpoch.Int64(int64(res.Epoch)), AttrGeneration.Int64(int64(r.gen))))
		start := time.Now()
		err := st.Run(sctx, res)
		took := time.Since(start)
		endSpan(span, err)
		if err != nil {
			r.log.Warn("after-sync step failed", "step", st.Name, "took", took, "err", err)
			r.mon.emit(Event{Kind: EventStepFailed, Generation: r.gen, Epoch: res.Epoch, Bounded: true, Step: st.Name,
				Took: took, Err: redactErr(err)})
			return err
		}
		r.log.Info("after-sync step finished", "step", st.Name, "took", took)
		r.mon.emit(Event{Kind: EventStepSucceeded, Generation: r.gen, Epoch: res.Epoch, Bounded: true, Step: st.Name,
			Took: took})
	}
	return nil
}

// Package dropfinish is a Writer wrapper that forwards every method but
// Finish. It must not compile: sink_test's TestWrapperDroppingFinish
// builds it and expects the compiler to name the missing method.
package dropfinish

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

type wrapper struct{ w sink.Writer }

var _ sink.Writer = (*wrapper)(nil)

func (w *wrapper) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	return w.w.Write(ctx, stream, rec)
}

func (w *wrapper) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	return w.w.PreCommit(ctx, epoch)
}

func (w *wrapper) Commit(ctx context.Context, epoch uint64, cs []sink.Committable) error {
	return w.w.Commit(ctx, epoch, cs)
}

func (w *wrapper) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	return w.w.Recover(ctx, gen, head)
}

func (w *wrapper) Close(ctx context.Context) error { return w.w.Close(ctx) }

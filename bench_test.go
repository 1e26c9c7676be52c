package etl_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// BenchmarkSyncFakerToParquet measures a whole sync, faker → engine →
// Parquet (zstd) in memory, 2 × 100k records per iteration: the
// quickstart's path without the disk. Each lane count runs with both
// encoders in turn (arrow-go, then the engine's), so -count N alternates
// them, and the engine's again with one engine worker (workers=1; the
// others have the default, one per stream up to GOMAXPROCS); it reports
// records a second and this process's CPU a record.
func BenchmarkSyncFakerToParquet(b *testing.B) {
	for _, lanes := range []int{1, 2} {
		for _, enc := range []parquet.Encoder{parquet.EncoderArrowGo, parquet.EncoderEngine, 255} {
			workers := 0
			name := fmt.Sprintf("lanes=%d/%v", lanes, enc)
			if enc == 255 { // the engine's, one worker
				enc, workers = parquet.EncoderEngine, 1
				name = fmt.Sprintf("lanes=%d/%v/workers=1", lanes, enc)
			}
			b.Run(name, func(b *testing.B) {
				const rows = 100_000
				var records int64
				c0 := cpuTime()
				for b.Loop() {
					src, err := faker.New(faker.Config{Rows: rows})
					if err != nil {
						b.Fatal(err)
					}
					bucket := memblob.OpenBucket(nil)
					dst, err := parquet.New(parquet.Config{Bucket: bucket, Encoder: enc})
					if err != nil {
						b.Fatal(err)
					}
					p, err := etl.NewPipeline("bench").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Lanes(lanes).EngineWorkers(workers).Build()
					if err != nil {
						b.Fatal(err)
					}
					res, err := p.Sync(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					for _, c := range res.Streams {
						records += c.Read
					}
					bucket.Close()
				}
				b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
				b.ReportMetric(float64(cpuTime()-c0)/float64(records), "cpu-ns/record")
			})
		}
	}
}

// discard is a destination that drops every row: it measures the runner
// and the engine without a writer's cost.
type discard struct{}

func (discard) Class() sink.Class               { return sink.StageAndApply }
func (discard) Capabilities() sink.Capabilities { return sink.Capabilities{} }
func (discard) Writer(context.Context, sink.WriterConfig) (sink.Writer, error) {
	return discardWriter{}, nil
}

type discardWriter struct{}

func (discardWriter) Write(context.Context, string, arrow.RecordBatch) error { return nil }
func (discardWriter) PreCommit(context.Context, uint64) (sink.Committable, error) {
	return sink.Committable("{}"), nil
}
func (discardWriter) Commit(context.Context, uint64, []sink.Committable) error { return nil }
func (discardWriter) Recover(context.Context, checkpoint.Generation, *checkpoint.Record) (sink.Outcome, error) {
	return sink.Applied, nil
}
func (discardWriter) Close(context.Context) error          { return nil }
func (discardWriter) Finish(context.Context, uint64) error { return nil }

// BenchmarkSyncFakerToDiscard measures faker → runner → engine with a
// writer that drops rows: the pipeline's own ceiling on this machine.
func BenchmarkSyncFakerToDiscard(b *testing.B) {
	const rows = 200_000
	var records int64
	for b.Loop() {
		src, err := faker.New(faker.Config{Rows: rows})
		if err != nil {
			b.Fatal(err)
		}
		p, err := etl.NewPipeline("bench").From(src).To(discard{}).Checkpoints(checkpoint.NewMem()).Build()
		if err != nil {
			b.Fatal(err)
		}
		res, err := p.Sync(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range res.Streams {
			records += c.Read
		}
	}
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
}

package etl_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// BenchmarkTransformOverhead runs faker → zstd Parquet in memory (2 ×
// 200k records, 0.1% malformed, 2s epochs, as
// BenchmarkTelemetryOverhead) without a transform and with the identity
// transform (each batch emitted as it came) on both streams. Each
// iteration is a pair of runs, one of each, in alternating order, each
// after a GC; it reports the median over the pairs of the with/without
// ratio of the process's CPU time and of wall time, as an overhead in
// percent, and CPU per row of each. The goal is at most 2%. Run it with
// -benchtime 20x or more; BenchmarkTransformHook in package
// internal/runner gives the hook's own cost per batch.
func BenchmarkTransformOverhead(b *testing.B) {
	const rows = 200_000
	identity := func(_ context.Context, tb etl.TransformBatch) error {
		tb.Emit(tb.Record())
		return nil
	}
	run := func(transform bool) (wall, cpu time.Duration) {
		src, err := faker.New(faker.Config{Seed: 42, Rows: rows, MalformedShare: 0.001})
		if err != nil {
			b.Fatal(err)
		}
		bucket := memblob.OpenBucket(nil)
		defer bucket.Close()
		dst, err := parquet.New(parquet.Config{Bucket: bucket})
		if err != nil {
			b.Fatal(err)
		}
		bld := etl.NewPipeline("quickstart").From(src).To(dst).Checkpoints(checkpoint.NewMem()).EpochEvery(2*time.Second, 0)
		if transform {
			bld = bld.Transform(identity, faker.Customers, faker.Orders)
		}
		p, err := bld.Build()
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		start, startCPU := time.Now(), cpuTime()
		res, err := p.Sync(context.Background())
		wall, cpu = time.Since(start), cpuTime()-startCPU
		if err != nil {
			b.Fatal(err)
		}
		if c := res.Streams[faker.Orders]; c.Read != rows || c.Read != c.Written+c.Quarantined || c.Filtered != 0 {
			b.Fatalf("result %+v", res)
		}
		return wall, cpu
	}
	var wallRatios, cpuRatios []float64
	var offCPU, onCPU time.Duration
	i := 0
	for b.Loop() {
		var ow, oc, nw, nc time.Duration
		if i%2 == 0 {
			ow, oc = run(false)
			nw, nc = run(true)
		} else {
			nw, nc = run(true)
			ow, oc = run(false)
		}
		offCPU, onCPU = offCPU+oc, onCPU+nc
		wallRatios = append(wallRatios, nw.Seconds()/ow.Seconds())
		cpuRatios = append(cpuRatios, nc.Seconds()/oc.Seconds())
		i++
	}
	n := float64(2 * rows * i)
	b.ReportMetric(float64(offCPU.Nanoseconds())/n, "cpu-ns/row-without")
	b.ReportMetric(float64(onCPU.Nanoseconds())/n, "cpu-ns/row-with")
	b.ReportMetric(100*(median(wallRatios)-1), "%overhead-wall-median")
	b.ReportMetric(100*(median(cpuRatios)-1), "%overhead-cpu-median")
	b.ReportMetric(100*(quantile(cpuRatios, 0.25)-1), "%overhead-cpu-q1")
	b.ReportMetric(100*(quantile(cpuRatios, 0.75)-1), "%overhead-cpu-q3")
}

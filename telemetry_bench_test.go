package etl_test

import (
	"context"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// BenchmarkTelemetryOverhead runs the quickstart's pipeline (faker with
// 0.1% malformed records → zstd Parquet, in memory, 2 × 200k records,
// 2s epochs as the quickstart) with metrics and traces off (no-op
// providers) and on (the SDK's meter provider with a reader and its
// tracer provider sampling every span). Each iteration is a pair of runs,
// one off and one on, in alternating order, each after a GC (so that one
// run's garbage is not collected in the other's time). It reports the
// median over the pairs of the on/off ratio of the process's CPU time
// and of wall time, as an overhead in percent: pairing cancels the drift
// of a shared machine's load, and the median ignores the pairs a burst of
// other work hit. Run it with -benchtime 20x or more; BenchmarkMeasureBatch
// in package internal/runner gives the per-batch cost, which noise doesn't blur.
func BenchmarkTelemetryOverhead(b *testing.B) {
	const rows = 200_000
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	defer mp.Shutdown(context.Background())
	defer tp.Shutdown(context.Background())
	offMP, offTP := metricnoop.NewMeterProvider(), tracenoop.NewTracerProvider()
	// run returns the wall and CPU time of one sync.
	run := func(mp metric.MeterProvider, tp trace.TracerProvider) (wall, cpu time.Duration) {
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
		p, err := etl.NewPipeline("quickstart").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
			EpochEvery(2*time.Second, 0).Telemetry(mp, tp).Build()
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
		if res.Streams["orders"].Read != rows {
			b.Fatalf("result %+v", res)
		}
		return wall, cpu
	}
	var wallRatios, cpuRatios []float64
	var offWall, onWall, offCPU time.Duration
	i := 0
	for b.Loop() {
		var ow, oc, nw, nc time.Duration
		if i%2 == 0 {
			ow, oc = run(offMP, offTP)
			nw, nc = run(mp, tp)
		} else {
			nw, nc = run(mp, tp)
			ow, oc = run(offMP, offTP)
		}
		offWall, onWall, offCPU = offWall+ow, onWall+nw, offCPU+oc
		wallRatios = append(wallRatios, nw.Seconds()/ow.Seconds())
		cpuRatios = append(cpuRatios, nc.Seconds()/oc.Seconds())
		i++
	}
	n := float64(2 * rows * i)
	b.ReportMetric(n/offWall.Seconds(), "records/s-off")
	b.ReportMetric(n/onWall.Seconds(), "records/s-on")
	b.ReportMetric(offCPU.Seconds()/float64(i), "cpu-s/run-off")
	b.ReportMetric(100*(median(wallRatios)-1), "%overhead-wall-median")
	b.ReportMetric(100*(median(cpuRatios)-1), "%overhead-cpu-median")
	// The spread of the paired CPU ratios: the middle half of the pairs
	// lies between these.
	b.ReportMetric(100*(quantile(cpuRatios, 0.25)-1), "%overhead-cpu-q1")
	b.ReportMetric(100*(quantile(cpuRatios, 0.75)-1), "%overhead-cpu-q3")
}

func median(xs []float64) float64 { return quantile(xs, 0.5) }

// quantile returns the q-quantile of xs, interpolating between ranks.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(pos)
	if lo+1 >= len(s) {
		return s[lo]
	}
	return s[lo] + (pos-float64(lo))*(s[lo+1]-s[lo])
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package etl_test

import (
	"context"
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
// tracer provider sampling every span), alternating within each
// iteration so both see the same machine, and reports each rate and the
// overhead in percent of wall time and of the process's CPU time.
func BenchmarkTelemetryOverhead(b *testing.B) {
	const rows = 200_000
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	defer mp.Shutdown(context.Background())
	defer tp.Shutdown(context.Background())
	// CPU time as well as wall time: on a machine shared with other work
	// the process's CPU time is the steadier figure.
	var offCPU, onCPU time.Duration
	run := func(mp metric.MeterProvider, tp trace.TracerProvider, cpu *time.Duration) time.Duration {
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
		start, startCPU := time.Now(), cpuTime()
		res, err := p.Sync(context.Background())
		took := time.Since(start)
		*cpu += cpuTime() - startCPU
		if err != nil {
			b.Fatal(err)
		}
		if res.Streams["orders"].Read != rows {
			b.Fatalf("result %+v", res)
		}
		return took
	}
	var off, on time.Duration
	i := 0
	for b.Loop() {
		// Alternate which goes first, so warm-up and drift fall on both.
		if i%2 == 0 {
			off += run(metricnoop.NewMeterProvider(), tracenoop.NewTracerProvider(), &offCPU)
			on += run(mp, tp, &onCPU)
		} else {
			on += run(mp, tp, &onCPU)
			off += run(metricnoop.NewMeterProvider(), tracenoop.NewTracerProvider(), &offCPU)
		}
		i++
	}
	n := float64(2 * rows * i)
	b.ReportMetric(n/off.Seconds(), "records/s-off")
	b.ReportMetric(n/on.Seconds(), "records/s-on")
	b.ReportMetric(100*(on.Seconds()/off.Seconds()-1), "%overhead-wall")
	b.ReportMetric(100*(onCPU.Seconds()/offCPU.Seconds()-1), "%overhead-cpu")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

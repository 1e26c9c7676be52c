package runner

import (
	"context"
	"log/slog"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
)

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMeasureBatch is the runner's telemetry cost per raw batch of
// 8192 records (the default batch): metrics, status and the Debug-level
// check, with no-op providers ("off") and the SDK's ("on", with a
// sampled span in the context, so exemplars are taken). Divided by a
// batch's processing time it gives the per-batch overhead.
func BenchmarkMeasureBatch(b *testing.B) {
	raw := new(engine.RawBatch)
	raw.Reset()
	raw.Stream = "orders"
	payload := []byte(`{"id":1,"customer_id":2,"total":12.5,"status":"paid"}`)
	for i := range defaultBatchRows {
		raw.Append(uint8(source.OpInsert), int64(i), []byte(strconv.Itoa(i)), payload)
	}
	bld := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "status", Type: arrow.BinaryTypes.String}}, nil))
	for i := range defaultBatchRows {
		bld.Field(0).(*array.Int64Builder).Append(int64(i))
		bld.Field(1).(*array.StringBuilder).Append("paid")
	}
	rec := bld.NewRecordBatch()
	defer rec.Release()
	out := engine.Output{Record: rec}

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	defer tp.Shutdown(context.Background())

	for _, tc := range []struct {
		name   string
		cfg    Config
		noSpan bool
	}{
		{"off", Config{Name: "bench", MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()}, false},
		{"on", Config{Name: "bench", MeterProvider: mp, TracerProvider: tp}, false},
		{"on-nospan", Config{Name: "bench", MeterProvider: mp, TracerProvider: tp}, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := tc.cfg.withDefaults()
			mon := NewMonitor(cfg)
			defer mon.close()
			r := &runner{cfg: cfg, mon: mon, state: newAttemptState("bench", true, time.Now()),
				streamOpts: map[string]streamOpts{}, log: slog.New(slog.DiscardHandler)}
			ctx, span := mon.tracer.Start(context.Background(), "bench")
			defer span.End()
			if tc.noSpan {
				ctx = context.Background()
			}
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				r.measureBatch(ctx, 0, raw, out, time.Millisecond, 1)
			}
			// On a loaded machine ns/op (wall time) counts the waits for a
			// core too; the process's CPU time per batch doesn't.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

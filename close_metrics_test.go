package etl_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/sourcetest"
)

// TestCloseUnregistersInstruments: a Pipeline's observable instruments
// report through the host's meter provider until Close, and not after:
// a host that builds pipelines and closes them (one per tenant, a test
// suite) does not pile up callbacks that keep each one reachable.
func TestCloseUnregistersInstruments(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	observed := func() int {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "openetl.events.dropped" {
					continue
				}
				if s, ok := m.Data.(metricdata.Sum[int64]); ok {
					n += len(s.DataPoints)
				}
			}
		}
		return n
	}
	src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Streams: []sourcetest.FakeStream{{Name: "s", Rows: 10}}})
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	p, err := etl.NewPipeline("p").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
		Telemetry(mp, tracenoop.NewTracerProvider()).Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := observed(); n != 1 {
		t.Fatalf("before Close: %d points of openetl.events.dropped, want 1 (the pipeline's)", n)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := observed(); n != 0 {
		t.Errorf("after Close: %d points of openetl.events.dropped, want none: the pipeline's callback is still registered", n)
	}
}

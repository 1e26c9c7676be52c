package iceberg_test

import (
	"context"
	"testing"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/sinktest"
)

// The conformance suite every destination passes, on a SQL catalog on
// SQLite with a file warehouse. Every Destination of one run shares the
// catalog (a new iceberg.New on it stands for a new process); Visible
// scans the table's current snapshot with iceberg-go.
func TestConformance(t *testing.T) {
	wh := newWarehouse(t)
	sinktest.Run(t, func(t *testing.T) sink.Destination {
		return newDest(t, wh.cat, iceberg.Config{})
	}, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			return scan(ctx, wh.cat, iceberg.DefaultNamespace, stream)
		},
		Skip: knownLimits,
	})
}

// TestConformanceSnapshots runs the suite with the pipeline's markers in
// snapshot summaries (FenceSnapshots). Through the REST catalog, the
// zombie tests and a pipeline through a catalog that refuses custom
// properties run with them (rest_fence_test.go).
func TestConformanceSnapshots(t *testing.T) {
	wh := newWarehouse(t)
	sinktest.Run(t, func(t *testing.T) sink.Destination {
		return newDest(t, wh.cat, iceberg.Config{Fence: iceberg.FenceSnapshots})
	}, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			return scan(ctx, wh.cat, iceberg.DefaultNamespace, stream)
		},
		Skip: knownLimits,
	})
}

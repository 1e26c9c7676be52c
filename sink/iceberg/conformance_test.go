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

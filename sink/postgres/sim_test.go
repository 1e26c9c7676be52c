package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink"
)

// TestSim drives the whole runner into the real server through crashes
// at every protocol step, lost Commit responses, zombies and staged rows
// expiring (OPENETL_SIM_SEEDS seeds, 40), appended and merged streams.
func TestSim(t *testing.T) {
	dsn(t)
	sim.RunSeeds(t, sim.Seeds{Name: "the Postgres writer", Key: "sink/postgres", Default: 40,
		Run: func(t *testing.T, seed uint64) (*sim.Report, error) {
			e := newEnv(t)
			return sim.Run(seed, sim.Options{MaxRows: 40, Target: &sim.Target{Name: "postgres", Read: e.visible,
				DropStaged: func(ctx context.Context) (int, error) { return e.open(t).DropStaged(ctx) },
				Open:       func(context.Context, sim.Setup) (sink.Destination, error) { return e.open(t), nil }}})
		},
		Replay: func(seed uint64) string {
			return fmt.Sprintf("OPENETL_SIM_SEED=%d go test ./sink/postgres -run TestSim", seed)
		},
	})
}

package ledger_test

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

var flagSimSeed = flag.String("sim.seed", "", "TestSim* replay this one seed and print its trace (or OPENETL_SIM_SEED)")

// simOptions are the options every seed runs with (a seed replays only
// with the same options).
var simOptions = sim.Options{MaxRows: 40}

// A writer whose data path knows nothing of fences or epochs (memStager,
// memApplier) passes the conformance suite, Ahead and poisoned batches
// included, with and without a Finisher.
func TestConformance(t *testing.T) {
	for _, finish := range []bool{false, true} {
		t.Run(fmt.Sprintf("finisher=%v", finish), func(t *testing.T) {
			m := newMemStore()
			sinktest.Run(t, func(*testing.T) sink.Destination { return &memDest{m: m, finish: finish} },
				sinktest.Options{Visible: m.visible})
		})
	}
}

// The same writer under the simulation of the whole runner: crashes at
// every step, lost Commit responses, zombies, staged data expiring, a
// lost checkpoint store (OPENETL_SIM_SEEDS seeds, default 40).
func TestSim(t *testing.T) {
	sim.RunSeeds(t, sim.Seeds{Name: "a writer on package ledger (in memory)", Key: "sink/ledger", Default: 40, One: *flagSimSeed,
		Run: func(t *testing.T, seed uint64) (*sim.Report, error) {
			m := newMemStore()
			opts := simOptions
			opts.Target = &sim.Target{Name: "ledger in memory", Read: m.visible, DropStaged: m.dropStaged,
				Open: func(context.Context, sim.Setup) (sink.Destination, error) {
					return &memDest{m: m, finish: seed%2 == 0}, nil
				}}
			return sim.Run(seed, opts)
		},
		Replay: func(seed uint64) string {
			return fmt.Sprintf("go test ./sink/ledger -run 'TestSim$' -sim.seed %d -v", seed)
		},
	})
}

package sim_test

import (
	"errors"
	"flag"
	"testing"

	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink/sinktest"
)

var flagCatchReps = flag.Int("sim.catchreps", 4, "repetitions of 50 seeds TestTargetCatchesWithin50Seeds runs per broken destination")

// caught50 runs 50 seeds from base against the broken destination seen
// as a Target and reports whether one of them failed the run.
func caught50(t *testing.T, base uint64, broken sinktest.FakeBroken) (bool, uint64) {
	t.Helper()
	for seed := base; seed < base+50; seed++ {
		opts := ciOptions
		opts.Target = fakeTarget(seed, broken)
		_, err := sim.Run(seed, opts)
		if errors.Is(err, sim.ErrViolation) {
			return true, seed
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	return false, 0
}

// A user runs a few dozen seeds against their destination: 50 seeds
// must fail a destination whose Commit is not idempotent, and one whose
// Commit ignores the fence, nearly always (the bar: 95 of 100
// sets of 50). CI runs a few sets from the commit's seed;
// -sim.catchreps=100 measures the rate.
func TestTargetCatchesWithin50Seeds(t *testing.T) {
	for _, broken := range []sinktest.FakeBroken{sinktest.FakeDoubleApply, sinktest.FakeSkipFence} {
		t.Run(broken.String(), func(t *testing.T) {
			// Fixed seeds: the rate is a property of the fault plans, and
			// CI must not fail on a commit's unlucky draw.
			base := uint64(7_000_000)
			missed := 0
			for rep := range *flagCatchReps {
				if ok, _ := caught50(t, base+uint64(rep)*50, broken); !ok {
					missed++
					t.Logf("seeds %d..%d missed the %v destination", base+uint64(rep)*50, base+uint64(rep)*50+49, broken)
				}
			}
			t.Logf("%v: caught in %d of %d sets of 50 seeds", broken, *flagCatchReps-missed, *flagCatchReps)
			// One miss in a small sample is within a 95% rate; more is not.
			if limit := max(*flagCatchReps/20, 1); missed > limit || (*flagCatchReps < 20 && missed > 0 && missed == *flagCatchReps) {
				t.Fatalf("the %v destination got past %d of %d sets of 50 seeds", broken, missed, *flagCatchReps)
			}
		})
	}
}

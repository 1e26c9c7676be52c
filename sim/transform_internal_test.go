package sim

import (
	"strings"
	"testing"
)

// The checks catch a transform that is not deterministic: a filter that
// also drops a row now and then, at random, shows as records lost (or
// counts that don't add up) within a few seeds.
func TestCatchesFlakyTransform(t *testing.T) {
	opts := Options{MaxRows: 40, MaxAttempts: 8, Transforms: true, flakyFilter: true}
	for seed := uint64(1); seed <= 50; seed++ {
		rep, err := Run(seed, opts)
		if err == nil {
			continue
		}
		all := strings.Join(rep.Violations, "\n")
		if !strings.Contains(all, "records lost") && !strings.Contains(all, "final totals") && !strings.Contains(all, "missing") {
			t.Fatalf("seed %d: violations %v: want lost records or totals", seed, rep.Violations)
		}
		t.Logf("seed %d caught the flaky filter: %v", seed, rep.Violations)
		return
	}
	t.Fatal("no seed of 50 caught the flaky filter")
}

package sim_test

import (
	"flag"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/sim"
)

var (
	flagTransformSeeds = flag.Int("sim.transform-seeds", 100, "number of seeds TestSeedsTransforms runs, derived from the commit")
	flagTransformSeed  = flag.String("sim.transform-seed", "", "replay this one seed of TestSeedsTransforms and print its trace")
)

// transformOptions are ciOptions with Go transforms on some streams.
var transformOptions = func() sim.Options {
	o := ciOptions
	o.Transforms = true
	return o
}()

func transformReplay(seed uint64) string {
	return "go test ./sim -run TestSeedsTransforms -sim.transform-seed=" + strconv.FormatUint(seed, 10) + " -v"
}

// TestSeedsTransforms runs the simulation with transforms (the identity
// and a filter that rejects, drops, adds a column and doubles rows, and
// the engine's row filter, etl.Builder.Filter) on some streams of each seed: the guarantee package delivery reports still
// holds for what the transform returns, and the counts add up (read +
// added = written + filtered + quarantined). CI runs 100 seeds;
// -sim.transform-seeds=N runs more.
func TestSeedsTransforms(t *testing.T) {
	if *flagTransformSeed != "" {
		seed, err := strconv.ParseUint(*flagTransformSeed, 10, 64)
		if err != nil {
			t.Fatalf("-sim.transform-seed %q: %v", *flagTransformSeed, err)
		}
		rep, err := sim.Run(seed, transformOptions)
		t.Log(rep)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	base := baseSeed(t) + 2_000_000
	n := *flagTransformSeeds
	start := time.Now()
	var (
		mu                          sync.Mutex
		failed                      []uint64
		filters, identities, merged atomic.Int64
		rowFilters, rowMerged       atomic.Int64
		attempts, faults            atomic.Int64
	)
	t.Run("seeds", func(t *testing.T) {
		for i := range n {
			seed := base + uint64(i)
			t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				t.Parallel()
				rep, err := sim.Run(seed, transformOptions)
				attempts.Add(int64(rep.Attempts))
				faults.Add(int64(rep.Faults))
				for _, l := range strings.Split(rep.Workload, "\n") {
					switch {
					case strings.Contains(l, "transform=filter"):
						filters.Add(1)
						if strings.Contains(l, "mode=merge") {
							merged.Add(1)
						}
					case strings.Contains(l, "transform=identity"):
						identities.Add(1)
					case strings.Contains(l, "transform=rowfilter"):
						rowFilters.Add(1)
						if strings.Contains(l, "mode=merge") {
							rowMerged.Add(1)
						}
					}
				}
				if err != nil {
					mu.Lock()
					failed = append(failed, seed)
					mu.Unlock()
					t.Errorf("%v\nreplay: %s\n%v", err, transformReplay(seed), rep)
				}
			})
		}
	})
	t.Logf("%d seeds from %d in %v: %d attempts, %d faults fired; streams with the filter %d (%d merged), with the identity %d, with the engine's row filter %d (%d merged); %d failed",
		n, base, time.Since(start).Round(time.Millisecond), attempts.Load(), faults.Load(), filters.Load(), merged.Load(),
		identities.Load(), rowFilters.Load(), rowMerged.Load(), len(failed))
	if n >= 10 && (filters.Load() == 0 || rowFilters.Load() == 0) {
		t.Error("no seed gave a stream the filter, or none the row filter")
	}
	for _, s := range failed {
		t.Logf("replay: %s", transformReplay(s))
	}
}

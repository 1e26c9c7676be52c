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
	flagRouteSeeds = flag.Int("sim.route-seeds", 30, "number of seeds TestSeedsRoutes runs, derived from the commit")
	flagRouteSeed  = flag.String("sim.route-seed", "", "replay this one seed of TestSeedsRoutes and print its trace")
)

// routeOptions are ciOptions with some streams routed into shared tables.
var routeOptions = func() sim.Options {
	o := ciOptions
	o.Routes = true
	return o
}()

func routeReplay(seed uint64) string {
	return "go test ./sim -run TestSeedsRoutes -sim.route-seed=" + strconv.FormatUint(seed, 10) + " -v"
}

// TestSeedsRoutes runs the simulation with streams routed into shared
// tables (etl.Builder.Route): every promise holds per source stream,
// read out of its table by _openetl_stream, and every row of a routed
// table names its record's stream. CI runs 30 seeds;
// -sim.route-seeds=N runs more.
func TestSeedsRoutes(t *testing.T) {
	if *flagRouteSeed != "" {
		seed, err := strconv.ParseUint(*flagRouteSeed, 10, 64)
		if err != nil {
			t.Fatalf("-sim.route-seed %q: %v", *flagRouteSeed, err)
		}
		rep, err := sim.Run(seed, routeOptions)
		t.Log(rep)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	base := baseSeed(t) + 3_000_000
	n := *flagRouteSeeds
	start := time.Now()
	var (
		mu                       sync.Mutex
		failed                   []uint64
		routed, merged, attempts atomic.Int64
		shared, faults           atomic.Int64
	)
	t.Run("seeds", func(t *testing.T) {
		for i := range n {
			seed := base + uint64(i)
			t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				t.Parallel()
				rep, err := sim.Run(seed, routeOptions)
				attempts.Add(int64(rep.Attempts))
				faults.Add(int64(rep.Faults))
				tables := map[string]int{}
				for _, l := range strings.Split(rep.Workload, "\n") {
					_, table, ok := strings.Cut(l, " routed=")
					if !ok {
						continue
					}
					routed.Add(1)
					tables[table]++
					if strings.Contains(l, "mode=merge") {
						merged.Add(1)
					}
				}
				for _, k := range tables {
					if k > 1 {
						shared.Add(1)
					}
				}
				if err != nil {
					mu.Lock()
					failed = append(failed, seed)
					mu.Unlock()
					t.Errorf("%v\nreplay: %s\n%v", err, routeReplay(seed), rep)
				}
			})
		}
	})
	t.Logf("%d seeds from %d in %v: %d attempts, %d faults fired; %d streams routed (%d merged), %d tables shared by several; %d failed",
		n, base, time.Since(start).Round(time.Millisecond), attempts.Load(), faults.Load(), routed.Load(), merged.Load(), shared.Load(), len(failed))
	if n >= 10 && (routed.Load() == 0 || shared.Load() == 0) {
		t.Error("no seed routed a stream, or none shared a table")
	}
	for _, s := range failed {
		t.Logf("replay: %s", routeReplay(s))
	}
}

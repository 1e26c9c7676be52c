package sim

import (
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Seeds says how RunSeeds runs the simulation over many seeds from a
// connector's tests.
type Seeds struct {
	// Name is what runs, for the log ("the Iceberg writer").
	Name string
	// Key names the seed range: the first seed is derived from Key and
	// the commit (git rev-parse HEAD), so every commit runs other seeds.
	Key string
	// Default is the number of seeds when OPENETL_SIM_SEEDS is unset.
	Default int
	// One is a seed to replay alone with its trace (a -sim.seed flag's
	// value), or "": then OPENETL_SIM_SEED is read.
	One string
	// Run runs one seed.
	Run func(t *testing.T, seed uint64) (*Report, error)
	// Replay returns the command that replays seed.
	Replay func(seed uint64) string
}

// RunSeeds runs s.Run for OPENETL_SIM_SEEDS seeds (default s.Default)
// from OPENETL_SIM_BASE (default derived from s.Key and the commit), in
// parallel subtests, failing each seed that reports a violation with its
// replay command, and logs the totals (attempts, faults, faults at
// Finish, rewinds, stream modes, superset sources) and the first notes
// (contract deviations no promise depends on: reported, not failed).
// With a seed to replay (s.One or OPENETL_SIM_SEED) it runs that seed
// alone and logs its report.
func RunSeeds(t *testing.T, s Seeds) {
	t.Helper()
	one := s.One
	if one == "" {
		one = os.Getenv("OPENETL_SIM_SEED")
	}
	if one != "" {
		seed, err := strconv.ParseUint(one, 10, 64)
		if err != nil {
			t.Fatalf("seed %q: %v", one, err)
		}
		rep, err := s.Run(t, seed)
		t.Log(rep)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	n := s.Default
	if v := os.Getenv("OPENETL_SIM_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("OPENETL_SIM_SEEDS=%q: want a positive number", v)
		}
	}
	base := baseSeed(t, s.Key)
	if v := os.Getenv("OPENETL_SIM_BASE"); v != "" {
		var err error
		if base, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("OPENETL_SIM_BASE=%q: %v", v, err)
		}
	}
	t.Logf("running %d seeds from %d against %s", n, base, s.Name)
	start := time.Now()
	var (
		mu                                      sync.Mutex
		failed                                  []uint64
		notes                                   []string
		attempts, faults, finishFaults, rewinds atomic.Int64
		merged, appended, superset              atomic.Int64
	)
	t.Run("seeds", func(t *testing.T) {
		for i := range n {
			seed := base + uint64(i)
			t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				t.Parallel()
				rep, err := s.Run(t, seed)
				attempts.Add(int64(rep.Attempts))
				faults.Add(int64(rep.Faults))
				rewinds.Add(int64(rep.Rewinds))
				merged.Add(int64(strings.Count(rep.Workload, "mode=merge")))
				appended.Add(int64(strings.Count(rep.Workload, "mode=append")))
				if strings.Contains(rep.Workload, "replay=superset") {
					superset.Add(1)
				}
				for _, l := range rep.Trace {
					if strings.Contains(l, "fault fired") && strings.Contains(l, "dest.finish") {
						finishFaults.Add(1)
					}
				}
				mu.Lock()
				if len(rep.Notes) > 0 {
					notes = append(notes, fmt.Sprintf("seed %d: %s", seed, rep.Notes[0]))
				}
				if err != nil {
					failed = append(failed, seed)
				}
				mu.Unlock()
				if err != nil {
					t.Errorf("%v\nreplay: %s\n%v", err, s.Replay(seed), rep)
				}
			})
		}
	})
	t.Logf("%d seeds in %v: %d attempts, %d faults fired (%d at Finish), %d rewinds; streams merged %d, appended %d; %d seeds with a superset source; %d failed",
		n, time.Since(start).Round(time.Millisecond), attempts.Load(), faults.Load(), finishFaults.Load(), rewinds.Load(),
		merged.Load(), appended.Load(), superset.Load(), len(failed))
	for _, seed := range failed {
		t.Logf("replay: %s", s.Replay(seed))
	}
	t.Logf("%d seeds with notes", len(notes))
	for _, note := range notes[:min(len(notes), 5)] {
		t.Logf("note: %s", note)
	}
}

// baseSeed derives the first seed from key and the commit. Outside a git
// checkout (a module in the module cache, a vendored copy, a machine
// without git) it depends on key only, quietly: that is a normal place
// to run a user's simulation, not an error.
func baseSeed(_ *testing.T, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key + ":"))
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		h.Write([]byte(strings.TrimSpace(string(out))))
	}
	return h.Sum64() >> 12
}

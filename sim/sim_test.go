package sim_test

import (
	"context"
	"errors"
	"flag"
	"hash/fnv"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

var (
	flagSeeds = flag.Int("sim.seeds", 300, "number of seeds TestSeeds runs, derived from the commit")
	flagSeed  = flag.String("sim.seed", "", "replay this one seed and print its trace")
)

// ciOptions are the options TestSeeds runs every seed with: small
// workloads, so hundreds of seeds fit in CI. A seed replays only with the
// same options.
var ciOptions = sim.Options{MaxRows: 40, MaxAttempts: 8}

// baseSeed derives the first seed from the commit, so every commit runs a
// different set of seeds (and a failing one is replayed by number).
func baseSeed(t *testing.T) uint64 {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		const fixed = 0x0e7e7e57
		t.Logf("git rev-parse HEAD failed (%v): using the fixed base seed %d", err, uint64(fixed))
		return fixed
	}
	h := fnv.New64a()
	h.Write([]byte(strings.TrimSpace(string(out))))
	return h.Sum64() >> 12 // keep the numbers short enough to type
}

func replayCommand(seed uint64) string {
	return "go test ./sim -run TestSeeds -sim.seed=" + strconv.FormatUint(seed, 10) + " -v"
}

func TestSeeds(t *testing.T) {
	if *flagSeed != "" {
		seed, err := strconv.ParseUint(*flagSeed, 10, 64)
		if err != nil {
			t.Fatalf("-sim.seed %q: %v", *flagSeed, err)
		}
		rep, err := sim.Run(seed, ciOptions)
		t.Log(rep)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	base := baseSeed(t)
	n := *flagSeeds
	t.Logf("running %d seeds from %d", n, base)
	start := time.Now()
	var (
		mu       sync.Mutex
		failed   []uint64
		attempts atomic.Int64
		faults   atomic.Int64
		rewinds  atomic.Int64
	)
	t.Run("seeds", func(t *testing.T) {
		for i := range n {
			seed := base + uint64(i)
			t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				t.Parallel()
				rep, err := sim.Run(seed, ciOptions)
				attempts.Add(int64(rep.Attempts))
				faults.Add(int64(rep.Faults))
				rewinds.Add(int64(rep.Rewinds))
				if err != nil {
					mu.Lock()
					failed = append(failed, seed)
					mu.Unlock()
					t.Errorf("%v\nreplay: %s\n%v", err, replayCommand(seed), rep)
				}
			})
		}
	})
	t.Logf("%d seeds in %v: %d attempts, %d faults fired, %d rewinds, %d failed",
		n, time.Since(start).Round(time.Millisecond), attempts.Load(), faults.Load(), rewinds.Load(), len(failed))
	for _, s := range failed {
		t.Logf("replay: %s", replayCommand(s))
	}
}

// findViolations runs seeds from 1 against a broken destination until one
// reports a violation of the protocol (named by protocolMsg) and one
// reports what a user would see: duplicated records or wrong final rows.
// It fails unless both turn up within limit seeds.
func findViolations(t *testing.T, broken sinktest.FakeBroken, limit int, protocolMsg string) {
	t.Helper()
	opts := ciOptions
	opts.Broken = broken
	var protocol, data bool
	for seed := uint64(1); seed <= uint64(limit) && !(protocol && data); seed++ {
		rep, err := sim.Run(seed, opts)
		if err == nil {
			continue
		}
		if !errors.Is(err, sim.ErrViolation) {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !protocol && containsAny(rep.Violations, protocolMsg) {
			protocol = true
			t.Logf("seed %d caught the %v destination: %v", seed, broken, rep.Violations)
		}
		if !data && containsAny(rep.Violations, "duplicated", "differ") {
			data = true
			t.Logf("seed %d caught the %v destination in the data: %v", seed, broken, rep.Violations)
		}
	}
	if !protocol || !data {
		t.Fatalf("within %d seeds against the %v destination: protocol violation found %v, data violation found %v", limit, broken, protocol, data)
	}
}

// The simulation catches a destination whose Commit skips the fence: a
// zombie paused inside Commit applies an epoch a newer attempt already
// recovered.
func TestCatchesSkipFence(t *testing.T) {
	findViolations(t, sinktest.FakeSkipFence, 1000, "a zombie's Commit landed")
}

// The simulation catches a destination whose Commit is not idempotent:
// a Commit retried after a lost response applies the epoch twice.
func TestCatchesDoubleApply(t *testing.T) {
	findViolations(t, sinktest.FakeDoubleApply, 1000, "applied twice")
}

// The simulation catches a destination whose Recover does not check for
// epochs the checkpoint log doesn't know: with the store lost and the
// new log's generation past the fence, the attempt skips the new
// epochs as applied instead of failing with sink.ErrAhead.
func TestCatchesSkipAhead(t *testing.T) {
	opts := ciOptions
	opts.Broken = sinktest.FakeSkipAhead
	for seed := uint64(1); seed <= 200; seed++ {
		rep, err := sim.Run(seed, opts)
		if err != nil && !errors.Is(err, sim.ErrViolation) {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if containsAny(rep.Violations, "want an error wrapping sink.ErrAhead") {
			t.Logf("seed %d caught the %v destination: %v", seed, opts.Broken, rep.Violations)
			return
		}
	}
	t.Fatalf("no seed of 200 caught the %v destination", opts.Broken)
}

func containsAny(l []string, subs ...string) bool {
	all := strings.Join(l, "\n")
	for _, s := range subs {
		if strings.Contains(all, s) {
			return true
		}
	}
	return false
}

func TestRecordIDVectors(t *testing.T) {
	for _, v := range []struct {
		stream, key, payload string
		seq                  int64
		id                   string
	}{
		{"orders", "42", `{"id":42}`, 7, "79f31045bf5ab5655cdd3b5607862643"},
		{"orders", "", `{"id":42}`, 7, "0a203a32206444d5c896477c05649d92"},
		{"orders", "42", `{"id":42}`, 8, "612569515ae994aa12ef4bd465665389"},
		{"", "", "", 0, "0a92a762d88e9a8dd845fcbc05d3a4b7"},
		{"événements", "k", "", -1, "d449e4e163ce8019a82a6595809c16af"},
	} {
		if got := sim.RecordID(v.stream, []byte(v.key), []byte(v.payload), v.seq); got != v.id {
			t.Errorf("RecordID(%q, %q, %q, %d) = %s, want %s", v.stream, v.key, v.payload, v.seq, got, v.id)
		}
	}
}

// The same seed picks the same workload and fault plan.
func TestSeedIsDeterministic(t *testing.T) {
	a, _ := sim.Run(7, ciOptions)
	b, _ := sim.Run(7, ciOptions)
	if a.Workload != b.Workload {
		t.Fatalf("workload differs:\n%s\n%s", a.Workload, b.Workload)
	}
	plan := func(r *sim.Report) []string {
		var out []string
		for _, l := range r.Trace {
			if strings.Contains(l, "starting") {
				out = append(out, l)
			}
		}
		return out
	}
	if pa, pb := plan(a), plan(b); strings.Join(pa, "\n") != strings.Join(pb, "\n") {
		t.Fatalf("fault plans differ:\n%v\n%v", pa, pb)
	}
}

// fakeTarget is a sinktest.FakeDestination driven as a sim.Target: the
// simulation sees it only as it would a real destination (through
// sinktest.WithFaults, Read and DropStaged), not through the fake's
// records. The class and capabilities come from the seed.
func fakeTarget(seed uint64, broken sinktest.FakeBroken) *sim.Target {
	class := []sink.Class{sink.StageAndApply, sink.Transactional, sink.DeliverAck}[seed%3]
	caps := sink.Capabilities{Merge: seed%5 != 0, SkipByID: seed%2 == 0}
	var (
		mu sync.Mutex
		d  *sinktest.FakeDestination
	)
	return &sim.Target{
		Name: "sinktest.FakeDestination as a Target",
		Open: func(_ context.Context, setup sim.Setup) (sink.Destination, error) {
			mu.Lock()
			defer mu.Unlock()
			if setup.Attempt == 0 {
				return sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: class, Capabilities: caps}), nil
			}
			if d == nil {
				d = sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: class, Capabilities: caps, Broken: broken})
			}
			return d, nil
		},
		Read: func(_ context.Context, stream string) ([]sinktest.Row, error) {
			mu.Lock()
			dd := d
			mu.Unlock()
			if dd == nil {
				return nil, nil
			}
			var out []sinktest.Row
			for _, r := range dd.Rows(stream) {
				out = append(out, sinktest.Row{ID: r.ID, Seq: r.Seq, Op: r.Op, Values: r.Values})
			}
			return out, nil
		},
		DropStaged: func(context.Context) (int, error) {
			mu.Lock()
			dd := d
			mu.Unlock()
			if dd == nil {
				return 0, nil
			}
			return dd.DropStaged("sim"), nil
		},
	}
}

// The simulation drives a destination it knows only as a sim.Target
// (here the fake, seen from outside) and finds no violation, and no
// note.
func TestSeedsTarget(t *testing.T) {
	base := baseSeed(t) + 1_000_000
	n := max(*flagSeeds/3, 1)
	var failed atomic.Int64
	t.Run("seeds", func(t *testing.T) {
		for i := range n {
			seed := base + uint64(i)
			t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
				t.Parallel()
				opts := ciOptions
				opts.Target = fakeTarget(seed, sinktest.FakeCorrect)
				rep, err := sim.Run(seed, opts)
				if err != nil || len(rep.Notes) > 0 {
					failed.Add(1)
					t.Errorf("%v (notes: %v)\n%v", err, rep.Notes, rep)
				}
			})
		}
	})
	t.Logf("%d seeds from %d, %d failed", n, base, failed.Load())
}

package shard

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/checkpoint/object"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

var (
	flagSimSeeds = flag.Int("shard.sim-seeds", 4, "number of seeds TestSimHosts runs")
	flagSimSeed  = flag.Uint64("shard.sim-seed", 0, "replay this one seed of TestSimHosts")
)

// TestSimHosts is the simulation's hosts and leases: a seed picks S
// shards of a pipeline and hosts that spread them with Leases over one
// bucket, stepped on a simulated clock while the shards' pipelines Run
// for real, into one destination, from live sources whose logs grow.
// At random steps a host pauses (it stops stepping while its runs go
// on, so its leases expire mid-epoch and it is a zombie once another
// host takes its shards), comes back, dies for good (its runs go on
// until fenced), or a host is added. Afterwards every host stops and
// each shard syncs to the end of its source: every record is visible
// at the destination exactly once (the source replays exactly and the
// destination stages and applies, so exactly once is what each shard
// promises), and the zombies that raced a new owner were fenced rather
// than landing anything twice.
func TestSimHosts(t *testing.T) {
	seeds := []uint64{*flagSimSeed}
	if *flagSimSeed == 0 {
		base := uint64(time.Now().UnixNano())
		seeds = seeds[:0]
		for i := range *flagSimSeeds {
			seeds = append(seeds, base+uint64(i))
		}
	}
	var fenced, takeovers int64
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			f, k := simHosts(t, seed)
			fenced += f
			takeovers += k
		})
	}
	t.Logf("%d seeds: %d runs fenced, %d shard starts after the first", len(seeds), fenced, takeovers)
}

type simHost struct {
	l      *Leases
	ctx    context.Context
	cancel func()
	paused int  // steps left to skip
	dead   bool // never steps again
}

func simHosts(t *testing.T, seed uint64) (fencedRuns, restarts int64) {
	t.Logf("seed %d (replay: -run TestSimHosts -shard.sim-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5ead))
	shards := 2 + rng.IntN(3)
	const rows, step = 400, 40 // records a split holds, and how many more each step reveals
	bucket := object.NewMem()
	store := checkpoint.NewMem()
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	srcs := make([]*sourcetest.FakeSource, shards)
	for i := range srcs {
		srcs[i] = sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Seed: seed + uint64(i), Live: true, Replay: source.ReplayExact,
			Streams: []sourcetest.FakeStream{{Name: fmt.Sprintf("s%d", i), Splits: 1 + rng.IntN(2), Rows: rows, BadEvery: 37}}})
	}
	var fenced, starts atomic.Int64
	epochs := make(chan struct{}, 1) // an epoch committed somewhere
	run := func(ctx context.Context, i int) error {
		starts.Add(1)
		p, err := etl.NewPipeline(etl.ShardKey("sim", i, shards)).From(srcs[i]).To(dst).Checkpoints(store).
			EpochEvery(2*time.Millisecond, 1<<30).OnProgress(func(etl.Progress) {
			select {
			case epochs <- struct{}{}:
			default:
			}
		}).Build()
		if err != nil {
			return err
		}
		defer p.Close(context.WithoutCancel(ctx))
		err = p.Run(ctx)
		if etl.IsFenced(err) {
			fenced.Add(1)
		}
		return err
	}

	var hosts []*simHost
	addHost := func() {
		l, err := NewLeases(LeaseConfig{Bucket: bucket, Prefix: "sim/_leases", Host: fmt.Sprintf("h%d", len(hosts)),
			Shards: shards, TTL: 3 * time.Second, Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		hosts = append(hosts, &simHost{l: l, ctx: ctx, cancel: cancel})
	}
	for range 1 + rng.IntN(3) {
		addHost()
	}
	now := time.Unix(1_000_000, 0)
	horizon := 0
	steps := 25 + rng.IntN(20)
	for s := range steps {
		now = now.Add(time.Second)
		horizon = min(rows, horizon+step)
		for _, src := range srcs {
			src.SetHorizon(horizon)
		}
		live := 0
		for _, h := range hosts {
			if !h.dead {
				live++
			}
		}
		switch r := rng.IntN(20); {
		case r == 0 && len(hosts) < 5:
			addHost()
		case r <= 2:
			h := hosts[rng.IntN(len(hosts))]
			if !h.dead {
				h.paused = 1 + rng.IntN(8) // past its leases' TTL when above 3
			}
		case r == 3 && live > 1 && s < steps-5:
			hosts[rng.IntN(len(hosts))].dead = true
		}
		for _, h := range hosts {
			switch {
			case h.dead:
			case h.paused > 0:
				h.paused--
			default:
				Step(h.ctx, h.l, now, run)
			}
		}
		// Let the runs move on: an epoch committed by any of them, or
		// a while without any (every shard between owners).
		select {
		case <-epochs:
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Stop: the live hosts leave cleanly; the dead ones' runs stop with
	// their process.
	for _, h := range hosts {
		if !h.dead {
			Stop(h.ctx, h.l, now)
		}
		h.cancel()
		Settle(h.l)
	}
	for _, h := range hosts {
		h.l.mu.Lock()
		done := make([]chan struct{}, 0, len(h.l.held))
		for _, ls := range h.l.held {
			done = append(done, ls.done)
		}
		h.l.mu.Unlock()
		for _, d := range done {
			<-d
		}
	}
	// Every shard to the end of its source, then the checks.
	for i, src := range srcs {
		src.SetHorizon(rows)
		p, err := etl.NewPipeline(etl.ShardKey("sim", i, shards)).From(src).To(dst).Checkpoints(store).Build()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range p.Guarantees() {
			if g.Level != delivery.ExactlyOnce {
				t.Fatalf("shard %d: stream %s is %v (%s), want exactly once", i, g.Stream, g.Level, g.Reason)
			}
		}
		if _, err := p.Sync(context.Background()); err != nil {
			t.Fatalf("shard %d: final sync: %v", i, err)
		}
		p.Close(context.Background())
		stream := fmt.Sprintf("s%d", i)
		want := 0
		for _, r := range src.Records(stream) {
			if !r.Bad {
				want++
			}
		}
		vis := dst.Visibility(stream)
		for id, n := range vis {
			if n != 1 {
				t.Errorf("shard %d: record %s visible %d times", i, id, n)
			}
		}
		if len(vis) != want {
			t.Errorf("shard %d: %d records visible, want %d", i, len(vis), want)
		}
		// The destination's own log: each epoch applied once, never by a
		// generation below the fence (a zombie's Commit).
		seen := map[uint64]bool{}
		for _, a := range dst.Applies(etl.ShardKey("sim", i, shards)) {
			if seen[a.Epoch] || a.Gen < a.Fence {
				t.Errorf("shard %d: epoch %d applied again or by generation %d under fence %d", i, a.Epoch, a.Gen, a.Fence)
			}
			seen[a.Epoch] = true
		}
	}
	t.Logf("%d shards, %d hosts, %d steps: %d runs started, %d fenced", shards, len(hosts), steps, starts.Load(), fenced.Load())
	return fenced.Load(), starts.Load() - int64(shards)
}

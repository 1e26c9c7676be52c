package shard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint/object"
	"github.com/openetl/etl/shard"
)

const ttl = 15 * time.Second

// cluster is a set of hosts sharing one bucket, stepped by the test on a
// clock of its own: nothing waits for time to pass.
type cluster struct {
	t      *testing.T
	bucket object.Bucket
	shards int
	now    time.Time
	hosts  map[string]*shard.Leases

	mu      sync.Mutex
	changed *sync.Cond       // broadcast when running changes
	running map[int][]string // shard → hosts whose run of it hasn't returned
	starts  int
}

func newCluster(t *testing.T, b object.Bucket, shards int, hosts ...string) *cluster {
	c := &cluster{t: t, bucket: b, shards: shards, now: time.Unix(1_000_000, 0), hosts: map[string]*shard.Leases{}, running: map[int][]string{}}
	c.changed = sync.NewCond(&c.mu)
	for _, h := range hosts {
		c.add(h)
	}
	return c
}

func (c *cluster) add(host string) {
	l, err := shard.NewLeases(shard.LeaseConfig{Bucket: c.bucket, Prefix: "p/_leases", Host: host, Shards: c.shards, TTL: ttl})
	if err != nil {
		c.t.Fatal(err)
	}
	c.hosts[host] = l
}

// run is each host's shard run: it stays until cancelled.
func (c *cluster) run(host string) func(context.Context, int) error {
	return func(ctx context.Context, s int) error {
		c.mu.Lock()
		c.running[s] = append(c.running[s], host)
		c.starts++
		c.changed.Broadcast()
		c.mu.Unlock()
		<-ctx.Done()
		c.mu.Lock()
		c.running[s] = slices.DeleteFunc(c.running[s], func(h string) bool { return h == host })
		c.changed.Broadcast()
		c.mu.Unlock()
		return nil
	}
}

// step advances the clock by one Interval and steps the hosts named (all
// when none), each then waiting for the runs it cancelled.
func (c *cluster) step(hosts ...string) {
	c.now = c.now.Add(ttl / 3)
	if len(hosts) == 0 {
		for h := range c.hosts {
			hosts = append(hosts, h)
		}
		slices.Sort(hosts)
	}
	for _, h := range hosts {
		shard.Step(c.t.Context(), c.hosts[h], c.now, c.run(h))
		shard.Settle(c.hosts[h])
	}
}

// held returns each host's held shards.
func (c *cluster) held() map[string][]int {
	out := map[string][]int{}
	for h, l := range c.hosts {
		out[h] = l.Held()
	}
	return out
}

// check fails unless every shard is held by one host and run by it
// alone (once its run started), and the counts per host are want.
func (c *cluster) check(want map[string]int) {
	c.t.Helper()
	owner := map[int]string{}
	for h, ss := range c.held() {
		if len(ss) != want[h] {
			c.t.Fatalf("host %s holds %v, want %d shards (all: %v)", h, ss, want[h], c.held())
		}
		for _, s := range ss {
			if o, dup := owner[s]; dup {
				c.t.Fatalf("shard %d held by %s and %s", s, o, h)
			}
			owner[s] = h
		}
	}
	if len(owner) != c.shards {
		c.t.Fatalf("%d shards held, want %d: %v", len(owner), c.shards, c.held())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, hs := range c.running {
		if len(hs) > 1 || len(hs) == 1 && hs[0] != owner[s] {
			c.t.Fatalf("shard %d run by %v, held by %s", s, hs, owner[s])
		}
	}
}

// settle steps every host until the holdings stay the same for three
// rounds (news of a host reaches the others a round late).
func (c *cluster) settle() {
	c.t.Helper()
	prev, same := fmt.Sprint(c.held()), 0
	for range 30 {
		c.step()
		cur := fmt.Sprint(c.held())
		if cur == prev {
			if same++; same == 3 {
				return
			}
		} else {
			prev, same = cur, 0
		}
	}
	c.t.Fatalf("holdings never settled: %v", c.held())
}

// runs counts the shards host runs; c.mu is held.
func (c *cluster) runs(host string) int {
	n := 0
	for _, hs := range c.running {
		if slices.Contains(hs, host) {
			n++
		}
	}
	return n
}

func buckets(t *testing.T) map[string]func() object.Bucket {
	return map[string]func() object.Bucket{
		"mem": func() object.Bucket { return object.NewMem() },
		"dir": func() object.Bucket {
			b, err := object.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
}

// TestLeasesBalance: 7 shards over 3 hosts settle at 3, 2, 2 (the first
// host in name order takes the extra one), each shard run by one host;
// a fourth host joins and they settle at 2, 2, 2, 1 with the shards
// given up stopped before anyone else runs them.
func TestLeasesBalance(t *testing.T) {
	for name, nb := range buckets(t) {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, nb(), 7, "a", "b", "c")
			c.settle()
			c.check(map[string]int{"a": 3, "b": 2, "c": 2})
			c.add("d")
			c.settle()
			c.check(map[string]int{"a": 2, "b": 2, "c": 2, "d": 1})
		})
	}
}

// TestLeasesTakeover: host b stops (dead, or paused: no more steps).
// Host a takes none of b's shards before b's leases have looked
// unchanged to it for TTL, and all of them by TTL + 2 Intervals after
// b's last renewal. When b steps again (a zombie back from a pause),
// its renewals fail, and it cancels its runs and holds nothing; then it
// is a live host again and gets its share back.
func TestLeasesTakeover(t *testing.T) {
	for name, nb := range buckets(t) {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, nb(), 4, "a", "b")
			c.settle()
			c.check(map[string]int{"a": 2, "b": 2})
			last := c.now // b's last renewal
			var took time.Duration
			for range 10 {
				c.step("a")
				if len(c.hosts["a"].Held()) == 4 {
					took = c.now.Sub(last)
					break
				}
				if c.now.Sub(last) < ttl && len(c.hosts["a"].Held()) != 2 {
					t.Fatalf("a holds %v only %v after b's last renewal (TTL %v)", c.hosts["a"].Held(), c.now.Sub(last), ttl)
				}
			}
			if bound := c.hosts["a"].Bound(); took == 0 || took > bound {
				t.Fatalf("a took b's shards %v after b's last renewal, want within %v", took, bound)
			}
			t.Logf("takeover %v after the last renewal (TTL %v, bound %v)", took, ttl, c.hosts["a"].Bound())
			// b's runs still go on (a zombie): the checkpoint generation
			// fences them, not the lease. Its next step cancels them.
			// (Wait for its runs to have started: they start on goroutines.)
			c.mu.Lock()
			for c.runs("b") != 2 {
				c.changed.Wait()
			}
			c.mu.Unlock()
			c.step("b")
			c.mu.Lock()
			for s, hs := range c.running {
				if slices.Contains(hs, "b") {
					t.Errorf("b still runs shard %d after losing its lease", s)
				}
			}
			c.mu.Unlock()
			if h := c.hosts["b"].Held(); len(h) != 0 {
				t.Fatalf("b holds %v after its leases were taken", h)
			}
			c.settle()
			c.check(map[string]int{"a": 2, "b": 2})
		})
	}
}

// TestLeasesLeave: a host that stops cleanly frees its leases and marks
// itself gone, so the other takes its shards at its next step, with no
// TTL to wait.
func TestLeasesLeave(t *testing.T) {
	c := newCluster(t, object.NewMem(), 5, "a", "b")
	c.settle()
	c.check(map[string]int{"a": 3, "b": 2})
	shard.Stop(t.Context(), c.hosts["b"], c.now)
	delete(c.hosts, "b")
	c.step("a")
	c.check(map[string]int{"a": 5})
}

// TestNewLeasesErrors: bad configurations wrap ErrConfig.
func TestNewLeasesErrors(t *testing.T) {
	b := object.NewMem()
	for _, cfg := range []shard.LeaseConfig{
		{Prefix: "p", Host: "h", Shards: 1},
		{Bucket: b, Prefix: "p", Host: "h", Shards: 0},
		{Bucket: b, Prefix: "p", Host: "a/b", Shards: 1},
		{Bucket: b, Prefix: "p", Host: ".h", Shards: 1},
		{Bucket: b, Prefix: "", Host: "h", Shards: 1},
		{Bucket: b, Prefix: "p", Host: "h", Shards: 1, TTL: time.Second, Interval: time.Second},
	} {
		if _, err := shard.NewLeases(cfg); err == nil || !isConfig(err) {
			t.Errorf("NewLeases(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

// TestLeasesPermanentError: a run whose error LeaseConfig.Permanent
// calls permanent ends Run, which returns it (naming the shard) and
// frees the host's leases, so another host takes them at once; other
// errors leave Run going and the shard is run again.
func TestLeasesPermanentError(t *testing.T) {
	bad := errors.New("bad configuration")
	b := object.NewMem()
	l, err := shard.NewLeases(shard.LeaseConfig{Bucket: b, Prefix: "p/_leases", Host: "h1", Shards: 2,
		TTL: 200 * time.Millisecond, Permanent: func(err error) bool { return errors.Is(err, bad) }})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	starts := map[int]int{}
	res := make(chan error, 1)
	go func() {
		res <- l.Run(t.Context(), func(ctx context.Context, s int) error {
			mu.Lock()
			starts[s]++
			n := starts[s]
			mu.Unlock()
			switch {
			case s == 0:
				<-ctx.Done() // a healthy shard, stopped when Run ends
				return nil
			case n < 3:
				return errors.New("transient") // run again at the next Interval
			default:
				return bad
			}
		})
	}()
	err = <-res
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "shard 1") {
		t.Fatalf("Run returned %v, want the permanent error of shard 1", err)
	}
	mu.Lock()
	if starts[1] != 3 || starts[0] != 1 {
		t.Errorf("starts %v, want shard 1 three times (two transient errors), shard 0 once", starts)
	}
	mu.Unlock()
	// Its leases are free: a second host takes both shards at its first
	// step.
	l2, err := shard.NewLeases(shard.LeaseConfig{Bucket: b, Prefix: "p/_leases", Host: "h2", Shards: 2, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	shard.Step(t.Context(), l2, now, func(ctx context.Context, _ int) error { <-ctx.Done(); return nil })
	if got := l2.Held(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("the second host holds %v, want [0 1]", got)
	}
	shard.Stop(t.Context(), l2, now)
}

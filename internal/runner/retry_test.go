package runner_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// cutSource has one stream and nothing to read: each attempt's split
// waits idle for after (on the clock), then fails as a connection cut by
// an idle timeout does, until cuts attempts have; the next waits for
// its context.
type cutSource struct {
	after time.Duration
	cuts  int32
	opens atomic.Int32
}

var errCut = errors.New("connection reset by peer")

func (s *cutSource) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{Streams: []source.Stream{{Name: "s0"}}}, nil
}

func (s *cutSource) Replay() source.Replay { return source.ReplayExact }

func (s *cutSource) Open(context.Context, []string, map[source.SplitID][]byte) ([]source.Split, error) {
	return []source.Split{&cutSplit{src: s, n: s.opens.Add(1)}}, nil
}

type cutSplit struct {
	src *cutSource
	n   int32
}

func (sp *cutSplit) ID() source.SplitID { return "s0" }

func (sp *cutSplit) Read(ctx context.Context, _ source.Emitter, _ bool) error {
	if sp.n > sp.src.cuts {
		<-ctx.Done()
		return ctx.Err()
	}
	select {
	case <-time.After(sp.src.after):
		return errCut
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestRetryBudgetCountsOutages, on a bubble's fake clock: attempts that
// fail at once exhaust the budget (a *BudgetError after pauses of 1, 2,
// 4, 8 and then 10 ms summing past 100 ms); an idle pipeline whose
// connection is cut after being up longer than the longest pause is not
// in an outage, however often that happens: each cut is retry 1 again,
// and Run goes on well past the budget until cancelled.
func TestRetryBudgetCountsOutages(t *testing.T) {
	policy := func() *runner.RetryPolicy {
		return &runner.RetryPolicy{Budget: 100 * time.Millisecond, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
			Jitter: func() float64 { return 1 }} // pauses of exactly d
	}
	config := func(src source.Source, on func(runner.Event)) runner.Config {
		cfg := runner.Config{Name: "p", Source: src, Destination: newMemDest(), Store: checkpoint.NewMem(),
			NewEngine: newFakeEngine, EpochInterval: 5 * time.Millisecond, Retry: policy(), OnEvent: on}
		cfg.Monitor = runner.NewMonitor(cfg)
		return cfg
	}
	t.Run("failing at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			var waits []time.Duration
			cfg := config(&fakeSource{streams: 1, rows: 10, rpEvery: 1, openErr: errCut}, func(e runner.Event) {
				if e.Kind == runner.EventSyncRetrying {
					mu.Lock()
					waits = append(waits, e.Wait)
					mu.Unlock()
				}
			})
			start := time.Now()
			err := runner.Run(context.Background(), cfg)
			var be *runner.BudgetError
			if !errors.As(err, &be) || !errors.Is(err, errCut) {
				t.Fatalf("Run: %v, want a *BudgetError wrapping the cut", err)
			}
			cfg.Monitor.Close(context.Background())
			// 1+2+4+8 = 15 ms, then 10 ms each: the failure after 105 ms
			// of outage ends it, after 13 retries.
			if be.Retries != 13 || be.Outage != 105*time.Millisecond || time.Since(start) != 105*time.Millisecond {
				t.Errorf("budget error %+v after %v; want 13 retries over 105ms", be, time.Since(start))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(waits) != 13 || waits[0] != time.Millisecond || waits[3] != 8*time.Millisecond || waits[4] != 10*time.Millisecond {
				t.Errorf("pauses %v", waits)
			}
		})
	})
	t.Run("idle and cut", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			var nums []int
			src := &cutSource{after: 50 * time.Millisecond, cuts: 6}
			cfg := config(src, func(e runner.Event) {
				if e.Kind == runner.EventSyncRetrying {
					mu.Lock()
					nums = append(nums, e.Retry)
					mu.Unlock()
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- runner.Run(ctx, cfg) }()
			for src.opens.Load() <= src.cuts {
				synctest.Wait()
				time.Sleep(time.Millisecond) // the fake clock: moves the cuts along
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v, want nil (cancelled)", err)
			}
			cfg.Monitor.Close(context.Background())
			mu.Lock()
			defer mu.Unlock()
			if len(nums) != 6 {
				t.Fatalf("%d retries, want 6 (one per cut)", len(nums))
			}
			for i, n := range nums {
				if n != 1 {
					t.Errorf("retry %d numbered %d, want 1: an idle attempt up for 50ms ends the outage", i+1, n)
				}
			}
		})
	})
}

// TestRetriedSyncCountsEpochPastCommitPoint: the first attempt's
// destination Commit fails after the epoch's record is at HEAD (the
// commit point); the retried attempt's Recover rolls it forward. The
// Sync's Result counts the epoch once, as the checkpoint's totals do.
func TestRetriedSyncCountsEpochPastCommitPoint(t *testing.T) {
	ctx := context.Background()
	var commits atomic.Int32
	fake := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
		Class: sink.StageAndApply,
		Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == sinktest.FakeCommit && commits.Add(1) <= 2 { // the first try and its one retry
				return errors.New("commit refused")
			}
			return nil
		},
	})
	src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Replay: source.ReplayExact,
		Streams: []sourcetest.FakeStream{{Name: "s", Rows: 5}}})
	store := checkpoint.NewMem()
	cfg := runner.Config{Name: "p", Source: src, Destination: fake, Store: store, CommitRetries: 1, CommitBackoff: time.Millisecond,
		Retry: &runner.RetryPolicy{Sync: true, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	res, err := runner.Sync(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Generation < 2 {
		t.Fatalf("the Sync ended in generation %d: the refused Commit did not end an attempt", res.Generation)
	}
	_, head, err := store.Head(ctx, "p")
	if err != nil || head == nil {
		t.Fatalf("HEAD: %v %v", head, err)
	}
	if got, want := res.Streams["s"], head.Totals["s"]; got != want || got.Read != 5 {
		t.Errorf("Result counts %+v, the checkpoint's totals %+v: want both to read 5", got, want)
	}
	if res.Epochs < 1 {
		t.Errorf("Result.Epochs %d, want the epoch whose Commit failed counted", res.Epochs)
	}
	if rows := fake.Rows("s"); len(rows) != 5 {
		t.Errorf("destination has %d rows, want 5", len(rows))
	}
}

// TestRetryStopsWhenOvertaken: another copy claims the pipeline while a
// retrying Run's attempt is under way, and the attempt then fails with
// an error that is not itself a fence (a transient Commit failure). The
// Run returns a fenced error instead of retrying: a retry would claim
// the pipeline back and fence the other copy.
func TestRetryStopsWhenOvertaken(t *testing.T) {
	ctx := context.Background()
	var overtaken atomic.Bool
	reached := make(chan struct{})
	goOn := make(chan struct{})
	var once sync.Once
	fake := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
		Class: sink.StageAndApply,
		Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op != sinktest.FakeCommit {
				return nil
			}
			once.Do(func() { close(reached); <-goOn })
			if overtaken.Load() {
				return errors.New("connection reset by peer")
			}
			return nil
		},
	})
	src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Replay: source.ReplayExact,
		Streams: []sourcetest.FakeStream{{Name: "s", Rows: 5}}})
	store := checkpoint.NewMem()
	cfg := runner.Config{Name: "p", Source: src, Destination: fake, Store: store, CommitRetries: 1, CommitBackoff: time.Millisecond,
		Retry: &runner.RetryPolicy{Budget: time.Minute, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}}
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, cfg) }()
	<-reached
	gen, _, err := store.Claim(ctx, "p") // the other copy
	if err != nil {
		t.Fatal(err)
	}
	overtaken.Store(true)
	close(goOn)
	err = <-done
	if !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("Run: %v, want a fenced error", err)
	}
	if g, _, err := store.Head(ctx, "p"); err != nil || g != gen {
		t.Fatalf("HEAD held by generation %d (%v), want the other copy's %d", g, err, gen)
	}
}

// stopSource is a source whose Open stops the caller (cancel) and then
// fails as a cut connection does: the failure and the stop come
// together.
type stopSource struct {
	cutSource
	cancel context.CancelFunc
}

func (s *stopSource) Open(context.Context, []string, map[source.SplitID][]byte) ([]source.Split, error) {
	s.cancel()
	return nil, errCut
}

// TestStopDuringFailedAttempt: an attempt fails with an error a retry
// would ride out just as the caller stops. Run returns nil, as when the
// stop comes during the pause before the next attempt; a retrying Sync
// returns an error wrapping both the stop and the failure.
func TestStopDuringFailedAttempt(t *testing.T) {
	for _, bounded := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		cfg := runner.Config{Name: "p", Source: &stopSource{cancel: cancel}, Destination: newMemDest(), Store: checkpoint.NewMem(),
			NewEngine: newFakeEngine, Retry: &runner.RetryPolicy{Budget: time.Minute, Backoff: time.Millisecond, Sync: true}}
		if !bounded {
			if err := runner.Run(ctx, cfg); err != nil {
				t.Errorf("Run: %v, want nil (stopped)", err)
			}
			continue
		}
		_, err := runner.Sync(ctx, cfg)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errCut) {
			t.Errorf("Sync: %v, want the stop and the cut", err)
		}
	}
}

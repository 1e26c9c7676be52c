package runner_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

type fixture struct {
	workers int // engine workers; 0: the default
	src     *fakeSource
	dst     *memDest
	store   checkpoint.Store
}

func newFixture(t *testing.T, streams, rows int) *fixture {
	t.Helper()
	return &fixture{
		src:   &fakeSource{streams: streams, rows: rows, rpEvery: 7, badEvery: 0},
		dst:   newMemDest(),
		store: checkpoint.NewMem(),
	}
}

func (f *fixture) config(lanes int) runner.Config {
	return runner.Config{
		Name: "p", Source: f.src, Destination: f.dst, Store: f.store,
		Lanes: lanes, EngineWorkers: f.workers, BatchRows: 16, EpochInterval: 5 * time.Millisecond,
		CommitBackoff: time.Millisecond, NewEngine: newFakeEngine,
	}
}

// holdUntil makes f's splits wait at their first resume point at or past
// record at until the attempt run with cfg has committed epoch: the read
// is then still under way when the epoch commits, on any machine.
func (f *fixture) holdUntil(cfg *runner.Config, at int, epoch uint64) {
	f.src.holdAt, f.src.hold = at, make(chan struct{})
	var once sync.Once
	next := cfg.OnProgress
	cfg.OnProgress = func(p runner.Progress) {
		if next != nil {
			next(p)
		}
		if p.Epoch >= epoch {
			once.Do(func() { close(f.src.hold) })
		}
	}
}

// checkExactlyOnce asserts that every non-quarantined record of every
// stream is visible exactly once, and nothing else.
func (f *fixture) checkExactlyOnce(t *testing.T) {
	t.Helper()
	rows, dup := f.dst.rows()
	if dup {
		for k, v := range rows {
			if v > 1 {
				t.Errorf("row %s visible %d times", k, v)
			}
		}
	}
	want := 0
	for s := range f.src.streams {
		for i := range f.src.rows {
			if f.src.badEvery > 0 && i%f.src.badEvery == f.src.badEvery-1 {
				continue
			}
			want++
			k := fmt.Sprintf("s%d/%d/%d", s, i, i+1)
			if rows[k] != 1 {
				t.Fatalf("row %s visible %d times, want 1", k, rows[k])
			}
		}
	}
	if len(rows) != want {
		t.Fatalf("%d distinct rows visible, want %d", len(rows), want)
	}
}

func TestSyncExactlyOnce(t *testing.T) {
	for _, c := range []struct{ lanes, workers int }{{1, 1}, {3, 1}, {1, 3}, {3, 3}} {
		lanes := c.lanes
		t.Run(fmt.Sprintf("lanes=%d/workers=%d", lanes, c.workers), func(t *testing.T) {
			f := newFixture(t, 3, 500)
			f.src.badEvery = 10
			f.workers = c.workers
			res, err := runner.Sync(context.Background(), f.config(lanes))
			if err != nil {
				t.Fatal(err)
			}
			f.checkExactlyOnce(t)
			if res.Epochs < 1 || res.Epoch != uint64(res.Epochs) || res.Generation != 1 {
				t.Fatalf("result %+v", res)
			}
			for s := range 3 {
				c := res.Streams[fmt.Sprintf("s%d", s)]
				if c.Read != 500 || c.Quarantined != 50 || c.Written != 450 {
					t.Fatalf("stream s%d counts %+v", s, c)
				}
			}
			// A second sync finds nothing new and commits no epoch.
			res2, err := runner.Sync(context.Background(), f.config(lanes))
			if err != nil {
				t.Fatal(err)
			}
			if res2.Epochs != 0 || res2.Epoch != res.Epoch || res2.Totals["s0"].Read != 500 {
				t.Fatalf("second sync %+v", res2)
			}
			f.checkExactlyOnce(t)
		})
	}
}

func TestSyncResumesAfterMoreData(t *testing.T) {
	f := newFixture(t, 2, 100)
	if _, err := runner.Sync(context.Background(), f.config(1)); err != nil {
		t.Fatal(err)
	}
	f.src.rows = 250
	res, err := runner.Sync(context.Background(), f.config(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Streams["s0"].Read != 150 || res.Totals["s0"].Read != 250 {
		t.Fatalf("counts %+v totals %+v", res.Streams, res.Totals)
	}
	f.checkExactlyOnce(t)
}

func TestCommitFailureIsRecoveredByNextAttempt(t *testing.T) {
	f := newFixture(t, 2, 300)
	f.src.badEvery = 25
	cfg := f.config(2)
	cfg.EpochInterval = time.Hour // one epoch
	cfg.CommitRetries = 2
	f.dst.commitErr = errors.New("destination down")
	_, err := runner.Sync(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "destination down") {
		t.Fatalf("want the commit error, got %v", err)
	}
	// HEAD moved (the commit point) but the epoch is not visible yet.
	if rows, _ := f.dst.rows(); len(rows) != 0 {
		t.Fatalf("%d rows visible before recovery", len(rows))
	}
	// Committed but not applied: its quarantine is staged, not published.
	ctx := context.Background()
	if _, err := f.store.ReadFile(ctx, "p", runner.QuarantineName("s0", 1)); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("quarantine published before the epoch was applied: %v", err)
	}
	f.dst.mu.Lock()
	f.dst.commitErr = nil
	f.dst.mu.Unlock()
	if _, err := runner.Sync(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
	for _, s := range []string{"s0", "s1"} {
		b, err := f.store.ReadFile(ctx, "p", runner.QuarantineName(s, 1))
		if err != nil || strings.Count(string(b), "\n") != 12 || !strings.Contains(string(b), `"reason":"parse_error"`) {
			t.Fatalf("stream %s: published quarantine %q, %v; want 12 lines", s, b, err)
		}
	}
}

func TestCommitRetriedWithinAttempt(t *testing.T) {
	f := newFixture(t, 1, 50)
	f.dst.failOnce[1] = errors.New("transient")
	if _, err := runner.Sync(context.Background(), f.config(1)); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
}

func TestRunStopsWithCleanFinalCheckpoint(t *testing.T) {
	f := newFixture(t, 2, 1<<30) // more than it can read: it never idles
	f.src.delay = 20 * time.Microsecond
	cfg := f.config(2)
	cfg.EpochInterval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Stop once a few epochs are committed.
	cfg.OnProgress = func(p runner.Progress) {
		if p.Epoch >= 3 {
			cancel()
		}
	}
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, cfg) }()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	// Everything read before the final barrier is visible; the rest is
	// read by the next attempt.
	rows, dup := f.dst.rows()
	if dup || len(rows) == 0 {
		t.Fatalf("after Run: %d rows, dup=%v", len(rows), dup)
	}
	f.src.rows = len(rows) + 1000 // beyond what any split has read
	f.src.delay = 0
	if _, err := runner.Sync(context.Background(), f.config(2)); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
	if len(f.src.acks) == 0 {
		t.Fatal("source never acknowledged")
	}
}

func TestZombieIsFenced(t *testing.T) {
	// A has more than it can read: it keeps placing barriers, so it
	// reaches a HEAD write after B claimed the pipeline, however late.
	f := newFixture(t, 2, 1<<30)
	f.src.delay = 10 * time.Microsecond
	cfgA := f.config(1)
	cfgA.EpochInterval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runningA := make(chan struct{})
	var once sync.Once
	cfgA.OnProgress = func(p runner.Progress) {
		if p.Epoch >= 1 {
			once.Do(func() { close(runningA) })
		}
	}
	errA := make(chan error, 1)
	go func() { errA <- runner.Run(ctx, cfgA) }()
	select {
	case <-runningA:
	case err := <-errA:
		t.Fatalf("A ended before it committed an epoch: %v", err)
	}

	// B claims the pipeline while A runs, and stops once it committed
	// rows of its own; A must stop with ErrFenced.
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	cfgB := f.config(1)
	cfgB.EpochInterval = 10 * time.Millisecond
	cfgB.OnProgress = func(p runner.Progress) {
		for _, c := range p.Committed {
			if c.Read > 0 {
				cancelB()
			}
		}
	}
	if err := runner.Run(ctxB, cfgB); err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := testutil.Recv(t, "A to stop after B claimed the pipeline", errA); !errors.Is(err, checkpoint.ErrFenced) && !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("A: want ErrFenced, got %v", err)
	}
	rows, _ := f.dst.rows()
	f.src.rows = len(rows) + 1000 // beyond what any split has read
	f.src.delay = 0
	if _, err := runner.Sync(context.Background(), f.config(1)); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
}

func TestValidate(t *testing.T) {
	err := (&runner.Config{Name: "bad name", Lanes: -1}).Validate()
	for _, want := range []string{"name", "source: missing", "destination: missing", "checkpoints: missing", "lanes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to mention %q", err, want)
		}
	}
}

// TestLostFirstEpochStartsOver: the destination lost the staged data of
// HEAD's epoch, the pipeline's first; the next sync rewinds the log to
// before it and reads everything again, exactly once.
func TestLostFirstEpochStartsOver(t *testing.T) {
	f := newFixture(t, 2, 60)
	cfg := f.config(1)
	cfg.EpochInterval = time.Hour // one final epoch
	cfg.CommitRetries = 1
	f.dst.commitErr = errors.New("destination down")
	if _, err := runner.Sync(context.Background(), cfg); err == nil {
		t.Fatal("first sync succeeded despite the failing commit")
	}
	f.dst.mu.Lock()
	f.dst.commitErr = nil
	clear(f.dst.staged) // the staged data is gone
	f.dst.mu.Unlock()
	res, err := runner.Sync(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != 1 || res.Streams["s0"].Read != 60 || res.Totals["s0"].Read != 60 {
		t.Fatalf("after the rewind: %+v", res)
	}
	f.checkExactlyOnce(t)
}

// quietSource's one split emits no records, only resume points that move
// (a replication slot on a quiet table while the database is busy).
type quietSource struct{ fakeSource }

func (s *quietSource) Open(context.Context, []string, map[source.SplitID][]byte) ([]source.Split, error) {
	return []source.Split{quietSplit{}}, nil
}

type quietSplit struct{}

func (quietSplit) ID() source.SplitID { return "s0" }

func (quietSplit) Read(ctx context.Context, e source.Emitter, _ bool) error {
	var st [8]byte
	for i := uint64(1); ; i++ {
		binary.BigEndian.PutUint64(st[:], i)
		if err := e.ResumePoint(st[:]); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// TestResumePointsWithoutRecordsAreCheckpointed: moving resume points
// alone close epochs, so the source can acknowledge its position.
func TestResumePointsWithoutRecordsAreCheckpointed(t *testing.T) {
	src := &quietSource{fakeSource{streams: 1}}
	store := checkpoint.NewMem()
	cfg := runner.Config{Name: "quiet", Source: src, Destination: newMemDest(), Store: store,
		EpochInterval: 5 * time.Millisecond, NewEngine: newFakeEngine}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Stop after a few epochs: acknowledgements run one behind.
	cfg.OnProgress = func(p runner.Progress) {
		if p.Epoch >= 3 {
			cancel()
		}
	}
	if err := runner.Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, head, err := store.Claim(context.Background(), "quiet")
	if err != nil {
		t.Fatal(err)
	}
	if head == nil || head.Epoch < 2 || binary.BigEndian.Uint64(head.Resume["s0"]) < 2 {
		t.Fatalf("HEAD after a quiet run: %+v", head)
	}
	if len(src.acks) == 0 {
		t.Fatal("the quiet source's positions were never acknowledged")
	}
}

// TestByteBudgetClosesEpochs: with an interval too long to matter, epochs
// still close every EpochBytes of payload.
func TestByteBudgetClosesEpochs(t *testing.T) {
	f := newFixture(t, 1, 2000)
	cfg := f.config(1)
	cfg.EpochInterval = time.Hour
	cfg.EpochBytes = 1000 // records carry ~4 bytes of key and payload
	// The split waits half-way until an epoch commits, which only the
	// budget can close: a budget that closes none hangs the sync.
	f.holdUntil(&cfg, 1000, 1)
	res, err := syncWithin(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Without the budget a sync with an hour's interval commits one
	// epoch, its last. How many the budget adds depends on how far the
	// source got before a barrier was placed, so at least one more.
	if res.Epochs < 2 {
		t.Fatalf("%d epochs for ~8 KB read with a 1 KB budget", res.Epochs)
	}
	f.checkExactlyOnce(t)
}

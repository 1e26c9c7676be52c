package runner_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// checkLog walks the checkpoint log from HEAD to its first record and
// checks that every record's resume state of every split matches the rows
// committed through that epoch (barriers aligned at resume points), and
// that the record's counts match the states' progress.
func (f *fixture) checkLog(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	_, head, err := f.store.Claim(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var recs []*checkpoint.Record
	for r := head; r != nil; {
		recs = append([]*checkpoint.Record{r}, recs...)
		if r.Prev == nil {
			break
		}
		if r, err = f.store.Get(ctx, "p", *r.Prev); err != nil {
			t.Fatal(err)
		}
	}
	f.dst.mu.Lock()
	defer f.dst.mu.Unlock()
	committed := map[string]map[int]bool{} // stream → keys committed so far
	prev := map[string]int{}
	for _, rec := range recs {
		for _, c := range rec.Committables {
			var id string
			if err := json.Unmarshal(c, &id); err != nil {
				t.Fatal(err)
			}
			for _, row := range f.dst.staged[id] {
				parts := strings.Split(row, "/")
				k, _ := strconv.Atoi(parts[1])
				if committed[parts[0]] == nil {
					committed[parts[0]] = map[int]bool{}
				}
				committed[parts[0]][k] = true
			}
		}
		for s := range f.src.streams {
			name := fmt.Sprintf("s%d", s)
			pos := 0
			if st, ok := rec.Resume[name]; ok {
				pos = int(binary.BigEndian.Uint64(st))
			}
			want := 0
			for i := range pos {
				if f.src.badEvery == 0 || i%f.src.badEvery != f.src.badEvery-1 {
					want++
				}
			}
			got := 0
			for k := range committed[name] {
				if k >= pos {
					t.Fatalf("epoch %d: split %s resumes at %d but row %d is committed through this epoch", rec.Epoch, name, pos, k)
				}
				got++
			}
			if got != want {
				t.Fatalf("epoch %d: split %s resumes at %d, %d rows committed through this epoch, want %d", rec.Epoch, name, pos, got, want)
			}
			c := rec.Counts[name]
			if c.Read != int64(pos-prev[name]) || c.Read != c.Written+c.Quarantined {
				t.Fatalf("epoch %d: split %s moved %d→%d, counts %+v", rec.Epoch, name, prev[name], pos, c)
			}
			prev[name] = pos
		}
	}
}

// Many splits, one-row batches and a barrier requested as soon as the
// previous one aligns: every record must land in the epoch whose barrier
// follows it on its split.
func TestManySplitsTinyEpochsStayAligned(t *testing.T) {
	f := newFixture(t, 8, 300)
	f.src.rpEvery = 3
	f.src.badEvery = 5
	cfg := f.config(3)
	cfg.BatchRows = 1
	cfg.EpochInterval = time.Millisecond
	cfg.EpochBytes = 1 // a barrier per aligned epoch
	f.holdUntil(&cfg, 150, 1)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	cfg.NewEngine = newFakeEngineWith(mem)
	res, err := syncWithin(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := mem.CurrentAlloc(); n != 0 {
		t.Fatalf("%d bytes of Arrow records never released", n)
	}
	if res.Epochs < 2 {
		t.Fatalf("only %d epochs", res.Epochs)
	}
	for s := range 8 {
		c := res.Streams[fmt.Sprintf("s%d", s)]
		if c.Read != 300 || c.Quarantined != 60 || c.Written != 240 {
			t.Fatalf("stream s%d counts %+v", s, c)
		}
	}
	f.checkExactlyOnce(t)
	f.checkLog(t)
}

// runnerGoroutines returns the stacks of goroutines running code of
// package runner (not its tests).
func runnerGoroutines() []string {
	return testutil.Goroutines("github.com/openetl/etl/internal/runner.")
}

// checkNoRunnerGoroutines fails when goroutines of the runner outlive
// the attempt. Ones that are just returning (the event queue's, which
// the attempt does not wait for) get until the test's deadline.
func checkNoRunnerGoroutines(t *testing.T) {
	t.Helper()
	var gs []string
	defer func() {
		if t.Failed() && len(gs) > 0 {
			t.Logf("%d runner goroutines outlive the attempt:\n%s", len(gs), strings.Join(gs, "\n\n"))
		}
	}()
	testutil.Until(t, "the runner's goroutines to end", func() bool {
		gs = runnerGoroutines()
		return len(gs) == 0
	})
}

// Run stops its splits with source.ErrStopping: nothing the attempt
// started may keep running once it returns.
func TestRunLeavesNoGoroutines(t *testing.T) {
	f := newFixture(t, 4, 200) // unbounded: splits idle at their end
	cfg := f.config(2)
	cfg.EpochInterval = time.Hour
	runThenCancel(t, cfg, func() { waitIdle(t, f, 4) })
	f.checkExactlyOnce(t)
	checkNoRunnerGoroutines(t)
}

// waitIdle waits until n unbounded splits of f's source sit at their end.
func waitIdle(t *testing.T, f *fixture, n int32) {
	t.Helper()
	testutil.Until(t, fmt.Sprintf("%d splits at their end", n), func() bool { return f.src.idle.Load() >= n })
}

// doneMarkerSource has one stream "s0" and one split that reads rows
// 0..rows-1 once, then declares the empty resume state: reopened with
// any state, even an empty one, the split has nothing more to read.
type doneMarkerSource struct{ fakeSource }

func (s *doneMarkerSource) Open(_ context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	_, done := resume["s0"]
	return []source.Split{&doneMarkerSplit{rows: s.rows, done: done}}, nil
}

type doneMarkerSplit struct {
	rows int
	done bool
}

func (sp *doneMarkerSplit) ID() source.SplitID { return "s0" }

func (sp *doneMarkerSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if sp.done {
		return nil
	}
	for i := range sp.rows {
		if err := e.Record("s0", source.OpInsert, int64(i+1), []byte(strconv.Itoa(i)), []byte("ok")); err != nil {
			return err
		}
	}
	return e.ResumePoint([]byte{})
}

// A resume state is opaque: an empty one is a state like any other and
// must be saved, not mistaken for "no state" (read from the beginning).
func TestEmptyResumeStateIsKept(t *testing.T) {
	f := newFixture(t, 1, 50)
	src := &doneMarkerSource{fakeSource: fakeSource{streams: 1, rows: 50}}
	cfg := f.config(1)
	cfg.Source = src
	for i := range 2 {
		res, err := runner.Sync(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(50 * (1 - i)); res.Streams["s0"].Read != want {
			t.Fatalf("sync %d read %d rows, want %d", i+1, res.Streams["s0"].Read, want)
		}
	}
	f.checkExactlyOnce(t)
}

// checkWritersClosed fails unless every writer the attempts made was
// closed.
func (f *fixture) checkWritersClosed(t *testing.T) {
	t.Helper()
	f.dst.mu.Lock()
	defer f.dst.mu.Unlock()
	if f.dst.writers == 0 || f.dst.closed != f.dst.writers {
		t.Fatalf("%d writers made, %d closed", f.dst.writers, f.dst.closed)
	}
}

// syncWithin runs Sync and fails the test if it hangs.
func syncWithin(t *testing.T, cfg runner.Config) (runner.Result, error) {
	t.Helper()
	type out struct {
		res runner.Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := runner.Sync(context.Background(), cfg)
		ch <- out{res, err}
	}()
	o := testutil.Recv(t, "Sync to return", ch)
	return o.res, o.err
}

func TestSplitErrorFailsSync(t *testing.T) {
	f := newFixture(t, 4, 400)
	f.src.failStream, f.src.failAt, f.src.failErr = "s2", 150, errors.New("connection reset")
	cfg := f.config(2)
	cfg.EpochInterval = time.Millisecond
	_, err := syncWithin(t, cfg)
	if !errors.Is(err, f.src.failErr) || !strings.Contains(err.Error(), `"s2"`) {
		t.Fatalf("want the split's error naming it, got %v", err)
	}
	checkNoRunnerGoroutines(t)
	f.checkWritersClosed(t)
	// What was committed is consistent, and the next sync completes it.
	f.src.failErr = nil
	if _, err := syncWithin(t, cfg); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
	f.checkLog(t)
}

func TestOpenErrorFailsSync(t *testing.T) {
	f := newFixture(t, 2, 10)
	f.src.openErr = errors.New("no such slot")
	res, err := syncWithin(t, f.config(2))
	if !errors.Is(err, f.src.openErr) {
		t.Fatalf("want the open error, got %v", err)
	}
	// It failed after its claim: the Result says which generation it had.
	if res.Generation != 1 || res.Epoch != 0 || res.Epochs != 0 {
		t.Errorf("result of the failed sync %+v, want generation 1 and nothing committed", res)
	}
	checkNoRunnerGoroutines(t)
	f.checkWritersClosed(t)
	if rows, _ := f.dst.rows(); len(rows) != 0 {
		t.Fatalf("%d rows visible", len(rows))
	}
	f.src.openErr = nil
	if _, err := syncWithin(t, f.config(2)); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
	// A failed sync that resumed from an epoch reports it, and the totals.
	f.src.openErr = errors.New("no such slot")
	res, err = syncWithin(t, f.config(2))
	if !errors.Is(err, f.src.openErr) || res.Generation != 3 || res.Epoch == 0 || res.Totals["s0"].Written != 10 {
		t.Errorf("failed sync after a committed one: %+v, %v; want generation 3, the epoch and totals it resumed from", res, err)
	}
}

// A split that returns nil with records after its last resume point
// breaks the contract: the sync fails instead of committing records it
// could not resume after.
func TestSplitWithoutFinalResumePointFailsSync(t *testing.T) {
	f := newFixture(t, 3, 100) // 100 is not a multiple of rpEvery (7)
	f.src.noFinalRP = true
	_, err := syncWithin(t, f.config(1))
	if err == nil || !strings.Contains(err.Error(), "without a resume point") {
		t.Fatalf("want a missing resume point error, got %v", err)
	}
	checkNoRunnerGoroutines(t)
	f.checkWritersClosed(t)
	f.checkLog(t)
}

// Run with every split idle at its end: cancelling places the final
// barrier on the splits' behalf, commits it and returns nil, whether the
// data is already committed by an interval barrier or not.
func TestRunCancelWithIdleSplits(t *testing.T) {
	for _, interval := range []time.Duration{time.Millisecond, time.Hour} {
		t.Run(interval.String(), func(t *testing.T) {
			f := newFixture(t, 8, 97)
			cfg := f.config(3)
			cfg.EpochInterval = interval
			cfg.StopTimeout = time.Minute // a hang fails the test below first
			runThenCancel(t, cfg, func() { waitIdle(t, f, 8) })
			f.checkExactlyOnce(t)
			f.checkLog(t)
			checkNoRunnerGoroutines(t)
			f.checkWritersClosed(t)
		})
	}
}

// nilHeadDest reports outcome out for a new pipeline (nil head), which
// only Applied describes: a buggy destination must fail the sync, not
// crash the host.
type nilHeadDest struct {
	*memDest
	out sink.Outcome
}

func (d nilHeadDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.memDest.Writer(ctx, cfg)
	return nilHeadWriter{w.(*memWriter), d.out}, err
}

type nilHeadWriter struct {
	*memWriter
	out sink.Outcome
}

func (w nilHeadWriter) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	o, err := w.memWriter.Recover(ctx, gen, head)
	if head == nil {
		return w.out, err
	}
	return o, err
}

func TestRecoverOutcomeWithoutHeadFailsSync(t *testing.T) {
	for _, out := range []sink.Outcome{sink.Recoverable, sink.Lost} {
		t.Run(out.String(), func(t *testing.T) {
			f := newFixture(t, 1, 10)
			cfg := f.config(1)
			cfg.Destination = nilHeadDest{f.dst, out}
			_, err := syncWithin(t, cfg)
			if err == nil || !strings.Contains(err.Error(), out.String()) {
				t.Fatalf("want an error naming outcome %v, got %v", out, err)
			}
			f.checkWritersClosed(t)
		})
	}
}

// Cancelling a Sync abandons it: it returns the cancellation, keeps what
// it committed, and the next sync reads the rest exactly once.
func TestSyncCancelAbandons(t *testing.T) {
	f := newFixture(t, 4, 20_000)
	// The splits wait half-way until the Sync is cancelled, so it can't
	// end before.
	f.src.holdAt, f.src.hold = 10_000, make(chan struct{})
	cfg := f.config(2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.OnProgress = func(p runner.Progress) {
		if p.Epoch >= 1 {
			cancel()
		}
	}
	type out struct {
		res runner.Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := runner.Sync(ctx, cfg)
		ch <- out{res, err}
	}()
	o := testutil.Recv(t, "Sync to return after cancel", ch)
	if !errors.Is(o.err, context.Canceled) || o.res.Epochs < 1 {
		t.Fatalf("want context.Canceled after an epoch, got %v (result %+v)", o.err, o.res)
	}
	checkNoRunnerGoroutines(t)
	f.checkWritersClosed(t)
	close(f.src.hold)
	if _, err := syncWithin(t, f.config(2)); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
	f.checkLog(t)
}

// Repeated Runs, each cancelled at a different point (after its first
// record, after a few hundred, a few thousand, or once every split sits
// at its end), with many splits and tiny epochs: every stop is clean and
// the log stays consistent.
func TestRunStopRestartCycles(t *testing.T) {
	f := newFixture(t, 8, 3000)
	f.src.rpEvery = 5
	f.src.badEvery = 7
	for i, records := range []int64{1, 300, 3000, 1, 10_000, 24_000} {
		cfg := f.config(3)
		cfg.BatchRows = 2
		cfg.EpochInterval = time.Millisecond
		cfg.EpochBytes = 64
		from := f.src.emitted.Load()
		runThenCancel(t, cfg, func() {
			testutil.Until(t, fmt.Sprintf("run %d to read %d records or reach the end", i+1, records), func() bool {
				return f.src.emitted.Load()-from >= records || f.src.idle.Load() == 8
			})
		})
		checkNoRunnerGoroutines(t)
	}
	if _, err := syncWithin(t, f.config(3)); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
	f.checkLog(t)
	f.checkWritersClosed(t)
}

// Two attempts of one pipeline at once, with many splits and tiny
// epochs: the older is fenced and whatever either committed stays
// consistent.
func TestZombieManySplits(t *testing.T) {
	f := newFixture(t, 8, 1<<30) // more than A can read: it never idles
	f.src.delay = 5 * time.Microsecond
	f.src.rpEvery = 3
	mk := func() runner.Config {
		cfg := f.config(2)
		cfg.BatchRows = 1
		cfg.EpochInterval = time.Millisecond
		return cfg
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	errA := make(chan error, 1)
	progressA := make(chan struct{}, 1)
	cfgA := mk()
	cfgA.OnProgress = func(p runner.Progress) {
		if p.Epoch >= 3 {
			select {
			case progressA <- struct{}{}:
			default:
			}
		}
	}
	go func() { errA <- runner.Run(ctxA, cfgA) }()
	testutil.Recv(t, "A to commit 3 epochs", progressA)
	// B takes over; A must notice at its next HEAD write and stop.
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	cfgB := mk()
	cfgB.OnProgress = func(p runner.Progress) {
		if p.Committed["s0"].Read > 0 {
			cancelB()
		}
	}
	errB := make(chan error, 1)
	go func() { errB <- runner.Run(ctxB, cfgB) }()
	for _, ch := range []struct {
		name  string
		err   chan error
		fence bool
	}{{"A", errA, true}, {"B", errB, false}} {
		err := testutil.Recv(t, ch.name+" to stop", ch.err)
		if fenced := errors.Is(err, checkpoint.ErrFenced) || errors.Is(err, sink.ErrFenced); fenced != ch.fence || !fenced && err != nil {
			t.Fatalf("%s: %v", ch.name, err)
		}
	}
	checkNoRunnerGoroutines(t)
	rows, _ := f.dst.rows()
	f.src.rows = len(rows) + 1000 // beyond what any split committed
	f.src.delay = 0
	if _, err := syncWithin(t, f.config(2)); err != nil {
		t.Fatal(err)
	}
	f.checkExactlyOnce(t)
	f.checkLog(t)
	f.checkWritersClosed(t)
}

// Every Arrow record the engine makes is released, also when a lane fails
// and the attempt stops with records still queued for the lanes (the real
// engine's records hold memory that only Release frees).
func TestFailedAttemptReleasesRecords(t *testing.T) {
	for _, lanes := range []int{1, 3} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			f := newFixture(t, 4, 5000)
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			cfg := f.config(lanes)
			cfg.BatchRows = 4
			cfg.NewEngine = newFakeEngineWith(mem)
			f.dst.writeErr = errors.New("disk full")
			if _, err := syncWithin(t, cfg); !errors.Is(err, f.dst.writeErr) {
				t.Fatalf("want the write error, got %v", err)
			}
			checkNoRunnerGoroutines(t)
			if n := mem.CurrentAlloc(); n != 0 {
				t.Fatalf("%d bytes of Arrow records never released", n)
			}
		})
	}
}

// runThenCancel runs cfg with Run, calls wait, cancels, and fails the test
// unless Run returns nil within a minute (a clean final checkpoint).
func runThenCancel(t *testing.T, cfg runner.Config, wait func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, cfg) }()
	wait()
	cancel()
	if err := testutil.Recv(t, "Run to return after cancel", done); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

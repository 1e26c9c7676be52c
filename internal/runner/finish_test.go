package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
)

// finishDest is memDest whose writers record every Finish: it records
// every Finish (epoch, and whether that epoch was applied by then) and
// the head every Recover was given.
type finishDest struct {
	*memDest
	mu        sync.Mutex
	finished  []uint64
	unapplied []uint64 // Finish calls that came before their epoch's Commit
	finishErr error    // the next Finish fails with it
	heads     []*checkpoint.Record
}

func (d *finishDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.memDest.Writer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &finishWriter{Writer: w, d: d}, nil
}

type finishWriter struct {
	sink.Writer
	d *finishDest
}

func (w *finishWriter) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	w.d.mu.Lock()
	w.d.heads = append(w.d.heads, head)
	w.d.mu.Unlock()
	return w.Writer.Recover(ctx, gen, head)
}

func (w *finishWriter) Finish(_ context.Context, epoch uint64) error {
	w.d.mem().mu.Lock()
	applied := w.d.mem().applied[epoch]
	w.d.mem().mu.Unlock()
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	w.d.finished = append(w.d.finished, epoch)
	if !applied {
		w.d.unapplied = append(w.d.unapplied, epoch)
	}
	err := w.d.finishErr
	w.d.finishErr = nil
	return err
}

func (d *finishDest) mem() *memDest { return d.memDest }

// records returns the log from its first record to HEAD.
func logRecords(t *testing.T, store checkpoint.Store) []*checkpoint.Record {
	t.Helper()
	ctx := context.Background()
	_, head, err := store.Claim(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var recs []*checkpoint.Record
	for r := head; r != nil; {
		recs = append([]*checkpoint.Record{r}, recs...)
		if r.Prev == nil {
			break
		}
		if r, err = store.Get(ctx, "p", *r.Prev); err != nil {
			t.Fatal(err)
		}
	}
	return recs
}

// TestFinalRecordAndFinish: a Sync that reads every split to its end
// marks its last record Final and calls lane 0's Finish once, for that
// epoch, after its Commit; no other record is Final. A second Sync with
// nothing new to read commits no epoch and doesn't finish again.
func TestFinalRecordAndFinish(t *testing.T) {
	f := newFixture(t, 3, 300)
	d := &finishDest{memDest: f.dst}
	cfg := f.config(2)
	cfg.Destination = d
	cfg.EpochInterval = time.Millisecond
	f.holdUntil(&cfg, 150, 1) // so that epochs before the last commit
	res, err := syncWithin(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epochs < 2 {
		t.Fatalf("%d epochs: the test wants several", res.Epochs)
	}
	recs := logRecords(t, f.store)
	for i, r := range recs {
		if want := i == len(recs)-1; r.Final != want {
			t.Errorf("epoch %d: Final %v, want %v", r.Epoch, r.Final, want)
		}
	}
	head := recs[len(recs)-1]
	if len(d.finished) != 1 || d.finished[0] != head.Epoch {
		t.Errorf("Finish calls %v, want one for epoch %d", d.finished, head.Epoch)
	}
	if len(d.unapplied) != 0 {
		t.Errorf("Finish of epochs %v came before their Commit", d.unapplied)
	}
	f.checkExactlyOnce(t)

	res, err = syncWithin(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epochs != 0 || len(d.finished) != 1 {
		t.Errorf("a Sync with nothing to read committed %d epochs and finished %v; want 0 and [%d]", res.Epochs, d.finished, head.Epoch)
	}
	if got := d.heads[len(d.heads)-1]; got == nil || !got.Final || got.Epoch != head.Epoch {
		t.Errorf("the second Sync's Recover got head %+v, want the Final epoch %d", got, head.Epoch)
	}
	checkNoRunnerGoroutines(t)
}

// TestFinishErrorFailsSync: Finish's error is Sync's; the Final record
// stays HEAD and the next attempt's Recover gets it, Final.
func TestFinishErrorFailsSync(t *testing.T) {
	f := newFixture(t, 2, 100)
	errFinish := errors.New("grouped files could not be committed")
	d := &finishDest{memDest: f.dst, finishErr: errFinish}
	cfg := f.config(1)
	cfg.Destination = d
	_, err := syncWithin(t, cfg)
	if !errors.Is(err, errFinish) {
		t.Fatalf("Sync returned %v, want Finish's error", err)
	}
	recs := logRecords(t, f.store)
	head := recs[len(recs)-1]
	if !head.Final {
		t.Fatalf("HEAD (epoch %d) is not Final after the failed Finish", head.Epoch)
	}
	f.checkExactlyOnce(t) // Commit had landed: the rows are there
	if _, err := syncWithin(t, cfg); err != nil {
		t.Fatal(err)
	}
	if got := d.heads[len(d.heads)-1]; got == nil || !got.Final || got.Epoch != head.Epoch {
		t.Errorf("the next Recover got head %+v, want the Final epoch %d", got, head.Epoch)
	}
	checkNoRunnerGoroutines(t)
}

// TestStoppedRunIsNotFinal: a Run stopped by its context ends with a
// final checkpoint that is not Final (its splits were not read to their
// end) and never calls Finish; the Sync after it has nothing new to read
// yet commits one epoch without rows, Final, so the refresh that the Run
// left open ends and Finish runs.
func TestStoppedRunIsNotFinal(t *testing.T) {
	f := newFixture(t, 2, 200)
	d := &finishDest{memDest: f.dst}
	cfg := f.config(1)
	cfg.Destination = d
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, cfg) }()
	waitIdle(t, f, 2)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	recs := logRecords(t, f.store)
	for _, r := range recs {
		if r.Final {
			t.Errorf("epoch %d of a stopped Run is Final", r.Epoch)
		}
	}
	if len(d.finished) != 0 {
		t.Errorf("a stopped Run finished epochs %v", d.finished)
	}
	runHead := recs[len(recs)-1].Epoch
	res, err := syncWithin(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epochs != 1 || res.Epoch != runHead+1 {
		t.Fatalf("the Sync after the Run committed %d epochs up to %d, want 1: epoch %d", res.Epochs, res.Epoch, runHead+1)
	}
	recs = logRecords(t, f.store)
	head := recs[len(recs)-1]
	if !head.Final || len(d.finished) != 1 || d.finished[0] != head.Epoch {
		t.Errorf("HEAD epoch %d Final %v, Finish calls %v", head.Epoch, head.Final, d.finished)
	}
	for _, c := range head.Counts {
		if c.Read != 0 || c.Written != 0 {
			t.Errorf("the finishing epoch counts %+v, want no rows", c)
		}
	}
	f.checkExactlyOnce(t)
	checkNoRunnerGoroutines(t)
}

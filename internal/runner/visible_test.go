package runner_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
)

// deferredDest is memDest declaring Capabilities.Deferred; its writers
// report visible the epoch two before the last Commit (noVisible: they
// don't implement sink.Visibility).
type deferredDest struct {
	*memDest
	noVisible bool
	last      atomic.Uint64
}

func (d *deferredDest) Capabilities() sink.Capabilities { return sink.Capabilities{Deferred: true} }

func (d *deferredDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.memDest.Writer(ctx, cfg)
	if err != nil || d.noVisible {
		return w, err
	}
	return &lagWriter{Writer: w, d: d}, nil
}

type lagWriter struct {
	sink.Writer
	d *deferredDest
}

func (w *lagWriter) Commit(ctx context.Context, epoch uint64, cs []sink.Committable) error {
	w.d.last.Store(epoch)
	return w.Writer.Commit(ctx, epoch, cs)
}

func (w *lagWriter) Visible() uint64 { return max(w.d.last.Load(), 2) - 2 }

// TestAcksOnlyVisibleEpochs: with a Deferred destination the source is
// acknowledged the resume states of the newest epoch its writer reports
// visible (here two behind the Commit), not the epoch before the
// Commit's; a Deferred destination whose writer lacks Visible fails the
// attempt, permanently.
func TestAcksOnlyVisibleEpochs(t *testing.T) {
	f := newFixture(t, 2, 3000)
	d := &deferredDest{memDest: f.dst}
	cfg := f.config(1)
	cfg.Destination = d
	cfg.EpochInterval = time.Millisecond
	f.holdUntil(&cfg, 150, 1) // so that epochs follow the first
	res, err := syncWithin(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	recs := logRecords(t, f.store)
	last := recs[len(recs)-1].Epoch
	if res.Epochs < 2 || int(last) != len(recs) {
		t.Fatalf("%d epochs, log of %d records up to epoch %d: the test wants several, from 1", res.Epochs, len(recs), last)
	}
	acks := f.src.acks
	if last == 2 {
		// After Commit 2 epoch 0 is visible: nothing to acknowledge
		// (by the Commit alone, epoch 1's states).
		if len(acks) != 0 {
			t.Errorf("%d acks after 2 epochs, none visible: want none", len(acks))
		}
	} else {
		if len(acks) == 0 {
			t.Fatal("no acknowledgement")
		}
		want := recs[last-3].Resume // epoch last-2, the newest visible
		for id, st := range acks[len(acks)-1] {
			if !bytes.Equal(st, want[string(id)]) {
				t.Errorf("last ack: split %s at %x, want epoch %d's %x (the newest visible)", id, st, last-2, want[string(id)])
			}
		}
	}

	d2 := &deferredDest{memDest: newMemDest(), noVisible: true}
	cfg.Destination = d2
	_, err = syncWithin(t, cfg)
	var pe *runner.PermanentError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "sink.Visibility") {
		t.Fatalf("a Deferred destination whose writer lacks Visible: %v, want a permanent error naming sink.Visibility", err)
	}
}

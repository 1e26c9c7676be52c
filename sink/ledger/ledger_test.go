package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/ledger"
)

const pipe = "p"

// batch returns n rows of stream, ids from first.
func batch(t *testing.T, first, n int) arrow.RecordBatch {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
		{Name: sink.ColumnSyncedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for k := first; k < first+n; k++ {
		b.Field(0).(*array.Int64Builder).Append(int64(k))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("id-%d", k))
		b.Field(2).(*array.StringBuilder).Append(sink.OpInsert)
		b.Field(3).(*array.Int64Builder).Append(int64(k))
		b.Field(4).(*array.TimestampBuilder).Append(0)
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return rec
}

type fixture struct {
	t *testing.T
	m *memStore
	d *memDest
}

func newFixture(t *testing.T) *fixture {
	m := newMemStore()
	return &fixture{t: t, m: m, d: &memDest{m: m}}
}

func (f *fixture) writer(lane int) *ledger.Writer[*memTx] {
	f.t.Helper()
	w, err := f.d.writer(pipe, lane)
	if err != nil {
		f.t.Fatal(err)
	}
	return w
}

func (f *fixture) recover(w *ledger.Writer[*memTx], gen checkpoint.Generation, head *checkpoint.Record) sink.Outcome {
	f.t.Helper()
	out, err := w.Recover(context.Background(), gen, head)
	if err != nil {
		f.t.Fatalf("Recover(%d): %v", gen, err)
	}
	return out
}

// stage writes n rows (ids from first) on w and pre-commits epoch.
func (f *fixture) stage(w *ledger.Writer[*memTx], epoch uint64, first, n int) sink.Committable {
	f.t.Helper()
	ctx := context.Background()
	if n > 0 {
		if err := w.Write(ctx, "s", batch(f.t, first, n)); err != nil {
			f.t.Fatal(err)
		}
	}
	c, err := w.PreCommit(ctx, epoch)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) commit(w *ledger.Writer[*memTx], epoch uint64, cs ...sink.Committable) {
	f.t.Helper()
	if err := w.Commit(context.Background(), epoch, cs); err != nil {
		f.t.Fatalf("Commit(%d): %v", epoch, err)
	}
}

func (f *fixture) rows() int {
	rows, _ := f.m.visible(context.Background(), "s")
	return len(rows)
}

func (f *fixture) wantRows(when string, n int) {
	f.t.Helper()
	if got := f.rows(); got != n {
		f.t.Errorf("%s: %d rows visible, want %d", when, got, n)
	}
}

func head(epoch uint64, gen checkpoint.Generation, cs ...sink.Committable) *checkpoint.Record {
	r := &checkpoint.Record{Pipeline: pipe, Epoch: epoch, Generation: gen}
	for _, c := range cs {
		r.Committables = append(r.Committables, c)
	}
	return r
}

func wantFenced(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, sink.ErrFenced) {
		t.Errorf("%s: %v, want an error wrapping sink.ErrFenced", what, err)
	}
}

// A zombie (generation 1) whose successor (2) recovered can't Commit,
// neither its pre-committed epoch nor an applied one, and can't Finish;
// the successor's Commit applies the epoch once.
func TestZombieIsFenced(t *testing.T) {
	f := newFixture(t)
	zombie := f.writer(0)
	f.recover(zombie, 1, nil)
	c1 := f.stage(zombie, 1, 0, 5)

	next := f.writer(0)
	if out := f.recover(next, 2, head(1, 1, c1)); out != sink.Recoverable {
		t.Fatalf("Recover(2, head 1 staged) = %v, want recoverable", out)
	}
	wantFenced(t, "the zombie's Commit(1)", zombie.Commit(context.Background(), 1, []sink.Committable{c1}))
	f.wantRows("after the zombie's Commit", 0)
	f.commit(next, 1, c1)
	f.wantRows("after the successor's Commit", 5)
	wantFenced(t, "the zombie's Commit(1) of an applied epoch", zombie.Commit(context.Background(), 1, []sink.Committable{c1}))
	wantFenced(t, "the zombie's Finish(1)", zombie.Finish(context.Background(), 1))
	c2 := f.stage(zombie, 2, 5, 3)
	wantFenced(t, "the zombie's Commit(2)", zombie.Commit(context.Background(), 2, []sink.Committable{c2}))
	f.wantRows("after the zombie's Commit(2)", 5)

	// A Recover of an older generation fails and lowers nothing.
	late := f.writer(0)
	_, err := late.Recover(context.Background(), 1, head(1, 1, c1))
	wantFenced(t, "Recover(1) after Recover(2)", err)
	if mk := f.m.marker(pipe); mk.Fence != 2 || mk.Epoch != 1 || mk.Generation != 2 {
		t.Errorf("marker = %+v, want fence 2, epoch 1 applied by generation 2", mk)
	}
}

// A lost checkpoint store (no HEAD) or one restored from an older copy
// (HEAD behind the marker) fails Recover with a *sink.AheadError, not
// fenced, and raises no fence: the restored store then recovers.
func TestAhead(t *testing.T) {
	f := newFixture(t)
	w := f.writer(0)
	f.recover(w, 1, nil)
	c1 := f.stage(w, 1, 0, 2)
	f.commit(w, 1, c1)
	c2 := f.stage(w, 2, 2, 2)
	f.commit(w, 2, c2)

	for _, tc := range []struct {
		name string
		gen  checkpoint.Generation
		head *checkpoint.Record
	}{
		{"a lost store", 2, nil},
		{"a lost store, past the fence", 7, nil},
		{"a store restored from an older copy", 3, head(1, 1, c1)},
	} {
		_, err := f.writer(0).Recover(context.Background(), tc.gen, tc.head)
		var ae *sink.AheadError
		switch {
		case !errors.As(err, &ae) || !errors.Is(err, sink.ErrAhead):
			t.Errorf("%s: Recover = %v, want a *sink.AheadError", tc.name, err)
		case errors.Is(err, sink.ErrFenced):
			t.Errorf("%s: Recover = %v: fenced too", tc.name, err)
		case ae.Pipeline != pipe || ae.Epoch != 2 || ae.Generation != 1 || ae.Where != "mem":
			t.Errorf("%s: AheadError %+v, want pipeline %q, epoch 2 of generation 1, where \"mem\"", tc.name, ae, pipe)
		}
	}
	if mk := f.m.marker(pipe); mk.Fence != 1 {
		t.Errorf("fence = %d after the refused recoveries, want 1", mk.Fence)
	}
	if out := f.recover(f.writer(0), 2, head(2, 1, c2)); out != sink.Applied {
		t.Errorf("Recover(2) of the restored store = %v, want applied", out)
	}
	f.wantRows("at the end", 4)
}

// Commit is idempotent: the same epoch again, on the same writer or a
// new attempt's, applies nothing.
func TestCommitTwice(t *testing.T) {
	f := newFixture(t)
	w := f.writer(0)
	f.recover(w, 1, nil)
	c1 := f.stage(w, 1, 0, 4)
	f.commit(w, 1, c1)
	f.commit(w, 1, c1)
	w2 := f.writer(0)
	if out := f.recover(w2, 2, head(1, 1, c1)); out != sink.Applied {
		t.Errorf("Recover(2, applied head) = %v, want applied", out)
	}
	f.commit(w2, 1, c1)
	if n := f.m.count("apply"); n != 1 {
		t.Errorf("Apply ran %d times, want 1", n)
	}
	f.wantRows("after three Commits of epoch 1", 4)
}

// Recover reports a HEAD whose staged data is gone Lost, and discards
// what other attempts staged; a Recoverable HEAD's lanes are kept.
func TestRecoverOutcomes(t *testing.T) {
	f := newFixture(t)
	w := f.writer(0)
	f.recover(w, 1, nil)
	c1 := f.stage(w, 1, 0, 3)
	other := f.stage(f.writer(1), 1, 10, 2) // a lane whose epoch...
	_ = f.stage(f.writer(0), 9, 20, 2)      // ...and a dead attempt's leftovers

	if out := f.recover(f.writer(0), 2, head(1, 1, c1, other)); out != sink.Recoverable {
		t.Fatalf("Recover(2, head 1 staged) = %v, want recoverable", out)
	}
	keep := f.m.keeps[len(f.m.keeps)-1]
	if len(keep) != 2 || keep[0].Lane != 0 || keep[1].Lane != 1 || keep[0].Epoch != 1 || keep[0].Pipeline != pipe {
		t.Errorf("Discard kept %+v, want both lanes of epoch 1", keep)
	}
	if n := len(f.m.state.staged); n != 2 {
		t.Errorf("%d stages left after Recover, want head's 2", n)
	}
	if _, err := f.m.dropStaged(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out := f.recover(f.writer(0), 3, head(1, 1, c1, other)); out != sink.Lost {
		t.Errorf("Recover(3, head 1 with its staged data gone) = %v, want lost", out)
	}
	if keep := f.m.keeps[len(f.m.keeps)-1]; len(keep) != 0 {
		t.Errorf("Discard of a Lost head kept %+v, want nothing", keep)
	}
	// The log rewinds to before epoch 1: a new pipeline.
	if out := f.recover(f.writer(0), 3, nil); out != sink.Applied {
		t.Errorf("Recover(3, nil) after the rewind = %v, want applied", out)
	}
	f.wantRows("after the lost epoch", 0)
}

// A destination behind the log by more than one epoch (restored from an
// older copy) is never written past: Recover reports HEAD Lost, so the
// log rewinds to what it has, and a Commit of a later epoch fails.
func TestBehind(t *testing.T) {
	f := newFixture(t)
	w := f.writer(0)
	f.recover(w, 1, nil)
	f.commit(w, 1, f.stage(w, 1, 0, 1))
	c3 := f.stage(w, 3, 1, 1)
	err := w.Commit(context.Background(), 3, []sink.Committable{c3})
	if err == nil || !strings.Contains(err.Error(), "epochs between are missing") {
		t.Errorf("Commit(3) after epoch 1 = %v, want the missing epochs named", err)
	}
	if out := f.recover(f.writer(0), 2, head(3, 1, c3)); out != sink.Lost {
		t.Errorf("Recover(head 3) with epoch 1 applied = %v, want lost", out)
	}
	if n := f.m.count("intact"); n != 0 {
		t.Errorf("Intact ran %d times, want none: the epoch before is missing", n)
	}
	f.wantRows("at the end", 1)
}

// A lane that staged nothing has no Apply and no Intact, but the epoch
// is recorded all the same.
func TestEmptyLanes(t *testing.T) {
	f := newFixture(t)
	w0, w1 := f.writer(0), f.writer(1)
	f.recover(w0, 1, nil)
	c0, c1 := f.stage(w0, 1, 0, 0), f.stage(w1, 1, 0, 2)
	f.commit(w0, 1, c0, c1)
	if n := f.m.count("apply"); n != 1 {
		t.Errorf("Apply ran %d times, want 1 (lane 1 only)", n)
	}
	empty := f.stage(w0, 2, 0, 0)
	if out := f.recover(f.writer(0), 2, head(2, 1, empty, f.stage(w1, 2, 0, 0))); out != sink.Recoverable {
		t.Errorf("Recover(head 2, no rows) = %v, want recoverable", out)
	}
	if n := f.m.count("intact"); n != 0 {
		t.Errorf("Intact ran %d times for lanes that staged nothing", n)
	}
	if mk := f.m.marker(pipe); mk.Epoch != 1 {
		t.Errorf("marker epoch %d, want 1", mk.Epoch)
	}
}

// A Finisher's Finish runs once per Final epoch: in Finish after the
// Commit, or in the next attempt's Recover (applying the epoch first
// when it is not applied), never twice.
func TestFinish(t *testing.T) {
	m := newMemStore()
	f := &fixture{t: t, m: m, d: &memDest{m: m, finish: true}}
	ctx := context.Background()
	w := f.writer(0)
	f.recover(w, 1, nil)
	c1 := f.stage(w, 1, 0, 2)
	if err := w.Finish(ctx, 1); err == nil {
		t.Error("Finish(1) before Commit(1) returned nil, want an error")
	}
	f.commit(w, 1, c1)
	for range 2 {
		if err := w.Finish(ctx, 1); err != nil {
			t.Fatalf("Finish(1): %v", err)
		}
	}
	final := head(1, 1, c1)
	final.Final = true
	if out := f.recover(f.writer(0), 2, final); out != sink.Applied {
		t.Errorf("Recover(finished Final head) = %v, want applied", out)
	}
	if !slices.Equal(m.state.finished, []string{"p/1"}) {
		t.Errorf("finished %v, want [p/1] once", m.state.finished)
	}

	// The process died after Commit(2), before Finish(2).
	w2 := f.writer(0)
	f.recover(w2, 3, final)
	c2 := f.stage(w2, 2, 2, 2)
	f.commit(w2, 2, c2)
	final2 := head(2, 3, c2)
	final2.Final = true
	if out := f.recover(f.writer(0), 4, final2); out != sink.Applied {
		t.Errorf("Recover(applied, unfinished Final head) = %v, want applied", out)
	}
	// The process died before Commit(3): Recover applies and finishes.
	w3 := f.writer(0)
	f.recover(w3, 5, final2)
	c3 := f.stage(w3, 3, 4, 2)
	final3 := head(3, 5, c3)
	final3.Final = true
	if out := f.recover(f.writer(0), 6, final3); out != sink.Applied {
		t.Errorf("Recover(staged Final head) = %v, want applied", out)
	}
	if !slices.Equal(m.state.finished, []string{"p/1", "p/2", "p/3"}) {
		t.Errorf("finished %v, want [p/1 p/2 p/3]", m.state.finished)
	}
	f.wantRows("at the end", 6)
	if mk := m.marker(pipe); mk.Epoch != 3 || mk.Finished != 3 || mk.Generation != 6 {
		t.Errorf("marker %+v, want epoch 3 applied by generation 6, finished 3", mk)
	}
}

// A failed Recover (here Intact failing) changes nothing: the fence is
// not raised, nothing is discarded.
func TestFailedRecoverChangesNothing(t *testing.T) {
	f := newFixture(t)
	w := f.writer(0)
	f.recover(w, 1, nil)
	c1 := f.stage(w, 1, 0, 2)
	f.m.fail = func(op string, _ ledger.Staged) error {
		if op == "intact" {
			return errInjected
		}
		return nil
	}
	if _, err := f.writer(0).Recover(context.Background(), 2, head(1, 1, c1)); !errors.Is(err, errInjected) {
		t.Fatalf("Recover with Intact failing = %v, want the injected error", err)
	}
	f.m.fail = nil
	if mk := f.m.marker(pipe); mk.Fence != 1 {
		t.Errorf("fence %d after the failed Recover, want 1", mk.Fence)
	}
	f.commit(w, 1, c1) // generation 1 is not fenced
	f.wantRows("after Commit(1)", 2)
}

// A failed Apply rolls the epoch back whole: a retry applies it once.
func TestFailedApplyRollsBack(t *testing.T) {
	f := newFixture(t)
	w0, w1 := f.writer(0), f.writer(1)
	f.recover(w0, 1, nil)
	c0, c1 := f.stage(w0, 1, 0, 2), f.stage(w1, 1, 2, 3)
	f.m.fail = func(op string, s ledger.Staged) error {
		if op == "apply" && s.Lane == 1 {
			return errInjected
		}
		return nil
	}
	if err := w0.Commit(context.Background(), 1, []sink.Committable{c0, c1}); !errors.Is(err, errInjected) {
		t.Fatalf("Commit with lane 1's Apply failing = %v, want the injected error", err)
	}
	f.wantRows("after the failed Commit", 0)
	f.m.fail = nil
	f.commit(w0, 1, c0, c1)
	f.wantRows("after the retried Commit", 5)
}

// Calls out of order and committables that are not this writer's fail
// with errors that say so, and change nothing.
func TestMisuse(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	w := f.writer(0)
	c1 := f.stage(w, 1, 0, 1)
	if err := w.Commit(ctx, 1, []sink.Committable{c1}); err == nil || !strings.Contains(err.Error(), "before Recover") {
		t.Errorf("Commit before Recover = %v", err)
	}
	if err := w.Finish(ctx, 1); err == nil || !strings.Contains(err.Error(), "before Recover") {
		t.Errorf("Finish before Recover = %v", err)
	}
	if _, err := w.Recover(ctx, 0, nil); err == nil {
		t.Error("Recover(0) returned nil")
	}
	f.recover(w, 1, nil)

	var e map[string]any
	if err := json.Unmarshal(c1, &e); err != nil {
		t.Fatal(err)
	}
	edit := func(k string, v any) sink.Committable {
		c := map[string]any{}
		for key, val := range e {
			c[key] = val
		}
		c[k] = v
		b, _ := json.Marshal(c)
		return b
	}
	other := head(1, 1, c1)
	other.Pipeline = "q"
	for name, cs := range map[string][]sink.Committable{
		"another pipeline's": {edit("pipeline", "q")},
		"another epoch's":    {edit("epoch", 2)},
		"another lane's":     {edit("lane", 1)},
		"a newer format":     {edit("ledger", 2)},
		"not JSON":           {sink.Committable("parquet")},
		"another writer's":   {sink.Committable(`{"files":[]}`)},
	} {
		if err := w.Commit(ctx, 1, cs); err == nil {
			t.Errorf("Commit with %s committable returned nil", name)
		}
		if _, err := f.writer(0).Recover(ctx, 2, head(1, 1, cs...)); err == nil {
			t.Errorf("Recover with %s committable returned nil", name)
		}
	}
	if _, err := f.writer(0).Recover(ctx, 2, other); err == nil {
		t.Error("Recover with another pipeline's record returned nil")
	}
	f.wantRows("after the refused calls", 0)
	if mk := f.m.marker(pipe); mk.Fence != 1 || mk.Epoch != 0 {
		t.Errorf("marker %+v after the refused calls, want fence 1, nothing applied", mk)
	}

	// The books lost (reset) under a running attempt: Commit refuses.
	f.m.mu.Lock()
	delete(f.m.state.markers, pipe)
	f.m.mu.Unlock()
	if err := w.Commit(ctx, 1, []sink.Committable{c1}); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("Commit after the books were reset = %v, want an error saying so", err)
	}
}

func TestNewWriterRequires(t *testing.T) {
	m := newMemStore()
	ok := ledger.Config[*memTx]{Pipeline: pipe, Stager: &memStager{m: m}, Books: m, Applier: memApplier{m}}
	for name, edit := range map[string]func(*ledger.Config[*memTx]){
		"Pipeline": func(c *ledger.Config[*memTx]) { c.Pipeline = "" },
		"Stager":   func(c *ledger.Config[*memTx]) { c.Stager = nil },
		"Books":    func(c *ledger.Config[*memTx]) { c.Books = nil },
		"Applier":  func(c *ledger.Config[*memTx]) { c.Applier = nil },
	} {
		cfg := ok
		edit(&cfg)
		if _, err := ledger.NewWriter(cfg); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("NewWriter without %s: %v, want an error naming it", name, err)
		}
	}
	if _, err := ledger.NewWriter(ok); err != nil {
		t.Error(err)
	}
}

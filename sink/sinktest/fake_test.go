package sinktest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

type fakeRow struct {
	id  int64
	op  string
	seq int64
}

// batch builds what the engine emits: the source's columns and the
// metadata columns.
func fakeBatch(rows ...fakeRow) arrow.RecordBatch {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.StringBuilder).Append(string(rune('a'+r.id)) + "-" + string(rune('0'+r.seq)))
		b.Field(2).(*array.StringBuilder).Append(r.op)
		b.Field(3).(*array.Int64Builder).Append(r.seq)
	}
	return b.NewRecordBatch()
}

type fakeFixture struct {
	t     *testing.T
	d     *sinktest.FakeDestination
	ctx   context.Context
	specs []sink.StreamSpec // what its writers get
}

func (f *fakeFixture) writer() sink.Writer {
	w, err := f.d.Writer(f.ctx, sink.WriterConfig{Pipeline: "p", Streams: f.specs})
	if err != nil {
		f.t.Fatal(err)
	}
	return w
}

// epoch writes rows and pre-commits them as one epoch.
func (f *fakeFixture) epoch(w sink.Writer, epoch uint64, rows ...fakeRow) sink.Committable {
	f.t.Helper()
	rec := fakeBatch(rows...)
	defer rec.Release()
	if err := w.Write(f.ctx, "s", rec); err != nil {
		f.t.Fatal(err)
	}
	c, err := w.PreCommit(f.ctx, epoch)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func newFakeFixture(t *testing.T, cfg sinktest.FakeDestinationConfig) *fakeFixture {
	return &fakeFixture{t: t, d: sinktest.NewFakeDestination(cfg), ctx: context.Background()}
}

// TestFakeDestinationMergeGuardsSeq: merge keeps each key's highest
// seq; a delete's tombstone stops a replayed older version, and is what
// a reader sees of the key with soft deletes, nothing with hard ones.
func TestFakeDestinationMergeGuardsSeq(t *testing.T) {
	for _, deletes := range []sink.Deletes{sink.SoftDeletes, sink.HardDeletes} {
		t.Run(deletes.String(), func(t *testing.T) {
			f := newFakeFixture(t, sinktest.FakeDestinationConfig{Class: sink.StageAndApply, Capabilities: sink.Capabilities{Merge: true, HardDeletes: true}})
			f.specs = []sink.StreamSpec{{Stream: "s", Table: "s", Mode: sink.Merge, Key: []string{"id"}, Deletes: deletes}}
			w := f.writer()
			if out, err := w.Recover(f.ctx, 1, nil); err != nil || out != sink.Applied {
				t.Fatalf("recover: %v %v", out, err)
			}
			c := f.epoch(w, 1, fakeRow{1, "insert", 1}, fakeRow{2, "insert", 2}, fakeRow{1, "update", 5})
			if len(f.d.Rows("s")) != 0 {
				t.Fatal("staged rows visible before Commit")
			}
			if err := w.Commit(f.ctx, 1, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			// A replay of older versions, and a delete.
			c = f.epoch(w, 2, fakeRow{1, "insert", 1}, fakeRow{2, "delete", 6}, fakeRow{2, "insert", 2})
			if err := w.Commit(f.ctx, 2, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			rows := f.d.Rows("s")
			switch {
			case len(rows) == 0 || rows[0].Key != "1" || rows[0].Seq != 5 || rows[0].Op != "update":
				t.Fatalf("rows %+v, want key 1 at seq 5", rows)
			case deletes == sink.HardDeletes && len(rows) != 1:
				t.Fatalf("rows %+v, want key 1 only", rows)
			case deletes == sink.SoftDeletes && (len(rows) != 2 || rows[1].Key != "2" || rows[1].Seq != 6 || rows[1].Op != "delete"):
				t.Fatalf("rows %+v, want key 1 and key 2's tombstone at seq 6", rows)
			}
			if err := w.Commit(f.ctx, 2, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			if n := len(f.d.Applies("p")); n != 2 {
				t.Fatalf("%d applies after a repeated Commit, want 2", n)
			}
		})
	}
}

// TestFakeDestinationOverwrite: an Overwrite table's epochs are held
// until Finish of a Final epoch replaces the table's rows with them,
// once; a Recover given a Final head that was not finished finishes it.
func TestFakeDestinationOverwrite(t *testing.T) {
	f := newFakeFixture(t, sinktest.FakeDestinationConfig{Class: sink.StageAndApply, Capabilities: sink.Capabilities{Overwrite: true}})
	f.specs = []sink.StreamSpec{{Stream: "s", Table: "s", Mode: sink.Overwrite, Key: []string{"id"}}}
	w := f.writer()
	if _, err := w.Recover(f.ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	commit := func(w sink.Writer, epoch uint64, rows ...fakeRow) sink.Committable {
		t.Helper()
		c := f.epoch(w, epoch, rows...)
		if err := w.Commit(f.ctx, epoch, []sink.Committable{c}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	keys := func() (out []string) {
		for _, r := range f.d.Rows("s") {
			out = append(out, r.Key)
		}
		return out
	}
	commit(w, 1, fakeRow{1, "insert", 1}, fakeRow{2, "insert", 1})
	commit(w, 2, fakeRow{3, "insert", 1})
	if got := keys(); len(got) != 0 {
		t.Fatalf("rows %v before Finish, want none", got)
	}
	for range 2 {
		if err := w.Finish(f.ctx, 2); err != nil {
			t.Fatal(err)
		}
		if got := keys(); len(got) != 3 {
			t.Fatalf("rows %v after Finish(2), want keys 1, 2, 3", got)
		}
	}
	c := commit(w, 3, fakeRow{4, "insert", 2})
	if got := keys(); len(got) != 3 {
		t.Fatalf("rows %v after the next refresh's Commit(3), want the last refresh's", got)
	}
	// The process dies before Finish(3): the next attempt's Recover
	// finishes it, and a zombie's Finish is fenced.
	w2 := f.writer()
	head := &checkpoint.Record{Pipeline: "p", Epoch: 3, Generation: 1, Final: true, Committables: [][]byte{c}}
	if out, err := w2.Recover(f.ctx, 2, head); err != nil || out != sink.Applied {
		t.Fatalf("Recover of the Final head: %v %v, want applied", out, err)
	}
	if got := keys(); len(got) != 1 || got[0] != "4" {
		t.Fatalf("rows %v after Recover of the Final head, want key 4", got)
	}
	if err := w.Finish(f.ctx, 3); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("the zombie's Finish(3): %v, want ErrFenced", err)
	}
	// A refresh without rows empties the table.
	commit(w2, 4)
	if err := w2.Finish(f.ctx, 4); err != nil {
		t.Fatal(err)
	}
	if got := keys(); len(got) != 0 {
		t.Fatalf("rows %v after an empty refresh, want none", got)
	}
}

func TestFakeDestinationFence(t *testing.T) {
	for _, broken := range []sinktest.FakeBroken{sinktest.FakeCorrect, sinktest.FakeSkipFence} {
		t.Run(broken.String(), func(t *testing.T) {
			f := newFakeFixture(t, sinktest.FakeDestinationConfig{Class: sink.StageAndApply, Broken: broken})
			old := f.writer()
			if _, err := old.Recover(f.ctx, 1, nil); err != nil {
				t.Fatal(err)
			}
			c := f.epoch(old, 1, fakeRow{1, "insert", 1})
			head := &checkpoint.Record{Pipeline: "p", Epoch: 1, Generation: 1, Committables: [][]byte{c}}
			// The new generation recovers the epoch and applies it.
			nw := f.writer()
			if out, err := nw.Recover(f.ctx, 2, head); err != nil || out != sink.Recoverable {
				t.Fatalf("recover: %v %v", out, err)
			}
			if err := nw.Commit(f.ctx, 1, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			// The zombie's Commit after the fence rose.
			err := old.Commit(f.ctx, 1, []sink.Committable{c})
			if broken == sinktest.FakeCorrect && !errors.Is(err, sink.ErrFenced) {
				t.Fatalf("zombie commit: %v, want ErrFenced", err)
			}
			if _, err := old.Recover(f.ctx, 1, head); !errors.Is(err, sink.ErrFenced) {
				t.Fatalf("stale recover: %v, want ErrFenced", err)
			}
			if f.d.Fence("p") != 2 {
				t.Fatalf("fence %d", f.d.Fence("p"))
			}
		})
	}
}

// A Commit paused inside the destination while a newer generation
// recovers the same epoch: the fence is what keeps it from landing.
func TestFakeDestinationZombieInsideCommit(t *testing.T) {
	for _, broken := range []sinktest.FakeBroken{sinktest.FakeCorrect, sinktest.FakeSkipFence} {
		t.Run(broken.String(), func(t *testing.T) {
			paused, release := make(chan struct{}), make(chan struct{})
			d := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.Transactional, Broken: broken})
			zombie := d.WithControl(func(_ context.Context, c sinktest.FakeDestCall) error {
				if c.Op == sinktest.FakeCommit {
					close(paused)
					<-release
				}
				return nil
			})
			f := &fakeFixture{t: t, d: zombie, ctx: context.Background()}
			old := f.writer()
			old.Recover(f.ctx, 1, nil)
			c := f.epoch(old, 1, fakeRow{1, "insert", 1})
			done := make(chan error)
			go func() { done <- old.Commit(f.ctx, 1, []sink.Committable{c}) }()
			<-paused
			nw, _ := d.Writer(f.ctx, sink.WriterConfig{Pipeline: "p"})
			head := &checkpoint.Record{Pipeline: "p", Epoch: 1, Generation: 1, Committables: [][]byte{c}}
			if out, err := nw.Recover(f.ctx, 2, head); err != nil || out != sink.Recoverable {
				t.Fatalf("recover: %v %v", out, err)
			}
			if err := nw.Commit(f.ctx, 1, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			close(release)
			err := <-done
			n := len(d.Rows("s"))
			switch broken {
			case sinktest.FakeCorrect:
				if !errors.Is(err, sink.ErrFenced) || n != 1 {
					t.Fatalf("zombie commit %v, %d rows visible", err, n)
				}
			case sinktest.FakeSkipFence:
				if err != nil || n != 2 {
					t.Fatalf("broken zombie commit %v, %d rows visible, want it to land twice", err, n)
				}
			}
		})
	}
}

func TestFakeDestinationDoubleApplyAndLostResponse(t *testing.T) {
	for _, broken := range []sinktest.FakeBroken{sinktest.FakeCorrect, sinktest.FakeDoubleApply} {
		t.Run(broken.String(), func(t *testing.T) {
			lost := true
			d := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply, Broken: broken,
				Control: func(_ context.Context, c sinktest.FakeDestCall) error {
					if c.Op == sinktest.FakeCommit && lost {
						lost = false
						return &sinktest.FakeFault{After: true}
					}
					return nil
				}})
			f := &fakeFixture{t: t, d: d, ctx: context.Background()}
			w := f.writer()
			w.Recover(f.ctx, 1, nil)
			c := f.epoch(w, 1, fakeRow{1, "insert", 1})
			if err := w.Commit(f.ctx, 1, []sink.Committable{c}); !errors.Is(err, sinktest.ErrFakeFault) {
				t.Fatalf("first commit: %v, want the injected fault", err)
			}
			if len(d.Rows("s")) != 1 {
				t.Fatal("a lost response did not apply")
			}
			if err := w.Commit(f.ctx, 1, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			want := map[sinktest.FakeBroken]int{sinktest.FakeCorrect: 1, sinktest.FakeDoubleApply: 2}[broken]
			if n := len(d.Rows("s")); n != want {
				t.Fatalf("%d rows after a retried commit, want %d", n, want)
			}
		})
	}
}

func TestFakeDestinationDeliverAckAndCrash(t *testing.T) {
	d := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.DeliverAck, Capabilities: sink.Capabilities{SkipByID: true}})
	f := &fakeFixture{t: t, d: d, ctx: context.Background()}
	w := f.writer()
	w.Recover(f.ctx, 1, nil)
	rec := fakeBatch(fakeRow{1, "insert", 1}, fakeRow{1, "insert", 1})
	defer rec.Release()
	if err := w.Write(f.ctx, "s", rec); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Rows("s")); n != 1 {
		t.Fatalf("deliver-ack with skip-by-id: %d rows visible at Write, want 1", n)
	}
	view := d.WithControl(func(context.Context, sinktest.FakeDestCall) error { return &sinktest.FakeFault{Crash: true} })
	vw, _ := view.Writer(f.ctx, sink.WriterConfig{Pipeline: "p"})
	if _, err := vw.PreCommit(f.ctx, 1); !errors.Is(err, sinktest.ErrFakeFault) {
		t.Fatalf("crash: %v", err)
	}
	if err := vw.Close(f.ctx); !errors.Is(err, sinktest.ErrFakeKilled) {
		t.Fatalf("call after a crash: %v, want ErrFakeKilled", err)
	}
	if n := d.DropStaged("p"); n != 0 {
		t.Fatalf("deliver-ack staged %d", n)
	}
}

func TestFakeDestinationLost(t *testing.T) {
	f := newFakeFixture(t, sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	w := f.writer()
	w.Recover(f.ctx, 1, nil)
	c := f.epoch(w, 1, fakeRow{1, "insert", 1})
	if n := f.d.DropStaged("p"); n != 1 {
		t.Fatalf("dropped %d", n)
	}
	head := &checkpoint.Record{Pipeline: "p", Epoch: 1, Generation: 1, Committables: [][]byte{c}}
	if out, err := f.writer().Recover(f.ctx, 2, head); err != nil || out != sink.Lost {
		t.Fatalf("recover after the staged data expired: %v %v, want lost", out, err)
	}
}

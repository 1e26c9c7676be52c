package sinktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

// faultsFixture wraps a stage-and-apply FakeDestination with WithFaults,
// failing the calls fail says how to, and recording what Observe saw.
type faultsFixture struct {
	inner *sinktest.FakeDestination
	view  *sinktest.FaultyDestination
	mu    sync.Mutex
	fail  map[sinktest.FakeDestOp]error
	calls []sinktest.FakeDestCall // what Control saw
	seen  []string                // what Observe saw
}

func newFaultsFixture() *faultsFixture {
	f := &faultsFixture{inner: sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply}),
		fail: map[sinktest.FakeDestOp]error{}}
	f.view = sinktest.WithFaults(f.inner, sinktest.FaultConfig{
		Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.calls = append(f.calls, c)
			err := f.fail[c.Op]
			delete(f.fail, c.Op)
			return err
		},
		Observe: func(c sinktest.FakeDestCall, o sink.Outcome, err error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			s := c.Op.String() + " " + o.String()
			if err != nil {
				s += " " + err.Error()
			}
			f.seen = append(f.seen, s)
		},
	})
	return f
}

func (f *faultsFixture) failNext(op sinktest.FakeDestOp, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] = err
}

func TestWithFaults(t *testing.T) {
	ctx := context.Background()
	f := newFaultsFixture()
	w, err := f.view.Writer(ctx, sink.WriterConfig{Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := w.Recover(ctx, 3, nil); err != nil || out != sink.Applied {
		t.Fatalf("recover: %v %v", out, err)
	}
	rec := fakeBatch(fakeRow{1, "insert", 1})
	defer rec.Release()
	if err := w.Write(ctx, "s", rec); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}

	// An error fails the call before it reaches the destination.
	boom := errors.New("boom")
	f.failNext(sinktest.FakeCommit, boom)
	if err := w.Commit(ctx, 1, []sink.Committable{c}); !errors.Is(err, boom) {
		t.Fatalf("commit with an error before: %v, want boom", err)
	}
	if f.inner.Applied("p", 1) {
		t.Fatal("a Commit failed before its effect applied the epoch")
	}
	// An After fault lets it take effect, then fails it.
	f.failNext(sinktest.FakeCommit, &sinktest.FakeFault{After: true, Err: boom})
	if err := w.Commit(ctx, 1, []sink.Committable{c}); !errors.Is(err, boom) {
		t.Fatalf("commit with a lost response: %v, want boom", err)
	}
	if !f.inner.Applied("p", 1) || len(f.inner.Rows("s")) != 1 {
		t.Fatalf("a Commit whose response was lost did not apply the epoch: rows %v", f.inner.Rows("s"))
	}
	f.mu.Lock()
	var commitGen []uint64
	for _, c := range f.calls {
		if c.Op == sinktest.FakeCommit {
			commitGen = append(commitGen, uint64(c.Gen))
		}
	}
	seen := append([]string(nil), f.seen...)
	f.mu.Unlock()
	if len(commitGen) != 2 || commitGen[0] != 3 || commitGen[1] != 3 {
		t.Errorf("Control saw Commits of generations %v, want [3 3] (Recover's)", commitGen)
	}
	want := []string{"recover applied", "write applied", "precommit applied", "commit applied"}
	if len(seen) != len(want) {
		t.Fatalf("Observe saw %q, want %q", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("Observe saw %q, want %q", seen, want)
		}
	}

	// A crash kills the view: this call and every later one fail
	// without reaching the destination.
	f.failNext(sinktest.FakeWrite, &sinktest.FakeFault{Crash: true})
	if err := w.Write(ctx, "s", rec); err == nil {
		t.Fatal("a crashed Write succeeded")
	}
	if _, err := w.PreCommit(ctx, 2); !errors.Is(err, sinktest.ErrFakeKilled) {
		t.Fatalf("PreCommit after the crash: %v, want ErrFakeKilled", err)
	}
	if err := w.Close(ctx); !errors.Is(err, sinktest.ErrFakeKilled) {
		t.Fatalf("Close after the crash: %v, want ErrFakeKilled", err)
	}
	if _, err := f.view.Writer(ctx, sink.WriterConfig{Pipeline: "p", Lane: 1}); !errors.Is(err, sinktest.ErrFakeKilled) {
		t.Fatalf("Writer after the crash: %v, want ErrFakeKilled", err)
	}
	// Another view of the same destination is alive.
	other := sinktest.WithFaults(f.inner, sinktest.FaultConfig{})
	w2, err := other.Writer(ctx, sink.WriterConfig{Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	head := &checkpoint.Record{Pipeline: "p", Epoch: 1, Generation: 3, Committables: [][]byte{c}}
	if out, err := w2.Recover(ctx, 4, head); err != nil || out != sink.Applied {
		t.Fatalf("recover through another view: %v %v", out, err)
	}
}

// checkerDest is a destination that rejects every column named "bad".
type checkerDest struct{ *sinktest.FakeDestination }

func (checkerDest) CheckSchema(_ context.Context, _ string, sc *arrow.Schema) ([]sink.RejectedColumn, error) {
	var out []sink.RejectedColumn
	for _, f := range sc.Fields() {
		if f.Name == "bad" {
			out = append(out, sink.RejectedColumn{Column: f.Name, Reason: "bad"})
		}
	}
	return out, nil
}

func TestWithFaultsCheckSchema(t *testing.T) {
	ctx := context.Background()
	sc := arrow.NewSchema([]arrow.Field{{Name: "bad", Type: arrow.PrimitiveTypes.Int64}}, nil)
	fake := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{})
	got, err := sinktest.WithFaults(checkerDest{fake}, sinktest.FaultConfig{}).CheckSchema(ctx, "t", sc)
	if err != nil || len(got) != 1 || got[0].Column != "bad" {
		t.Fatalf("CheckSchema through the wrapper of a checker: %v %v, want column bad rejected", got, err)
	}
	got, err = sinktest.WithFaults(fake, sinktest.FaultConfig{}).CheckSchema(ctx, "t", sc)
	if err != nil || len(got) != 0 {
		t.Fatalf("CheckSchema through the wrapper of a destination without one: %v %v, want none", got, err)
	}
}

// finisherDest's writers count Finish calls; it implements every
// optional capability of a destination, so that a wrapper can be seen
// forwarding each.
type finisherDest struct {
	*sinktest.FakeDestination
	finished *[]uint64
}

type finisherWriter struct {
	sink.Writer
	finished *[]uint64
}

func (w finisherWriter) Finish(_ context.Context, epoch uint64) error {
	*w.finished = append(*w.finished, epoch)
	return nil
}

func (d finisherDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.FakeDestination.Writer(ctx, cfg)
	return finisherWriter{w, d.finished}, err
}

func (d finisherDest) CheckStream(spec sink.StreamSpec) error {
	if spec.Mode == sink.Overwrite {
		return errors.New("no overwrite here")
	}
	return nil
}

func (d finisherDest) CheckSchema(_ context.Context, table string, _ *arrow.Schema) ([]sink.RejectedColumn, error) {
	return []sink.RejectedColumn{{Column: "c", Reason: "not in " + table}}, nil
}

func (d finisherDest) Name() string { return "finisher" }

// TestWithFaultsFinish: the wrapper's writers forward Finish with the
// hooks, to every writer (Finish is part of sink.Writer).
func TestWithFaultsFinish(t *testing.T) {
	ctx := context.Background()
	var finished []uint64
	var ops []sinktest.FakeDestOp
	control := func(_ context.Context, c sinktest.FakeDestCall) error {
		ops = append(ops, c.Op)
		if c.Op == sinktest.FakeFinish && c.Epoch == 2 {
			return &sinktest.FakeFault{After: true}
		}
		return nil
	}
	fake := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	w, err := sinktest.WithFaults(finisherDest{fake, &finished}, sinktest.FaultConfig{Control: control}).Writer(ctx, sink.WriterConfig{Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(ctx, 2); !errors.Is(err, sinktest.ErrFakeFault) {
		t.Fatalf("Finish with a lost response: %v, want ErrFakeFault", err)
	}
	if len(finished) != 2 || finished[0] != 1 || finished[1] != 2 || len(ops) != 2 || ops[0] != sinktest.FakeFinish {
		t.Fatalf("wrapped Finish saw epochs %v, Control saw %v; want [1 2] and two finish calls", finished, ops)
	}
	// Over the fake, which holds nothing back, Finish still meets the
	// hooks, and the fake's does nothing.
	ops = nil
	w, err = sinktest.WithFaults(fake, sinktest.FaultConfig{Control: control}).Writer(ctx, sink.WriterConfig{Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(ctx, 3); err != nil || len(ops) != 1 || ops[0] != sinktest.FakeFinish {
		t.Fatalf("Finish over the fake: %v, Control saw %v; want nil and one finish call", err, ops)
	}
}

// TestWithFaultsForwardsCapabilities: every optional capability of the
// wrapped destination (sink/optional.go) is the wrapper's too, and one
// it lacks gets the runner's default.
func TestWithFaultsForwardsCapabilities(t *testing.T) {
	ctx := context.Background()
	fake := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	over := sinktest.WithFaults(finisherDest{fake, new([]uint64)}, sinktest.FaultConfig{})
	if err := over.CheckStream(sink.StreamSpec{Stream: "s", Table: "s", Mode: sink.Overwrite}); err == nil {
		t.Error("CheckStream: the wrapped destination's refusal was dropped")
	}
	if rej, err := over.CheckSchema(ctx, "t", arrow.NewSchema(nil, nil)); err != nil || len(rej) != 1 || rej[0].Reason != "not in t" {
		t.Errorf("CheckSchema: %v, %v; want the wrapped destination's rejection", rej, err)
	}
	if n := over.Name(); n != "finisher" {
		t.Errorf("Name: %q, want the wrapped destination's, finisher", n)
	}
	plain := sinktest.WithFaults(fake, sinktest.FaultConfig{})
	if err := plain.CheckStream(sink.StreamSpec{Stream: "s", Table: "s", Mode: sink.Overwrite}); err != nil {
		t.Errorf("CheckStream over a destination without one: %v", err)
	}
	if rej, err := plain.CheckSchema(ctx, "t", arrow.NewSchema(nil, nil)); err != nil || len(rej) != 0 {
		t.Errorf("CheckSchema over a destination without one: %v, %v", rej, err)
	}
	if n := plain.Name(); n != "sinktest" {
		t.Errorf("Name over a destination without one: %q, want its package, sinktest", n)
	}
}

// classifying is a fake destination that calls errPermanent permanent.
type classifying struct{ *sinktest.FakeDestination }

var errPermanent = errors.New("credentials refused")

func (classifying) Permanent(err error) bool { return errors.Is(err, errPermanent) }

// FaultyDestination forwards sink.Classifier: the wrapped destination's
// answer, never for a fault it injected; a destination without one
// calls nothing permanent.
func TestFaultyDestinationForwardsClassifier(t *testing.T) {
	inner := classifying{sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{})}
	d := sinktest.WithFaults(inner, sinktest.FaultConfig{})
	if !d.Permanent(errPermanent) || d.Permanent(errors.New("connection reset")) || d.Permanent(&sinktest.FakeFault{}) {
		t.Error("Permanent: want the wrapped destination's answer, and false for an injected fault")
	}
	bare := sinktest.WithFaults(sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{}), sinktest.FaultConfig{})
	if bare.Permanent(errPermanent) {
		t.Error("Permanent of a wrapped destination without a Classifier: true, want false")
	}
}

// TestFaultyDestinationHold: Hold waits for a call under way inside the
// wrapped destination to return, and a call made while the view is held
// reaches it only after the release.
func TestFaultyDestinationHold(t *testing.T) {
	ctx := context.Background()
	inner := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	var (
		mu      sync.Mutex
		order   []string
		inWrite = make(chan struct{})
		gate    = make(chan struct{})
		passed  = make(chan struct{}, 1)
		writes  int
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	view := sinktest.WithFaults(inner, sinktest.FaultConfig{
		Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			mu.Lock()
			defer mu.Unlock()
			if c.Op == sinktest.FakeWrite {
				if writes++; writes == 2 {
					passed <- struct{}{}
				}
			}
			return nil
		},
		Observe: func(c sinktest.FakeDestCall, _ sink.Outcome, _ error) {
			if c.Op != sinktest.FakeWrite {
				return
			}
			mu.Lock()
			n := writes
			mu.Unlock()
			if n == 1 {
				close(inWrite)
				<-gate // the first Write is under way until the test says
			}
			note(fmt.Sprintf("write %d returned", n))
		},
	})
	w, err := view.Writer(ctx, sink.WriterConfig{Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	rec := fakeBatch(fakeRow{1, "insert", 1})
	defer rec.Release()
	errs := make(chan error, 2)
	go func() { errs <- w.Write(ctx, "s", rec) }()
	<-inWrite
	held := make(chan func())
	go func() {
		release := view.Hold()
		note("held")
		held <- release
	}()
	close(gate)
	release := <-held
	go func() { errs <- w.Write(ctx, "s", rec) }()
	<-passed // the second Write went past Control and waits for the view
	note("released")
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"write 1 returned", "held", "released", "write 2 returned"}
	if !slices.Equal(order, want) {
		t.Fatalf("order %q, want %q", order, want)
	}
}

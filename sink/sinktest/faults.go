package sinktest

import (
	"context"
	"errors"
	"path"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// FaultConfig configures WithFaults.
type FaultConfig struct {
	// Control, when set, is called before each writer call with the
	// call's context, as FakeDestinationConfig.Control is: it may block,
	// and may return an error. A *FakeFault (directly or wrapped) says
	// how to fail: with After, the call reaches the wrapped writer and
	// takes whatever effect it takes there before the fault's error is
	// returned (a lost response); with Crash, the view is killed as the
	// call fails. Any other error fails the call before it reaches the
	// wrapped writer. For FakeCommit, Gen is the generation the writer's
	// Recover was given (0 before one). It is called from the runner's
	// goroutines, concurrently.
	Control func(ctx context.Context, call FakeDestCall) error
	// Observe, when set, is called after each call that reached the
	// wrapped writer, with what the wrapped writer returned (before any
	// After fault replaced it): the outcome for FakeRecover, otherwise
	// 0. It is called even when the view was killed meanwhile, because
	// the call took effect. It is called concurrently.
	Observe func(call FakeDestCall, outcome sink.Outcome, err error)
}

// FaultyDestination wraps any sink.Destination with the fault hooks of a
// FakeDestination, so a test (or package sim) can crash, fail and pause
// a real destination's writers at every protocol step and see what each
// call did. It adds no state of its own to the destination: what a
// crash leaves behind is what the wrapped destination left.
//
// A killed view refuses every later call with ErrFakeKilled (Writer and
// Close included, so a crashed "process" commits nothing at Close and
// its writers' resources are abandoned, as a dead process's would be);
// calls already past the control function when it was killed complete.
// It forwards every optional capability of package sink
// (sink/optional.go) to the wrapped destination: sink.SpecChecker and
// sink.SchemaChecker ask it when it implements them (and accept
// otherwise, as the runner would), sink.Namer returns its name,
// sink.Collector collects through it (nothing, without one). Its
// writers wrap every Writer method, Finish included (FakeFinish), and
// forward sink.Visibility (reported in Observe's FakeDestCall.Visible).
// It is safe for concurrent use.
type FaultyDestination struct {
	inner sink.Destination
	cfg   FaultConfig
	dead  atomic.Bool
	// hold is read-locked by each writer call while it is inside the
	// wrapped writer, and locked by Hold.
	hold sync.RWMutex
}

var (
	_ sink.Destination   = (*FaultyDestination)(nil)
	_ sink.SpecChecker   = (*FaultyDestination)(nil)
	_ sink.SchemaChecker = (*FaultyDestination)(nil)
	_ sink.Namer         = (*FaultyDestination)(nil)
	_ sink.Collector     = (*FaultyDestination)(nil)
	_ sink.Writer        = (*faultyWriter)(nil)
	_ sink.Visibility    = (*faultyWriter)(nil)
)

// WithFaults returns a view of d whose writers call cfg's hooks around
// each call. Make one view per attempt: Kill kills that view only.
func WithFaults(d sink.Destination, cfg FaultConfig) *FaultyDestination {
	return &FaultyDestination{inner: d, cfg: cfg}
}

// Kill makes this view and its writers refuse every later call with
// ErrFakeKilled.
func (d *FaultyDestination) Kill() { d.dead.Store(true) }

// Hold pauses the view as a paused process is paused: it waits until no
// writer call of the view is inside the wrapped destination (calls
// blocked in the Control function are not), and keeps later calls from
// reaching it until the returned function is called. A test uses it to
// change the destination's storage behind a zombie's back (expire
// staged files, say) without racing a call the zombie has under way.
func (d *FaultyDestination) Hold() (release func()) {
	d.hold.Lock()
	var once sync.Once
	return func() { once.Do(d.hold.Unlock) }
}

// Unwrap returns the wrapped destination.
func (d *FaultyDestination) Unwrap() sink.Destination { return d.inner }

// Class returns the wrapped destination's class.
func (d *FaultyDestination) Class() sink.Class { return d.inner.Class() }

// Capabilities returns the wrapped destination's capabilities.
func (d *FaultyDestination) Capabilities() sink.Capabilities { return d.inner.Capabilities() }

// CheckStream asks the wrapped destination when it implements
// sink.SpecChecker; otherwise it accepts every spec.
func (d *FaultyDestination) CheckStream(spec sink.StreamSpec) error {
	if c, ok := d.inner.(sink.SpecChecker); ok {
		return c.CheckStream(spec)
	}
	return nil
}

// Name returns the wrapped destination's name: its own (sink.Namer),
// or the last element of its type's package path, as the runner names
// a destination without one.
func (d *FaultyDestination) Name() string {
	if n, ok := d.inner.(sink.Namer); ok {
		return n.Name()
	}
	t := reflect.TypeOf(d.inner)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return ""
	}
	if p := t.PkgPath(); p != "" {
		return path.Base(p)
	}
	return t.Name()
}

// Permanent asks the wrapped destination when it implements
// sink.Classifier; otherwise no error is permanent. The faults it
// injects are not.
func (d *FaultyDestination) Permanent(err error) bool {
	c, ok := d.inner.(sink.Classifier)
	return ok && !errors.Is(err, ErrFakeFault) && c.Permanent(err)
}

// CheckSchema asks the wrapped destination when it implements
// sink.SchemaChecker; otherwise it accepts every schema.
func (d *FaultyDestination) CheckSchema(ctx context.Context, table string, sc *arrow.Schema) ([]sink.RejectedColumn, error) {
	if d.dead.Load() {
		return nil, ErrFakeKilled
	}
	if c, ok := d.inner.(sink.SchemaChecker); ok {
		return c.CheckSchema(ctx, table, sc)
	}
	return nil, nil
}

// Collect asks the wrapped destination when it implements
// sink.Collector; otherwise it removes nothing. A killed view's fails
// with ErrFakeKilled.
func (d *FaultyDestination) Collect(ctx context.Context, req sink.CollectRequest) (sink.Collected, error) {
	if d.dead.Load() {
		return sink.Collected{}, ErrFakeKilled
	}
	if c, ok := d.inner.(sink.Collector); ok {
		return c.Collect(ctx, req)
	}
	return sink.Collected{}, nil
}

// Writer returns the wrapped destination's writer, wrapped.
func (d *FaultyDestination) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	if d.dead.Load() {
		return nil, ErrFakeKilled
	}
	w, err := d.inner.Writer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &faultyWriter{d: d, w: w, pipeline: cfg.Pipeline, lane: cfg.Lane}, nil
}

// before runs the control function: it returns the error to return after
// the call took effect (an After fault), or an error to return now.
func (d *FaultyDestination) before(ctx context.Context, c FakeDestCall) (after error, now error) {
	if d.dead.Load() {
		return nil, ErrFakeKilled
	}
	if d.cfg.Control != nil {
		if err := d.cfg.Control(ctx, c); err != nil {
			var f *FakeFault
			if !errors.As(err, &f) {
				return nil, err
			}
			if f.Crash {
				d.Kill()
			}
			if !f.After {
				return nil, err
			}
			after = err
		}
	}
	d.hold.RLock() // released by observe, once the call returned
	// A fault on another goroutine may have killed the view while the
	// control function ran (or blocked), or while Hold held the call.
	if d.dead.Load() && after == nil {
		d.hold.RUnlock()
		return nil, ErrFakeKilled
	}
	return after, nil
}

// observe ends a call that before let reach the wrapped writer.
func (d *FaultyDestination) observe(c FakeDestCall, o sink.Outcome, err error) {
	defer d.hold.RUnlock()
	if d.cfg.Observe != nil {
		d.cfg.Observe(c, o, err)
	}
}

type faultyWriter struct {
	d        *FaultyDestination
	w        sink.Writer
	pipeline string
	lane     int
	gen      atomic.Uint64
}

// finish returns what a call that reached the writer returns: its own
// error, or the After fault's.
func finish(after, err error) error {
	if err != nil {
		return err
	}
	return after
}

func (w *faultyWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	c := FakeDestCall{Op: FakeWrite, Pipeline: w.pipeline, Lane: w.lane, Stream: stream, Rows: int(rec.NumRows()),
		Gen: checkpoint.Generation(w.gen.Load())}
	after, err := w.d.before(ctx, c)
	if err != nil {
		return err
	}
	err = w.w.Write(ctx, stream, rec)
	w.d.observe(c, 0, err)
	return finish(after, err)
}

func (w *faultyWriter) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	c := FakeDestCall{Op: FakePreCommit, Pipeline: w.pipeline, Lane: w.lane, Epoch: epoch, Gen: checkpoint.Generation(w.gen.Load())}
	after, err := w.d.before(ctx, c)
	if err != nil {
		return nil, err
	}
	cm, err := w.w.PreCommit(ctx, epoch)
	w.d.observe(c, 0, err)
	if err := finish(after, err); err != nil {
		return nil, err
	}
	return cm, nil
}

func (w *faultyWriter) Commit(ctx context.Context, epoch uint64, cs []sink.Committable) error {
	c := FakeDestCall{Op: FakeCommit, Pipeline: w.pipeline, Lane: w.lane, Epoch: epoch, Gen: checkpoint.Generation(w.gen.Load())}
	after, err := w.d.before(ctx, c)
	if err != nil {
		return err
	}
	err = w.w.Commit(ctx, epoch, cs)
	w.d.observe(w.visible(c), 0, err)
	return finish(after, err)
}

func (w *faultyWriter) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	c := FakeDestCall{Op: FakeRecover, Pipeline: w.pipeline, Lane: w.lane, Gen: gen}
	if head != nil {
		c.Epoch = head.Epoch
	}
	after, err := w.d.before(ctx, c)
	if err != nil {
		return 0, err
	}
	o, err := w.w.Recover(ctx, gen, head)
	if err == nil {
		w.gen.Store(uint64(gen))
	}
	w.d.observe(w.visible(c), o, err)
	if err := finish(after, err); err != nil {
		return 0, err
	}
	return o, nil
}

func (w *faultyWriter) Close(ctx context.Context) error {
	c := FakeDestCall{Op: FakeClose, Pipeline: w.pipeline, Lane: w.lane, Gen: checkpoint.Generation(w.gen.Load())}
	after, err := w.d.before(ctx, c)
	if err != nil {
		return err
	}
	err = w.w.Close(ctx)
	w.d.observe(w.visible(c), 0, err)
	return finish(after, err)
}

// Finish calls the wrapped writer's Finish, with the hooks.
func (w *faultyWriter) Finish(ctx context.Context, epoch uint64) error {
	c := FakeDestCall{Op: FakeFinish, Pipeline: w.pipeline, Lane: w.lane, Epoch: epoch, Gen: checkpoint.Generation(w.gen.Load())}
	after, err := w.d.before(ctx, c)
	if err != nil {
		return err
	}
	err = w.w.Finish(ctx, epoch)
	w.d.observe(w.visible(c), 0, err)
	return finish(after, err)
}

// Visible forwards to the wrapped writer when it implements
// sink.Visibility; otherwise it reports 0 (nothing visible), which the
// runner asks only of a destination that declares Deferred.
func (w *faultyWriter) Visible() uint64 {
	if v, ok := w.w.(sink.Visibility); ok {
		return v.Visible()
	}
	return 0
}

// visible returns c with what the wrapped writer's Visible reports.
func (w *faultyWriter) visible(c FakeDestCall) FakeDestCall {
	if v, ok := w.w.(sink.Visibility); ok {
		c.Visible = v.Visible()
	}
	return c
}

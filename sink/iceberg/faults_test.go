package iceberg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// The faults TestFaults injects at the writer boundary, in the spirit of
// package sim, which drives only its own fake destination
// (sinktest.FakeDestination) and can't run against this one yet.
type faultOp uint8

const (
	fWrite faultOp = iota
	fPreCommit
	fCommit
	fRecover
	nFaultOps
)

func (o faultOp) String() string {
	return [...]string{"Write", "PreCommit", "Commit", "Recover"}[o]
}

type faultAction uint8

const (
	crashBefore faultAction = iota // the process dies before the call
	crashAfter                     // the call takes effect, then the process dies
	errBefore                      // the call fails
	errAfter                       // the call takes effect, its response is lost
	pause                          // Commit waits (a zombie) while the next attempt runs
	nFaultActions
)

func (a faultAction) String() string {
	return [...]string{"crash-before", "crash-after", "error-before", "error-after", "zombie-pause"}[a]
}

var (
	errCrashed  = errors.New("fault: the process crashed")
	errInjected = errors.New("fault: injected error")
)

// faultAttempt is one attempt's "process": a crash cancels its context
// and makes every later writer call fail without reaching the writer, so
// nothing it does afterwards has an effect (Close included: a dead
// process commits nothing when it would have closed).
type faultAttempt struct {
	n      int
	op     faultOp
	nth    int64 // the fault fires at the nth call of op (1-based)
	action faultAction
	calls  [nFaultOps]atomic.Int64
	dead   atomic.Bool
	cancel context.CancelFunc
	fired  atomic.Bool
	paused chan struct{} // closed when a pause fault holds a Commit
	resume chan struct{} // closed to let it go on
	// zombieErr is what the paused Commit returned once let go.
	zombieErr error
	log       func(string, ...any)
}

func (a *faultAttempt) kill(why string) {
	a.log("attempt %d: crash (%s)", a.n, why)
	a.dead.Store(true)
	a.cancel()
}

// call runs f as the writer call op under the attempt's fault plan.
func (a *faultAttempt) call(op faultOp, f func() error) error {
	if a.dead.Load() {
		return errCrashed
	}
	if a.calls[op].Add(1) != a.nth || a.op != op || !a.fired.CompareAndSwap(false, true) {
		return f()
	}
	a.log("attempt %d: fault fired: %v at %v #%d", a.n, a.action, op, a.nth)
	switch a.action {
	case crashBefore:
		a.kill(fmt.Sprintf("before %v", op))
		return errCrashed
	case crashAfter:
		err := f()
		a.kill(fmt.Sprintf("after %v (err %v)", op, err))
		return errCrashed
	case errBefore:
		return errInjected
	case errAfter:
		if err := f(); err != nil {
			return err
		}
		return errInjected
	case pause:
		close(a.paused)
		<-a.resume
		err := f()
		a.zombieErr = err
		a.log("attempt %d: the zombie's Commit returned %v", a.n, err)
		return err
	}
	return f()
}

// faultDest wraps the Destination, forwarding its optional capabilities
// (sink/optional.go), with writers that meet the attempt's fault.
type faultDest struct {
	inner *iceberg.Destination
	a     *faultAttempt
}

var (
	_ sink.SpecChecker   = (*faultDest)(nil)
	_ sink.SchemaChecker = (*faultDest)(nil)
	_ sink.Collector     = (*faultDest)(nil)
)

func (d *faultDest) Collect(ctx context.Context, req sink.CollectRequest) (sink.Collected, error) {
	return d.inner.Collect(ctx, req)
}

func (d *faultDest) Class() sink.Class                      { return d.inner.Class() }
func (d *faultDest) Capabilities() sink.Capabilities        { return d.inner.Capabilities() }
func (d *faultDest) CheckStream(spec sink.StreamSpec) error { return d.inner.CheckStream(spec) }
func (d *faultDest) CheckSchema(ctx context.Context, table string, sc *arrow.Schema) ([]sink.RejectedColumn, error) {
	return d.inner.CheckSchema(ctx, table, sc)
}
func (d *faultDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.inner.Writer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &faultWriter{w: w, a: d.a}, nil
}

type faultWriter struct {
	w sink.Writer
	a *faultAttempt
}

// Visible forwards (sink.Visibility): the runner requires it of a
// Deferred destination's writer.
func (w *faultWriter) Visible() uint64 { return w.w.(sink.Visibility).Visible() }

func (w *faultWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	return w.a.call(fWrite, func() error { return w.w.Write(ctx, stream, rec) })
}

func (w *faultWriter) PreCommit(ctx context.Context, epoch uint64) (c sink.Committable, err error) {
	err = w.a.call(fPreCommit, func() error { c, err = w.w.PreCommit(ctx, epoch); return err })
	return c, err
}

func (w *faultWriter) Commit(ctx context.Context, epoch uint64, cs []sink.Committable) error {
	return w.a.call(fCommit, func() error { return w.w.Commit(ctx, epoch, cs) })
}

func (w *faultWriter) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (o sink.Outcome, err error) {
	err = w.a.call(fRecover, func() error { o, err = w.w.Recover(ctx, gen, head); return err })
	return o, err
}

// Finish meets no fault of its own (the attempts' faults are drawn at
// the other calls); a crashed attempt's fails.
func (w *faultWriter) Finish(ctx context.Context, epoch uint64) error {
	if w.a.dead.Load() {
		return errCrashed
	}
	return w.w.Finish(ctx, epoch)
}

func (w *faultWriter) Close(ctx context.Context) error {
	if w.a.dead.Load() {
		return errCrashed
	}
	return w.w.Close(ctx)
}

// TestFaults runs the fake customers (merge) and orders (append) through
// the real runner into a SQL catalog on SQLite, grouping epochs (up to
// 50ms or 64 KiB), over a seeded list of attempts that each meet one
// fault at the writer boundary: a crash before or after a Write,
// PreCommit, Commit or Recover; an error before or after one (after =
// the call took effect and its response was lost; the runner retries
// Commit); or a zombie: the attempt pauses inside a Commit while the next
// attempt claims the pipeline, recovers and syncs, then goes on and must
// be fenced. Clean syncs follow until one succeeds; pyiceberg must then
// read every order version exactly once and every customer's latest
// version. OPENETL_SEED replays a failing seed's plan (goroutine
// interleavings differ between runs).
func TestFaults(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: a dozen syncs take many minutes under -race (the plain run covers it)")
	}
	const rows = 20_000
	const attempts = 8
	rng := seededRNG(t)
	dir := t.TempDir()
	_, cat := openCatalog(t, dir)
	store := checkpoint.NewMem()
	var mu sync.Mutex
	var trace []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, fmt.Sprintf(format, args...))
	}
	defer func() {
		if t.Failed() {
			for _, l := range trace {
				t.Log(l)
			}
		}
	}()
	start := func(a *faultAttempt) (done chan struct{}, res *etl.Result, errp *error) {
		// Rate-limited, so that a sync spans about a hundred epochs and
		// the faults land mid-sync.
		src, err := faker.New(faker.Config{Seed: 42, Rows: rows, Rate: 10_000})
		if err != nil {
			t.Fatal(err)
		}
		inner := newDest(t, cat, iceberg.Config{Grouping: &iceberg.Grouping{Bytes: 64 << 10, Interval: 50 * time.Millisecond}})
		p, err := etl.NewPipeline("kill").From(src).To(&faultDest{inner: inner, a: a}).Checkpoints(store).
			Mode(delivery.Merge, faker.Customers).Lanes(2).EpochEvery(20*time.Millisecond, 0).
			CommitRetries(3, time.Millisecond).Require(delivery.ExactlyOnce).Build()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		a.cancel = cancel
		done = make(chan struct{})
		res, errp = new(etl.Result), new(error)
		go func() {
			defer close(done)
			defer cancel()
			*res, *errp = p.Sync(ctx)
			logf("attempt %d ended: generation %d, epoch %d, %d epochs, err %v", a.n, res.Generation, res.Epoch, res.Epochs, *errp)
		}()
		return done, res, errp
	}
	newAttempt := func(n int, clean bool) *faultAttempt {
		a := &faultAttempt{n: n, paused: make(chan struct{}), resume: make(chan struct{}), log: logf}
		if clean {
			a.fired.Store(true)
			return a
		}
		a.op = faultOp(rng.IntN(int(nFaultOps)))
		a.action = faultAction(rng.IntN(int(nFaultActions)))
		if a.action == pause {
			a.op = fCommit
		}
		switch a.op {
		case fRecover:
			a.nth = 1
		case fWrite:
			a.nth = 1 + rng.Int64N(40)
		default:
			a.nth = 1 + rng.Int64N(30)
		}
		logf("attempt %d: plan %v at %v #%d", n, a.action, a.op, a.nth)
		return a
	}
	wait := func(done chan struct{}, what string) {
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			t.Fatalf("%s did not return within 5 minutes", what)
		}
	}
	n, zombies, fenced, fired := 0, 0, 0, 0
	var plans []*faultAttempt
	for range attempts {
		n++
		a := newAttempt(n, false)
		plans = append(plans, a)
		done, _, _ := start(a)
		if a.action == pause {
			select {
			case <-a.paused:
				// The zombie waits inside Commit; the next attempt runs.
				n++
				b := newAttempt(n, true)
				bdone, _, _ := start(b)
				wait(bdone, "the attempt after a zombie")
				close(a.resume)
				wait(done, "the zombie")
				zombies++
				if errors.Is(a.zombieErr, sink.ErrFenced) {
					fenced++
				}
				continue
			case <-done:
				continue
			}
		}
		wait(done, fmt.Sprintf("attempt %d", n))
	}
	ok := false
	for range 3 {
		n++
		done, _, errp := start(newAttempt(n, true))
		wait(done, "a clean attempt")
		if *errp == nil {
			ok = true
			break
		}
	}
	if !ok {
		t.Fatal("no clean sync succeeded (see the trace)")
	}
	for _, a := range plans {
		if a.fired.Load() {
			fired++
		}
	}
	t.Logf("%d attempts, %d faults fired, %d zombies (%d fenced in Commit)", n, fired, zombies, fenced)
	if fired == 0 {
		t.Error("no fault fired: the syncs are too short for the plans")
	}
	verifyFakerRows(t, dir, rows)
}

package etl_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// events collects a pipeline's events and lets a test wait for one.
type events struct {
	mu     sync.Mutex
	all    []etl.Event
	change chan struct{}
}

func newEvents() *events { return &events{change: make(chan struct{}, 1)} }

func (ev *events) on(e etl.Event) {
	ev.mu.Lock()
	ev.all = append(ev.all, e)
	ev.mu.Unlock()
	select {
	case ev.change <- struct{}{}:
	default:
	}
}

func (ev *events) of(kind etl.EventKind) []etl.Event {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []etl.Event
	for _, e := range ev.all {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// wait returns once n events of kind arrived.
func (ev *events) wait(t *testing.T, kind etl.EventKind, n int) []etl.Event {
	t.Helper()
	testutil.Until(t, "event "+string(kind), func() bool { return len(ev.of(kind)) >= n })
	return ev.of(kind)
}

// retryFixture is a faker source into a FakeDestination whose control
// function fails the calls fail picks.
type retryFixture struct {
	src   *faker.Source
	dst   *sinktest.FakeDestination
	store checkpoint.Store
	ev    *events
	tel   *telemetry
	calls atomic.Int64
}

const retryRows = 3000

func newRetryFixture(t *testing.T, fail func(n int64, c sinktest.FakeDestCall) error) *retryFixture {
	t.Helper()
	src, err := faker.New(faker.Config{Seed: 3, Rows: retryRows})
	if err != nil {
		t.Fatal(err)
	}
	f := &retryFixture{src: src, store: checkpoint.NewMem(), ev: newEvents(), tel: newTelemetry(t)}
	f.dst = sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply,
		Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if fail == nil {
				return nil
			}
			return fail(f.calls.Add(1), c)
		}})
	return f
}

func (f *retryFixture) build(t *testing.T, r etl.Retry) *etl.Pipeline {
	t.Helper()
	p, err := etl.NewPipeline("retry").From(f.src).To(f.dst).Checkpoints(f.store).
		// Epochs by bytes, and by time too: under Run faker's splits wait
		// at their end, so the last rows, short of a byte budget, commit
		// only at the interval (with an hour's, the test hung whenever
		// the last barrier came before the last rows).
		BatchSize(256, 0).EpochEvery(100*time.Millisecond, 32<<10).Retry(r).OnEvent(f.ev.on, 0).
		Telemetry(f.tel.mp, f.tel.tp).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// exact checks that the destination holds every faker record of both
// streams once.
func (f *retryFixture) exact(t *testing.T) {
	t.Helper()
	for _, stream := range []string{faker.Customers, faker.Orders} {
		rows := f.dst.Rows(stream)
		ids := map[string]bool{}
		for _, r := range rows {
			ids[r.ID] = true
		}
		if len(rows) != retryRows || len(ids) != retryRows {
			t.Errorf("stream %s: %d rows, %d ids, want %d of each", stream, len(rows), len(ids), retryRows)
		}
	}
}

// committedAll reports whether p's checkpoint log holds every row.
func committedAll(t *testing.T, p *etl.Pipeline) bool {
	c, err := p.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c.Totals[faker.Customers].Written == retryRows && c.Totals[faker.Orders].Written == retryRows
}

var injected = errors.New("object store unavailable: connection refused")

// TestRunRetriesTransientFailures: a Run whose destination fails three
// PreCommits (a store that is briefly away) starts a new attempt after
// each, with an escalating retry number, a sync.retrying event naming the
// destination, and openetl.retries{cause=destination}; it goes on to
// commit everything exactly once and returns nil when cancelled.
func TestRunRetriesTransientFailures(t *testing.T) {
	var failed atomic.Int64
	f := newRetryFixture(t, func(_ int64, c sinktest.FakeDestCall) error {
		if c.Op == sinktest.FakePreCommit && c.Epoch >= 2 && failed.Add(1) <= 3 {
			return injected
		}
		return nil
	})
	// MaxBackoff well above the epoch interval: an attempt that read
	// nothing for longer than MaxBackoff counts as a healthy idle one
	// and starts the count again, which a loaded machine can make
	// happen with a few milliseconds' ceiling (CI saw retries 1, 1, 2).
	p := f.build(t, etl.Retry{Backoff: time.Millisecond, MaxBackoff: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	retries := f.ev.wait(t, etl.EventSyncRetrying, 3)
	testutil.Until(t, "every row committed", func() bool { return committedAll(t, p) })
	cancel()
	if err := testutil.Recv(t, "Run to return", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The count runs from 1 and goes up by one, or starts again at 1
	// after an attempt that committed an epoch (under load a barrier can
	// come before an attempt reads a row, and its empty epoch commits
	// without the destination: CI saw 1, 1, 2); each wait is within the
	// backoff of its count.
	for i, e := range retries {
		next := e.Retry == 1 || (i > 0 && e.Retry == retries[i-1].Retry+1)
		if !next || e.Cause != "destination" || !errors.Is(e.Err, injected) || e.Wait <= 0 || e.Wait > time.Millisecond<<(e.Retry-1) {
			t.Errorf("retry event %d: retry %d cause %q wait %v err %v", i, e.Retry, e.Cause, e.Wait, e.Err)
		}
	}
	if n := len(f.ev.of(etl.EventSyncRetrying)); n != 3 {
		t.Errorf("%d retries, want 3", n)
	}
	// Four attempts: three failed, the last stopped; generations 1-4.
	started := f.ev.of(etl.EventSyncStarted)
	if len(started) != 4 || started[3].Generation != 4 {
		t.Errorf("%d attempts started (last %+v), want 4", len(started), started[len(started)-1])
	}
	f.exact(t)
	if st := p.Status(); st.Retries != 0 || st.Phase != etl.PhaseStopped {
		t.Errorf("status after the run: phase %s, retries %d", st.Phase, st.Retries)
	}
	ms := f.tel.collect(t)
	if got := sumPoint(t, ms["openetl.retries"], attrs(attrPipeline("retry"), attrCause("destination"))); got != 3 {
		t.Errorf("openetl.retries{cause=destination} = %d, want 3", got)
	}
}

// TestRetryBackoffEscalatesAndStatus: retries in a row wait longer each
// time up to MaxBackoff, Status says PhaseRetrying with the count while
// Run waits, and a Run cancelled while it waits returns nil at once.
func TestRetryBackoffEscalatesAndStatus(t *testing.T) {
	f := newRetryFixture(t, func(_ int64, c sinktest.FakeDestCall) error {
		if c.Op == sinktest.FakeWrite {
			return injected
		}
		return nil
	})
	p := f.build(t, etl.Retry{Backoff: time.Millisecond, MaxBackoff: time.Hour, Budget: 2 * time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	// Pauses: 1ms, 2ms, 4ms, ... each in [d/2, d]; the test goes on
	// once one is long enough to look at the status meanwhile.
	for n := 1; ; n++ {
		evs := f.ev.wait(t, etl.EventSyncRetrying, n)
		if evs[n-1].Wait >= 256*time.Millisecond {
			break
		}
	}
	evs := f.ev.of(etl.EventSyncRetrying)
	for i, e := range evs {
		d := time.Millisecond << i
		if e.Retry != i+1 || e.Wait < d/2 || e.Wait > d {
			t.Errorf("retry %d: number %d, waited %v, want within [%v, %v]", i+1, e.Retry, e.Wait, d/2, d)
		}
	}
	testutil.Until(t, "status retrying", func() bool { return p.Status().Phase == etl.PhaseRetrying })
	if st := p.Status(); st.Retries != len(evs) || !strings.Contains(st.LastError, injected.Error()) {
		t.Errorf("status: retries %d (want %d), last error %q", st.Retries, len(evs), st.LastError)
	}
	cancel()
	if err := testutil.Recv(t, "Run to return while it waits to retry", done); err != nil {
		t.Errorf("Run cancelled while waiting to retry: %v, want nil", err)
	}
}

// TestRetryBudget: a destination that never comes back ends Run once
// the outage outlasts the budget, with a *RetryBudgetError wrapping the
// last failure; a negative budget returns the first failure at once,
// with no retry.
func TestRetryBudget(t *testing.T) {
	fail := func(_ int64, c sinktest.FakeDestCall) error {
		if c.Op == sinktest.FakeWrite {
			return injected
		}
		return nil
	}
	t.Run("runs out", func(t *testing.T) {
		f := newRetryFixture(t, fail)
		p := f.build(t, etl.Retry{Budget: 30 * time.Millisecond, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
		err := p.Run(testutil.Context(t))
		var be *etl.RetryBudgetError
		if !errors.As(err, &be) || !errors.Is(err, injected) || be.Retries < 1 || be.Outage < 30*time.Millisecond ||
			be.Budget != 30*time.Millisecond || !etl.IsRetryable(err) {
			t.Fatalf("Run: %v (%+v), want a *RetryBudgetError wrapping the injected fault", err, be)
		}
		if n := len(f.ev.of(etl.EventSyncRetrying)); n != be.Retries {
			t.Errorf("%d retry events, error says %d retries", n, be.Retries)
		}
		if !strings.Contains(err.Error(), "retry budget is 30ms") {
			t.Errorf("error %q does not name the budget", err)
		}
	})
	t.Run("off", func(t *testing.T) {
		f := newRetryFixture(t, fail)
		p := f.build(t, etl.Retry{Budget: -1})
		err := p.Run(testutil.Context(t))
		var be *etl.RetryBudgetError
		if !errors.Is(err, injected) || errors.As(err, &be) {
			t.Fatalf("Run: %v, want the injected fault itself", err)
		}
		if n := len(f.ev.of(etl.EventSyncRetrying)); n != 0 || len(f.ev.of(etl.EventSyncStarted)) != 1 {
			t.Errorf("%d retries, %d attempts; want 0 and 1", n, len(f.ev.of(etl.EventSyncStarted)))
		}
	})
}

// markedErr marks itself permanent, as a connector's error may.
type markedErr struct{}

func (markedErr) Error() string   { return "table dropped" }
func (markedErr) Permanent() bool { return true }

// TestRetryStopsOnPermanent: an error IsPermanent reports (a connector's
// own mark) ends Run at once, without a retry.
func TestRetryStopsOnPermanent(t *testing.T) {
	f := newRetryFixture(t, func(_ int64, c sinktest.FakeDestCall) error {
		if c.Op == sinktest.FakeWrite {
			return markedErr{}
		}
		return nil
	})
	p := f.build(t, etl.Retry{Backoff: time.Millisecond})
	err := p.Run(testutil.Context(t))
	if !etl.IsPermanent(err) {
		t.Fatalf("Run: %v, want the permanent error", err)
	}
	if n := len(f.ev.of(etl.EventSyncRetrying)); n != 0 {
		t.Errorf("%d retries of a permanent error", n)
	}
}

// TestSyncRetries: Sync returns its first failure unless Retry.Sync is
// set; then it retries and its Result counts every attempt.
func TestSyncRetries(t *testing.T) {
	fail := func() func(int64, sinktest.FakeDestCall) error {
		var n atomic.Int64
		return func(_ int64, c sinktest.FakeDestCall) error {
			if c.Op == sinktest.FakePreCommit && c.Epoch >= 2 && n.Add(1) == 1 {
				return injected
			}
			return nil
		}
	}
	f := newRetryFixture(t, fail())
	if _, err := f.build(t, etl.Retry{Backoff: time.Millisecond}).Sync(testutil.Context(t)); !errors.Is(err, injected) {
		t.Fatalf("Sync without Retry.Sync: %v, want the injected fault", err)
	}
	f = newRetryFixture(t, fail())
	res, err := f.build(t, etl.Retry{Backoff: time.Millisecond, Sync: true}).Sync(testutil.Context(t))
	if err != nil {
		t.Fatalf("Sync with Retry.Sync: %v", err)
	}
	if res.Generation != 2 || res.Totals[faker.Orders].Written != retryRows || len(f.ev.of(etl.EventSyncRetrying)) != 1 {
		t.Errorf("result %+v, %d retries; want generation 2, every row, 1 retry", res, len(f.ev.of(etl.EventSyncRetrying)))
	}
	f.exact(t)
}

// TestSyncDoesNotRetrySteps: with Retry.Sync, a failed AfterSync step
// still ends the Sync at once with its *StepError.
func TestSyncDoesNotRetrySteps(t *testing.T) {
	f := newRetryFixture(t, nil)
	runs := 0
	p, err := etl.NewPipeline("retry").From(f.src).To(f.dst).Checkpoints(f.store).OnEvent(f.ev.on, 0).
		Retry(etl.Retry{Backoff: time.Millisecond, Sync: true}).
		AfterSync("check", func(context.Context, etl.Result) error { runs++; return injected }).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	_, err = p.Sync(testutil.Context(t))
	var se *etl.StepError
	if !errors.As(err, &se) || runs != 1 {
		t.Fatalf("Sync: %v after %d runs of the step, want its *StepError after 1", err, runs)
	}
	if n := len(f.ev.of(etl.EventSyncRetrying)); n != 0 {
		t.Errorf("%d retries of a failed step", n)
	}
}

// TestFencedRunStopsAtOnce: a Run that a newer attempt fences returns
// the fenced error at once, never retried, however generous its retry
// policy.
func TestFencedRunStopsAtOnce(t *testing.T) {
	f := newRetryFixture(t, nil)
	release := make(chan struct{})
	a, err := etl.NewPipeline("retry").From(testutil.HoldUntil(f.src, 1000, release)).To(f.dst).
		Checkpoints(f.store).BatchSize(256, 0).EpochEvery(time.Hour, 16<<10).OnEvent(f.ev.on, 0).
		Retry(etl.Retry{Backoff: time.Millisecond, Budget: time.Hour}).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	errA := make(chan error, 1)
	go func() { errA <- a.Run(context.Background()) }()
	testutil.Until(t, "A to commit an epoch", func() bool { return a.Status().Epochs > 0 })
	// B claims the pipeline and syncs it through; A, released, reads on
	// and finds B's claim at its next HEAD write.
	if _, err := f.build(t, etl.Retry{}).Sync(testutil.Context(t)); err != nil {
		t.Fatalf("B: %v", err)
	}
	close(release)
	err = testutil.Recv(t, "A to stop after B claimed the pipeline", errA)
	if !etl.IsFenced(err) || !etl.IsPermanent(err) {
		t.Fatalf("A: %v, want a fenced error", err)
	}
	for _, e := range f.ev.of(etl.EventSyncRetrying) {
		t.Errorf("retry after a fence: %+v", e)
	}
	if st := a.Status(); st.Phase != etl.PhaseFenced {
		t.Errorf("A's phase %s, want fenced", st.Phase)
	}
}

func attrPipeline(name string) attribute.KeyValue { return attribute.String("openetl.pipeline", name) }
func attrCause(cause string) attribute.KeyValue   { return attribute.String("openetl.cause", cause) }

// classifiedSource and classifiedDest call the injected error permanent,
// as a connector's Permanent does a refused password
// (source.Classifier, sink.Classifier).
type classifiedSource struct{ *faker.Source }

func (classifiedSource) Permanent(err error) bool { return errors.Is(err, injected) }

type classifiedDest struct{ *sinktest.FakeDestination }

func (classifiedDest) Permanent(err error) bool { return errors.Is(err, injected) }

// An error the source or the destination calls permanent ends Run at
// its first failure, with no retry: IsPermanent reports it, and the
// error is still the connector's for errors.Is. An error neither calls
// permanent is retried (TestRunRetriesTransientFailures).
func TestRunStopsOnClassifiedPermanentError(t *testing.T) {
	for _, by := range []string{"source", "destination", "destination, joined with a cancellation"} {
		t.Run(by, func(t *testing.T) {
			failure := injected
			if strings.Contains(by, "joined") {
				// A sibling the first failure stopped: the attempt's error
				// joins its cancellation, and is still permanent.
				failure = errors.Join(injected, context.Canceled)
			}
			f := newRetryFixture(t, func(_ int64, c sinktest.FakeDestCall) error {
				if c.Op == sinktest.FakePreCommit {
					return failure
				}
				return nil
			})
			var src source.Source = f.src
			var dst sink.Destination = f.dst
			if by == "source" {
				src = classifiedSource{f.src}
			} else {
				dst = classifiedDest{f.dst}
			}
			p, err := etl.NewPipeline("classified").From(src).To(dst).Checkpoints(f.store).BatchSize(256, 0).
				EpochEvery(100*time.Millisecond, 32<<10).Retry(etl.Retry{Backoff: time.Millisecond, MaxBackoff: time.Minute}).
				OnEvent(f.ev.on, 0).Build()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close(context.Background()) })
			done := make(chan error, 1)
			go func() { done <- p.Run(t.Context()) }()
			err = testutil.Recv(t, "Run to return", done)
			if !errors.Is(err, injected) || !etl.IsPermanent(err) || etl.IsRetryable(err) {
				t.Fatalf("Run: %v (permanent %v), want the injected error, permanent", err, etl.IsPermanent(err))
			}
			if n := len(f.ev.of(etl.EventSyncRetrying)); n != 0 {
				t.Errorf("%d retries of an error the %s calls permanent, want 0", n, by)
			}
		})
	}
}

package etl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// blockedSource is a fake source of 100 rows whose read of row 50
// closes started and waits for release (or its context).
func blockedSource() (src *sourcetest.FakeSource, started, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	src = sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{
		Streams: []sourcetest.FakeStream{{Name: "s", Rows: 100}},
		Control: func(ctx context.Context, c sourcetest.FakeSourceCall) error {
			if c.Op == sourcetest.FakeRead && c.Index == 50 {
				once.Do(func() { close(started) })
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}})
	return src, started, release
}

// blockedPipeline builds a pipeline over a fake source whose first read
// blocks until release is closed; started is closed when it blocks.
func blockedPipeline(t *testing.T, store checkpoint.Store, onEvent func(etl.Event)) (p *etl.Pipeline, started, release chan struct{}) {
	t.Helper()
	src, started, release := blockedSource()
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	b := etl.NewPipeline("life").From(src).To(dst).Checkpoints(store)
	if onEvent != nil {
		b = b.OnEvent(onEvent, 0)
	}
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return p, started, release
}

// A second Sync or Run on one *Pipeline while the first runs returns
// ErrBusy at once and fences nothing: the first commits.
func TestConcurrentSyncIsBusy(t *testing.T) {
	store := checkpoint.NewMem()
	p, started, release := blockedPipeline(t, store, nil)
	first := make(chan error, 1)
	go func() { _, err := p.Sync(context.Background()); first <- err }()
	<-started
	before, err := p.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sync(context.Background()); !errors.Is(err, etl.ErrBusy) || etl.IsFenced(err) {
		t.Fatalf("second Sync = %v, want ErrBusy (not fenced)", err)
	}
	if err := p.Run(context.Background()); !errors.Is(err, etl.ErrBusy) {
		t.Fatalf("Run beside a Sync = %v, want ErrBusy", err)
	}
	if !etl.IsRetryable(etl.ErrBusy) {
		t.Error("ErrBusy is not retryable")
	}
	after, err := p.Inspect(context.Background())
	if err != nil || after.Generation != before.Generation {
		t.Fatalf("the busy calls claimed: generation %d → %d (%v)", before.Generation, after.Generation, err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first Sync: %v", err)
	}
	res, err := p.Sync(context.Background())
	if err != nil || res.Generation != after.Generation+1 {
		t.Fatalf("Sync after the first returned = %+v, %v; want generation %d", res, err, after.Generation+1)
	}
}

// Close waits for the running attempt and for the delivery of every
// event, even from a callback slower than the attempt; later calls fail
// with ErrClosed.
func TestCloseDeliversEveryEvent(t *testing.T) {
	var mu sync.Mutex
	var kinds []etl.EventKind
	gate := make(chan struct{})
	p, started, release := blockedPipeline(t, checkpoint.NewMem(), func(e etl.Event) {
		<-gate // the callback lags behind the attempt
		mu.Lock()
		kinds = append(kinds, e.Kind)
		mu.Unlock()
	})
	done := make(chan error, 1)
	go func() { _, err := p.Sync(context.Background()); done <- err }()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The attempt returned, but no event has reached the callback: Close
	// must still be waiting.
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the events were delivered", err)
	default:
	}
	close(gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := fmt.Sprint(kinds)
	last := kinds[len(kinds)-1]
	mu.Unlock()
	if kinds[0] != etl.EventSyncStarted || last != etl.EventSyncSucceeded {
		t.Fatalf("events delivered before Close returned: %s; want sync.started … sync.succeeded", got)
	}
	if _, err := p.Sync(context.Background()); !errors.Is(err, etl.ErrClosed) || !etl.IsPermanent(err) {
		t.Fatalf("Sync after Close = %v, want ErrClosed (permanent)", err)
	}
}

// Close gives up when its context ends while an attempt still runs.
func TestCloseHonoursContext(t *testing.T) {
	p, started, release := blockedPipeline(t, checkpoint.NewMem(), nil)
	defer close(release)
	go func() { _, _ = p.Sync(context.Background()) }()
	<-started
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("host gave up")
	cancel(stop)
	if err := p.Close(ctx); !errors.Is(err, stop) {
		t.Fatalf("Close with an ended context = %v, want its cause", err)
	}
}

// Inspect reads the checkpoint without claiming: a running attempt is not
// fenced by it, and it reports the committed totals.
func TestInspectIsReadOnly(t *testing.T) {
	store := checkpoint.NewMem()
	p, started, release := blockedPipeline(t, store, nil)
	c, err := p.Inspect(context.Background())
	if err != nil || c.Generation != 0 || c.Epoch != 0 {
		t.Fatalf("Inspect before any sync = %+v, %v", c, err)
	}
	done := make(chan error, 1)
	go func() { _, err := p.Sync(context.Background()); done <- err }()
	<-started
	for range 3 {
		if _, err := p.Inspect(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Sync beside Inspect: %v", err)
	}
	c, err = p.Inspect(context.Background())
	if err != nil || c.Generation != 1 || c.Epoch == 0 || c.EpochGeneration != 1 || !c.Final ||
		c.Totals["s"].Written != 100 {
		t.Fatalf("Inspect after the sync = %+v, %v; want generation 1, a final epoch, 100 written", c, err)
	}
}

func TestErrorPredicates(t *testing.T) {
	fenced := fmt.Errorf("commit: %w", checkpoint.ErrFenced)
	// One sentinel for a fenced attempt, wherever it is noticed.
	if !errors.Is(fmt.Errorf("x: %w", sink.ErrFenced), checkpoint.ErrFenced) || !errors.Is(fenced, sink.ErrFenced) {
		t.Error("sink.ErrFenced and checkpoint.ErrFenced are different errors")
	}
	for _, tc := range []struct {
		err                  error
		permanent, retryable bool
	}{
		{nil, false, false},
		{context.Canceled, false, false},
		{fenced, true, false},
		// A fenced attempt's error joins its lanes' cancellation: still
		// permanent, or a retrying Run claims again and fences its twin.
		{errors.Join(fenced, context.Canceled), true, false},
		{errors.Join(errors.New("connection refused"), context.Canceled), false, false},
		{fmt.Errorf("x: %w", sink.ErrFenced), true, false},
		{fmt.Errorf("level: %w", delivery.ErrUnmet), true, false},
		{fmt.Errorf("open: %w", source.ErrPositionLost), true, false},
		{&etl.BuildError{Pipeline: "p", Err: errors.New("bad")}, true, false},
		{errors.Join(errors.New("io"), permanentErr{}), true, false},
		{errors.New("connection refused"), false, true},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), false, true},
	} {
		if got := etl.IsPermanent(tc.err); got != tc.permanent {
			t.Errorf("IsPermanent(%v) = %v", tc.err, got)
		}
		if got := etl.IsRetryable(tc.err); got != tc.retryable {
			t.Errorf("IsRetryable(%v) = %v", tc.err, got)
		}
	}
}

// discoverFails is a source whose Discover fails with err; it calls
// errors marked permanent so (source.Classifier).
type discoverFails struct {
	source.Source
	err error
}

func (s discoverFails) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{}, s.err
}
func (s discoverFails) Permanent(err error) bool { return errors.Is(err, errDenied) }

var errDenied = errors.New("password authentication failed")

// A Build whose only problem is a Discover that failed is retryable
// when the source does not call the failure permanent (the database was
// briefly away); permanent when it does, or when the configuration has
// another problem too.
func TestBuildErrorOfDiscover(t *testing.T) {
	fake := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Streams: []sourcetest.FakeStream{{Name: "s", Rows: 1}}})
	build := func(err error, streams ...string) error {
		dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
		b := etl.NewPipeline("p").From(discoverFails{fake, err}).To(dst).Checkpoints(checkpoint.NewMem())
		if len(streams) > 0 {
			b = b.Streams(streams...)
		}
		_, err = b.Build()
		var be *etl.BuildError
		if !errors.As(err, &be) {
			t.Fatalf("Build: %v, want a *BuildError", err)
		}
		return err
	}
	for _, tc := range []struct {
		what                 string
		err                  error
		permanent, retryable bool
	}{
		{"connection refused", errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), false, true},
		{"credentials refused", fmt.Errorf("connect: %w", errDenied), true, false},
		{"marked permanent", permanentErr{}, true, false},
		{"cancelled", context.Canceled, false, false},
	} {
		err := build(tc.err)
		if etl.IsPermanent(err) != tc.permanent || etl.IsRetryable(err) != tc.retryable {
			t.Errorf("%s: IsPermanent %v, IsRetryable %v, want %v, %v (%v)", tc.what, etl.IsPermanent(err), etl.IsRetryable(err), tc.permanent, tc.retryable, err)
		}
	}
	// Another problem beside it: the configuration is wrong whatever
	// Discover does.
	if err := build(errors.New("connection refused"), ""); !etl.IsPermanent(err) {
		t.Errorf("Build with an empty stream name and a failed Discover: IsPermanent false (%v)", err)
	}
}

type permanentErr struct{}

func (permanentErr) Error() string   { return "slot dropped" }
func (permanentErr) Permanent() bool { return true }

// Build refuses what it can see would fail later: a mode, policy or JSON
// options with no stream named, or naming a stream the source doesn't
// have (both silently ignored before, but for modes), a name the
// checkpoint store refuses (".lock", accepted by Build and refused at the
// first Sync).
func TestBuildValidatesWhatItSees(t *testing.T) {
	parts := func(name string) *etl.Builder {
		src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Streams: []sourcetest.FakeStream{{Name: "s", Rows: 1}}})
		dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
		return etl.NewPipeline(name).From(src).To(dst).Checkpoints(checkpoint.NewMem())
	}
	for _, tc := range []struct {
		b    *etl.Builder
		want string
	}{
		{parts("p").Mode(delivery.Merge), "write mode merge: no stream names"},
		{parts("p").SchemaPolicy(etl.PolicyFreeze), "schema policy \"freeze\": no stream names"},
		{parts("p").JSON(etl.JSONOptions{Timestamps: true}), "JSON options: no stream names"},
		{parts("p").Mode(delivery.Append, "t"), `write mode: stream "t" is not in the source's catalog`},
		{parts("p").SchemaPolicy(etl.PolicyFreeze, "t"), `schema policy: stream "t" is not in the source's catalog`},
		{parts("p").JSON(etl.JSONOptions{Timestamps: true}, "t"), `JSON options: stream "t" is not in the source's catalog`},
		{parts("orders.lock"), `".lock"`},
	} {
		_, err := tc.b.Build()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !etl.IsPermanent(err) {
			t.Errorf("Build = %v, want a permanent error saying %s", err, tc.want)
		}
	}
	if _, err := parts("orders.v2").Build(); err != nil {
		t.Errorf("Build of a valid name: %v", err)
	}
}

// Close delivers every event of a Run that ended fenced, the last one
// included, before it returns: a twin's Sync claims a newer generation
// while Run's attempt waits in a read, so its next checkpoint is fenced
// and Run returns at once (a fence is never retried); the callback lags
// behind, and Close waits for it.
func TestCloseDeliversTheEventsOfAFencedRun(t *testing.T) {
	store := checkpoint.NewMem()
	var mu sync.Mutex
	var kinds []etl.EventKind
	gate := make(chan struct{})
	src, started, release := blockedSource()
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	p, err := etl.NewPipeline("fenced").From(src).To(dst).Checkpoints(store).EpochEvery(10*time.Millisecond, 0).
		OnEvent(func(e etl.Event) {
			<-gate
			mu.Lock()
			kinds = append(kinds, e.Kind)
			mu.Unlock()
		}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	testutil.Recv(t, "Run's attempt to read", started)

	twinSrc := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Streams: []sourcetest.FakeStream{{Name: "s", Rows: 100}}})
	twin, err := etl.NewPipeline("fenced").From(twinSrc).To(dst).Checkpoints(store).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer twin.Close(context.Background())
	if _, err := twin.Sync(context.Background()); err != nil {
		t.Fatalf("the twin's Sync: %v", err)
	}
	close(release)
	if err := testutil.Recv(t, "Run to return", done); !etl.IsFenced(err) {
		t.Fatalf("Run after a twin claimed a newer generation: %v, want fenced", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the events were delivered", err)
	default:
	}
	close(gate)
	if err := testutil.Recv(t, "Close to return", closed); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kinds) == 0 || kinds[0] != etl.EventSyncStarted || kinds[len(kinds)-1] != etl.EventSyncFailed {
		t.Fatalf("events delivered before Close returned: %v; want sync.started … sync.failed", kinds)
	}
	if slices.Contains(kinds, etl.EventSyncRetrying) {
		t.Errorf("events %v: a fenced attempt was retried", kinds)
	}
}

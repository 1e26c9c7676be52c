package runner_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// eventWaiter collects events and lets a test wait for one of a kind.
type eventWaiter struct {
	mu     sync.Mutex
	events []runner.Event
	added  chan struct{}
}

func newEventWaiter() *eventWaiter { return &eventWaiter{added: make(chan struct{}, 1)} }

func (w *eventWaiter) on(e runner.Event) {
	w.mu.Lock()
	w.events = append(w.events, e)
	w.mu.Unlock()
	select {
	case w.added <- struct{}{}:
	default:
	}
}

// wait returns the n-th event (from 1) of kind, waiting for it until the
// test's deadline (testutil.Context).
func (w *eventWaiter) wait(t *testing.T, kind runner.EventKind, n int) runner.Event {
	t.Helper()
	deadline := testutil.Context(t).Done()
	for {
		w.mu.Lock()
		seen := 0
		for _, e := range w.events {
			if e.Kind == kind {
				if seen++; seen == n {
					w.mu.Unlock()
					return e
				}
			}
		}
		w.mu.Unlock()
		select {
		case <-w.added:
		case <-deadline:
			t.Fatalf("no %s event #%d before the test's deadline", kind, n)
		}
	}
}

func (w *eventWaiter) all() []runner.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]runner.Event(nil), w.events...)
}

func (w *eventWaiter) count(kind runner.EventKind) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// pausingSource has one stream "s0" and one split implementing
// source.PauseReporter: half-way through its records it reports itself paused,
// and waits for the test to let it resume.
type pausingSource struct {
	rows   int
	sp     *pausingSplit
	opened chan struct{}
}

func (s *pausingSource) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{Streams: []source.Stream{{Name: "s0", PrimaryKey: []string{"id"}}}}, nil
}

func (s *pausingSource) Replay() source.Replay { return source.ReplayExact }

func (s *pausingSource) Open(context.Context, []string, map[source.SplitID][]byte) ([]source.Split, error) {
	s.sp = &pausingSplit{rows: s.rows, resume: make(chan struct{}), resumed: make(chan struct{})}
	close(s.opened)
	return []source.Split{s.sp}, nil
}

type pausingSplit struct {
	rows    int
	mu      sync.Mutex
	paused  bool
	since   time.Time
	resume  chan struct{} // closed by the test: report not paused any more
	resumed chan struct{} // closed by the test: go on reading
}

func (sp *pausingSplit) ID() source.SplitID { return "p0" }

func (sp *pausingSplit) Paused() (bool, time.Time, bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.paused, sp.since, true
}

func (sp *pausingSplit) setPaused(p bool) {
	sp.mu.Lock()
	sp.paused = p
	if p {
		sp.since = time.Now()
	} else {
		sp.since = time.Time{}
	}
	sp.mu.Unlock()
}

func (sp *pausingSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	var st [8]byte
	for i := range sp.rows {
		if err := e.Record("s0", source.OpInsert, int64(i+1), []byte(strconv.Itoa(i)), []byte("ok")); err != nil {
			return err
		}
		if (i+1)%10 == 0 || i+1 == sp.rows {
			binary.BigEndian.PutUint64(st[:], uint64(i+1))
			if err := e.ResumePoint(st[:]); err != nil {
				return err
			}
		}
		if i+1 == sp.rows/2 {
			sp.setPaused(true)
			for _, ch := range []chan struct{}{sp.resume, sp.resumed} {
				select {
				case <-ch:
				case <-ctx.Done():
					return ctx.Err()
				}
				if ch == sp.resume {
					sp.setPaused(false)
				}
			}
		}
	}
	return nil
}

// TestPauseReporterEvents: a split that reports itself paused (as a Kafka
// partition does under backpressure) gets stream.paused, its status says
// paused since when it said, and it gets stream.resumed once it reports
// reading again.
func TestPauseReporterEvents(t *testing.T) {
	src := &pausingSource{rows: 200, opened: make(chan struct{})}
	ev := newEventWaiter()
	cfg := runner.Config{
		Name: "pause", Source: src, Destination: newMemDest(), Store: checkpoint.NewMem(),
		BatchRows: 16, EpochInterval: 5 * time.Millisecond, NewEngine: newFakeEngine, OnEvent: ev.on,
	}
	cfg.Monitor = runner.NewMonitor(cfg)
	done := make(chan error, 1)
	go func() { _, err := runner.Sync(context.Background(), cfg); done <- err }()

	paused := ev.wait(t, runner.EventStreamPaused, 1)
	<-src.opened
	_, since, _ := src.sp.Paused()
	if paused.Split != "p0" || paused.Stream != "s0" || paused.Generation != 1 || paused.Paused < 0 || paused.Pipeline != "pause" {
		t.Errorf("stream.paused %+v", paused)
	}
	st := cfg.Monitor.Status()
	if st.Paused != 1 || len(st.Splits) != 1 || !st.Splits[0].Paused || !st.Splits[0].PausedSince.Equal(since) ||
		len(st.Splits[0].Streams) != 1 || st.Splits[0].Streams[0] != "s0" {
		t.Errorf("status while paused: %+v", st)
	}
	if len(st.Splits) == 1 && len(st.Splits[0].Streams) == 1 {
		st.Splits[0].Streams[0] = "changed by the caller"
		if got := cfg.Monitor.Status().Splits[0].Streams[0]; got != "s0" {
			t.Errorf("Status shares a split's streams with the pipeline: %q", got)
		}
	}
	close(src.sp.resume)
	resumed := ev.wait(t, runner.EventStreamResumed, 1)
	if resumed.Split != "p0" || resumed.Stream != "s0" || resumed.Paused < paused.Paused {
		t.Errorf("stream.resumed %+v after stream.paused %+v", resumed, paused)
	}
	if st := cfg.Monitor.Status(); st.Paused != 0 || st.Splits[0].Paused || !st.Splits[0].PausedSince.IsZero() {
		t.Errorf("status after resuming: %+v", st)
	}
	close(src.sp.resumed)
	if err := testutil.Recv(t, "Sync to return", done); err != nil {
		t.Fatal(err)
	}
	ev.wait(t, runner.EventSyncSucceeded, 1)
	if n, m := ev.count(runner.EventStreamPaused), ev.count(runner.EventStreamResumed); n != 1 || m != 1 {
		t.Errorf("%d stream.paused, %d stream.resumed events; want 1 each", n, m)
	}
}

// gatedDest is a memDest whose writers' Write waits until gate is
// closed: a stuck destination.
type gatedDest struct {
	*memDest
	gate chan struct{}
}

func (d *gatedDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.memDest.Writer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &gatedWriter{Writer: w, gate: d.gate}, nil
}

type gatedWriter struct {
	sink.Writer
	gate chan struct{}
}

func (w *gatedWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	select {
	case <-w.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return w.Writer.Write(ctx, stream, rec)
}

// unknownPause wraps a source's splits in a split whose Paused says it
// can't tell, as a wrapper of a split without Paused does.
type unknownPause struct{ source.Source }

func (s unknownPause) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits, err := s.Source.Open(ctx, streams, resume)
	for i, sp := range splits {
		splits[i] = unknownPauseSplit{sp}
	}
	return splits, err
}

type unknownPauseSplit struct{ source.Split }

func (unknownPauseSplit) Paused() (bool, time.Time, bool) { return false, time.Time{}, false }

// TestRunnerReportsBackpressurePause: with a destination stuck in Write,
// the queues fill and the split (which doesn't implement
// source.PauseReporter, or whose Paused says it can't tell) waits on the
// runner: the runner reports it paused (event, status,
// openetl.splits.paused, full queues in openetl.queue.depth), then
// resumed once the destination moves, and counts the wait in
// openetl.backpressure.duration and SplitStatus.Backpressure. Also when
// the split placed a barrier before the queues filled ("barrier"): it
// then waits for the barrier's alignment, which the engine stage reaches
// only once the lane takes what is queued before it, so behind a stuck
// destination that wait is backpressure too.
func TestRunnerReportsBackpressurePause(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testBackpressurePause(t, false, false) })
	t.Run("unknown", func(t *testing.T) { testBackpressurePause(t, true, false) })
	t.Run("barrier", func(t *testing.T) { testBackpressurePause(t, false, true) })
}

// onMessage is a slog handler that calls do, once, when a record with
// message msg is logged: a test sequences on the runner's own logs.
type onMessage struct {
	msg  string
	once *sync.Once
	do   func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(h.do)
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }

func testBackpressurePause(t *testing.T, unknown, barrier bool) {
	f := newFixture(t, 1, 5000)
	dst := &gatedDest{memDest: f.dst, gate: make(chan struct{})}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ev := newEventWaiter()
	cfg := f.config(1)
	if unknown {
		cfg.Source = unknownPause{cfg.Source}
	}
	cfg.Name, cfg.Destination, cfg.OnEvent = "bp", dst, ev.on
	// No barrier on the clock: in the plain cases none before the
	// source's end, so the split waits on the full engine queue.
	cfg.EpochInterval = time.Hour
	if barrier {
		// The byte budget asks for a barrier once the split flushed its
		// 4th batch (64 records of 16: 246 bytes of keys and payloads);
		// the split waits at its resume point after record 77 until the
		// coordinator has logged the request, so the barrier is placed
		// at record 70, 77 or 84: behind 5 or 6 batches, which fill the
		// lane (one in the stuck Write, four queued) before the engine
		// stage reaches it. The split then waits for the alignment, with
		// the engine queue never full.
		cfg.EpochBytes = 200
		f.src.holdAt, f.src.hold = 77, make(chan struct{})
		cfg.Logger = slog.New(onMessage{msg: "barrier requested", once: new(sync.Once), do: func() { close(f.src.hold) }})
	}
	cfg.MeterProvider, cfg.TracerProvider = mp, tracenoop.NewTracerProvider()
	cfg.Monitor = runner.NewMonitor(cfg)
	done := make(chan error, 1)
	go func() { _, err := runner.Sync(context.Background(), cfg); done <- err }()

	paused := ev.wait(t, runner.EventStreamPaused, 1)
	if paused.Split != "s0" || paused.Stream != "s0" || paused.Paused < runner.PauseAfter {
		t.Errorf("stream.paused %+v", paused)
	}
	st := cfg.Monitor.Status()
	if st.Paused != 1 || !st.Splits[0].Paused || st.Splits[0].PausedSince.IsZero() || st.Splits[0].LagKnown {
		t.Errorf("status while the destination is stuck: %+v", st)
	}
	pipe := runner.AttrPipeline.String("bp")
	ms := collectMetrics(t, reader)
	if got := gaugeValue(t, ms["openetl.splits.paused"], attribute.NewSet(pipe)); got != 1 {
		t.Errorf("openetl.splits.paused = %d, want 1", got)
	}
	// The engine waits on the full lane queue, the split on the full
	// engine queue (capacity 4 each), or, behind its barrier, for the
	// barrier's alignment with the engine queue not full.
	switch got := gaugeValue(t, ms["openetl.queue.depth"], attribute.NewSet(pipe, runner.AttrQueue.String("engine"))); {
	case !barrier && got != 4:
		t.Errorf("openetl.queue.depth{queue=engine} = %d, want 4 (full)", got)
	case barrier && got > 1:
		t.Errorf("openetl.queue.depth{queue=engine} = %d, want 0 or 1: the split waits for its barrier's alignment", got)
	}
	if got := gaugeValue(t, ms["openetl.queue.depth"], attribute.NewSet(pipe, runner.AttrQueue.String("lane"), runner.AttrLane.Int(0))); got != 4 {
		t.Errorf("openetl.queue.depth{queue=lane,lane=0} = %d, want 4 (full)", got)
	}
	close(dst.gate)
	resumed := ev.wait(t, runner.EventStreamResumed, 1)
	if resumed.Split != "s0" || resumed.Paused < paused.Paused {
		t.Errorf("stream.resumed %+v after %+v", resumed, paused)
	}
	if err := testutil.Recv(t, "Sync to return", done); err != nil {
		t.Fatal(err)
	}
	st = cfg.Monitor.Status()
	if st.Splits[0].Backpressure < paused.Paused || st.Paused != 0 {
		t.Errorf("status after the sync: %+v (paused %v)", st, paused.Paused)
	}
	ms = collectMetrics(t, reader)
	bp, ok := ms["openetl.backpressure.duration"].Data.(metricdata.Sum[float64])
	if !ok || len(bp.DataPoints) != 1 || bp.DataPoints[0].Value < paused.Paused.Seconds() || !bp.IsMonotonic {
		t.Errorf("openetl.backpressure.duration %+v, want at least %v", ms["openetl.backpressure.duration"].Data, paused.Paused)
	}
	f.checkExactlyOnce(t)
}

func collectMetrics(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func gaugeValue(t *testing.T, m metricdata.Metrics, set attribute.Set) int64 {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("%s: %T, want an int64 gauge", m.Name, m.Data)
	}
	for _, dp := range g.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp.Value
		}
	}
	t.Fatalf("%s: no point with attributes %v", m.Name, set.Encoded(attribute.DefaultEncoder()))
	return 0
}

package runner_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// schemaEngine is the fake engine reporting, at each stream's first
// push, the schema outcomes an engine reports under each policy: a column
// added and one widened (evolve), one blocked (freeze) and one discarded
// (discard).
type schemaEngine struct {
	engine.Engine
	seen map[string]bool
}

func (e *schemaEngine) Push(b *engine.RawBatch, now time.Time) (engine.Output, error) {
	out, err := e.Engine.Push(b, now)
	if err == nil && !e.seen[b.Stream] {
		e.seen[b.Stream] = true
		out.SchemaChanges = []engine.SchemaChange{
			{Stream: b.Stream, Column: "a", Kind: engine.ChangeAdded, To: "int64"},
			{Stream: b.Stream, Column: "b", Kind: engine.ChangeWidened, From: "int64", To: "float64"},
			{Stream: b.Stream, Column: "c", Kind: engine.ChangeBlocked, To: "utf8"},
			{Stream: b.Stream, Column: "d", Kind: engine.ChangeDiscarded},
		}
	}
	return out, err
}

// TestSchemaEvents: the engine's schema outcomes become schema.changed
// (added, widened) and schema.blocked (blocked, discarded) events with
// the stream, column, types and the epoch they are committed with, and
// are logged at Info.
func TestSchemaEvents(t *testing.T) {
	f := newFixture(t, 2, 100)
	var logs syncBuffer
	ev := newEventWaiter()
	cfg := f.config(1)
	cfg.OnEvent = ev.on
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.NewEngine = func(c engine.Config) (engine.Engine, error) {
		e, err := newFakeEngine(c)
		return &schemaEngine{Engine: e, seen: map[string]bool{}}, err
	}
	res, err := syncWithin(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ev.wait(t, runner.EventSyncSucceeded, 1)
	got := map[string]runner.Event{}
	for _, e := range ev.all() {
		if e.Kind == runner.EventSchemaChanged || e.Kind == runner.EventSchemaBlocked {
			if e.Epoch < 1 || e.Epoch > res.Epoch || e.Generation != 1 || e.Pipeline != "p" {
				t.Errorf("%s: %+v (last epoch %d)", e.Kind, e, res.Epoch)
			}
			got[e.Stream+"."+e.Column] = e
		}
	}
	for _, s := range []string{"s0", "s1"} {
		for col, want := range map[string]struct {
			kind             runner.EventKind
			change, from, to string
		}{
			"a": {runner.EventSchemaChanged, "added", "", "int64"},
			"b": {runner.EventSchemaChanged, "widened", "int64", "float64"},
			"c": {runner.EventSchemaBlocked, "blocked", "", "utf8"},
			"d": {runner.EventSchemaBlocked, "discarded", "", ""},
		} {
			e, ok := got[s+"."+col]
			if !ok || e.Kind != want.kind || e.Change != want.change || e.From != want.from || e.To != want.to {
				t.Errorf("stream %s column %s: %+v, want %+v", s, col, e, want)
			}
		}
	}
	if len(got) != 8 {
		t.Errorf("%d schema events, want 8", len(got))
	}
	if n := strings.Count(logs.String(), `level=INFO msg="schema change"`); n != 8 {
		t.Errorf("%d schema changes logged at Info, want 8:\n%s", n, logs.String())
	}
}

// TestRecoveryEventsRetryLogsAndAttemptMetrics: an attempt whose
// destination Commit keeps failing logs each retry at Warn and ends with
// sync.failed (openetl.attempts{outcome=failed}); the next attempt finds
// HEAD's epoch not applied and says so with epoch.recovered — recoverable
// when the staged data is there (applied now), lost when it is gone
// (rewound). Each Commit of an epoch on lane 0, the recovery's included,
// is one openetl.commit span (a retry event per retry) and one
// openetl.commit.duration measurement.
func TestRecoveryEventsRetryLogsAndAttemptMetrics(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome sink.Outcome
	}{{"recoverable", sink.Recoverable}, {"lost", sink.Lost}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 1, 100)
			var logs syncBuffer
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer mp.Shutdown(context.Background())
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			defer tp.Shutdown(context.Background())
			ev := newEventWaiter()
			cfg := f.config(1)
			cfg.EpochInterval = time.Hour // one epoch
			cfg.CommitRetries = 2
			cfg.OnEvent = ev.on
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			cfg.MeterProvider, cfg.TracerProvider = mp, tp
			cfg.Monitor = runner.NewMonitor(cfg)
			f.dst.commitErr = errors.New("destination down")
			if _, err := syncWithin(t, cfg); err == nil {
				t.Fatal("sync with a failing destination succeeded")
			}
			failed := ev.wait(t, runner.EventSyncFailed, 1)
			if failed.Err == nil || !strings.Contains(failed.Err.Error(), "destination down") || failed.Generation != 1 {
				t.Errorf("sync.failed %+v", failed)
			}
			if n := strings.Count(logs.String(), `level=WARN msg="destination commit failed; retrying"`); n != cfg.CommitRetries {
				t.Errorf("%d retries logged at Warn, want %d:\n%s", n, cfg.CommitRetries, logs.String())
			}
			if !strings.Contains(logs.String(), `level=WARN msg="attempt failed"`) {
				t.Errorf("the failure is not logged at Warn:\n%s", logs.String())
			}

			f.dst.mu.Lock()
			f.dst.commitErr = nil
			if tc.outcome == sink.Lost {
				clear(f.dst.staged)
			}
			f.dst.mu.Unlock()
			if _, err := syncWithin(t, cfg); err != nil {
				t.Fatal(err)
			}
			ev.wait(t, runner.EventSyncSucceeded, 1)
			var rec []runner.Event
			for _, e := range ev.all() {
				if e.Kind == runner.EventEpochRecovered {
					rec = append(rec, e)
				}
			}
			if len(rec) != 1 || rec[0].Epoch != 1 || rec[0].Outcome != tc.outcome || rec[0].Generation != 2 {
				t.Errorf("epoch.recovered events %+v, want one for epoch 1, %v", rec, tc.outcome)
			}
			if tc.outcome == sink.Recoverable {
				f.checkExactlyOnce(t)
			}

			ms := collectMetrics(t, reader)
			pipe := runner.AttrPipeline.String("p")
			for outcome, want := range map[string]int64{"failed": 1, "succeeded": 1} {
				set := attribute.NewSet(pipe, runner.AttrOutcome.String(outcome))
				if got := sumValue(t, ms["openetl.attempts"], set); got != want {
					t.Errorf("openetl.attempts{outcome=%s} = %d, want %d", outcome, got, want)
				}
			}
			// Two Commits: the failing one, and the recovery's
			// (recoverable) or the epoch read again's (lost).
			var retries []int64
			commits := 0
			for _, s := range spans.Ended() {
				if s.Name() != "openetl.commit" {
					continue
				}
				commits++
				for _, e := range s.Events() {
					if e.Name == "retry" {
						for _, a := range e.Attributes {
							if a.Key == "try" {
								retries = append(retries, a.Value.AsInt64())
							}
						}
					}
				}
			}
			if commits != 2 || len(retries) != 2 || retries[0] != 1 || retries[1] != 2 {
				t.Errorf("%d openetl.commit spans, retry events with tries %v; want 2 spans and tries [1 2]", commits, retries)
			}
			h, _ := ms["openetl.commit.duration"].Data.(metricdata.Histogram[float64])
			var n uint64
			for _, dp := range h.DataPoints {
				n += dp.Count
			}
			if n != 2 {
				t.Errorf("openetl.commit.duration: %d measurements, want 2", n)
			}
		})
	}
}

// TestCancelledSyncStops: a Sync whose context is cancelled ends with
// sync.stopped carrying the context's error, status stopped, and
// openetl.attempts{outcome=stopped}.
func TestCancelledSyncStops(t *testing.T) {
	f := newFixture(t, 1, 1<<30)
	f.src.delay = 10 * time.Microsecond
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ev := newEventWaiter()
	cfg := f.config(1)
	cfg.OnEvent = ev.on
	cfg.MeterProvider, cfg.TracerProvider = mp, tracenoop.NewTracerProvider()
	cfg.Monitor = runner.NewMonitor(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := runner.Sync(ctx, cfg); done <- err }()
	ev.wait(t, runner.EventEpochCommitted, 1)
	cancel()
	if err := testutil.Recv(t, "the cancelled Sync to return", done); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Sync: %v", err)
	}
	stopped := ev.wait(t, runner.EventSyncStopped, 1)
	if !errors.Is(stopped.Err, context.Canceled) || !stopped.Bounded || stopped.Epoch < 1 {
		t.Errorf("sync.stopped %+v", stopped)
	}
	if n := ev.count(runner.EventSyncFailed) + ev.count(runner.EventSyncSucceeded); n != 0 {
		t.Errorf("%d other terminal events", n)
	}
	if st := cfg.Monitor.Status(); st.Phase != runner.PhaseStopped || st.LastError != "" {
		t.Errorf("status %+v", st)
	}
	ms := collectMetrics(t, reader)
	set := attribute.NewSet(runner.AttrPipeline.String("p"), runner.AttrOutcome.String("stopped"))
	if got := sumValue(t, ms["openetl.attempts"], set); got != 1 {
		t.Errorf("openetl.attempts{outcome=stopped} = %d", got)
	}
}

// lagSource wraps the fixture's source: its splits report a fixed lag.
type lagSource struct{ *fakeSource }

func (s lagSource) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	sps, err := s.fakeSource.Open(ctx, streams, resume)
	for i, sp := range sps {
		sps[i] = fixedLagSplit{sp}
	}
	return sps, err
}

type fixedLagSplit struct{ source.Split }

func (fixedLagSplit) Lag() (int64, string, time.Duration, bool) {
	return 42, "byte", 3 * time.Second, true
}

// TestLagMetrics: what splits report through source.LagReporter reaches
// openetl.job.lag (in the source's unit) and openetl.job.lag.age, per
// split, and the status's backlog and lag.
func TestLagMetrics(t *testing.T) {
	f := newFixture(t, 2, 100)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	cfg := f.config(1)
	cfg.Source = lagSource{f.src}
	cfg.MeterProvider, cfg.TracerProvider = mp, tracenoop.NewTracerProvider()
	cfg.Monitor = runner.NewMonitor(cfg)
	if _, err := syncWithin(t, cfg); err != nil {
		t.Fatal(err)
	}
	ms := collectMetrics(t, reader)
	if m := ms["openetl.job.lag"]; m.Unit != "1" || m.Description == "" {
		t.Errorf("openetl.job.lag: unit %q, description %q", m.Unit, m.Description)
	}
	if m := ms["openetl.job.lag.age"]; m.Unit != "s" || m.Description == "" {
		t.Errorf("openetl.job.lag.age: unit %q, description %q", m.Unit, m.Description)
	}
	pipe := runner.AttrPipeline.String("p")
	for _, split := range []string{"s0", "s1"} {
		sp := runner.AttrSplit.String(split)
		if got := gaugeValue(t, ms["openetl.job.lag"], attribute.NewSet(pipe, sp, runner.AttrLagUnit.String("byte"))); got != 42 {
			t.Errorf("openetl.job.lag{split=%s} = %d, want 42", split, got)
		}
		g, _ := ms["openetl.job.lag.age"].Data.(metricdata.Gauge[float64])
		set := attribute.NewSet(pipe, sp)
		found := false
		for _, dp := range g.DataPoints {
			if dp.Attributes.Equals(&set) {
				found = true
				if dp.Value != 3 {
					t.Errorf("openetl.job.lag.age{split=%s} = %v, want 3", split, dp.Value)
				}
			}
		}
		if !found {
			t.Errorf("openetl.job.lag.age has no point for split %s: %+v", split, g.DataPoints)
		}
	}
	st := cfg.Monitor.Status()
	if st.Backlog["byte"] != 84 || !st.LagKnown || st.Lag != 3*time.Second || len(st.Splits) != 2 {
		t.Errorf("status %+v", st)
	}
}

func sumValue(t *testing.T, m metricdata.Metrics, set attribute.Set) int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T, want an int64 sum", m.Name, m.Data)
	}
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp.Value
		}
	}
	return 0
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFirstEpochSooner: FirstEpoch places the first timed barrier that
// long after the start: with an hour between epochs, the first epoch
// commits well within the hour (in a bubble, on its fake clock; on the
// real clock none would come at all while the test waits).
func TestFirstEpochSooner(t *testing.T) {
	f := newFixture(t, 1, 1<<30)
	f.src.delay = 10 * time.Microsecond
	ev := newEventWaiter()
	cfg := f.config(1)
	cfg.OnEvent = ev.on
	cfg.EpochInterval, cfg.FirstEpoch = time.Hour, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { _, err := runner.Sync(ctx, cfg); done <- err }()
	if e := ev.wait(t, runner.EventEpochCommitted, 1); e.Epoch != 1 {
		t.Errorf("first epoch committed: %d", e.Epoch)
	}
	if took := time.Since(start); took >= cfg.EpochInterval {
		t.Errorf("first epoch committed %v after the start, want before the %v interval", took, cfg.EpochInterval)
	}
	cancel()
	testutil.Recv(t, "the cancelled Sync to return", done)
}

package runner_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
)

// reportingSource has one stream "s0" and one split that implements
// source.LagReporter and source.SnapshotReporter: it copies rows records as a
// snapshot, reporting an age of an hour until it is half-way, has been
// polled there and seen is closed, then none.
type reportingSource struct {
	rows int
	seen chan struct{}
	sp   *reportingSplit
}

func (s *reportingSource) Discover(context.Context) (source.Catalog, error) {
	return source.Catalog{Streams: []source.Stream{{Name: "s0", PrimaryKey: []string{"id"}}}}, nil
}

func (s *reportingSource) Replay() source.Replay { return source.ReplayExact }

func (s *reportingSource) Open(context.Context, []string, map[source.SplitID][]byte) ([]source.Split, error) {
	s.sp = &reportingSplit{rows: int64(s.rows), polledBehind: make(chan struct{}), seen: s.seen}
	return []source.Split{s.sp}, nil
}

type reportingSplit struct {
	rows         int64
	next         atomic.Int64
	caughtUp     atomic.Bool
	polls        atomic.Int64
	once         sync.Once
	polledBehind chan struct{} // closed at the first poll at half-way
	seen         chan struct{} // closed by the test
}

func (sp *reportingSplit) ID() source.SplitID { return "s0" }

func (sp *reportingSplit) Lag() (int64, string, time.Duration, bool) {
	sp.polls.Add(1)
	next := sp.next.Load()
	age := time.Duration(0)
	if !sp.caughtUp.Load() {
		age = time.Hour
		if next >= sp.rows/2 {
			sp.once.Do(func() { close(sp.polledBehind) })
		}
	}
	return sp.rows - next, "message", age, true
}

func (sp *reportingSplit) SnapshotProgress() (string, int64, int64, bool) {
	next := sp.next.Load()
	return "s0", next, sp.rows, next < sp.rows
}

func (sp *reportingSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	var st [8]byte
	for i := int64(0); i < sp.rows; i++ {
		if err := e.Record("s0", source.OpInsert, i+1, []byte(strconv.FormatInt(i, 10)), []byte("ok")); err != nil {
			return err
		}
		sp.next.Store(i + 1)
		if (i+1)%10 == 0 || i+1 == sp.rows {
			binary.BigEndian.PutUint64(st[:], uint64(i+1))
			if err := e.ResumePoint(st[:]); err != nil {
				return err
			}
		}
		if i+1 == sp.rows/2 {
			// At a resume point: the runner can place barriers and poll
			// while the split waits to be seen behind, and the test to
			// see a progress report of the copy under way.
			for _, ch := range []chan struct{}{sp.polledBehind, sp.seen} {
				select {
				case <-ch:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			sp.caughtUp.Store(true)
		}
	}
	return nil
}

// TestLagAndSnapshotReports checks that what splits report through
// source.LagReporter and source.SnapshotReporter reaches the progress callback, the
// status and the lag events.
func TestLagAndSnapshotReports(t *testing.T) {
	src := &reportingSource{rows: 1000, seen: make(chan struct{})}
	var mu sync.Mutex
	var events []runner.Event
	var progress []runner.Progress
	var seen sync.Once
	cfg := runner.Config{
		Name: "lag", Source: src, Destination: newMemDest(), Store: checkpoint.NewMem(),
		BatchRows: 16, EpochInterval: 5 * time.Millisecond, NewEngine: newFakeEngine,
		LagAlert: time.Minute,
		OnEvent: func(e runner.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		},
		OnProgress: func(p runner.Progress) {
			progress = append(progress, p)
			// A report made while the split is held half-way: a poll of
			// the copy under way reached the progress callback.
			if s := p.Streams["s0"]; s.Snapshotting && p.LagKnown {
				seen.Do(func() { close(src.seen) })
			}
		},
	}
	cfg.Monitor = runner.NewMonitor(cfg)
	res, err := syncWithin(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Streams["s0"].Written != 1000 {
		t.Fatalf("result %+v", res)
	}
	// The events are delivered on a goroutine of their own: Close
	// returns once every one published is.
	if err := cfg.Monitor.Close(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	if n := len(events); n == 0 || events[n-1].Kind != runner.EventSyncSucceeded {
		t.Fatalf("events after the sync's Close: %d, want sync.succeeded last", n)
	}
	var lagging, recovered int
	for _, e := range events {
		switch e.Kind {
		case runner.EventPipelineLagging:
			if recovered > 0 || e.Lag != time.Hour {
				t.Errorf("pipeline.lagging %+v after %d pipeline.recovered", e, recovered)
			}
			lagging++
		case runner.EventPipelineRecovered:
			if lagging == 0 || e.Lag != 0 {
				t.Errorf("pipeline.recovered %+v before pipeline.lagging", e)
			}
			recovered++
		}
	}
	if lagging != 1 || recovered != 1 {
		t.Fatalf("%d pipeline.lagging and %d pipeline.recovered events, want 1 each", lagging, recovered)
	}

	// Some progress report saw the copy under way; none saw more rows
	// done than estimated, or a backlog that disagrees with it.
	var during bool
	for _, p := range progress {
		s := p.Streams["s0"]
		if s.SnapshotDone > s.SnapshotEstimated || s.Snapshotting && s.SnapshotEstimated != 1000 {
			t.Errorf("progress %+v", s)
		}
		if s.Snapshotting && p.LagKnown {
			during = true
			// Lag is asked before SnapshotProgress, so the split may have
			// moved on in between, never back.
			if p.Backlog["message"] < 1000-s.SnapshotDone {
				t.Errorf("backlog %v with %d of 1000 rows copied", p.Backlog, s.SnapshotDone)
			}
		}
	}
	if !during {
		t.Errorf("no progress report during the copy (%d reports)", len(progress))
	}
	st := cfg.Monitor.Status()
	if len(st.Splits) != 1 || st.Splits[0].ID != "s0" || !st.Splits[0].LagKnown || st.Splits[0].Behind != 0 ||
		st.Splits[0].Unit != "message" || st.Splits[0].Snapshot || st.Backlog["message"] != 0 || !st.LagKnown || st.Lag != 0 {
		t.Errorf("status after the sync: %+v", st)
	}
	if ss := st.Streams["s0"]; ss.Snapshotting || ss.Committed.Written != 1000 || ss.Read != 1000 {
		t.Errorf("stream status after the sync: %+v", ss)
	}
}

// TestRunStopEvents cancels a Run after its first committed epoch: its
// events end with sync.stopped without an error, its status is stopped,
// and every epoch.committed came in order before it.
func TestRunStopEvents(t *testing.T) {
	f := newFixture(t, 2, 1_000_000)
	f.src.delay = 10 * time.Microsecond
	events := make(chan runner.Event, 10_000)
	cfg := f.config(2)
	cfg.OnEvent = func(e runner.Event) { events <- e }
	cfg.Monitor = runner.NewMonitor(cfg)
	runThenCancel(t, cfg, func() {
		testutil.Until(t, "an epoch committed", func() bool { return cfg.Monitor.Status().Epoch >= 1 })
	})
	var got []runner.Event
	for e := range events {
		got = append(got, e)
		if e.Kind == runner.EventSyncStopped || e.Kind == runner.EventSyncFailed || e.Kind == runner.EventSyncSucceeded {
			break
		}
	}
	last := got[len(got)-1]
	if got[0].Kind != runner.EventSyncStarted || got[0].Bounded || last.Kind != runner.EventSyncStopped || last.Err != nil {
		t.Fatalf("first %+v, last %+v", got[0], last)
	}
	var epochs uint64
	for _, e := range got {
		if e.Kind == runner.EventEpochCommitted {
			epochs++
			if e.Epoch != epochs {
				t.Fatalf("epoch.committed %d, want %d", e.Epoch, epochs)
			}
		}
	}
	st := cfg.Monitor.Status()
	if st.Phase != runner.PhaseStopped || st.Epoch != epochs || last.Epoch != epochs || st.LastError != "" || st.Bounded {
		t.Errorf("status %+v, last event %+v, %d epoch.committed events", st, last, epochs)
	}
}

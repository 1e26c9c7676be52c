package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// eventLog keeps a pipeline's events; wait returns them once the
// attempt's last event (sync.succeeded, sync.stopped or sync.failed) has
// arrived.
type eventLog struct {
	mu     sync.Mutex
	events []etl.Event
	ended  chan struct{}
}

func newEventLog() *eventLog { return &eventLog{ended: make(chan struct{}, 16)} }

func (l *eventLog) add(e etl.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	switch e.Kind {
	case etl.EventSyncSucceeded, etl.EventSyncStopped, etl.EventSyncFailed:
		l.ended <- struct{}{}
	}
}

// wait waits for the end of an attempt and returns the events so far,
// clearing them.
func (l *eventLog) wait(t *testing.T) []etl.Event {
	t.Helper()
	testutil.Recv(t, "the event that ends the attempt", l.ended)
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	return out
}

// TestSlotLostReported: a sync that starts over after its slot was
// dropped (PositionLostResnapshot) says so: a source.reset event naming the
// split and the cause, and a Warn line in the pipeline's log.
func TestSlotLostReported(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("lostrep"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl), fmt.Sprintf("INSERT INTO %s VALUES (1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, OnPositionLost: source.PositionLostResnapshot})
	events := newEventLog()
	h.onEvent = events.add
	var logs strings.Builder
	h.logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.wait(t) {
		if e.Kind == etl.EventSourceReset {
			t.Fatalf("a first sync reported a reset: %+v", e)
		}
	}
	execSQL(t, d, "SELECT pg_drop_replication_slot('"+slot+"')", fmt.Sprintf("INSERT INTO %s VALUES (2)", tbl))
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 2 {
		t.Fatalf("resnapshot sync: %+v, %v; want both rows read again", res.Streams[tbl], err)
	}
	var reset []etl.Event
	for _, e := range events.wait(t) {
		if e.Kind == etl.EventSourceReset {
			reset = append(reset, e)
		}
	}
	if len(reset) != 1 || reset[0].Split != "slot:"+slot || !errors.Is(reset[0].Err, postgres.ErrSlotMissing) ||
		!strings.Contains(reset[0].Detail, "new snapshot") || reset[0].Generation == 0 {
		t.Fatalf("reset events %+v, want one for split slot:%s with ErrSlotMissing", reset, slot)
	}
	if l := logs.String(); !strings.Contains(l, "kind=source.reset") || !strings.Contains(l, "slot:"+slot) {
		t.Errorf("the pipeline's log has no Warn line for the reset:\n%s", l)
	}
}

// failSnapshots wraps a source so that its snapshot splits fail at their
// first record: an attempt that dies while it copies, before any
// checkpoint.
type failSnapshots struct{ source.Source }

var errInjected = errors.New("injected: the snapshot failed")

func (s failSnapshots) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits, err := s.Source.Open(ctx, streams, resume)
	for i, sp := range splits {
		if strings.HasPrefix(string(sp.ID()), "snapshot:") {
			splits[i] = failingSplit{sp}
		}
	}
	return splits, err
}

type failingSplit struct{ source.Split }

func (sp failingSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	return sp.Split.Read(ctx, failingEmitter{e}, bounded)
}

type failingEmitter struct{ source.Emitter }

func (failingEmitter) Record(string, source.Op, int64, []byte, []byte) error { return errInjected }

// TestResnapshotFailsBeforeCheckpoint: with PositionLostResnapshot, a
// re-snapshot that fails before its first checkpoint leaves a new slot
// behind while the checkpoint still holds the old slot's position; the
// next sync starts over again (instead of failing for good on a slot
// "past the resume position") and reads every row.
func TestResnapshotFailsBeforeCheckpoint(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("refail"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl), fmt.Sprintf("INSERT INTO %s VALUES (1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, OnPositionLost: source.PositionLostResnapshot})
	events := newEventLog()
	h.onEvent = events.add
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	events.wait(t)
	execSQL(t, d, "SELECT pg_drop_replication_slot('"+slot+"')", fmt.Sprintf("INSERT INTO %s VALUES (2)", tbl))

	h.wrap = func(src source.Source) source.Source { return failSnapshots{src} }
	if _, err := h.sync(); !errors.Is(err, errInjected) {
		t.Fatalf("the failing re-snapshot: %v, want the injected failure", err)
	}
	events.wait(t)
	if n := queryOne(t, d, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+slot+"'"); n != "1" {
		t.Fatalf("%s slots named %s after the failed re-snapshot, want the new one", n, slot)
	}

	h.wrap = nil
	res, err := h.sync()
	if err != nil || res.Streams[tbl].Read != 2 {
		t.Fatalf("the sync after a failed re-snapshot: %+v, %v; want both rows read again", res.Streams[tbl], err)
	}
	var reset []etl.Event
	for _, e := range events.wait(t) {
		if e.Kind == etl.EventSourceReset {
			reset = append(reset, e)
		}
	}
	var se *postgres.SlotError
	if len(reset) != 1 || !errors.As(reset[0].Err, &se) || !errors.Is(reset[0].Err, postgres.ErrSlotAdvanced) {
		t.Fatalf("reset events %+v, want one whose cause is the new slot past the resume position (ErrSlotAdvanced)", reset)
	}
	if got := h.rows(tbl); !slices.Contains(got, "insert 1") || !slices.Contains(got, "insert 2") {
		t.Errorf("rows %q, want both", got)
	}
}

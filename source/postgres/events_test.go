package postgres_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl"
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
	select {
	case <-l.ended:
	case <-time.After(time.Minute):
		t.Fatal("no event ended the attempt")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	return out
}

// TestSlotLostReported: a sync that starts over after its slot was
// dropped (SlotLostResnapshot) says so: a source.reset event naming the
// split and the cause, and a Warn line in the pipeline's log.
func TestSlotLostReported(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("lostrep"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl), fmt.Sprintf("INSERT INTO %s VALUES (1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, OnSlotLost: postgres.SlotLostResnapshot})
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

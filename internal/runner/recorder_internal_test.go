package runner

import (
	"fmt"
	"testing"
	"time"
)

// TestRecorderBounds checks what a Recorder keeps: the latest
// RecentEvents events in order without epoch.committed, at most one lag
// sample a second and LagSamples of them, LagSplits splits a sample, and
// quarantine reasons only of committed epochs, an attempt's uncommitted
// ones dropped when the next begins.
func TestRecorderBounds(t *testing.T) {
	var nilRec *Recorder
	nilRec.event(Event{Kind: EventSyncStarted}) // no Recorder: nothing, no panic
	nilRec.sample(time.Now(), nil)
	nilRec.quarantined(1, "s", 1, func(int) string { return "r" })
	nilRec.committed(1)
	nilRec.begin()

	m := &Monitor{name: "p", now: time.Now}
	if m.rec.Load() != nil {
		t.Fatal("a new Monitor records")
	}
	r := m.Watch()
	if m.Watch() != r {
		t.Fatal("Watch made a second Recorder")
	}
	for i := range RecentEvents + 7 {
		m.emit(Event{Kind: EventSchemaChanged, Epoch: uint64(i)})
		m.emit(Event{Kind: EventEpochCommitted, Epoch: uint64(i)})
	}
	events, _, _ := r.Recent()
	if len(events) != RecentEvents || events[0].Epoch != 7 || events[len(events)-1].Epoch != RecentEvents+6 {
		t.Fatalf("kept %d events, epochs %d to %d; want the last %d, 7 to %d", len(events), events[0].Epoch,
			events[len(events)-1].Epoch, RecentEvents, RecentEvents+6)
	}
	for _, e := range events {
		if e.Kind != EventSchemaChanged || e.Pipeline != "p" || e.Time.IsZero() {
			t.Fatalf("kept %+v; want only schema.changed, named and timed", e)
		}
	}

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ss []SplitStatus
	for i := range LagSplits + 3 {
		ss = append(ss, SplitStatus{ID: fmt.Sprint(i), LagKnown: i != 0, Age: time.Duration(i) * time.Second})
	}
	for i := range LagSamples + 10 {
		at := t0.Add(time.Duration(i) * time.Second)
		r.sample(at, ss)
		r.sample(at.Add(500*time.Millisecond), ss[:2]) // replaces the sample just taken
	}
	_, lag, _ := r.Recent()
	if len(lag) != LagSamples || !lag[0].Time.Equal(t0.Add(10*time.Second)) ||
		!lag[len(lag)-1].Time.Equal(t0.Add((LagSamples+9)*time.Second)) {
		t.Fatalf("kept %d samples from %v to %v; want %d, one a second, the latest", len(lag), lag[0].Time,
			lag[len(lag)-1].Time, LagSamples)
	}
	if len(lag[0].Splits) != 1 || lag[0].Splits[0].ID != "1" {
		t.Errorf("a replaced sample holds %+v; want the later poll's one split reporting a lag", lag[0].Splits)
	}
	r.sample(t0.Add(2*time.Hour), ss[:1]) // no split with a lag: no sample
	if _, lag, _ = r.Recent(); !lag[len(lag)-1].Time.Equal(t0.Add((LagSamples + 9) * time.Second)) {
		t.Errorf("a poll without lags left a sample at %v", lag[len(lag)-1].Time)
	}
	r.sample(t0.Add(time.Hour), ss)
	if _, lag, _ = r.Recent(); len(lag[len(lag)-1].Splits) != LagSplits || lag[len(lag)-1].Splits[0].ID != "1" {
		t.Errorf("a sample holds %d splits from %q; want %d, the first reporting one", len(lag[len(lag)-1].Splits),
			lag[len(lag)-1].Splits[0].ID, LagSplits)
	}

	reason := func(rs ...string) func(int) string { return func(i int) string { return rs[i] } }
	r.quarantined(3, "orders", 3, reason("parse_error", "too_large", "parse_error"))
	r.quarantined(4, "orders", 1, reason("parse_error"))
	r.committed(3)
	if _, _, got := r.Recent(); fmt.Sprint(got) != "[{orders parse_error 2} {orders too_large 1}]" {
		t.Errorf("after epoch 3 committed: %v; want its reasons only, most first", got)
	}
	m.begin(&attemptState{}) // epoch 4 never committed
	r.quarantined(4, "customers", 1, reason("type_conflict"))
	r.committed(4)
	if _, _, got := r.Recent(); fmt.Sprint(got) != "[{customers type_conflict 1} {orders parse_error 2} {orders too_large 1}]" {
		t.Errorf("after a new attempt committed its epoch 4: %v; want the old attempt's epoch 4 left out", got)
	}
}

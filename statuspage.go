package etl

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/internal/statuspage"
)

// StatusPage returns an http.Handler that serves a status page for the
// pipelines, for a person to look at, the way net/http/pprof serves
// profiles: nothing is served until the host mounts it, on a subtree of
// its choosing and behind whatever authentication it uses:
//
//	mux.Handle("/debug/etl/", etl.StatusPage(orders, customers))
//
// Under that subtree it answers GET (and HEAD):
//
//   - .../status.json: the figures of every pipeline as one JSON
//     document, for scripts (docs/status-page.md describes it): each
//     pipeline's Status (phase, generation, last committed epoch and its
//     age, per-stream counts and snapshot progress, splits with lag,
//     pauses and backpressure, the last error), its latest events, the
//     quarantine reasons of its committed epochs with counts, and its lag
//     over the last minutes.
//   - .../events: the same document once a second as Server-Sent Events,
//     for as long as the client stays connected; after the first, each
//     has "delta": true and only the lag samples from the last one sent
//     on (the same time: a newer value of that sample).
//   - any other path: one self-contained HTML page (no external assets:
//     it works offline) that shows the same figures, with a chart of
//     each split's lag, and keeps them current through .../events
//     (polling status.json where EventSource fails).
//
// Other methods get 405. The handler is read-only: nothing on the page
// or in the JSON changes a pipeline. It shows names, counts, times and
// messages, never row data, and passes every message through
// RedactSecrets, as the logger does.
//
// Costs: StatusPage starts recording, for each pipeline, its latest
// events (RecentEvents), a lag sample per poll of its splits (about once
// a second; LagSamples kept) and the reasons of the records its
// committed epochs quarantine; that is per event, per poll and per batch
// with quarantined records, never per record read, and bounded in
// memory. A pipeline not passed to StatusPage records nothing. Figures
// are computed per request, so a page nobody has open costs nothing
// more. Quarantine reasons count from the first StatusPage call on the
// pipeline in this process. Nil pipelines are left out. The handler is
// safe for concurrent use; pass the same pipeline to several handlers if
// you like.
func StatusPage(pipelines ...*Pipeline) http.Handler {
	h := &statusPage{interval: time.Second}
	for _, p := range pipelines {
		if p != nil {
			h.pipelines = append(h.pipelines, p)
			h.recs = append(h.recs, p.cfg.Monitor.Watch())
		}
	}
	return h
}

// The bounds of what StatusPage keeps per pipeline.
const (
	// RecentEvents is how many of a pipeline's latest events the status
	// page shows (epoch.committed events are left out: the page shows
	// the last epoch).
	RecentEvents = runner.RecentEvents
	// LagSamples is how many lag samples the status page keeps per
	// pipeline, at most one a second: five minutes of history.
	LagSamples = runner.LagSamples
	// LagSplits is how many splits each lag sample holds: the first
	// splits, in the order the source opened them, that report a lag.
	LagSplits = runner.LagSplits
)

type statusPage struct {
	interval  time.Duration
	pipelines []*Pipeline
	recs      []*runner.Recorder
}

// scriptHash is the Content-Security-Policy hash of the page's one
// script: the page may run it and nothing else, and load nothing.
var scriptHash = func() string {
	sum := sha256.Sum256([]byte(statuspage.Script))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

func (h *statusPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	p := r.URL.Path
	switch {
	case p == "status.json" || strings.HasSuffix(p, "/status.json"):
		hd.Set("Content-Type", "application/json")
		b, _ := json.Marshal(h.doc(time.Now(), nil))
		if r.Method == http.MethodGet {
			_, _ = w.Write(append(b, '\n'))
		}
	case p == "events" || strings.HasSuffix(p, "/events"):
		h.serveEvents(w, r)
	default:
		hd.Set("Content-Type", "text/html; charset=utf-8")
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src "+scriptHash+
			"; style-src 'unsafe-inline'; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte(statuspage.HTML))
		}
	}
}

// serveEvents sends the document every interval until the client goes.
func (h *statusPage) serveEvents(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("X-Accel-Buffering", "no")
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	t := time.NewTicker(h.interval)
	defer t.Stop()
	var buf bytes.Buffer
	buf.WriteString("retry: 2000\n")
	// After the first document, each holds only the lag samples from the
	// last one sent on (a full history is ~370 KB at 16 splits).
	var since []time.Time
	for {
		d := h.doc(time.Now(), since)
		if since == nil {
			since = make([]time.Time, len(d.Pipelines))
		}
		for i, pp := range d.Pipelines {
			if n := len(pp.LagHistory); n > 0 {
				since[i] = pp.LagHistory[n-1].Time
			}
		}
		b, _ := json.Marshal(d)
		buf.WriteString("data: ")
		buf.Write(b) // JSON without newlines: one data line
		buf.WriteString("\n\n")
		if _, err := w.Write(buf.Bytes()); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		buf.Reset()
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// The JSON document; docs/status-page.md describes its fields.
type pageDoc struct {
	Time      time.Time      `json:"time"`
	Delta     bool           `json:"delta,omitempty"`
	Pipelines []pagePipeline `json:"pipelines"`
}

type pagePipeline struct {
	Name          string           `json:"name"`
	Phase         Phase            `json:"phase"`
	Bounded       bool             `json:"bounded"`
	Generation    uint64           `json:"generation"`
	Started       time.Time        `json:"started,omitzero"`
	Ended         time.Time        `json:"ended,omitzero"`
	Epoch         uint64           `json:"epoch"`
	EpochTime     time.Time        `json:"epoch_time,omitzero"`
	EpochAge      *float64         `json:"epoch_age_seconds"`
	Epochs        int              `json:"epochs"`
	Read          int64            `json:"read"`
	Step          string           `json:"step,omitempty"`
	Streams       []pageStream     `json:"streams"`
	Splits        []pageSplit      `json:"splits"`
	Paused        int              `json:"paused"`
	Lag           *float64         `json:"lag_seconds"`
	Backlog       map[string]int64 `json:"backlog"`
	LastError     string           `json:"last_error,omitempty"`
	LastErrorTime time.Time        `json:"last_error_time,omitzero"`
	Retries       int              `json:"retries"`
	EventsDropped int64            `json:"events_dropped"`
	Events        []pageEvent      `json:"events"`
	Quarantine    []pageReason     `json:"quarantine"`
	LagHistory    []pageLagSample  `json:"lag_history"`
}

type pageStream struct {
	Name      string            `json:"name"`
	Read      int64             `json:"read"`
	Committed checkpoint.Counts `json:"committed"`
	Totals    checkpoint.Counts `json:"totals"`
	Snapshot  *pageSnapshot     `json:"snapshot,omitempty"`
}

type pageSnapshot struct {
	Stream    string `json:"stream,omitempty"`
	Done      int64  `json:"done"`
	Estimated int64  `json:"estimated"`
}

type pageSplit struct {
	ID           string        `json:"id"`
	Streams      []string      `json:"streams"`
	Lag          *pageLag      `json:"lag,omitempty"`
	Snapshot     *pageSnapshot `json:"snapshot,omitempty"`
	Paused       bool          `json:"paused"`
	PausedSince  time.Time     `json:"paused_since,omitzero"`
	Backpressure float64       `json:"backpressure_seconds"`
}

type pageLag struct {
	ID     string   `json:"id,omitempty"`
	Behind int64    `json:"behind"`
	Unit   string   `json:"unit"`
	Age    *float64 `json:"age_seconds"`
}

type pageEvent struct {
	Time       time.Time `json:"time"`
	Kind       EventKind `json:"kind"`
	Generation uint64    `json:"generation,omitempty"`
	Epoch      uint64    `json:"epoch,omitempty"`
	Stream     string    `json:"stream,omitempty"`
	Split      string    `json:"split,omitempty"`
	Column     string    `json:"column,omitempty"`
	Change     string    `json:"change,omitempty"`
	From       string    `json:"from,omitempty"`
	To         string    `json:"to,omitempty"`
	Rows       int64     `json:"rows,omitempty"`
	Path       string    `json:"path,omitempty"`
	Lag        float64   `json:"lag_seconds,omitempty"`
	Paused     float64   `json:"paused_seconds,omitempty"`
	Outcome    string    `json:"outcome,omitempty"`
	Step       string    `json:"step,omitempty"`
	Took       float64   `json:"took_seconds,omitempty"`
	Retry      int       `json:"retry,omitempty"`
	Wait       float64   `json:"wait_seconds,omitempty"`
	Cause      string    `json:"cause,omitempty"`
	Detail     string    `json:"detail,omitempty"`
	Error      string    `json:"error,omitempty"`
}

type pageReason struct {
	Stream string `json:"stream"`
	Reason string `json:"reason"`
	Rows   int64  `json:"rows"`
}

type pageLagSample struct {
	Time   time.Time `json:"time"`
	Splits []pageLag `json:"splits"`
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func secondsPtr(d time.Duration) *float64 { s := d.Seconds(); return &s }

// doc makes the document; with since (by pipeline), a delta whose lag
// histories start at the sample of that time.
func (h *statusPage) doc(now time.Time, since []time.Time) pageDoc {
	d := pageDoc{Time: now.UTC(), Delta: since != nil, Pipelines: make([]pagePipeline, len(h.pipelines))}
	for i, p := range h.pipelines {
		var from time.Time
		if since != nil {
			from = since[i]
		}
		d.Pipelines[i] = pipelineDoc(p.Status(), h.recs[i], now, from)
	}
	return d
}

func pipelineDoc(st Status, rec *runner.Recorder, now, lagFrom time.Time) pagePipeline {
	pp := pagePipeline{Name: st.Pipeline, Phase: st.Phase, Bounded: st.Bounded, Generation: uint64(st.Generation),
		Started: st.Started, Ended: st.Ended, Epoch: st.Epoch, EpochTime: st.EpochTime, Epochs: st.Epochs,
		Read: st.Read, Step: st.Step, Paused: st.Paused, Backlog: st.Backlog,
		LastError: RedactSecrets(st.LastError), LastErrorTime: st.LastErrorTime, Retries: st.Retries, EventsDropped: st.EventsDropped,
		Streams: []pageStream{}, Splits: []pageSplit{}, Events: []pageEvent{}, Quarantine: []pageReason{},
		LagHistory: []pageLagSample{}}
	if pp.Backlog == nil {
		pp.Backlog = map[string]int64{}
	}
	if !st.EpochTime.IsZero() {
		pp.EpochAge = secondsPtr(max(now.Sub(st.EpochTime), 0))
	}
	if st.LagKnown {
		pp.Lag = secondsPtr(st.Lag)
	}
	names := make([]string, 0, len(st.Streams))
	for name := range st.Streams {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		s := st.Streams[name]
		ps := pageStream{Name: name, Read: s.Read, Committed: s.Committed, Totals: s.Totals}
		if s.Snapshotting {
			ps.Snapshot = &pageSnapshot{Done: s.SnapshotDone, Estimated: s.SnapshotEstimated}
		}
		pp.Streams = append(pp.Streams, ps)
	}
	for _, sp := range st.Splits {
		ps := pageSplit{ID: sp.ID, Streams: sp.Streams, Paused: sp.Paused, PausedSince: sp.PausedSince,
			Backpressure: seconds(sp.Backpressure)}
		if ps.Streams == nil {
			ps.Streams = []string{}
		}
		if sp.LagKnown {
			ps.Lag = lagDoc("", sp.Behind, sp.Unit, sp.Age)
		}
		if sp.Snapshot {
			ps.Snapshot = &pageSnapshot{Stream: sp.Stream, Done: sp.Done, Estimated: sp.Estimated}
		}
		pp.Splits = append(pp.Splits, ps)
	}
	events, lag, reasons := rec.Recent()
	for _, e := range events {
		pp.Events = append(pp.Events, eventDoc(eventOf(e)))
	}
	for _, r := range reasons {
		pp.Quarantine = append(pp.Quarantine, pageReason{Stream: r.Stream, Reason: RedactSecrets(r.Reason), Rows: r.Rows})
	}
	for _, s := range lag {
		if s.Time.Before(lagFrom) {
			continue
		}
		ls := pageLagSample{Time: s.Time.UTC(), Splits: make([]pageLag, len(s.Splits))}
		for j, sp := range s.Splits {
			ls.Splits[j] = *lagDoc(sp.ID, sp.Behind, sp.Unit, sp.Age)
		}
		pp.LagHistory = append(pp.LagHistory, ls)
	}
	return pp
}

func lagDoc(id string, behind int64, unit string, age time.Duration) *pageLag {
	l := &pageLag{ID: id, Behind: behind, Unit: unit}
	if age >= 0 {
		l.Age = secondsPtr(age)
	}
	return l
}

func eventDoc(e Event) pageEvent {
	pe := pageEvent{Time: e.Time.UTC(), Kind: e.Kind, Generation: uint64(e.Generation), Epoch: e.Epoch,
		Stream: e.Stream, Split: e.Split, Column: e.Column, Change: e.Change, From: e.From, To: e.To, Rows: e.Rows,
		Path: e.Path, Lag: seconds(e.Lag), Paused: seconds(e.Paused), Step: e.Step, Took: seconds(e.Took),
		Retry: e.Retry, Wait: seconds(e.Wait), Cause: e.Cause, Detail: RedactSecrets(e.Detail)}
	if e.Kind == EventEpochRecovered {
		pe.Outcome = e.Outcome.String()
	}
	if e.Err != nil {
		pe.Error = RedactSecrets(e.Err.Error())
	}
	return pe
}

package etl_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

var updateScreenshot = flag.Bool("update", false, "rewrite docs/status-page.png with the status page test's screenshot")

// progressSource is a faker source whose splits say how far they are, as
// a real source's do: the customers splits copy a snapshot
// (source.SnapshotReporter: records emitted of the split's share), the
// orders splits are behind the end (source.LagReporter: records not
// emitted yet, and the time they take at the faker's rate).
type progressSource struct {
	*faker.Source
}

func (s progressSource) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits, err := s.Source.Open(ctx, streams, resume)
	cfg := s.Config()
	for i, sp := range splits {
		share := cfg.Rows / int64(cfg.SplitsPerStream)
		splits[i] = &progressSplit{Split: sp, share: share, rate: cfg.Rate,
			snapshot: strings.HasPrefix(string(sp.ID()), faker.Customers+"/")}
	}
	return splits, err
}

type progressSplit struct {
	source.Split
	share    int64
	rate     float64
	snapshot bool
	emitted  atomic.Int64
}

func (sp *progressSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	return sp.Split.Read(ctx, countingEmitter{e, &sp.emitted}, bounded)
}

func (sp *progressSplit) Lag() (int64, string, time.Duration, bool) {
	if sp.snapshot {
		return 0, "", 0, false
	}
	behind := max(sp.share-sp.emitted.Load(), 0)
	return behind, "message", time.Duration(float64(behind) / sp.rate * float64(time.Second)), true
}

func (sp *progressSplit) SnapshotProgress() (string, int64, int64, bool) {
	n := sp.emitted.Load()
	return faker.Customers, n, sp.share, sp.snapshot && n < sp.share
}

type countingEmitter struct {
	source.Emitter
	n *atomic.Int64
}

func (e countingEmitter) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	e.n.Add(1)
	return e.Emitter.Record(stream, op, seq, key, payload)
}

// pageFigures is what the page shows of one pipeline, read from its DOM
// as a person reads it (numbers with their thousands separators
// removed).
type pageFigures struct {
	Name, Phase, Generation, Epoch, EpochAge, Epochs, Read, LastError string
	Streams                                                           map[string]map[string]string
	Splits                                                            map[string]map[string]string
	Events                                                            []string
	Reasons                                                           map[string]string
	Samples                                                           int
	Lines                                                             int
}

const readPage = `[...document.querySelectorAll('section.pipeline')].map(function (s) {
	var f = function (name) { var e = s.querySelector('.facts [data-field="' + name + '"]'); return e ? e.textContent : null; };
	var rows = function (sel, key) {
		var m = {};
		s.querySelectorAll(sel).forEach(function (tr) {
			var c = {};
			tr.querySelectorAll('[data-field]').forEach(function (td) { c[td.dataset.field] = td.textContent; });
			m[tr.getAttribute(key)] = c;
		});
		return m;
	};
	var reasons = {};
	s.querySelectorAll('tr[data-reason]').forEach(function (tr) { reasons[tr.dataset.reason] = tr.querySelector('[data-field=rows]').textContent; });
	var chart = s.querySelector('[data-field="lag-chart"]');
	var err = s.querySelector('[data-field="last-error"]');
	return {Name: s.dataset.name, Phase: s.querySelector('[data-field=phase]').textContent, Generation: f('generation'),
		Epoch: f('epoch'), EpochAge: f('epoch-age'), Epochs: f('epochs'), Read: f('read'), LastError: err ? err.textContent : '',
		Streams: rows('tr[data-stream]', 'data-stream'), Splits: rows('tr[data-split]', 'data-split'),
		Events: [...s.querySelectorAll('li[data-kind]')].map(function (li) { return li.dataset.kind; }), Reasons: reasons,
		Samples: chart ? +chart.dataset.samples : 0,
		Lines: chart ? [...chart.querySelectorAll('polyline')].filter(function (l) { return l.getAttribute('points').split(' ').length > 1; }).length : 0};
})`

func num(t *testing.T, what, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Fatalf("the page shows %s as %q: not a number", what, s)
	}
	return n
}

func readFigures(t *testing.T, b *testutil.Browser) []pageFigures {
	t.Helper()
	var figs []pageFigures
	if err := b.Eval(readPage, &figs); err != nil {
		t.Fatal(err)
	}
	return figs
}

// TestStatusPageBrowser loads the status page in headless Chromium (from
// Debian's package, installed by scripts/chromium.sh when missing)
// against two running faker → Parquet pipelines: "orders", which runs
// on, and "billing", which a second copy (not on the page) fences. It
// waits for the page's live updates to show orders' epoch and counts
// advance, with its splits' lag charted and its snapshot's progress,
// and billing fenced, with the error and the event; saves a screenshot
// (docs/status-page.png with -update); then stops orders and checks
// that the page's figures are Status's, to the record, and that the page
// loaded nothing but its own three URLs.
func TestStatusPageBrowser(t *testing.T) {
	b := testutil.StartBrowser(t, 1280, 900)
	newPipeline := func(name string, rows int64, rate float64, store checkpoint.Store) *etl.Pipeline {
		t.Helper()
		fk, err := faker.New(faker.Config{Seed: 9, Rows: rows, Rate: rate, SplitsPerStream: 2, MalformedShare: 0.005})
		if err != nil {
			t.Fatal(err)
		}
		dst, err := parquet.New(parquet.Config{Bucket: memblob.OpenBucket(nil)})
		if err != nil {
			t.Fatal(err)
		}
		p, err := etl.NewPipeline(name).From(progressSource{fk}).To(dst).Checkpoints(store).
			EpochEvery(400*time.Millisecond, 0).BatchSize(200, 0).Build()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mem := func() checkpoint.Store {
		s, err := checkpoint.Open(context.Background(), "mem://")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	orders := newPipeline("orders", 40_000, 700, mem())
	billingStore := mem()
	billing := newPipeline("billing", 1_000_000, 300, billingStore)
	takeover := newPipeline("billing", 1_000_000, 300, billingStore)

	mux := http.NewServeMux()
	mux.Handle("/debug/etl/", etl.StatusPage(orders, billing))
	srv := httptest.NewServer(mux)
	// The page's event stream stays open until its client goes: Close
	// alone would wait for it.
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	run := func(p *etl.Pipeline) (stop func() error) {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(rctx) }()
		return sync.OnceValue(func() error { rcancel(); return <-done })
	}
	stopOrders := run(orders)
	stopBilling := run(billing)
	defer stopOrders()
	defer stopBilling()

	if err := b.Navigate(srv.URL + "/debug/etl/"); err != nil {
		t.Fatal(err)
	}
	wait := func(what, cond string) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if err := b.WaitFor(wctx, cond); err != nil {
			t.Fatalf("waiting for the page to show %s: %v\nthe page: %+v", what, err, readFigures(t, b))
		}
	}
	const section = `document.querySelector('section.pipeline[data-name="%s"]')`
	field := func(name, f string) string {
		return fmt.Sprintf(section+`.querySelector('[data-field="%s"]').textContent`, name, f)
	}
	wait("both pipelines running, billing past its first epoch", fmt.Sprintf(`%s == "running" && %s == "running" && +%s > 0 && +%s > 0`,
		field("orders", "phase"), field("billing", "phase"), field("orders", "epoch"), field("billing", "epoch")))

	// A second copy of billing claims it: the page's billing is fenced.
	stopTakeover := run(takeover)
	defer stopTakeover()
	wait("billing fenced", fmt.Sprintf(`%s == "fenced" && %s.querySelector('li[data-kind="pipeline.fenced"]')`,
		field("billing", "phase"), fmt.Sprintf(section, "billing")))

	// Live updates: orders' epoch and written count move on the page
	// without a reload.
	first := readFigures(t, b)[0]
	e1 := num(t, "orders' epoch", first.Epoch)
	w1 := num(t, "orders' written", first.Streams[faker.Orders]["written"])
	wait("orders' epoch and counts advance", fmt.Sprintf(`+%s > %d && +%s.querySelector('tr[data-stream="orders"] [data-field=written]').textContent.replace(/,/g, "") > %d`,
		field("orders", "epoch"), e1, fmt.Sprintf(section, "orders"), w1))
	wait("ten seconds of orders' lag charted, a line per orders split", fmt.Sprintf(
		`+%s.querySelector('[data-field="lag-chart"]').dataset.samples >= 10 && %s.querySelectorAll('[data-field="lag-chart"] polyline').length == 2`,
		fmt.Sprintf(section, "orders"), fmt.Sprintf(section, "orders")))

	shot := filepath.Join(t.TempDir(), "status-page.png")
	if *updateScreenshot {
		shot = filepath.Join("docs", "status-page.png")
	}
	if err := b.Screenshot(shot, 1280); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)

	live := readFigures(t, b)
	if len(live) != 2 || live[0].Name != "orders" || live[1].Name != "billing" {
		t.Fatalf("the page shows %+v; want orders, then billing", live)
	}
	o, bl := live[0], live[1]
	for _, id := range []string{"customers/0", "customers/1"} {
		if !strings.Contains(o.Splits[id]["snapshot"], "%") {
			t.Errorf("orders split %s: snapshot %q; want a progress bar (it copies a snapshot)", id, o.Splits[id]["snapshot"])
		}
	}
	for _, id := range []string{"orders/0", "orders/1"} {
		if !strings.HasSuffix(o.Splits[id]["behind"], " message") || o.Splits[id]["lag"] == "–" {
			t.Errorf("orders split %s: lag %q, behind %q; want both", id, o.Splits[id]["lag"], o.Splits[id]["behind"])
		}
	}
	if !strings.Contains(o.Streams[faker.Customers]["snapshot"], "%") {
		t.Errorf("orders' stream customers: snapshot %q; want its progress", o.Streams[faker.Customers]["snapshot"])
	}
	bst := billing.Status()
	if bst.Phase != etl.PhaseFenced || bl.Phase != "fenced" || num(t, "billing's generation", bl.Generation) != int64(bst.Generation) ||
		num(t, "billing's epoch", bl.Epoch) != int64(bst.Epoch) {
		t.Errorf("billing: the page shows %s, gen %s, epoch %s; Status %s, gen %d, epoch %d", bl.Phase, bl.Generation, bl.Epoch,
			bst.Phase, bst.Generation, bst.Epoch)
	}
	if !strings.Contains(bl.LastError, "fenced") || !strings.Contains(bl.LastError, bst.LastError) {
		t.Errorf("billing's last error on the page: %q; want Status's %q", bl.LastError, bst.LastError)
	}
	if tk := takeover.Status(); tk.Generation <= bst.Generation || tk.Phase != etl.PhaseRunning {
		t.Errorf("the second copy of billing: %s, gen %d; want running at a generation above %d", tk.Phase, tk.Generation, bst.Generation)
	}

	// Stop orders: once the page shows it stopped, every figure it shows
	// is Status's.
	if err := stopOrders(); err != nil {
		t.Fatalf("orders' Run: %v", err)
	}
	st := orders.Status()
	wait("orders stopped", fmt.Sprintf(`%s == "stopped"`, field("orders", "phase")))
	o = readFigures(t, b)[0]
	if st.Phase != etl.PhaseStopped || num(t, "epoch", o.Epoch) != int64(st.Epoch) ||
		num(t, "generation", o.Generation) != int64(st.Generation) || num(t, "epochs", o.Epochs) != int64(st.Epochs) ||
		num(t, "read", o.Read) != st.Read {
		t.Errorf("orders, stopped: the page shows epoch %s, gen %s, %s epochs, %s read; Status %s: epoch %d, gen %d, %d epochs, %d read",
			o.Epoch, o.Generation, o.Epochs, o.Read, st.Phase, st.Epoch, st.Generation, st.Epochs, st.Read)
	}
	if len(o.Streams) != len(st.Streams) {
		t.Errorf("the page shows streams %v; Status %d", o.Streams, len(st.Streams))
	}
	var quarantined int64
	for name, s := range st.Streams {
		row := o.Streams[name]
		if num(t, name+" read", row["read"]) != s.Read || num(t, name+" written", row["written"]) != s.Totals.Written ||
			num(t, name+" quarantined", row["quarantined"]) != s.Totals.Quarantined || num(t, name+" held", row["held"]) != s.Totals.Held {
			t.Errorf("stream %s: the page shows %v; Status read %d, totals %+v", name, row, s.Read, s.Totals)
		}
		var reasons int64
		for k, v := range o.Reasons {
			if strings.HasPrefix(k, name+"/") {
				reasons += num(t, "reason "+k, v)
			}
		}
		if reasons != s.Totals.Quarantined {
			t.Errorf("stream %s: the page's quarantine reasons %v count %d; Status %d quarantined", name, o.Reasons, reasons, s.Totals.Quarantined)
		}
		quarantined += s.Totals.Quarantined
	}
	if st.Epochs < 3 || quarantined == 0 || st.Read == 0 {
		t.Errorf("orders committed %d epochs, quarantined %d of %d read: too little to show anything", st.Epochs, quarantined, st.Read)
	}
	if !strings.Contains(strings.Join(o.Events, " "), string(etl.EventSyncStopped)) {
		t.Errorf("orders' events on the page: %v; want sync.stopped", o.Events)
	}

	// Self-contained: the page, its event stream, nothing else.
	var loaded []string
	if err := b.Eval(`performance.getEntriesByType('resource').map(function (e) { return e.name; }).concat([location.href])`, &loaded); err != nil {
		t.Fatal(err)
	}
	for _, u := range loaded {
		if !strings.HasPrefix(u, srv.URL+"/debug/etl/") {
			t.Errorf("the page loaded %s: it must load nothing from elsewhere", u)
		}
	}
	if err := stopTakeover(); err != nil {
		t.Errorf("billing's second copy: %v", err)
	}
	if err := stopBilling(); !errors.Is(err, checkpoint.ErrFenced) {
		t.Errorf("billing's first copy: %v; want it fenced", err)
	}
}

// TestStatusPageEventsDelta reads the event stream of a running pipeline
// whose splits report lag: the first document is whole, each later one
// is a delta whose lag history starts at the last sample sent before
// and which, merged, grows about one sample a second.
func TestStatusPageEventsDelta(t *testing.T) {
	fk, err := faker.New(faker.Config{Seed: 4, Rows: 1_000_000, Rate: 200, SplitsPerStream: 1})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := parquet.New(parquet.Config{Bucket: memblob.OpenBucket(nil)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("delta").From(progressSource{fk}).To(dst).Checkpoints(store).
		EpochEvery(300*time.Millisecond, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(etl.StatusPage(p))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	res, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<24)
	var merged []time.Time
	for n := 0; n < 6 && sc.Scan(); {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var d struct {
			Delta     bool `json:"delta"`
			Pipelines []struct {
				LagHistory []struct {
					Time time.Time `json:"time"`
				} `json:"lag_history"`
			} `json:"pipelines"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil || len(d.Pipelines) != 1 {
			t.Fatalf("event %d: %v", n, err)
		}
		if d.Delta != (n > 0) {
			t.Fatalf("event %d: delta %v; want only the first whole", n, d.Delta)
		}
		h := d.Pipelines[0].LagHistory
		if n > 0 && len(merged) > 0 && len(h) > 0 {
			if h[0].Time.Before(merged[len(merged)-1]) {
				t.Fatalf("event %d: lag samples %v after %v: want the last one sent on", n, h, merged[len(merged)-1])
			}
			if h[0].Time.Equal(merged[len(merged)-1]) {
				merged = merged[:len(merged)-1]
			}
		}
		for _, s := range h {
			merged = append(merged, s.Time)
		}
		n++
	}
	for i := 1; i < len(merged); i++ {
		if !merged[i].After(merged[i-1]) {
			t.Fatalf("merged lag samples %v: want each later than the one before", merged)
		}
	}
	if len(merged) < 3 {
		t.Errorf("six documents, a second apart, merged into %d lag samples; want one a second", len(merged))
	}
}

package etl_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// The faker's counts at 1000 rows per stream and a 1% malformed share
// (the same as Example's).
const fakerRows = 1000

var fakerWant = map[string]checkpoint.Counts{
	"customers": {Read: 1000, Written: 994, Quarantined: 6},
	"orders":    {Read: 1000, Written: 993, Quarantined: 7},
}

type telemetry struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	t.Cleanup(func() {
		_ = tel.mp.Shutdown(context.Background())
		_ = tel.tp.Shutdown(context.Background())
	})
	return tel
}

func (tel *telemetry) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
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

type fakerFixture struct {
	src    *faker.Source
	dst    *parquet.Destination
	store  checkpoint.Store
	bucket interface{ Close() error }
}

func newFaker(t *testing.T, cfg faker.Config) *fakerFixture {
	t.Helper()
	src, err := faker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bucket := memblob.OpenBucket(nil)
	t.Cleanup(func() { bucket.Close() })
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	return &fakerFixture{src: src, dst: dst, store: checkpoint.NewMem(), bucket: bucket}
}

func (f *fakerFixture) builder(name string) *etl.Builder {
	// Small batches and a small byte budget: several batches and epochs.
	return etl.NewPipeline(name).From(f.src).To(f.dst).Checkpoints(f.store).
		BatchSize(128, 0).EpochEvery(time.Hour, 64<<10)
}

func attrs(kv ...attribute.KeyValue) attribute.Set { return attribute.NewSet(kv...) }

func sumPoint(t *testing.T, m metricdata.Metrics, set attribute.Set) int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: data %T, want an int64 sum", m.Name, m.Data)
	}
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp.Value
		}
	}
	t.Fatalf("%s: no point with attributes %v; have %v", m.Name, set.Encoded(attribute.DefaultEncoder()), s.DataPoints)
	return 0
}

func histCount(t *testing.T, m metricdata.Metrics, set attribute.Set) uint64 {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: data %T, want a float64 histogram", m.Name, m.Data)
	}
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp.Count
		}
	}
	t.Fatalf("%s: no point with attributes %v", m.Name, set.Encoded(attribute.DefaultEncoder()))
	return 0
}

// TestMetricsAndSpansAfterFakerSync checks the metrics' names, units,
// attributes and values, and the spans' tree, after a sync with known
// counts.
func TestMetricsAndSpansAfterFakerSync(t *testing.T) {
	tel := newTelemetry(t)
	f := newFaker(t, faker.Config{Rows: fakerRows, MalformedShare: 0.01})
	p, err := f.builder("orders").Lanes(2).Telemetry(tel.mp, tel.tp).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Epochs < 2 {
		t.Fatalf("%d epochs; the test wants several", res.Epochs)
	}
	ms := tel.collect(t)

	units := map[string]string{
		"openetl.rows.read": "{row}", "openetl.bytes.read": "By", "openetl.bytes.written": "By",
		"openetl.rows.written": "{row}", "openetl.rows.quarantined": "{row}", "openetl.rows.held": "{value}",
		"openetl.epochs.committed": "{epoch}", "openetl.attempts": "{attempt}",
		"openetl.epoch.duration": "s", "openetl.checkpoint.duration": "s", "openetl.commit.duration": "s",
		"openetl.precommit.duration": "s", "openetl.engine.batch.duration": "s",
		"openetl.pipeline.freshness": "s", "openetl.backpressure.duration": "s", "openetl.events.dropped": "{event}",
	}
	for name, unit := range units {
		m, ok := ms[name]
		if !ok {
			t.Errorf("metric %s missing", name)
			continue
		}
		if m.Unit != unit {
			t.Errorf("metric %s: unit %q, want %q", name, m.Unit, unit)
		}
		if m.Description == "" {
			t.Errorf("metric %s: no description", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	pipe := etl.AttrPipeline.String("orders")
	dest := etl.AttrDestination.String("parquet")
	for stream, want := range fakerWant {
		st := etl.AttrStream.String(stream)
		var wantBytes int64
		var buf []byte
		for i := range int64(fakerRows) {
			_, _, key, payload := f.src.Generate(stream, i, buf)
			wantBytes += int64(len(key) + len(payload))
			buf = key[:0]
		}
		checks := []struct {
			metric string
			set    attribute.Set
			want   int64
		}{
			{"openetl.rows.read", attrs(pipe, st), want.Read},
			{"openetl.bytes.read", attrs(pipe, st), wantBytes},
			{"openetl.rows.written", attrs(pipe, st, dest), want.Written},
			{"openetl.rows.quarantined", attrs(pipe, st), want.Quarantined},
			{"openetl.rows.held", attrs(pipe, st), 0},
		}
		for _, c := range checks {
			if got := sumPoint(t, ms[c.metric], c.set); got != c.want {
				t.Errorf("%s{stream=%s} = %d, want %d", c.metric, stream, got, c.want)
			}
		}
		if got := sumPoint(t, ms["openetl.bytes.written"], attrs(pipe, st, dest)); got <= 0 {
			t.Errorf("openetl.bytes.written{stream=%s} = %d", stream, got)
		}
		if n := histCount(t, ms["openetl.engine.batch.duration"], attrs(pipe, st)); n < fakerRows/128 {
			t.Errorf("engine batches of %s: %d, want at least %d", stream, n, fakerRows/128)
		}
	}
	epochs := int64(res.Epochs)
	if got := sumPoint(t, ms["openetl.epochs.committed"], attrs(pipe)); got != epochs {
		t.Errorf("openetl.epochs.committed = %d, want %d", got, epochs)
	}
	if got := sumPoint(t, ms["openetl.attempts"], attrs(pipe, etl.AttrOutcome.String("succeeded"))); got != 1 {
		t.Errorf("openetl.attempts{outcome=succeeded} = %d, want 1", got)
	}
	for _, h := range []struct {
		name string
		set  attribute.Set
	}{
		{"openetl.epoch.duration", attrs(pipe)},
		{"openetl.checkpoint.duration", attrs(pipe)},
		{"openetl.commit.duration", attrs(pipe, dest)},
		{"openetl.precommit.duration", attrs(pipe, etl.AttrLane.Int(0), dest)},
		{"openetl.precommit.duration", attrs(pipe, etl.AttrLane.Int(1), dest)},
	} {
		if got := histCount(t, ms[h.name], h.set); got != uint64(epochs) {
			t.Errorf("%s%v: %d measurements, want one per epoch (%d)", h.name, h.set.Encoded(attribute.DefaultEncoder()), got, epochs)
		}
	}
	if got := sumPoint(t, ms["openetl.events.dropped"], attrs(pipe)); got != 0 {
		t.Errorf("openetl.events.dropped = %d", got)
	}
	if g, ok := ms["openetl.pipeline.freshness"].Data.(metricdata.Gauge[float64]); !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value < 0 {
		t.Errorf("openetl.pipeline.freshness: %+v", ms["openetl.pipeline.freshness"].Data)
	}

	// Spans: one sync, with a recovery and one span per epoch under it;
	// each epoch has its checkpoint commit, destination commit and a
	// PreCommit per lane.
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range tel.spans.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	if len(byName["openetl.sync"]) != 1 || len(byName["openetl.recover"]) != 1 {
		t.Fatalf("spans: %d sync, %d recover; want 1 each", len(byName["openetl.sync"]), len(byName["openetl.recover"]))
	}
	syncSpan := byName["openetl.sync"][0]
	sattrs := attribute.NewSet(syncSpan.Attributes()...)
	for k, want := range map[attribute.Key]attribute.Value{
		etl.AttrPipeline: attribute.StringValue("orders"), etl.AttrGeneration: attribute.Int64Value(1),
		etl.AttrEpoch: attribute.Int64Value(int64(res.Epoch)), "openetl.epochs": attribute.IntValue(res.Epochs),
		"openetl.rows.read": attribute.Int64Value(2000), "openetl.rows.written": attribute.Int64Value(994 + 993),
		etl.AttrOutcome: attribute.StringValue("succeeded"),
	} {
		if got, _ := sattrs.Value(k); got != want {
			t.Errorf("sync span %s = %v, want %v", k, got.Emit(), want.Emit())
		}
	}
	if byName["openetl.recover"][0].Parent().SpanID() != syncSpan.SpanContext().SpanID() {
		t.Error("recover span is not the sync span's child")
	}
	epochSpans := map[int64]sdktrace.ReadOnlySpan{}
	for _, s := range byName["openetl.epoch"] {
		if s.Parent().SpanID() != syncSpan.SpanContext().SpanID() {
			t.Errorf("epoch span %v is not the sync span's child", s.Attributes())
		}
		a := attribute.NewSet(s.Attributes()...)
		e, _ := a.Value(etl.AttrEpoch)
		epochSpans[e.AsInt64()] = s
	}
	if len(epochSpans) != res.Epochs {
		t.Fatalf("%d epoch spans, want %d", len(epochSpans), res.Epochs)
	}
	var epochRows int64
	for _, s := range epochSpans {
		a := attribute.NewSet(s.Attributes()...)
		v, _ := a.Value("openetl.rows.read")
		epochRows += v.AsInt64()
	}
	if epochRows != 2000 {
		t.Errorf("epoch spans count %d rows read, want 2000", epochRows)
	}
	for name, per := range map[string]int{"openetl.checkpoint.commit": 1, "openetl.commit": 1, "openetl.precommit": 2} {
		if len(byName[name]) != per*res.Epochs {
			t.Errorf("%d %s spans, want %d", len(byName[name]), name, per*res.Epochs)
		}
		for _, s := range byName[name] {
			a := attribute.NewSet(s.Attributes()...)
			e, _ := a.Value(etl.AttrEpoch)
			parent, ok := epochSpans[e.AsInt64()]
			if !ok || s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("%s span of epoch %d is not its epoch span's child", name, e.AsInt64())
			}
		}
	}
}

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []etl.Event
	ended  chan struct{}
	// block, when set, holds every callback until it is closed.
	block chan struct{}
}

func newRecorder() *recorder { return &recorder{ended: make(chan struct{}, 16)} }

func (r *recorder) on(e etl.Event) {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	switch e.Kind {
	case etl.EventSyncSucceeded, etl.EventSyncFailed, etl.EventSyncStopped:
		r.ended <- struct{}{}
	}
}

func (r *recorder) wait(t *testing.T) []etl.Event {
	t.Helper()
	testutil.Recv(t, "a terminal event", r.ended)
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func kinds(es []etl.Event) []etl.EventKind {
	out := make([]etl.EventKind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

func TestEventsOfSyncs(t *testing.T) {
	f := newFaker(t, faker.Config{Rows: fakerRows, MalformedShare: 0.01})
	rec := newRecorder()
	p, err := f.builder("orders").OnEvent(rec.on, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	es := rec.wait(t)
	ks := kinds(es)
	if ks[0] != etl.EventSyncStarted || ks[len(ks)-1] != etl.EventSyncSucceeded {
		t.Fatalf("events %v: want sync.started first and sync.succeeded last", ks)
	}
	if e := es[0]; e.Generation != 1 || e.Epoch != 0 || !e.Bounded || e.Pipeline != "orders" || e.Time.IsZero() {
		t.Errorf("sync.started: %+v", e)
	}
	last := es[len(es)-1]
	if last.Generation != 1 || last.Epoch != res.Epoch || last.Epochs != res.Epochs || last.Err != nil {
		t.Errorf("sync.succeeded: %+v, result %+v", last, res)
	}
	for s, want := range fakerWant {
		if last.Streams[s] != want {
			t.Errorf("sync.succeeded: stream %s %+v, want %+v", s, last.Streams[s], want)
		}
	}
	// Epochs committed in order; each stream's quarantine.added events sum
	// to its quarantined records, each before its epoch's epoch.committed;
	// schema changes name columns of the faker's streams.
	var nextEpoch uint64 = 1
	quarantined := map[string]int64{}
	committed := map[string]checkpoint.Counts{}
	pendingQ := map[uint64]int64{}
	columns := map[string]map[string]bool{}
	for _, e := range es[1 : len(es)-1] {
		if e.Generation != 1 {
			t.Errorf("%s: generation %d", e.Kind, e.Generation)
		}
		switch e.Kind {
		case etl.EventEpochCommitted:
			if e.Epoch != nextEpoch {
				t.Fatalf("epoch.committed %d, want %d (events %v)", e.Epoch, nextEpoch, ks)
			}
			var q int64
			for s, c := range e.Streams {
				committed[s] = addCounts(committed[s], c)
				q += c.Quarantined
			}
			if pendingQ[e.Epoch] != q {
				t.Errorf("epoch %d: quarantine.added events for %d records, its counts %d", e.Epoch, pendingQ[e.Epoch], q)
			}
			nextEpoch++
		case etl.EventQuarantineAdded:
			if e.Epoch != nextEpoch || e.Rows <= 0 || e.Path != "_quarantine/"+e.Stream+"/"+pad(e.Epoch)+".jsonl" {
				t.Errorf("quarantine.added: %+v (next epoch %d)", e, nextEpoch)
			}
			quarantined[e.Stream] += e.Rows
			pendingQ[e.Epoch] += e.Rows
		case etl.EventSchemaChanged:
			if columns[e.Stream] == nil {
				columns[e.Stream] = map[string]bool{}
			}
			columns[e.Stream][e.Column] = true
			if e.Change != "added" && e.Change != "widened" || e.To == "" {
				t.Errorf("schema.changed: %+v", e)
			}
		default:
			t.Errorf("unexpected %s in a plain sync", e.Kind)
		}
	}
	if nextEpoch-1 != uint64(res.Epochs) {
		t.Errorf("%d epoch.committed events, %d epochs", nextEpoch-1, res.Epochs)
	}
	for s, want := range fakerWant {
		if quarantined[s] != want.Quarantined || committed[s] != want {
			t.Errorf("stream %s: quarantine.added rows %d, epoch.committed counts %+v; want %+v", s, quarantined[s], committed[s], want)
		}
	}
	if !columns["orders"]["customer_id"] && !columns["orders"]["id"] {
		t.Errorf("schema.changed columns of orders: %v", columns["orders"])
	}

	// A second sync resumes after the first one's epoch and, with
	// nothing new, commits nothing.
	if _, err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	es = rec.wait(t)
	if ks := kinds(es); len(ks) != 2 || ks[0] != etl.EventSyncStarted || ks[1] != etl.EventSyncSucceeded {
		t.Fatalf("second sync's events %v", ks)
	}
	if es[0].Generation != 2 || es[0].Epoch != res.Epoch || es[1].Epochs != 0 {
		t.Errorf("second sync: %+v", es)
	}
}

func pad(e uint64) string {
	s := "00000000000000000000" + itoa(e)
	return s[len(s)-20:]
}

func itoa(u uint64) string {
	if u == 0 {
		return "0"
	}
	var b []byte
	for ; u > 0; u /= 10 {
		b = append([]byte{byte('0' + u%10)}, b...)
	}
	return string(b)
}

func addCounts(a, b checkpoint.Counts) checkpoint.Counts {
	return checkpoint.Counts{Read: a.Read + b.Read, Written: a.Written + b.Written,
		Quarantined: a.Quarantined + b.Quarantined, Held: a.Held + b.Held}
}

// TestEventsOfFencedZombie runs A, lets B claim the same pipeline, and
// checks A's events end with pipeline.fenced then sync.failed, and its
// status says fenced.
func TestEventsOfFencedZombie(t *testing.T) {
	f := newFaker(t, faker.Config{Rows: 1 << 40, Rate: 20_000})
	recA := newRecorder()
	a, err := etl.NewPipeline("z").From(f.src).To(f.dst).Checkpoints(f.store).
		EpochEvery(20*time.Millisecond, 0).OnEvent(recA.on, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errA := make(chan error, 1)
	go func() { errA <- a.Run(ctx) }()
	testutil.Until(t, "A to commit an epoch", func() bool { return a.Status().Epoch >= 1 })
	probe := httptest.NewRecorder()
	etl.HealthHandler(a).ServeHTTP(probe, httptest.NewRequest("GET", "/readyz", nil))
	if probe.Code != 200 || !strings.Contains(probe.Body.String(), `"phase":"running"`) {
		t.Errorf("A's readiness while it runs: %d %s", probe.Code, probe.Body)
	}

	// B: a Sync of the same pipeline over a source that ends where A's
	// checkpoint is (it reads nothing new), claiming generation 2.
	small, err := faker.New(faker.Config{Rows: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := etl.NewPipeline("z").From(small).To(f.dst).Checkpoints(f.store).Build()
	if err != nil {
		t.Fatal(err)
	}
	resB, err := b.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if resB.Generation != 2 {
		t.Fatalf("B: generation %d", resB.Generation)
	}
	if err2 := testutil.Recv(t, "A to stop after B claimed the pipeline", errA); !etl.IsFenced(err2) {
		t.Fatalf("A: %v, want fenced", err2)
	}
	es := recA.wait(t)
	ks := kinds(es)
	n := len(ks)
	if ks[0] != etl.EventSyncStarted || n < 3 || ks[n-2] != etl.EventPipelineFenced || ks[n-1] != etl.EventSyncFailed {
		t.Fatalf("A's events %v: want sync.started ... pipeline.fenced, sync.failed", ks)
	}
	for _, e := range es[n-2:] {
		if e.Generation != 1 || !etl.IsFenced(e.Err) || e.Bounded {
			t.Errorf("%s: %+v", e.Kind, e)
		}
	}
	st := a.Status()
	if st.Phase != etl.PhaseFenced || st.Generation != 1 || st.LastError == "" || st.Ended.IsZero() {
		t.Errorf("A's status after the fence: %+v", st)
	}
	if got := b.Status(); got.Phase != etl.PhaseSucceeded || got.Generation != 2 {
		t.Errorf("B's status: %+v", got)
	}
}

// TestSlowEventCallbackNeverBlocksTheSync holds the event callback on its
// first event for the whole sync: the sync still completes, at most the
// queue's length of events waits, and the rest are dropped and counted.
func TestSlowEventCallbackNeverBlocksTheSync(t *testing.T) {
	tel := newTelemetry(t)
	f := newFaker(t, faker.Config{Rows: fakerRows, MalformedShare: 0.01})
	rec := newRecorder()
	rec.block = make(chan struct{})
	const queue = 2
	p, err := f.builder("slow").OnEvent(rec.on, queue).Telemetry(tel.mp, nil).Build()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var res etl.Result
	go func() {
		var err error
		res, err = p.Sync(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-testutil.Context(t).Done():
		close(rec.block)
		t.Fatal("the sync waited for the event callback")
	}
	// At least: started, schema changes, an epoch.committed per epoch,
	// quarantine.added, succeeded. At most 1 (in the callback) + queue
	// were kept; the others were dropped.
	least := int64(2 + res.Epochs)
	dropped := p.Status().EventsDropped
	if dropped < least-1-queue {
		t.Fatalf("%d events dropped; at least %d were produced and only %d fit", dropped, least, 1+queue)
	}
	ms := tel.collect(t)
	if got := sumPoint(t, ms["openetl.events.dropped"], attrs(etl.AttrPipeline.String("slow"))); got != dropped {
		t.Errorf("openetl.events.dropped = %d, status says %d", got, dropped)
	}
	close(rec.block)
	// Close returns once every queued event is delivered.
	if err := p.Close(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 1+queue {
		t.Fatalf("%d events delivered, want the %d that fit the queue", len(rec.events), 1+queue)
	}
	if rec.events[0].Kind != etl.EventSyncStarted {
		t.Errorf("first delivered event %s, want sync.started", rec.events[0].Kind)
	}
	for i := 1; i < len(rec.events); i++ {
		if rec.events[i].Time.Before(rec.events[i-1].Time) {
			t.Errorf("events delivered out of order: %v", kinds(rec.events))
		}
	}
}

// TestStatusDuringAndAfterSync reads Status before, during (from the
// progress callback, after each committed epoch) and after a sync.
func TestStatusDuringAndAfterSync(t *testing.T) {
	f := newFaker(t, faker.Config{Rows: fakerRows, MalformedShare: 0.01})
	var p *etl.Pipeline
	var during []etl.Status
	var progress []etl.Progress
	p, err := f.builder("orders").OnProgress(func(pr etl.Progress) {
		progress = append(progress, pr)
		during = append(during, p.Status())
	}).Build()
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); st.Phase != etl.PhaseIdle || st.Pipeline != "orders" {
		t.Fatalf("status before any sync: %+v", st)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(during) < res.Epochs {
		t.Fatalf("%d progress calls for %d epochs", len(during), res.Epochs)
	}
	for i, st := range during {
		pr := progress[i]
		if st.Phase != etl.PhaseRunning && st.Phase != etl.PhaseStopping || st.Generation != 1 || !st.Bounded || st.Epoch < pr.Epoch {
			t.Errorf("status during the sync: %+v (progress %+v)", st, pr)
		}
		for s, ss := range st.Streams {
			if ss.Read < ss.Committed.Read || ss.Committed.Read != ss.Committed.Written+ss.Committed.Quarantined {
				t.Errorf("stream %s during the sync: %+v", s, ss)
			}
		}
		if pr.Phase != st.Phase && pr.Phase != etl.PhaseRunning {
			t.Errorf("progress phase %s, status %s", pr.Phase, st.Phase)
		}
	}
	lastPr := progress[len(progress)-1]
	for s, want := range fakerWant {
		if lastPr.Committed[s] != want || lastPr.Totals[s] != want || lastPr.Streams[s].Read != want.Read {
			t.Errorf("last progress, stream %s: committed %+v totals %+v streams %+v", s, lastPr.Committed[s], lastPr.Totals[s], lastPr.Streams[s])
		}
	}
	st := p.Status()
	if st.Phase != etl.PhaseSucceeded || st.Generation != 1 || st.Epoch != res.Epoch || st.Epochs != res.Epochs ||
		st.Read != 2*fakerRows || st.EpochTime.IsZero() || st.Ended.Before(st.Started) || st.LastError != "" {
		t.Errorf("status after the sync: %+v, result %+v", st, res)
	}
	for s, want := range fakerWant {
		if ss := st.Streams[s]; ss.Committed != want || ss.Totals != want || ss.Read != want.Read {
			t.Errorf("stream %s after the sync: %+v", s, ss)
		}
	}
	// The statuses are copies: changing one changes nothing.
	st.Streams["orders"] = etl.StreamStatus{}
	if p.Status().Streams["orders"].Committed != fakerWant["orders"] {
		t.Error("Status shares its map with the pipeline")
	}
}

// failingSource is the faker whose Open fails with an error carrying a
// DSN with a password, as a careless connector's might.
type failingSource struct{ *faker.Source }

const secret = "hunter2-s3cret"

func (s failingSource) Open(context.Context, []string, map[source.SplitID][]byte) ([]source.Split, error) {
	return nil, errors.New("connect postgres://app:" + secret + "@db.internal:5432/shop: connection refused")
}

// TestHeldMetric: values held back because the destination can't take
// their type are counted in openetl.rows.held, per stream, as the
// result counts them.
func TestHeldMetric(t *testing.T) {
	tel := newTelemetry(t)
	src, err := faker.New(faker.Config{Rows: 500, Streams: []string{faker.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
		Class: sink.StageAndApply, Capabilities: sink.Capabilities{Unsupported: []string{"float64"}},
	})
	p, err := etl.NewPipeline("held").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Telemetry(tel.mp, tel.tp).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := res.Streams[faker.Orders].Held
	if want == 0 {
		t.Fatalf("counts %+v: want some held", res.Streams[faker.Orders])
	}
	ms := tel.collect(t)
	set := attrs(etl.AttrPipeline.String("held"), etl.AttrStream.String(faker.Orders))
	if got := sumPoint(t, ms["openetl.rows.held"], set); got != want {
		t.Errorf("openetl.rows.held = %d, want %d", got, want)
	}
}

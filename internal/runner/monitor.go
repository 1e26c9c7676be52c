package runner

import (
	"context"
	"path"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// instrumentationName names the meter and tracer the runner uses.
const instrumentationName = "github.com/openetl/etl"

// The attribute keys of the runner's metrics and spans.
const (
	AttrPipeline    = attribute.Key("openetl.pipeline")
	AttrStream      = attribute.Key("openetl.stream")
	AttrLane        = attribute.Key("openetl.lane")
	AttrDestination = attribute.Key("openetl.destination")
	AttrSplit       = attribute.Key("openetl.split")
	AttrLagUnit     = attribute.Key("openetl.lag.unit")
	AttrQueue       = attribute.Key("openetl.queue")
	AttrOutcome     = attribute.Key("openetl.outcome")
	AttrGeneration  = attribute.Key("openetl.generation")
	AttrEpoch       = attribute.Key("openetl.epoch")
	AttrBounded     = attribute.Key("openetl.bounded")
	AttrStep        = attribute.Key("openetl.step")
)

// Monitor holds what outlives one attempt of a pipeline: its status, its
// event queue, its OpenTelemetry instruments and tracer. Package etl
// makes one per built Pipeline and passes it in Config.Monitor, so that
// Status and the metrics follow every attempt; without one, each attempt
// makes its own. A Monitor is safe for concurrent use.
type Monitor struct {
	name     string
	dest     string
	now      func() time.Time
	events   *eventQueue
	lagAlert time.Duration
	tracer   trace.Tracer
	inst     *instruments
	reg      metric.Registration

	pipeAttr    metric.MeasurementOption // openetl.pipeline
	destAttr    metric.MeasurementOption // openetl.pipeline, openetl.destination
	backpressNs atomic.Int64             // over all attempts
	rec         atomic.Pointer[Recorder] // nil until Watch

	mu        sync.Mutex
	cur       *attemptState // the latest attempt to start
	lastErr   string
	lastErrAt time.Time
	lagging   bool
	retries   int  // retries in a row since the last committed epoch (RetryPolicy)
	waiting   bool // waiting to retry
}

// NewMonitor makes a Monitor for the pipeline cfg describes, with
// instruments from cfg.MeterProvider and a tracer from cfg.TracerProvider
// (defaults: the global ones), events to cfg.OnEvent through a queue of
// cfg.EventQueue events. Its observable instruments stay registered with
// the meter provider for as long as the Monitor is reachable from it.
func NewMonitor(cfg Config) *Monitor {
	cfg = cfg.withDefaults()
	m := &Monitor{name: cfg.Name, dest: destinationName(cfg.Destination), now: cfg.Now,
		lagAlert: cfg.LagAlert, tracer: cfg.TracerProvider.Tracer(instrumentationName)}
	if cfg.OnEvent != nil {
		m.events = newEventQueue(cfg.OnEvent, cfg.EventQueue)
	}
	m.inst = instrumentsFor(cfg.MeterProvider)
	m.pipeAttr = metric.WithAttributeSet(attribute.NewSet(AttrPipeline.String(m.name)))
	m.destAttr = metric.WithAttributeSet(attribute.NewSet(AttrPipeline.String(m.name), AttrDestination.String(m.dest)))
	reg, err := m.inst.meter.RegisterCallback(m.observe, m.inst.lag, m.inst.lagAge, m.inst.freshness,
		m.inst.queueDepth, m.inst.backpressure, m.inst.eventsDropped, m.inst.splitsPaused)
	if err != nil {
		otel.Handle(err)
	} else {
		m.reg = reg
	}
	return m
}

// close unregisters the Monitor's callback; for the private Monitors of
// attempts run without one.
func (m *Monitor) close() {
	if m.reg != nil {
		_ = m.reg.Unregister()
	}
}

// Close waits until every event published so far has been delivered to
// the OnEvent callback (or ctx ends) and unregisters the Monitor's
// observable instruments. Call it once no attempt runs with the Monitor:
// events published later are still queued but no longer waited for.
func (m *Monitor) Close(ctx context.Context) error {
	var err error
	if m.events != nil {
		err = m.events.flush(ctx)
	}
	m.close()
	return err
}

// Status returns a snapshot of the latest attempt started in this
// process (Phase PhaseIdle before the first).
func (m *Monitor) Status() Status {
	m.mu.Lock()
	cur, lastErr, lastErrAt, retries, waiting := m.cur, m.lastErr, m.lastErrAt, m.retries, m.waiting
	m.mu.Unlock()
	var s Status
	if cur != nil {
		s = cur.snapshot()
	} else {
		s = Status{Pipeline: m.name, Phase: PhaseIdle}
	}
	s.LastError, s.LastErrorTime = lastErr, lastErrAt
	s.Retries = retries
	if waiting {
		s.Phase = PhaseRetrying
	}
	s.EventsDropped = m.EventsDropped()
	return s
}

// EventsDropped counts the events dropped because the OnEvent callback
// fell more than the queue's length behind.
func (m *Monitor) EventsDropped() int64 {
	if m.events == nil {
		return 0
	}
	return m.events.dropped.Load()
}

func (m *Monitor) begin(a *attemptState) {
	m.mu.Lock()
	m.cur = a
	m.lagging = false
	m.mu.Unlock()
	m.rec.Load().begin()
}

// progressed notes a committed epoch: the retries in a row start over.
func (m *Monitor) progressed() {
	m.mu.Lock()
	m.retries = 0
	m.mu.Unlock()
}

func (m *Monitor) failed(err error, at time.Time) {
	m.mu.Lock()
	m.lastErr, m.lastErrAt = RedactSecrets(err.Error()), at
	m.mu.Unlock()
}

// emit publishes e when the host listens; it never blocks.
func (m *Monitor) emit(e Event) {
	rec := m.rec.Load()
	if m.events == nil && rec == nil {
		return
	}
	e.Pipeline = m.name
	if e.Time.IsZero() {
		e.Time = m.now()
	}
	rec.event(e)
	if m.events != nil {
		m.events.publish(e)
	}
}

// lag updates the lagging state from a poll and emits its events.
func (m *Monitor) lag(a *attemptState, gen checkpoint.Generation, lag time.Duration, known bool) {
	if m.lagAlert <= 0 || !known {
		return
	}
	m.mu.Lock()
	if m.cur != a {
		m.mu.Unlock()
		return
	}
	var kind EventKind
	switch {
	case lag > m.lagAlert && !m.lagging:
		m.lagging, kind = true, EventPipelineLagging
	case lag <= m.lagAlert && m.lagging:
		m.lagging, kind = false, EventPipelineRecovered
	}
	m.mu.Unlock()
	if kind != "" {
		m.emit(Event{Kind: kind, Lag: lag, Generation: gen})
	}
}

// observe reports the observable instruments for the latest attempt.
func (m *Monitor) observe(_ context.Context, o metric.Observer) error {
	o.ObserveFloat64(m.inst.backpressure, time.Duration(m.backpressNs.Load()).Seconds(), m.pipeAttr)
	o.ObserveInt64(m.inst.eventsDropped, m.EventsDropped(), m.pipeAttr)
	m.mu.Lock()
	a := m.cur
	m.mu.Unlock()
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.st.EpochTime.IsZero() {
		o.ObserveFloat64(m.inst.freshness, m.now().Sub(a.st.EpochTime).Seconds(), m.pipeAttr)
	}
	for _, sp := range a.st.Splits {
		if !sp.LagKnown {
			continue
		}
		o.ObserveInt64(m.inst.lag, sp.Behind, metric.WithAttributes(AttrPipeline.String(m.name),
			AttrSplit.String(sp.ID), AttrLagUnit.String(sp.Unit)))
		if sp.Age >= 0 {
			o.ObserveFloat64(m.inst.lagAge, sp.Age.Seconds(), metric.WithAttributes(AttrPipeline.String(m.name),
				AttrSplit.String(sp.ID)))
		}
	}
	if a.toEngine != nil && a.st.Ended.IsZero() {
		o.ObserveInt64(m.inst.splitsPaused, int64(a.st.Paused), m.pipeAttr)
		queued := 0
		for _, ch := range a.toEngine {
			queued += len(ch)
		}
		o.ObserveInt64(m.inst.queueDepth, int64(queued), metric.WithAttributes(AttrPipeline.String(m.name),
			AttrQueue.String("engine")))
		for i, ch := range a.toLanes {
			o.ObserveInt64(m.inst.queueDepth, int64(len(ch)), metric.WithAttributes(AttrPipeline.String(m.name),
				AttrQueue.String("lane"), AttrLane.Int(i)))
		}
	}
	return nil
}

// destinationName names a destination for the openetl.destination
// attribute: the last element of its type's package path ("parquet",
// "sinktest"), or its Name() when it has one.
func destinationName(d sink.Destination) string {
	if d == nil {
		return ""
	}
	if n, ok := d.(sink.Namer); ok {
		return n.Name()
	}
	t := reflect.TypeOf(d)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return path.Base(p)
	}
	return strings.TrimPrefix(t.String(), "*")
}

// instruments are the runner's OpenTelemetry instruments, made once per
// meter provider and shared by every Monitor using it.
type instruments struct {
	meter metric.Meter

	rowsRead, bytesRead, bytesWritten                metric.Int64Counter
	rowsWritten, rowsQuarantined, rowsHeld           metric.Int64Counter
	rowsFiltered, rowsReleased                       metric.Int64Counter
	epochs, attempts, retries                        metric.Int64Counter
	epochDur, checkpointDur, commitDur, precommitDur metric.Float64Histogram
	engineDur, transformDur                          metric.Float64Histogram
	lag, queueDepth, eventsDropped, splitsPaused     metric.Int64Observable
	lagAge, freshness, backpressure                  metric.Float64Observable
}

var instrumentCache sync.Map // metric.MeterProvider → *instruments

func instrumentsFor(mp metric.MeterProvider) *instruments {
	comparable := reflect.TypeOf(mp).Comparable()
	if comparable {
		if in, ok := instrumentCache.Load(mp); ok {
			return in.(*instruments)
		}
	}
	in := newInstruments(mp.Meter(instrumentationName))
	if comparable {
		got, _ := instrumentCache.LoadOrStore(mp, in)
		return got.(*instruments)
	}
	return in
}

// secondsBuckets are the histograms' bucket bounds, in seconds: from a
// millisecond (an engine batch) to minutes (a slow epoch).
var secondsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newInstruments(m metric.Meter) *instruments {
	in := &instruments{meter: m}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(secondsBuckets...))
		errs = append(errs, err)
		return h
	}
	in.rowsRead = counter("openetl.rows.read", "{row}", "Records read from the source, committed or not (read again after a restart)")
	in.bytesRead = counter("openetl.bytes.read", "By", "Payload bytes read from the source")
	in.bytesWritten = counter("openetl.bytes.written", "By", "Arrow bytes handed to the destination's writers")
	in.rowsWritten = counter("openetl.rows.written", "{row}", "Rows committed to the destination")
	in.rowsQuarantined = counter("openetl.rows.quarantined", "{row}", "Records set aside in committed epochs (quarantine)")
	in.rowsHeld = counter("openetl.rows.held", "{value}", "Values held back in committed epochs because the destination can't take their type yet")
	in.rowsReleased = counter("openetl.rows.released", "{value}", "Held values written to their rows in committed epochs, once the destination took their column")
	in.rowsFiltered = counter("openetl.rows.filtered", "{row}", "Rows a stream's row filter or transform dropped (net of rows a transform added), in committed epochs")
	in.epochs = counter("openetl.epochs.committed", "{epoch}", "Epochs committed")
	in.attempts = counter("openetl.attempts", "{attempt}", "Attempts (Sync or Run) ended, by outcome")
	in.retries = counter("openetl.retries", "{retry}", "New attempts started after a transient failure, by the part that failed (openetl.cause)")
	in.epochDur = hist("openetl.epoch.duration", "From an epoch's barrier request to its commit")
	in.checkpointDur = hist("openetl.checkpoint.duration", "Writing an epoch's checkpoint record and moving HEAD (the commit point)")
	in.commitDur = hist("openetl.commit.duration", "The destination's Commit of an epoch on lane 0, retries included (recovery's too)")
	in.precommitDur = hist("openetl.precommit.duration", "A writer lane's PreCommit of an epoch")
	in.engineDur = hist("openetl.engine.batch.duration", "The engine's processing of one raw batch")
	in.transformDur = hist("openetl.transform.duration", "A stream's Go transform on one batch of one lane")
	var err error
	in.lag, err = m.Int64ObservableGauge("openetl.job.lag", metric.WithUnit("1"),
		metric.WithDescription("How far a split is behind the source's end, in the source's unit (openetl.lag.unit)"))
	errs = append(errs, err)
	in.lagAge, err = m.Float64ObservableGauge("openetl.job.lag.age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest record a split has not read yet, where the source knows it"))
	errs = append(errs, err)
	in.freshness, err = m.Float64ObservableGauge("openetl.pipeline.freshness", metric.WithUnit("s"),
		metric.WithDescription("Time since the last epoch was committed: the newest committed data is at least this old"))
	errs = append(errs, err)
	in.queueDepth, err = m.Int64ObservableGauge("openetl.queue.depth", metric.WithUnit("{batch}"),
		metric.WithDescription("Batches waiting in the runner's queues (engine, per writer lane)"))
	errs = append(errs, err)
	in.splitsPaused, err = m.Int64ObservableGauge("openetl.splits.paused", metric.WithUnit("{split}"),
		metric.WithDescription("Splits paused at the last poll because the runner's queues are full"))
	errs = append(errs, err)
	in.backpressure, err = m.Float64ObservableCounter("openetl.backpressure.duration", metric.WithUnit("s"),
		metric.WithDescription("Time source splits waited on the runner: a full engine queue, or a barrier's alignment"))
	errs = append(errs, err)
	in.eventsDropped, err = m.Int64ObservableCounter("openetl.events.dropped", metric.WithUnit("{event}"),
		metric.WithDescription("Events dropped because the host's event callback fell behind the queue"))
	errs = append(errs, err)
	for _, err := range errs {
		if err != nil {
			otel.Handle(err)
		}
	}
	return in
}

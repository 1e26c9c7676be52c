package etl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// Builder collects a pipeline's parts. Each method records its argument
// and returns the builder; nothing is checked until Build. A Builder is
// not safe for concurrent use; build once and share the *Pipeline.
type Builder struct {
	cfg   runner.Config
	retry *Retry  // nil: the default Retry
	errs  []error // misuses of the methods, reported by Build

	shard    Shard       // Shard's arguments
	shardSet bool        // Shard was called
	onEvent  func(Event) // OnEvent's callback, given the shard by Build
}

// NewPipeline starts building the pipeline called name. The name keys the
// pipeline's checkpoints: two pipelines with the same name and store are
// the same pipeline (and fence each other). It must be 1-200 letters,
// digits, '-', '_' or '.', not starting with '.' and not ending in
// ".lock".
func NewPipeline(name string) *Builder {
	return &Builder{cfg: runner.Config{Name: name}}
}

// From sets the source. Required.
func (b *Builder) From(src source.Source) *Builder { b.cfg.Source = src; return b }

// To sets the destination. Required.
func (b *Builder) To(dst sink.Destination) *Builder { b.cfg.Destination = dst; return b }

// Checkpoints sets the checkpoint store. Required; checkpoint.Open makes
// one from a URL (file:///dir, mem://).
func (b *Builder) Checkpoints(store checkpoint.Store) *Builder { b.cfg.Store = store; return b }

// Streams selects the streams to read by name; default every stream of
// the source's catalog. Each sync checks they exist.
func (b *Builder) Streams(names ...string) *Builder {
	b.cfg.Streams = append([]string(nil), names...)
	return b
}

// Require sets the delivery level every stream must reach (see package
// delivery); Build and every sync fail, naming each stream that falls
// short and why. Default delivery.BestEffort: no requirement, and each
// stream gets what its source and destination allow (Guarantees).
func (b *Builder) Require(level delivery.Level) *Builder { b.cfg.Required = level; return b }

// Policy is a stream's schema policy: what a record that would change
// the stream's schema does (Builder.SchemaPolicy).
type Policy string

// The schema policies.
const (
	// PolicyEvolve adds new columns and widens types (the default).
	PolicyEvolve = Policy(engine.PolicyEvolve)
	// PolicyFreeze keeps the schema: a record that would add a column or
	// widen one is quarantined (reason type_conflict).
	PolicyFreeze = Policy(engine.PolicyFreeze)
	// PolicyDiscard drops the new fields of documents; the rest of the
	// record is written.
	PolicyDiscard = Policy(engine.PolicyDiscard)
)

// SchemaPolicy sets the schema policy of the named streams (default
// PolicyEvolve: new columns are added and types widened). With
// PolicyFreeze a record that would add a column or widen one is
// quarantined (reason type_conflict); with PolicyDiscard new fields of
// documents are dropped. Either is reported by a schema.blocked event. A
// policy applies from the next attempt on, to the schema the stream has
// then. Build fails when no stream is named, and for a policy that is
// none of these.
func (b *Builder) SchemaPolicy(p Policy, streams ...string) *Builder {
	if len(streams) == 0 {
		b.errs = append(b.errs, fmt.Errorf("schema policy %q: no stream names (name the streams it applies to)", p))
	}
	if b.cfg.Policies == nil {
		b.cfg.Policies = map[string]engine.Policy{}
	}
	for _, s := range streams {
		b.cfg.Policies[s] = engine.Policy(p)
	}
	return b
}

// JSONOptions are how the documents of a JSON stream (source.FormatJSON)
// are typed; the zero value is the default. Builder.JSON sets them.
type JSONOptions struct {
	// NestedAsText keeps nested objects and arrays as JSON text (utf8
	// columns) instead of structs and lists. Default false.
	NestedAsText bool
	// Timestamps types strings that are RFC 3339 timestamps as
	// timestamp[us, UTC] instead of utf8. Default false.
	Timestamps bool
}

// JSON sets how the documents of the named JSON streams are typed (see
// JSONOptions); default neither option. Options apply from the next attempt on, and
// column types only ever widen: a column that is already utf8 stays so,
// and one already a struct or list becomes JSON text. Declared
// (FormatRow) streams are not affected. Build fails when no stream is
// named.
func (b *Builder) JSON(o JSONOptions, streams ...string) *Builder {
	if len(streams) == 0 {
		b.errs = append(b.errs, errors.New("JSON options: no stream names (name the streams they apply to)"))
	}
	if b.cfg.JSON == nil {
		b.cfg.JSON = map[string]runner.JSONOptions{}
	}
	for _, s := range streams {
		b.cfg.JSON[s] = runner.JSONOptions{NestedAsText: o.NestedAsText, Timestamps: o.Timestamps}
	}
	return b
}

// Mode sets the write mode of the named streams (default
// delivery.Append). Merge needs a primary key and a destination that can
// merge. Each stream's writers learn it, with the stream's key, through
// their sink.WriterConfig; a destination's own configuration has no say.
// Build fails when no stream is named, and when the destination can't
// write a stream so (sink.SpecChecker), naming the stream.
func (b *Builder) Mode(mode delivery.Mode, streams ...string) *Builder {
	if len(streams) == 0 {
		b.errs = append(b.errs, fmt.Errorf("write mode %v: no stream names (name the streams it applies to)", mode))
	}
	if b.cfg.Modes == nil {
		b.cfg.Modes = map[string]delivery.Mode{}
	}
	for _, s := range streams {
		b.cfg.Modes[s] = mode
	}
	return b
}

// Deletes sets what a delete does to the key's row in the named merge
// streams: sink.SoftDeletes (the default) keeps it, marked
// _openetl_deleted; sink.HardDeletes removes it. Build fails when no
// stream is named, when a named stream is not written in merge mode
// (Mode), and when the destination can't (sink.SpecChecker).
func (b *Builder) Deletes(d sink.Deletes, streams ...string) *Builder {
	if len(streams) == 0 {
		b.errs = append(b.errs, fmt.Errorf("deletes %v: no stream names (name the streams they apply to)", d))
	}
	if b.cfg.Deletes == nil {
		b.cfg.Deletes = map[string]sink.Deletes{}
	}
	for _, s := range streams {
		b.cfg.Deletes[s] = d
	}
	return b
}

// Route writes every stream read whose name matches pattern into one
// destination table, table: sharded tables orders_2024_01,
// orders_2024_02, ... into orders with Route("orders_2024_*", "orders").
// Patterns have path.Match's syntax and match the whole stream name as
// the source's catalog has it (a Postgres table outside the public
// schema is "schema.table"). Several routes may share a table. Default:
// each stream is its own table.
//
// The routed table's schema is the join of its streams' schemas under
// the engine's widening rules (package engine: int4 and int8 make int8,
// an integer and a float a double, an integer and numeric(p,s) a numeric
// holding both, any two text types text; a column one stream lacks is
// null in its rows), cast in the runner before the destination sees a
// batch; it only widens, across restarts too. Each row carries the
// column _openetl_stream (sink.ColumnStream: utf8, never null) naming the
// stream it came from, after the other metadata columns, and a keyed
// table's key is (_openetl_stream, the streams' key): equal keys of two
// shards are two rows, merged apart. _openetl_id already differs across
// shards (the stream name is hashed into it).
//
// Counts, Status, metrics, quarantine and held values stay per source
// stream (StreamStatus.Table names the routed table): a routed stream's quarantined records are filed under its own
// name (and Replay takes that name), its held values too, with the
// routed table in their "table" field. Guarantees notes the route in
// each routed stream's reason.
//
// Build fails, naming the route and stream, when a pattern is empty or
// malformed or given twice, when a table name is empty or starts with
// _openetl_, when a stream matches two patterns, when a pattern matches
// no stream read (a typo would otherwise write nothing, silently), when
// the streams of one table differ in declared or inferred schema, type
// system, mode, deletes or key, when their declared columns' types don't
// join short of making text of numbers or times, when a routed stream
// has a Go Transform (not supported yet: a transform's output is checked
// per stream, while the table's schema is joined before the lanes), and
// when a routed table's name is another table's of the pipeline (that of
// an unrouted stream or another route's, compared without case). Each
// attempt checks again against the catalog then: a shard added later
// joins its table; nested JSON columns join only when equal, and an
// attempt meeting two that differ fails (permanently) naming them.
func (b *Builder) Route(pattern, table string) *Builder {
	b.cfg.Routes = append(b.cfg.Routes, runner.Route{Pattern: pattern, Table: table})
	return b
}

// Lanes sets the number of writer lanes, each with its own destination
// Writer; rows are routed to lanes by a hash of their key. Default 1.
func (b *Builder) Lanes(n int) *Builder { b.cfg.Lanes = n; return b }

// EngineWorkers sets how many goroutines normalize records, each with an
// engine of its own for a share of the streams: a stream stays with one
// worker (streams routed into one table share one), so its schema
// evolves in one place and its rows keep their order. Default: as many
// as there are writer lanes (Lanes), up to GOMAXPROCS; never more than
// the pipeline has streams (or routed tables). One stream, however many
// splits, is normalized on one core; the lanes encode on others. A
// worker's engine and a lane's encoding cost about the same per row, so
// one worker per lane keeps them even; on a host with many cores and
// many streams, raise Lanes, and this with it.
func (b *Builder) EngineWorkers(n int) *Builder { b.cfg.EngineWorkers = n; return b }

// EpochEvery sets when barriers are placed: every interval (default 10s)
// and whenever bytes of payload were read since the last one (default
// 256 MiB), whichever comes first. Each barrier commits an epoch. Zero
// keeps a default.
func (b *Builder) EpochEvery(interval time.Duration, bytes int64) *Builder {
	b.cfg.EpochInterval, b.cfg.EpochBytes = interval, bytes
	return b
}

// BatchSize bounds the raw batches handed to the engine: rows (default
// 8192) and bytes (default 4 MiB). Zero keeps a default.
func (b *Builder) BatchSize(rows, bytes int) *Builder {
	b.cfg.BatchRows, b.cfg.BatchBytes = rows, bytes
	return b
}

// CommitRetries sets how often a failed destination commit is retried
// (default 5) and the first backoff (default 200ms, doubling). When
// retries run out the attempt fails; the next one applies the epoch.
func (b *Builder) CommitRetries(n int, backoff time.Duration) *Builder {
	b.cfg.CommitRetries, b.cfg.CommitBackoff = n, backoff
	return b
}

// StopTimeout bounds Run's final checkpoint after its context is
// cancelled; default 30s.
func (b *Builder) StopTimeout(d time.Duration) *Builder { b.cfg.StopTimeout = d; return b }

// MaxDocumentBytes sets the largest record payload accepted; larger ones
// are quarantined as too_large. Default 16 MiB.
func (b *Builder) MaxDocumentBytes(n int) *Builder { b.cfg.MaxDocumentBytes = n; return b }

// Logger sets the logger: lifecycle at Info, retries at Warn, per-epoch
// and per-batch detail at Debug; never row data, and every message and
// attribute passes through RedactSecrets (no passwords). Default:
// discard.
func (b *Builder) Logger(l *slog.Logger) *Builder { b.cfg.Logger = l; return b }

// OnProgress sets a callback called after every committed epoch and about
// once a second while a sync runs, from one goroutine of the runner at a
// time, with the attempt's counts, per-stream snapshot progress and lag
// (see Progress). It must return quickly: while it runs, no barrier is
// requested. Status gives the same figures to a caller that polls.
func (b *Builder) OnProgress(f func(Progress)) *Builder {
	b.cfg.OnProgress = nil
	if f != nil {
		b.cfg.OnProgress = func(p runner.Progress) { f(progressOf(p)) }
	}
	return b
}

// OnEvent sets a callback that receives typed events (see EventKind), in
// order, on a goroutine of its own. The runner never waits for it: events
// go through a queue of queue events (0: default 1024), and those that
// find it full are dropped and counted (Status().EventsDropped and the
// openetl.events.dropped metric). Default: no events.
func (b *Builder) OnEvent(f func(Event), queue int) *Builder {
	b.cfg.OnEvent, b.cfg.EventQueue, b.onEvent = nil, queue, f
	return b
}

// LagAlert sets the lag above which EventPipelineLagging is emitted (and
// at or below which EventPipelineRecovered follows): the largest age of
// unread data that the source's splits report (sources whose splits
// implement LagReporter). Default 0: no lag events.
func (b *Builder) LagAlert(d time.Duration) *Builder { b.cfg.LagAlert = d; return b }

// Telemetry sets the OpenTelemetry providers the pipeline's metrics and
// spans come from (docs/metrics.md lists them); a nil one keeps its default,
// the global provider (otel.GetMeterProvider, otel.GetTracerProvider),
// which does nothing until the host sets one. The instruments are made
// once by Build and stay registered with the meter provider for the
// life of the Pipeline.
func (b *Builder) Telemetry(mp metric.MeterProvider, tp trace.TracerProvider) *Builder {
	b.cfg.MeterProvider, b.cfg.TracerProvider = mp, tp
	return b
}

// Build is BuildContext with a background context.
func (b *Builder) Build() (*Pipeline, error) { return b.BuildContext(context.Background()) }

// BuildContext checks the configuration once and returns an immutable
// Pipeline. It asks the source for its catalog (Discover, under ctx) to
// check the selected streams and each stream's delivery guarantee against
// the required level, and asks a destination that can tell whether the
// pipeline may write there (sink.PipelineChecker: Parquet refuses a
// stream another pipeline writes under the same prefix). Its error joins one error per problem, each naming
// the part, option or stream at fault and why. It never panics.
func (b *Builder) BuildContext(ctx context.Context) (p *Pipeline, err error) {
	defer func() {
		if v := recover(); v != nil {
			p, err = nil, &BuildError{Pipeline: b.cfg.Name, Err: fmt.Errorf("build panicked (a part's method?): %v", v)}
		}
	}()
	cfg := b.cfg
	cfg.Streams = append([]string(nil), cfg.Streams...)
	cfg.Modes = maps.Clone(cfg.Modes)
	cfg.Deletes = maps.Clone(cfg.Deletes)
	cfg.Policies = maps.Clone(cfg.Policies)
	cfg.JSON = maps.Clone(cfg.JSON)
	cfg.Steps = slices.Clone(cfg.Steps)
	cfg.Transforms = maps.Clone(cfg.Transforms)
	cfg.Routes = slices.Clone(cfg.Routes)
	cfg.Rules = maps.Clone(cfg.Rules)
	cfg.Filters = maps.Clone(cfg.Filters)
	cfg.Retry = retryPolicy(b.retry)
	sh := Shard{Count: 1}
	if b.shardSet {
		sh = b.shard
	}
	var owned source.Source // a shard's source, the Pipeline's to close
	var shardErr error
	if sh.Count > 1 {
		shardErr = checkpoint.ValidPipeline(cfg.Name)
	}
	base := cfg.Name
	if shardErr == nil {
		var src source.Source
		cfg.Name, src, owned, shardErr = buildShard(cfg.Name, sh, cfg.Source)
		if shardErr == nil {
			cfg.Source = src
		}
	}
	if !sh.Sharded() {
		sh = Shard{}
	} else {
		// Shards started together close their epochs a share of the
		// interval apart: shard i's first after (i+1)/S of it.
		interval := cfg.EpochInterval
		if interval <= 0 {
			interval = runner.DefaultEpochInterval
		}
		cfg.FirstEpoch = interval * time.Duration(sh.Index+1) / time.Duration(sh.Count)
	}
	defer func() {
		if err != nil && owned != nil {
			closeSource(owned)
		}
	}()
	if f := b.onEvent; f != nil {
		cfg.OnEvent = func(e runner.Event) {
			ev := eventOf(e)
			ev.Shard = sh
			f(ev)
		}
	}
	errs := append([]error{cfg.Validate(), shardErr}, b.errs...)
	eng, engErr := engine.New(engine.Config{})
	if engErr != nil {
		errs = append(errs, fmt.Errorf("engine: %w", engErr))
	} else {
		eng.Close()
	}
	var guarantees []delivery.Guarantee
	var discoverErr error // a Discover failure the source does not call permanent
	if cfg.Source != nil && cfg.Destination != nil && shardErr == nil {
		catalog, err := cfg.Source.Discover(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("source: discover: %w", err))
			if c, ok := cfg.Source.(source.Classifier); !ok || !c.Permanent(err) {
				discoverErr = err
			}
		} else {
			guarantees, err = runner.Guarantees(cfg, catalog, nil)
			errs = append(errs, err)
			if engErr == nil {
				errs = append(errs, runner.CheckPolicies(cfg, catalog))
			}
			if err == nil && engErr == nil {
				errs = append(errs, runner.CheckPipeline(ctx, cfg, catalog))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		be := &BuildError{Pipeline: cfg.Name, Err: err}
		// Only a Discover that failed (a server briefly away, say): the
		// configuration was not checked, and a later Build may pass.
		be.transient = discoverErr != nil && !markedPermanent(discoverErr) &&
			len(slices.DeleteFunc(errs, func(e error) bool { return e == nil })) == 1
		return nil, be
	}
	cfg.Monitor = runner.NewMonitor(cfg)
	return &Pipeline{cfg: cfg, guarantees: guarantees, shard: sh, base: base, owned: owned}, nil
}

// BuildError is returned by Build. Err joins one error per problem;
// errors.Is finds sentinels such as engine.ErrUnavailable in it. Its
// message is redacted (RedactSecrets): a connector error quoting a DSN
// shows no password. IsPermanent reports it, unless its only problem is
// that the source's Discover failed with an error the source does not
// call permanent (source.Classifier): a database that was briefly away,
// where building again later may succeed (IsRetryable).
type BuildError struct {
	Pipeline string
	Err      error

	transient bool
}

func (e *BuildError) Error() string {
	return runner.RedactSecrets(fmt.Sprintf("etl: pipeline %q: %v", e.Pipeline, e.Err))
}

func (e *BuildError) Unwrap() error { return e.Err }

// Pipeline is a built pipeline. It is immutable and safe for concurrent
// use; each Sync or Run is one attempt, which claims the pipeline in its
// checkpoint store and fences any older attempt still running, in this
// process or another.
type Pipeline struct {
	cfg        runner.Config
	guarantees []delivery.Guarantee
	shard      Shard         // zero when unsharded
	base       string        // the name given to NewPipeline (a shard's Name is its key)
	owned      source.Source // the shard's source Build made, closed by Close; nil if none

	mu     sync.Mutex
	busy   chan struct{} // closed when the running Sync or Run returns; nil when none runs
	closed bool
}

// begin marks an attempt running, or says why none may start.
func (p *Pipeline) begin() (end func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return nil, fmt.Errorf("%w: pipeline %q", ErrClosed, p.cfg.Name)
	case p.busy != nil:
		return nil, fmt.Errorf("%w: pipeline %q", ErrBusy, p.cfg.Name)
	}
	done := make(chan struct{})
	p.busy = done
	return func() {
		p.mu.Lock()
		p.busy = nil
		p.mu.Unlock()
		close(done)
	}, nil
}

// Guarantees returns each selected stream's delivery guarantee, with the
// reason, as worked out by Build from the source's catalog then. Each sync
// checks again against the catalog the source reports at its start.
func (p *Pipeline) Guarantees() []delivery.Guarantee {
	return slices.Clone(p.guarantees)
}

// Name returns the pipeline's name: the one given to NewPipeline, or
// for a shard (Builder.Shard) the shard's key, ShardKey(name, index,
// count), under which its checkpoints are kept.
func (p *Pipeline) Name() string { return p.cfg.Name }

// Shard returns which shard the pipeline is (Builder.Shard); the zero
// Shard when unsharded.
func (p *Pipeline) Shard() Shard { return p.shard }

// Status returns a snapshot of the pipeline's latest attempt in this
// process: phase, generation, last committed epoch and its time,
// per-stream counts and snapshot progress, lag, the last error and the
// events dropped. It is cheap and safe to call from any goroutine at any
// time; before the first Sync or Run its Phase is PhaseIdle.
func (p *Pipeline) Status() Status {
	s := statusOf(p.cfg.Monitor.Status())
	s.Shard = p.shard
	return s
}

// Sync reads every stream to the source's end as of the start, commits
// what it read in one or more epochs, and returns the counts. It resumes
// from the pipeline's last checkpoint, so calling it again reads only
// what is new. Cancelling ctx abandons the sync: what was committed
// stays, the rest is read again next time. If a newer attempt claims the
// pipeline meanwhile, Sync stops with an error wrapping
// checkpoint.ErrFenced without committing anything more. If the
// destination holds epochs the checkpoint store doesn't know (the store
// was lost, replaced or restored from an older copy), Sync writes
// nothing and fails with a *sink.AheadError (errors.Is(err,
// sink.ErrAhead); IsPermanent), every time, until the store is restored
// or the pipeline starts over into an empty destination or under a new
// name. A failed Sync's Result still carries the generation it claimed,
// if it got that far.
//
// Once everything is committed, Sync runs the Builder's AfterSync steps
// in order. When one fails, Sync returns its *StepError together with
// the Result of what it committed, which stays committed.
//
// One Pipeline runs one Sync or Run at a time: a call while another runs
// returns ErrBusy at once, without touching the checkpoint store (two
// calls on one Pipeline never fence each other). After Close it returns
// ErrClosed.
func (p *Pipeline) Sync(ctx context.Context) (Result, error) {
	end, err := p.begin()
	if err != nil {
		return Result{}, err
	}
	defer end()
	res, err := runner.Sync(ctx, p.cfg)
	return Result(res), budgetError(err)
}

// Run reads continuously, committing an epoch at each barrier (see
// EpochEvery), until ctx is cancelled; it then places a final barrier,
// commits it (within StopTimeout) and returns nil.
//
// Run rides out transient failures by itself (see Retry, Builder.Retry):
// an attempt that fails with an error IsPermanent doesn't call permanent
// is followed by a new one after a backoff, which resumes from the last
// checkpoint. Run returns an error at once when the attempt is fenced
// (wrapping checkpoint.ErrFenced: a newer attempt took the pipeline
// over), when the destination is ahead of the checkpoint store (a
// *sink.AheadError, see Sync), or on any other permanent error; and a
// *RetryBudgetError when an outage outlasts Retry.Budget. Cancelled while
// it waits to retry, or as an attempt fails with an error it would
// retry, it returns nil: the stop was asked for, and the next Run
// resumes from the last checkpoint.
//
// Like Sync, Run returns ErrBusy while another Sync or Run of this
// Pipeline runs, and ErrClosed after Close. Run doesn't run AfterSync
// steps.
func (p *Pipeline) Run(ctx context.Context) error {
	end, err := p.begin()
	if err != nil {
		return err
	}
	defer end()
	return budgetError(runner.Run(ctx, p.cfg))
}

// Resnapshot asks the pipeline's source to read stream's table again
// while the pipeline goes on streaming its changes: for a destination
// that lost or mangled rows, say. The source must implement
// source.Resnapshotter (source/postgres and source/mysql do; see their
// package docs, "Reading a table again", for how the rows read meet the
// changes streamed meanwhile). It returns once the request is durable at the
// source; the running Run (or the next Sync or Run, if none runs) reads
// the table, and Status shows its progress as the stream's snapshot
// (StreamStatus.Snapshotting, SnapshotDone, SnapshotEstimated), with
// EventResnapshotStarted and EventResnapshotDone.
//
// A stream the pipeline doesn't read fails with an error wrapping
// source.ErrUnknownStream, a stream without a primary key with
// source.ErrNoKey, and a source without the capability with
// errors.ErrUnsupported.
func (p *Pipeline) Resnapshot(ctx context.Context, stream string) error {
	if len(p.cfg.Streams) > 0 && !slices.Contains(p.cfg.Streams, stream) {
		return fmt.Errorf("etl: pipeline %q: re-snapshot of %q: %w: the pipeline doesn't read it", p.cfg.Name, stream, source.ErrUnknownStream)
	}
	r, ok := p.cfg.Source.(source.Resnapshotter)
	if !ok {
		return fmt.Errorf("etl: pipeline %q: re-snapshot of %q: %w: the source (%T) can't read a stream again", p.cfg.Name, stream,
			errors.ErrUnsupported, p.cfg.Source)
	}
	if err := r.Resnapshot(ctx, stream); err != nil {
		return fmt.Errorf("etl: pipeline %q: %w", p.cfg.Name, err)
	}
	return nil
}

// Close ends the Pipeline's life in this process: later calls of Sync
// and Run return ErrClosed. It waits for a Sync or Run still running to
// return (cancel its context to make it stop), then until every event of
// every attempt has been delivered to the OnEvent callback, and
// unregisters the Pipeline's OpenTelemetry instruments. Call it before
// the process exits, or the last events (sync.failed, pipeline.fenced)
// may never reach the callback. A shard's Pipeline (Builder.Shard) also
// closes the source the shard was given by the Source's Shard method.
// When ctx ends first, Close returns its
// cause; the Pipeline stays closed, and a second Close waits again.
func (p *Pipeline) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	busy := p.busy
	p.mu.Unlock()
	if busy != nil {
		select {
		case <-busy:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	err := p.cfg.Monitor.Close(ctx)
	p.mu.Lock()
	owned := p.owned
	p.owned = nil
	p.mu.Unlock()
	if owned != nil {
		if c, ok := owned.(source.Closer); ok {
			err = errors.Join(err, c.Close(ctx))
		}
	}
	return err
}

// Inspect reads the pipeline's checkpoint log without claiming it, so a
// copy running elsewhere is not fenced: the generation that holds the
// pipeline, its last committed epoch and the row totals. A pipeline never
// run has Generation 0 and Epoch 0.
func (p *Pipeline) Inspect(ctx context.Context) (Checkpoint, error) {
	gen, rec, err := p.cfg.Store.Head(ctx, p.cfg.Name)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("etl: pipeline %q: inspect: %w", p.cfg.Name, err)
	}
	c := Checkpoint{Pipeline: p.cfg.Name, Generation: gen}
	if rec != nil {
		c.Epoch, c.EpochGeneration, c.Time, c.Final, c.Totals = rec.Epoch, rec.Generation, rec.Time, rec.Final, rec.Totals
	}
	return c, nil
}

// Checkpoint is what a pipeline's checkpoint log holds, as Inspect reads
// it.
type Checkpoint struct {
	Pipeline string
	// Generation is the latest attempt to claim the pipeline (running or
	// not); 0 when none ever did.
	Generation checkpoint.Generation
	// Epoch is the last committed epoch (0: none yet), committed by the
	// attempt of generation EpochGeneration at Time.
	Epoch           uint64
	EpochGeneration checkpoint.Generation
	Time            time.Time
	// Final reports that the epoch ended a Sync that read every split to
	// its end.
	Final bool
	// Totals counts the committed rows per stream over the pipeline's
	// life.
	Totals map[string]checkpoint.Counts
}

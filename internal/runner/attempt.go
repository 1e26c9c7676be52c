package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

type runner struct {
	cfg     Config
	log     *slog.Logger
	bounded bool
	start   time.Time

	gen        checkpoint.Generation
	head       *checkpoint.Record
	firstEpoch uint64

	streamSet map[string]bool
	streams   []string          // selected, in selection order
	catalog   source.Catalog    // the source's, for the engine workers' engines
	router    *router           // nil without routes
	specs     []sink.StreamSpec // what the writers were told
	splits    []source.Split
	pumps     []*pump
	eng       engine.Engine
	writers   []sink.Writer

	workers   []*engineWorker // the engine stage (workers.go)
	workerOf  map[string]int  // stream → its worker
	align     aligner
	toEngine  []chan pumpMsg // by worker
	toLanes   []chan laneMsg
	toCommit  chan commitMsg
	alignedCh chan uint64
	commitCh  chan committed
	budget    chan struct{}
	barriers  barrierControl

	// Observability: the monitor (status, events, instruments) and this
	// attempt's state in it; the attempt's span and its open epochs'
	// spans. streamOpts is filled before the engine workers start, read
	// only after.
	mon        *Monitor
	state      *attemptState
	syncSpan   trace.Span
	spanMu     sync.Mutex
	epochSpans map[uint64]epochSpan
	streamOpts map[string]streamOpts
	laneOpts   []metric.MeasurementOption

	placing    atomic.Bool // a placeIdle goroutine runs
	epochBytes atomic.Int64
	// freeBatches keeps raw batches for reuse. A channel rather than a
	// sync.Pool: the pool is emptied by every GC, and a batch that has to
	// grow again from nothing costs a copy and a clear of its buffers.
	freeBatches chan *engine.RawBatch
	// completeEpoch is the epoch that ends a completed read (its record is
	// Final), once the coordinator requested it; 0 before.
	completeEpoch atomic.Uint64
	// lastCommit is the commit goroutine's latest committed epoch, for the
	// Result of an attempt that failed before the coordinator heard of it.
	lastCommit atomic.Pointer[committed]
	// release is what the attempt's first epoch releases of the held
	// values (release.go); nil when nothing.
	release *heldRelease
}

type committed struct {
	epoch  uint64
	epochs int                          // committed in this attempt, this one included
	counts map[string]checkpoint.Counts // this attempt, cumulative
	totals map[string]checkpoint.Counts
}

func (r *runner) getBatch(stream string) *engine.RawBatch {
	var b *engine.RawBatch
	select {
	case b = <-r.freeBatches:
	default:
		b = new(engine.RawBatch)
		// Sized like the last full batch (of this process: a scheduled
		// Sync starts a new attempt each time), so that it doesn't double
		// its way up. Capped by this attempt's own bounds.
		h := lastFullBatch.Load()
		if h != nil {
			// An eighth more bytes: the next batch of as many rows is
			// rarely exactly as long.
			limit := r.cfg.BatchBytes + r.cfg.BatchBytes/8
			b.Grow(min(h.rows, r.cfg.BatchRows), min(h.keyBytes+h.keyBytes/8, limit), min(h.payloadBytes+h.payloadBytes/8, limit))
		}
	}
	b.Reset()
	b.Stream = stream
	return b
}

// batchSize is the size of a raw batch that reached a bound.
type batchSize struct{ rows, keyBytes, payloadBytes int }

// lastFullBatch is the size of the last raw batch flushed because it
// reached BatchRows or BatchBytes, in any attempt of this process.
var lastFullBatch atomic.Pointer[batchSize]

// noteFullBatch records b's size when it differs from the last one noted
// (an allocation only when the shape of the data changes).
func noteFullBatch(b *engine.RawBatch) {
	n := batchSize{rows: b.Len(), keyBytes: b.KeyBytes(), payloadBytes: b.Bytes() - b.KeyBytes()}
	if h := lastFullBatch.Load(); h != nil && *h == n {
		return
	}
	lastFullBatch.Store(&n)
}

func (r *runner) putBatch(b *engine.RawBatch) {
	select {
	case r.freeBatches <- b:
	default: // enough kept: let the GC have it
	}
}

func (r *runner) signalBudget() {
	select {
	case r.budget <- struct{}{}:
	default:
	}
}

// Sync runs one bounded attempt: it reads every split to the source's end
// as of the start, commits and returns. Cancelling ctx abandons the
// attempt: nothing after the last committed epoch is kept. Its error's
// message is redacted (RedactSecrets); errors.Is and errors.As see the
// original. A split's source.ErrReopen starts a new attempt instead
// (see there); the Result then counts them all.
func Sync(ctx context.Context, cfg Config) (Result, error) {
	return attempts(ctx, cfg, true)
}

// Run runs one continuous attempt until ctx is cancelled, then places a
// final barrier, commits it within StopTimeout and returns nil; cancelled
// while it sets up (claim, recovery, open), before reading, it returns
// nil too. It returns an error when the attempt fails, including
// checkpoint.ErrFenced when a newer attempt took the pipeline over. A
// split's source.ErrReopen starts a new attempt instead (see there).
func Run(ctx context.Context, cfg Config) error {
	_, err := attempts(ctx, cfg, false)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Cause(ctx)) {
		return nil // a stop during setup: nothing was read
	}
	return err
}

// attemptSummary is what attempts needs to know of an attempt besides
// its Result: how many records it read, and for how long it was reading
// (0 when it never got there).
type attemptSummary struct {
	read    int64
	reading time.Duration
}

// attempt runs one attempt; prior is what the earlier attempts of the
// same Sync committed (see attempts), for its after-sync steps.
func attempt(ctx context.Context, cfg Config, bounded bool, prior Result) (res Result, sum attemptSummary, err error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, sum, err
	}
	cfg = cfg.withDefaults()
	mon := cfg.Monitor
	if mon == nil {
		mon = NewMonitor(cfg)
		defer mon.close()
	}
	r := &runner{cfg: cfg, bounded: bounded, start: cfg.Now(), mon: mon,
		state: newAttemptState(cfg.Name, bounded, cfg.Now()), epochSpans: map[uint64]epochSpan{},
		streamOpts: map[string]streamOpts{}}
	mon.begin(r.state)
	ctx, r.syncSpan = mon.tracer.Start(ctx, "openetl.sync", trace.WithAttributes(
		AttrPipeline.String(cfg.Name), AttrBounded.Bool(bounded)))
	defer func() {
		r.state.mu.Lock()
		sum.read = r.state.st.Read
		if !r.state.readingSince.IsZero() {
			sum.reading = time.Since(r.state.readingSince)
		}
		r.state.mu.Unlock()
		r.end(ctx, res, err)
		// The caller may print it: no passwords (errors.Is and As still
		// see the original).
		err = redactErr(err)
	}()
	res, err = r.run(ctx)
	if err == nil && bounded && len(cfg.Steps) > 0 {
		err = r.runSteps(ctx, addResults(prior, res))
	}
	return res, sum, err
}

func (r *runner) run(ctx context.Context) (res Result, err error) {
	cfg := r.cfg
	defer func() {
		// An attempt that failed after its claim (in recovery, say) still
		// had its generation, and the epoch it resumed from.
		if res.Generation == 0 && r.gen != 0 {
			res.Generation, res.Epoch = r.gen, headEpoch(r.head)
			if r.head != nil {
				res.Totals = maps.Clone(r.head.Totals)
			}
		}
	}()
	bounded := r.bounded
	log := cfg.Logger.With("pipeline", cfg.Name)

	// Setting up (claim, discover, writers, recovery, open) follows the
	// caller's context. Once reading, work that must finish a clean stop
	// outlives it in Run; a Sync is abandoned with it.
	workParent := ctx
	if !bounded {
		workParent = context.WithoutCancel(ctx)
	}
	work, cancelWork := context.WithCancelCause(workParent)
	defer cancelWork(nil)

	// Check the catalog before claiming: an attempt that cannot run must
	// not fence one that can.
	catalog, err := cfg.Source.Discover(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("source: discover: %w", err)
	}
	streams, err := selectStreams(catalog, cfg.Streams)
	if err != nil {
		return Result{}, err
	}
	if _, err := Guarantees(cfg, catalog, streams); err != nil {
		return Result{}, err
	}
	r.streams, r.catalog = streams, catalog
	r.streamSet = map[string]bool{}
	for _, s := range streams {
		r.streamSet[s] = true
		r.streamOpts[s] = newStreamOpts(cfg.Name, s, r.mon.dest)
	}
	if sel := cfg.replay; sel != nil && !r.streamSet[sel.Stream] {
		return Result{}, fmt.Errorf("replay: stream %q is not selected or not in the source's catalog: %w", sel.Stream, delivery.ErrInvalid)
	}

	r.gen, r.head, err = cfg.Store.Claim(ctx, cfg.Name)
	if err != nil {
		return Result{}, fmt.Errorf("checkpoints: claim %q: %w", cfg.Name, err)
	}
	log = log.With("generation", uint64(r.gen))
	r.log = log
	if r.head != nil && r.head.Retired != "" && !cfg.settle {
		// Claimed (so fenced a run still going), read nothing.
		return Result{}, &PermanentError{By: CauseOther, Err: fmt.Errorf("checkpoints: %q: %w: %s", cfg.Name, ErrRetired, r.head.Retired)}
	}
	log.Info("attempt started", "bounded", bounded, "resume_epoch", headEpoch(r.head))
	r.claimed()

	defer func() { r.closeWriters(log) }()
	if err := r.setUp(ctx, catalog, streams, log); err != nil {
		return Result{}, err
	}
	defer r.eng.Close()
	if cfg.settle {
		// Settle: HEAD's epoch is applied and the fences raised; read
		// nothing (run's deferred function fills the Result in).
		log.Info("attempt settled the checkpoint without reading", "epoch", headEpoch(r.head))
		return Result{}, nil
	}
	r.firstEpoch = headEpoch(r.head) + 1
	// Before any Write: nothing of this attempt is staged yet.
	r.collect(ctx)

	resume := map[source.SplitID][]byte{}
	if sel := cfg.replay; sel != nil {
		// A replay reads no source split: its one split's resume state
		// is the record's account of what was replayed.
		var st []byte
		if r.head != nil {
			st = r.head.Replay
		}
		// Attempts run one after another: the first fixes the bound
		// its retries keep. A rewind since lowers it: later files
		// belong to epochs it undid.
		if !sel.fixed || headEpoch(r.head) < sel.upTo {
			sel.upTo, sel.fixed = headEpoch(r.head), true
		}
		rs := &replaySplit{store: cfg.Store, pipeline: cfg.Name, sel: *sel, upTo: sel.upTo}
		if rs.state, err = parseReplayState(st); err != nil {
			return Result{}, err
		}
		resume[ReplaySplitID] = st
		r.splits = []source.Split{rs}
		log.Info("replaying quarantined records instead of reading the source", "stream", sel.Stream,
			"reasons", sel.Reasons, "from_epoch", sel.FromEpoch, "to_epoch", sel.ToEpoch)
		return r.pipeline(ctx, work, cancelWork, resume, log)
	}
	if r.head != nil {
		for id, st := range r.head.Resume {
			resume[source.SplitID(id)] = st
		}
	}
	// After recovery, before any row: held values the destination takes
	// now go in the first epoch.
	if err := r.planRelease(ctx); err != nil {
		return Result{}, err
	}
	r.splits, err = cfg.Source.Open(ctx, streams, resume)
	if err != nil {
		return Result{}, fmt.Errorf("source: open: %w", err)
	}
	if len(r.splits) == 0 {
		return Result{}, fmt.Errorf("source: open returned no splits for streams %v", streams)
	}
	return r.pipeline(ctx, work, cancelWork, resume, log)
}

// setUp makes the engine from HEAD's state, opens the writers with every
// stream's spec and recovers. The engine is made first because it gives
// the table names the specs carry: every selected stream's, in selection
// order, before any batch (engine.Config.Tables), so a name never
// depends on which stream's rows come first, and every writer knows
// every table's spec from the start (lane 0 commits tables whose rows
// went to other lanes, and Recover may commit before any row is read).
// When recovery rewinds the log past a lost epoch, the engine is made
// again from the record resumed from; if that changes a name (the lost
// epoch was the first to name a stream whose name collides with
// another's), the writers are opened again with the new specs and
// recovered again.
func (r *runner) setUp(ctx context.Context, catalog source.Catalog, streams []string, log *slog.Logger) error {
	cfg := r.cfg
	caps := cfg.Destination.Capabilities()
	var open []sink.StreamSpec // the specs the writers have
	for {
		eng, err := r.newEngine(catalog, streams, caps)
		if err != nil {
			return err
		}
		names, err := givenNames(eng)
		if err != nil {
			eng.Close()
			return err
		}
		specs := make([]sink.StreamSpec, 0, len(streams))
		for _, name := range streams {
			specs = append(specs, specOf(catalog, name, cfg, caps, names))
		}
		if specs, err = routeSpecs(cfg, catalog, caps, specs); err != nil {
			eng.Close()
			return &PermanentError{By: CauseOther, Err: err}
		}
		if r.writers != nil && slices.EqualFunc(specs, open, sameSpec) {
			r.eng = eng
			return r.setUpRouter(catalog, streams, caps)
		}
		if err := r.checkSpecs(specs); err != nil {
			eng.Close()
			return err
		}
		if r.writers != nil {
			log.Info("reopening the writers: the rewind changed table names")
			r.closeWriters(log)
		}
		for lane := 0; lane < cfg.Lanes; lane++ {
			w, err := cfg.Destination.Writer(ctx, sink.WriterConfig{Pipeline: cfg.Name, Lane: lane, Streams: cloneSpecs(specs)})
			if err != nil {
				eng.Close()
				return fmt.Errorf("destination: writer for lane %d: %w", lane, err)
			}
			r.writers = append(r.writers, w)
			if _, ok := w.(sink.Visibility); lane == 0 && !ok && cfg.Destination.Capabilities().Deferred {
				eng.Close()
				return &PermanentError{By: CauseDestination, Err: fmt.Errorf(
					"destination: its Capabilities declare Deferred, but lane 0's writer (%T) does not implement sink.Visibility: "+
						"the source can't be told which positions it may drop (a wrapper must forward Visible)", w)}
			}
		}
		open = specs
		r.specs = specs
		head := r.head
		if err := r.recoverSpan(ctx); err != nil {
			eng.Close()
			return err
		}
		if r.head == head {
			r.eng = eng
			return r.setUpRouter(catalog, streams, caps)
		}
		// The log was rewound: the engine starts from the record it now
		// resumes from.
		eng.Close()
	}
}

// newEngine makes the attempt's engine from HEAD's state, with the
// streams' declared columns, policies and options, and every selected
// stream named ahead, in selection order.
func (r *runner) newEngine(catalog source.Catalog, streams []string, caps sink.Capabilities) (engine.Engine, error) {
	cfg := r.cfg
	var state []byte
	if r.head != nil {
		state = r.head.Engine
	}
	// Declared (FormatRow) streams need their columns in the engine, and
	// streams with a schema policy, JSON options or a key those.
	specs := engineSpecs(cfg, catalog, streams)
	eng, err := cfg.NewEngine(engine.Config{Lanes: cfg.Lanes, MaxDocumentBytes: cfg.MaxDocumentBytes, State: state, Streams: specs,
		Naming: namingRules(caps), Unsupported: caps.Unsupported, Tables: streams})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return eng, nil
}

// engineSpecs returns the engine specs of the selected streams:
// Declared (FormatRow) streams need their columns in the engine, and
// streams with a schema policy, JSON options, a key, column rules or a
// row filter those.
func engineSpecs(cfg Config, catalog source.Catalog, streams []string) []engine.StreamSpec {
	var specs []engine.StreamSpec
	for _, name := range streams {
		st, ok := catalog.Stream(name)
		rules, filter := cfg.Rules[name], cfg.Filters[name]
		var spec engine.StreamSpec
		switch pol := cfg.Policies[name]; {
		case !ok:
			continue
		case st.Format == source.FormatRow:
			spec = declaredSpec(st)
			spec.Policy = pol
		case pol != "" || cfg.JSON[name] != JSONOptions{} || len(st.PrimaryKey) > 0 || len(rules) > 0 || filter != nil:
			// A keyed stream's record without a key, or whose document
			// lacks a key field, is quarantined missing_key: it can't be
			// merged or deleted by key.
			o := cfg.JSON[name]
			spec = engine.StreamSpec{Name: st.Name, Policy: pol,
				NestedAsText: o.NestedAsText, Timestamps: o.Timestamps, Keyed: len(st.PrimaryKey) > 0, Key: st.PrimaryKey}
		default:
			continue
		}
		if len(rules) > 0 || filter != nil {
			spec.Rules, spec.Filter = rules, filter
			spec.Key = st.PrimaryKey
			spec.Merge = cfg.Modes[name] == delivery.Merge && len(st.PrimaryKey) > 0
		}
		specs = append(specs, spec)
	}
	return specs
}

// CheckPolicies checks the streams' column rules and row filters against
// the catalog, as the engine will take them: each names a selected
// stream, and a declared stream's columns of types its policy takes.
func CheckPolicies(cfg Config, catalog source.Catalog) error {
	if len(cfg.Rules) == 0 && len(cfg.Filters) == 0 {
		return nil
	}
	streams, err := selectStreams(catalog, cfg.Streams)
	if err != nil {
		return nil // reported by Guarantees
	}
	var errs []error
	for _, m := range []map[string]bool{keysOf(cfg.Rules), keysOf(cfg.Filters)} {
		for name := range m {
			if !slices.Contains(streams, name) {
				errs = append(errs, fmt.Errorf("policies: stream %q is not among the streams read", name))
			}
		}
	}
	for _, spec := range engineSpecs(cfg, catalog, streams) {
		if len(spec.Rules) == 0 && spec.Filter == nil {
			continue
		}
		eng, err := engine.New(engine.Config{Streams: []engine.StreamSpec{spec}})
		if errors.Is(err, engine.ErrUnavailable) {
			return nil // Build reports it
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("policies: %w", err))
			continue
		}
		eng.Close()
	}
	return errors.Join(errs...)
}

func keysOf[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// renamed is the name column c of stream has after its rename rule.
func renamed(cfg Config, stream, c string) string {
	for _, r := range cfg.Rules[stream] {
		if r.Kind == engine.RuleRename && r.Column == c {
			return r.To
		}
	}
	return c
}

// delivered says whether the column rules of stream keep column c.
func delivered(cfg Config, stream, c string) bool {
	rules := cfg.Rules[stream]
	included := true
	for _, r := range rules {
		switch {
		case r.Kind == engine.RuleExclude && r.Column == c:
			return false
		case r.Kind == engine.RuleInclude:
			included = included && slices.Contains(r.Columns, c)
		}
	}
	if !included {
		// Several include rules: a column any of them lists is kept.
		for _, r := range rules {
			if r.Kind == engine.RuleInclude && slices.Contains(r.Columns, c) {
				return true
			}
		}
		return false
	}
	// A column with a rename's new name, itself not renamed, is left
	// out (declared streams refuse it at Build).
	for _, r := range rules {
		if r.Kind == engine.RuleRename && r.To == c && r.Column != c && renamed(cfg, stream, c) == c {
			return false
		}
	}
	return true
}

// hashed says whether column c of stream is hashed.
func hashed(cfg Config, stream, c string) bool {
	for _, r := range cfg.Rules[stream] {
		if r.Kind == engine.RuleHash && r.Column == c {
			return true
		}
	}
	return false
}

// givenNames returns the destination names eng has given, by stream.
func givenNames(eng engine.Engine) (map[string]engine.StreamNames, error) {
	st, err := eng.State()
	if err != nil {
		return nil, fmt.Errorf("engine: state: %w", err)
	}
	names, err := engine.NamesFromState(st)
	if err != nil {
		return nil, fmt.Errorf("engine: names: %w", err)
	}
	return names, nil
}

// checkSpecs asks a destination that implements sink.SpecChecker about
// each spec, as Guarantees does before the claim, now with the table
// names the writers get.
func (r *runner) checkSpecs(specs []sink.StreamSpec) error {
	sc, ok := r.cfg.Destination.(sink.SpecChecker)
	if !ok {
		return nil
	}
	var errs []error
	for _, spec := range specs {
		if err := sc.CheckStream(spec); err != nil {
			errs = append(errs, fmt.Errorf("destination: stream %q: %w", spec.Stream, err))
		}
	}
	return errors.Join(errs...)
}

func sameSpec(a, b sink.StreamSpec) bool {
	return a.Stream == b.Stream && a.Table == b.Table && a.Mode == b.Mode && a.Deletes == b.Deletes &&
		a.Types == b.Types && slices.Equal(a.Key, b.Key) && slices.Equal(a.Columns, b.Columns)
}

// cloneSpecs copies specs, so that no writer can change another's.
func cloneSpecs(specs []sink.StreamSpec) []sink.StreamSpec {
	out := slices.Clone(specs)
	for i := range out {
		out[i].Key = slices.Clone(out[i].Key)
		out[i].Columns = slices.Clone(out[i].Columns)
	}
	return out
}

// declaredSpec returns the engine spec of a FormatRow stream of the
// catalog.
func declaredSpec(s source.Stream) engine.StreamSpec {
	cols := make([]engine.Column, len(s.Columns))
	for i, c := range s.Columns {
		cols[i] = engine.Column(c)
	}
	return engine.StreamSpec{Name: s.Name, Declared: true, Types: s.Types, Columns: cols, Keyed: len(s.PrimaryKey) > 0,
		Key: s.PrimaryKey}
}

func headEpoch(h *checkpoint.Record) uint64 {
	if h == nil {
		return 0
	}
	return h.Epoch
}

func selectStreams(c source.Catalog, want []string) ([]string, error) {
	if len(c.Streams) == 0 {
		return nil, errors.New("source: catalog has no streams")
	}
	var errs []error
	seen := map[string]bool{}
	all := make([]string, 0, len(c.Streams))
	for _, s := range c.Streams {
		if !validStreamName(s.Name) || seen[s.Name] {
			errs = append(errs, fmt.Errorf("source: catalog stream name %q is empty, repeated, longer than 200 bytes, ends in .lock, or has '/', '\\', a leading '.' or '_', or a control character", s.Name))
		}
		seen[s.Name] = true
		all = append(all, s.Name)
	}
	if len(want) == 0 {
		return all, errors.Join(errs...)
	}
	for _, w := range want {
		if !seen[w] {
			errs = append(errs, fmt.Errorf("streams: %q is not in the source's catalog", w))
		}
	}
	return want, errors.Join(errs...)
}

// Guarantees works out the delivery guarantee of each selected stream
// (all of the catalog's when streams is nil) and checks it against
// cfg.Required; the error names each stream that is invalid or falls
// short, and why.
func Guarantees(cfg Config, catalog source.Catalog, streams []string) ([]delivery.Guarantee, error) {
	if streams == nil {
		var err error
		if streams, err = selectStreams(catalog, cfg.Streams); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, opt := range []struct {
		what  string
		names []string
	}{
		{"write mode", slices.Sorted(maps.Keys(cfg.Modes))},
		{"schema policy", slices.Sorted(maps.Keys(cfg.Policies))},
		{"JSON options", slices.Sorted(maps.Keys(cfg.JSON))},
		{"transform", slices.Sorted(maps.Keys(cfg.Transforms))},
	} {
		for _, name := range opt.names {
			if _, ok := catalog.Stream(name); !ok {
				errs = append(errs, fmt.Errorf("%s: stream %q is not in the source's catalog", opt.what, name))
			}
		}
	}
	for name := range cfg.Deletes {
		if _, ok := catalog.Stream(name); !ok {
			errs = append(errs, fmt.Errorf("deletes: stream %q is not in the source's catalog", name))
		}
	}
	ds := make([]delivery.Stream, 0, len(streams))
	for _, name := range streams {
		st, _ := catalog.Stream(name)
		ds = append(ds, delivery.Stream{
			Name: name, Replay: cfg.Source.Replay(), Class: cfg.Destination.Class(),
			Capabilities: cfg.Destination.Capabilities(), Mode: cfg.Modes[name], HasKey: len(st.PrimaryKey) > 0,
			Deletes: cfg.Deletes[name],
		})
	}
	gs, err := delivery.Check(ds, cfg.Required)
	if err != nil {
		errs = append(errs, err)
	}
	noteTransforms(cfg, gs)
	routeErr := checkRoutes(cfg, catalog, streams)
	errs = append(errs, routeErr)
	if sc, ok := cfg.Destination.(sink.SpecChecker); ok {
		caps := cfg.Destination.Capabilities()
		var specs []sink.StreamSpec
		for i, name := range streams {
			if _, err := delivery.Decide(ds[i], cfg.Required); errors.Is(err, delivery.ErrInvalid) {
				continue // said already: a mode the destination doesn't declare, say
			}
			specs = append(specs, specOf(catalog, name, cfg, caps, nil))
		}
		if routeErr == nil {
			specs, _ = routeSpecs(cfg, catalog, caps, specs) // a routed table's one spec
		}
		for _, spec := range specs {
			if err := sc.CheckStream(spec); err != nil {
				errs = append(errs, fmt.Errorf("destination: stream %q: %w", spec.Stream, err))
			}
		}
	}
	return gs, errors.Join(errs...)
}

// specOf returns stream name's spec, with its table and columns named
// as the engine named them (names, from its state: exact), or, for
// names it has not given (names nil, before an attempt; a JSON stream's
// column not seen yet), as it will name them unless two names collide
// (baseName).
func specOf(catalog source.Catalog, name string, cfg Config, caps sink.Capabilities, names map[string]engine.StreamNames) sink.StreamSpec {
	st, _ := catalog.Stream(name)
	given := names[name]
	// A renamed column is named from its new name (the engine's names
	// are keyed by it too).
	column := func(c string) string {
		c = renamed(cfg, name, c)
		if d, ok := given.Columns[c]; ok {
			return d
		}
		return baseName(caps, c)
	}
	spec := sink.StreamSpec{Stream: name, Table: given.Table, Mode: cfg.Modes[name], Deletes: cfg.Deletes[name]}
	if spec.Table == "" {
		spec.Table = baseName(caps, name)
	}
	for _, k := range st.PrimaryKey {
		spec.Key = append(spec.Key, column(k))
	}
	if st.Format == source.FormatRow {
		spec.Types = st.Types
		if spec.Types == "" {
			spec.Types = source.TypesPostgres
		}
		for _, c := range st.Columns {
			if !delivered(cfg, name, c.Name) {
				continue
			}
			typ := c.Type
			if hashed(cfg, name, c.Name) {
				typ = "text" // a hash is 64 hex digits, of any column type
			}
			spec.Columns = append(spec.Columns, sink.Column{Name: column(c.Name), Type: typ, Nullable: c.Nullable})
		}
	}
	return spec
}

// baseName is the name the engine gives name under the destination's
// naming rules before any collision suffix (engine/rust/src/names.rs,
// Rules::base).
func baseName(c sink.Capabilities, name string) string {
	if namingRules(c) == nil {
		return name
	}
	s := name
	switch c.IdentifierCase {
	case "lower":
		s = strings.ToLower(s)
	case "upper":
		s = strings.ToUpper(s)
	}
	if c.SimpleIdentifiers {
		s = strings.Map(func(r rune) rune {
			if r < 0x80 && (r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return r
			}
			return '_'
		}, s)
		if s == "" || s[0] >= '0' && s[0] <= '9' {
			s = "_" + s
		}
	}
	if s == "" {
		s = "_"
	}
	for _, r := range c.ReservedWords {
		if strings.EqualFold(r, s) {
			s += "_"
			break
		}
	}
	if c.MaxIdentifier > 0 && len(s) > c.MaxIdentifier {
		cut := c.MaxIdentifier
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// namingRules turns a destination's naming capabilities into the engine's
// rules; nil when the destination takes any name.
func namingRules(c sink.Capabilities) *engine.NamingRules {
	if c.MaxIdentifier == 0 && c.IdentifierCase == "" && !c.SimpleIdentifiers && len(c.ReservedWords) == 0 {
		return nil
	}
	return &engine.NamingRules{MaxLength: c.MaxIdentifier, Case: engine.Case(c.IdentifierCase),
		Simple: c.SimpleIdentifiers, Reserved: c.ReservedWords}
}

// validStreamName reports whether a stream name can name directories and
// objects at destinations and in the checkpoint store.
func validStreamName(n string) bool {
	if n == "" || len(n) > 200 || n[0] == '.' || n[0] == '_' || strings.HasSuffix(n, ".lock") {
		return false
	}
	for _, c := range n {
		if c == '/' || c == '\\' || c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// fenceAhead decides what Recover's fenced error means. A fence above
// this attempt's generation was raised by a newer attempt, which claimed
// the pipeline in the log before raising it — unless the log never
// issued that generation: the store was lost or replaced, and the
// destination is ahead of it. If the log's HEAD (Store.Head) still
// belongs to this attempt's generation, no newer attempt exists. An
// error of the store leaves the fenced error as it is.
func (r *runner) fenceAhead(ctx context.Context, fenced error) error {
	if g, _, err := r.cfg.Store.Head(ctx, r.cfg.Name); err != nil || g != r.gen {
		return fenced
	}
	return &sink.AheadError{Pipeline: r.cfg.Name, Where: "the generation fence", HeadEpoch: headEpoch(r.head),
		Claimed: r.gen, Detail: fenced.Error()}
}

func (r *runner) closeWriters(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.StopTimeout)
	defer cancel()
	for i, w := range r.writers {
		if err := w.Close(ctx); err != nil {
			log.Warn("closing writer", "lane", i, "err", err)
		}
	}
	r.writers = nil
}

// resumeMap builds a record's resume states: the head's, overlaid with
// this epoch's per split.
func (r *runner) resumeMap(base map[string][]byte, states [][]byte) map[string][]byte {
	out := maps.Clone(base)
	if out == nil {
		out = map[string][]byte{}
	}
	for i, st := range states {
		id := string(r.pumps[i].id)
		if st == nil {
			delete(out, id)
		} else {
			out[id] = st
		}
	}
	return out
}

// CheckPipeline asks a sink.PipelineChecker destination whether the
// pipeline may write its streams, with the specs a first attempt's
// writers would get (table names from a fresh engine: an attempt
// resuming a checkpoint may name a colliding stream otherwise, and its
// writers check again). Build calls it; nil when the destination has no
// such check.
func CheckPipeline(ctx context.Context, cfg Config, catalog source.Catalog) error {
	pc, ok := cfg.Destination.(sink.PipelineChecker)
	if !ok {
		return nil
	}
	streams, err := selectStreams(catalog, cfg.Streams)
	if err != nil {
		return err
	}
	r := &runner{cfg: cfg.withDefaults()}
	caps := cfg.Destination.Capabilities()
	eng, err := r.newEngine(catalog, streams, caps)
	if err != nil {
		return err
	}
	defer eng.Close()
	names, err := givenNames(eng)
	if err != nil {
		return err
	}
	specs := make([]sink.StreamSpec, 0, len(streams))
	for _, name := range streams {
		specs = append(specs, specOf(catalog, name, r.cfg, caps, names))
	}
	if specs, err = routeSpecs(cfg, catalog, caps, specs); err != nil {
		return nil // Guarantees reports it
	}
	if err := pc.CheckPipeline(ctx, sink.WriterConfig{Pipeline: cfg.Name, Streams: specs}); err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	return nil
}

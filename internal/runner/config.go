// Package runner is the runner: it reads a source's splits, turns their
// records into Arrow through the engine, writes them through a
// destination's writer lanes and commits them in epochs through the
// checkpoint log. It is internal: package etl, its only public way in,
// wraps it in a builder and a Pipeline and owns the types hosts see
// (Event, Status, Progress, Result); package sim drives it directly to
// inject its faults.
//
// One attempt (Sync or Run) runs these goroutines:
//
//	pump (one per split) ──raw batches, barriers──▶ engine ──Arrow──▶ writer lanes
//	                                                  │                   │ PreCommit(N)
//	                                                  ▼                   ▼
//	                                  coordinator ◀── commit goroutine: record N, CAS HEAD,
//	                                                                   Commit(N) on lane 0, Ack(N-1)
//
// Barriers are aligned: a split that has placed barrier N emits nothing more
// until every split has placed it, so each epoch holds exactly the records
// between two sets of resume points.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// JSONOptions are how the engine types the documents of a JSON stream
// (etl.JSONOptions documents them); the zero value is the default.
type JSONOptions struct {
	NestedAsText bool
	Timestamps   bool
}

// Config is everything an attempt needs. The zero values of the optional
// fields select the documented defaults.
type Config struct {
	Name        string
	Source      source.Source
	Destination sink.Destination
	Store       checkpoint.Store
	// Streams selects streams by name; nil reads every stream in the
	// catalog.
	Streams []string
	// Required is the delivery level every selected stream must reach;
	// default delivery.BestEffort (no requirement).
	Required delivery.Level
	// Modes sets streams' write modes by name; default delivery.Append.
	Modes map[string]delivery.Mode
	// Deletes sets what merged streams' deletes do, by name; default
	// sink.SoftDeletes. Only Merge streams may set it.
	Deletes map[string]sink.Deletes
	// Policies sets streams' schema policies by name (see engine.Policy):
	// default engine.PolicyEvolve. A policy applies from the next attempt
	// on, to the schema the stream has then.
	Policies map[string]engine.Policy
	// JSON sets how JSON streams' documents are typed, by stream name
	// (see JSONOptions); default the zero JSONOptions.
	JSON map[string]JSONOptions
	// Rules sets streams' column policies by name (see engine.Rule and
	// etl.Builder.Columns); default none. Filters sets their row
	// filters (etl.Builder.Filter). Both run in the engine.
	Rules   map[string][]engine.Rule
	Filters map[string]*engine.Cond
	// Transforms sets streams' Go transforms by name (see Transform and
	// etl.Builder.Transform); default none.
	Transforms map[string]Transform
	// Routes send streams matching a pattern into one table each (see
	// Route and etl.Builder.Route); default none.
	Routes []Route
	// Lanes is the number of writer lanes; default 1.
	Lanes int
	// EngineWorkers is how many goroutines run the engine, each with an
	// engine of its own for a share of the streams (streams routed into
	// one table share one); default Lanes up to GOMAXPROCS, never more
	// than there are streams (or routed tables).
	EngineWorkers int
	// BatchRows and BatchBytes bound a raw batch handed to the engine;
	// defaults 8192 rows and 4 MiB.
	BatchRows  int
	BatchBytes int
	// EpochInterval places a barrier this long after the previous one;
	// default 10s.
	EpochInterval time.Duration
	// FirstEpoch, when positive and shorter than EpochInterval, places
	// an attempt's first timed barrier this long after its start (or at
	// the first multiple of it with something read): shards of one
	// pipeline started together then close their epochs out of phase,
	// so their destination commits don't come in bursts.
	FirstEpoch time.Duration
	// EpochBytes places a barrier once this many payload bytes were read
	// since the previous one; default 256 MiB.
	EpochBytes int64
	// CommitRetries is how often a failed destination Commit is retried,
	// with exponential backoff from CommitBackoff, before the attempt fails
	// (the next attempt recovers the epoch); defaults 5 and 200ms.
	CommitRetries int
	CommitBackoff time.Duration
	// StopTimeout bounds the final checkpoint of Run after its context is
	// cancelled; default 30s.
	StopTimeout time.Duration
	// MaxDocumentBytes is passed to the engine; default 16 MiB.
	MaxDocumentBytes int
	// Logger receives lifecycle (Info), retries (Warn) and per-epoch and
	// per-batch (Debug) logs, never row data; every message and attribute
	// passes through RedactSecrets first. Default discard.
	Logger *slog.Logger
	// OnProgress is called after every committed epoch and about once a
	// second while reading, from the attempt's coordinating goroutine:
	// while it runs no barrier is requested, so it must return quickly.
	OnProgress func(Progress)
	// OnEvent receives the attempt's events (see EventKind), in order, on
	// a goroutine of its own, through a queue of EventQueue events
	// (default 1024): the runner never waits for it, and events that find
	// the queue full are dropped and counted (Status.EventsDropped, the
	// openetl.events.dropped metric). Default: no events.
	OnEvent    func(Event)
	EventQueue int
	// LagAlert is the lag (the largest age a split reports through
	// source.LagReporter) above which EventPipelineLagging is emitted, and at
	// or below which EventPipelineRecovered follows; default 0, no lag
	// events.
	LagAlert time.Duration
	// MeterProvider and TracerProvider make the runner's metrics and
	// spans (docs/metrics.md lists them); defaults otel.GetMeterProvider() and
	// otel.GetTracerProvider(), which do nothing until the host sets
	// them.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Monitor carries status, events and instruments across attempts
	// (NewMonitor; package etl makes one per Pipeline). When nil, each
	// attempt makes its own from the fields above.
	Monitor *Monitor
	// NewEngine makes the engine; default engine.New.
	NewEngine func(engine.Config) (engine.Engine, error)
	// Now is the clock for _openetl_synced_at and record times; default
	// time.Now.
	Now func() time.Time
	// Retry makes Run (and Sync, with Retry.Sync) start a new attempt
	// after a transient failure (see RetryPolicy); nil: the first
	// failure is returned.
	Retry *RetryPolicy
	// Steps run, in order, after a Sync that read to the source's end
	// and committed (also one that committed nothing new), before the
	// attempt ends; the first that fails fails the Sync, with its error
	// as it is. Run never runs them.
	Steps []Step

	// replay, set by Replay, makes the attempt replay quarantined
	// records instead of reading the source.
	replay *ReplaySelection
	// settle, set by Settle, ends the attempt right after recovery,
	// before the source is opened.
	settle bool
}

// Step is work the host runs after a Sync commits (Config.Steps). Run
// gets the attempt's context and the Sync's Result (over every attempt
// of a Sync that a source's source.ErrReopen restarted).
type Step struct {
	Name string
	Run  func(context.Context, Result) error
}

// Progress is a snapshot of a running attempt, passed to OnProgress. Its
// maps and slices belong to the callback.
type Progress struct {
	Generation checkpoint.Generation
	// Phase is PhaseRunning, or PhaseStopping once the final barrier is
	// requested.
	Phase Phase
	// Epoch is the last committed epoch (the one resumed after, before
	// this attempt commits one; 0 when none).
	Epoch uint64
	// Read counts records read in this attempt so far, committed or not.
	Read int64
	// Committed counts this attempt's committed rows per stream.
	Committed map[string]checkpoint.Counts
	// Totals counts committed rows per stream over the pipeline's life.
	Totals map[string]checkpoint.Counts
	// Streams holds per-stream reads, counts and snapshot progress
	// (rows copied and estimated, from splits implementing
	// source.SnapshotReporter).
	Streams map[string]StreamStatus
	// Lag is the largest age of unread data the splits report (LagKnown
	// false when none implements source.LagReporter or none can tell), and
	// Backlog the splits' distance to the source's end, summed per unit.
	Lag      time.Duration
	LagKnown bool
	Backlog  map[string]int64
	// Elapsed since the attempt started.
	Elapsed time.Duration
}

// Result is what an attempt did.
type Result struct {
	// Generation is the generation the attempt claimed, also when it
	// failed after the claim; 0 when it failed before.
	Generation checkpoint.Generation
	// Epoch is the last committed epoch, from this attempt or, when it
	// committed nothing, the one it resumed from.
	Epoch uint64
	// Epochs is how many epochs this attempt committed.
	Epochs int
	// Streams counts this attempt's committed rows per stream.
	Streams map[string]checkpoint.Counts
	// Totals counts committed rows per stream over the pipeline's life.
	Totals map[string]checkpoint.Counts
}

// DefaultEpochInterval is Config.EpochInterval's default.
const DefaultEpochInterval = 10 * time.Second

const (
	defaultBatchRows     = 8192
	defaultBatchBytes    = 4 << 20
	defaultEpochBytes    = 256 << 20
	defaultCommitRetries = 5
	defaultCommitBackoff = 200 * time.Millisecond
	defaultStopTimeout   = 30 * time.Second
	maxLanes             = 256
)

// Validate reports every problem with c, each naming the field at fault,
// joined into one error.
func (c *Config) Validate() error {
	var errs []error
	if err := checkpoint.ValidPipeline(c.Name); err != nil {
		errs = append(errs, fmt.Errorf("name: %w", err))
	}
	if c.Source == nil {
		errs = append(errs, errors.New("source: missing (call From)"))
	}
	if c.Destination == nil {
		errs = append(errs, errors.New("destination: missing (call To)"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("checkpoints: missing store (call Checkpoints)"))
	}
	if c.Lanes < 0 || c.Lanes > maxLanes {
		errs = append(errs, fmt.Errorf("lanes: %d out of range 1..%d", c.Lanes, maxLanes))
	}
	if c.EngineWorkers < 0 || c.EngineWorkers > maxLanes {
		errs = append(errs, fmt.Errorf("engine workers: %d out of range 1..%d", c.EngineWorkers, maxLanes))
	}
	if c.BatchRows < 0 || c.BatchBytes < 0 {
		errs = append(errs, errors.New("batch size: negative"))
	}
	if c.EpochInterval < 0 {
		errs = append(errs, fmt.Errorf("epoch interval: negative (%v)", c.EpochInterval))
	}
	if c.EpochBytes < 0 {
		errs = append(errs, fmt.Errorf("epoch bytes: negative (%d)", c.EpochBytes))
	}
	if c.CommitRetries < 0 || c.CommitBackoff < 0 || c.StopTimeout < 0 {
		errs = append(errs, errors.New("commit retries, backoff and stop timeout: negative"))
	}
	if r := c.Retry; r != nil && (r.Backoff < 0 || r.MaxBackoff < 0) {
		errs = append(errs, errors.New("retry: negative backoff"))
	}
	if c.EventQueue < 0 || c.LagAlert < 0 {
		errs = append(errs, errors.New("event queue and lag alert: negative"))
	}
	if c.Required > delivery.ExactlyOnce {
		errs = append(errs, fmt.Errorf("required level: unknown %v", c.Required))
	}
	for name, m := range c.Modes {
		if m > delivery.Overwrite {
			errs = append(errs, fmt.Errorf("write mode: stream %q: unknown %v", name, m))
		}
	}
	for name, d := range c.Deletes {
		if d > sink.HardDeletes {
			errs = append(errs, fmt.Errorf("deletes: stream %q: unknown %v", name, d))
		} else if d != sink.SoftDeletes && c.Modes[name] != delivery.Merge {
			errs = append(errs, fmt.Errorf("deletes: stream %q: %v deletes need merge mode, but it is written in %v mode (set Mode(delivery.Merge, %q))", name, d, c.Modes[name], name))
		}
	}
	for name, p := range c.Policies {
		switch p {
		case "", engine.PolicyEvolve, engine.PolicyFreeze, engine.PolicyDiscard:
		default:
			errs = append(errs, fmt.Errorf("schema policy: stream %q: unknown %q (evolve, freeze or discard)", name, p))
		}
	}
	steps := map[string]bool{}
	for i, st := range c.Steps {
		switch {
		case st.Name == "" || steps[st.Name]:
			errs = append(errs, fmt.Errorf("after-sync step %d: name %q empty or repeated", i+1, st.Name))
		case st.Run == nil:
			errs = append(errs, fmt.Errorf("after-sync step %q: nil func", st.Name))
		}
		steps[st.Name] = true
	}
	for name, t := range c.Transforms {
		if t == nil {
			errs = append(errs, fmt.Errorf("transform: stream %q: nil function", name))
		}
	}
	errs = append(errs, validateRoutes(c.Routes)...)
	seen := map[string]bool{}
	for _, s := range c.Streams {
		if s == "" || seen[s] {
			errs = append(errs, fmt.Errorf("streams: %q empty or repeated", s))
		}
		seen[s] = true
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Lanes == 0 {
		c.Lanes = 1
	}
	if c.BatchRows == 0 {
		c.BatchRows = defaultBatchRows
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = defaultBatchBytes
	}
	if c.EpochInterval == 0 {
		c.EpochInterval = DefaultEpochInterval
	}
	if c.EpochBytes == 0 {
		c.EpochBytes = defaultEpochBytes
	}
	if c.CommitRetries == 0 {
		c.CommitRetries = defaultCommitRetries
	}
	if c.CommitBackoff == 0 {
		c.CommitBackoff = defaultCommitBackoff
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = defaultStopTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	} else if c.Logger.Handler() != slog.DiscardHandler {
		c.Logger = slog.New(newRedactHandler(c.Logger.Handler()))
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.NewEngine == nil {
		c.NewEngine = engine.New
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Package sim is a seeded simulation of the whole runner under faults, in
// the spirit of TigerBeetle's VOPR: one uint64 seed picks a workload and
// every fault, the real runner (what etl.Pipeline.Sync and Run run) and by
// default the real engine move the data from a sourcetest.FakeSource to a
// destination through a memory checkpoint store, and the simulation then
// checks the promises of package delivery (docs/delivery.md in the
// repository).
//
// The destination is by default a sinktest.FakeDestination, whose own
// records the checks read. Options.Target runs the same simulation
// against any real sink.Destination instead:
//
//	rep, err := sim.Run(seed, sim.Options{Target: &sim.Target{
//		Open: func(ctx context.Context, s sim.Setup) (sink.Destination, error) {
//			return mysink.New(mysink.Config{DB: db}) // a new "process" per attempt
//		},
//		Read: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
//			return readTable(ctx, db, stream) // what a reader sees
//		},
//		DropStaged: dropUncommitted, // optional: staged data expiring
//	}})
//
// The destination's Class and Capabilities then replace the ones the
// seed would pick, so the workload uses only write modes it declares
// (merge when Capabilities.Merge; the writers learn each stream's mode
// and key from their sink.WriterConfig), and each attempt's destination is
// wrapped by sinktest.WithFaults, which injects the same faults from
// outside the writer. The checks then read what the destination holds
// through Target.Read, and know what the wrapper saw: an epoch counts as
// applied once a Commit of it returned nil or a Recover with it as HEAD
// reported Applied — or, for a destination that declares
// sink.Capabilities.Deferred, once its writer reports it visible
// (sink.Visibility). What changes with a Target:
//
//   - a merged stream is checked by its rows now (each key's row the
//     source's latest version, one row per key), not version by version,
//     since a reader sees only the latest;
//   - the destination's own log of applies (each epoch applied once,
//     never by a generation below the fence) is not read: double applies
//     show as duplicated rows, and a zombie's landed Commit as rows
//     duplicated or out of date;
//   - a zombie pauses before its call reaches the destination, not
//     inside it (the fake pauses a Commit between reading which epochs
//     are applied and applying). A Commit that returns nil after a newer
//     generation recovered is a violation whether or not it changed a
//     row: package sink requires ErrFenced. Half the zombies (picked by
//     the seed) go on as the next attempt calls Recover, racing it,
//     instead of once it returned;
//   - the faults a writer's own code most often gets wrong are drawn
//     often: a Commit that lands and loses its response (the runner's
//     retry must change nothing) in most attempts, a zombie paused
//     before a Commit in a third of them, so that 50 seeds catch a
//     Commit that is not idempotent or one that ignores its fence in at
//     least 95 of 100 runs (TestTargetCatchesWithin50Seeds measures it);
//   - staged data expires only when Target.DropStaged is set;
//   - faults are drawn at the Writer's Finish too (crashes, errors,
//     lost responses, zombies), and errors at Recover (before it took
//     effect, or after it raised the fence), from a random stream of
//     their own, so that the fake's plans are the same as without.
//
// sink/iceberg and sink/parquet run it from their TestSim.
//
// The seed picks (math/rand/v2 PCG): the streams (keyed or not, CDC with
// updates and deletes or not, splits, rows, quarantined records), the
// source's replay class (exact or superset), the destination's class
// (stage-and-apply, transactional, deliver-ack), capabilities and write
// modes, the required level, lanes, batch sizes and epoch intervals, and a
// list of attempts (Syncs, and Runs cancelled after a while), each with
// its faults:
//
//   - a crash at each protocol step: before and after PreCommit, after
//     the HEAD write and before Commit, during Commit, during Recover,
//     while reading;
//   - Commit errors (retried; enough of them fail the attempt) and
//     Commits that land but lose their response;
//   - checkpoint store errors on Claim, Commit, Rewind, Get, WriteFile and
//     ReadFile, before the call or after it landed (a lost response);
//   - slow calls; zombies: an attempt pauses at a call while the next
//     attempt claims the pipeline and runs, then goes on;
//   - source disconnects, destination write errors, and staged data that
//     expires between attempts (Recover then reports the epoch lost and
//     the log rewinds);
//   - after the planned attempts, for a third of the seeds (a random
//     stream of its own) but deliver-ack ones, the checkpoint store
//     lost: one attempt runs
//     with an empty store (its generation below the destination's fence,
//     or claimed past it), and must fail with sink.ErrAhead, not fenced,
//     before writing anything; the real store is back for the attempts
//     after it.
//
// A crash kills the attempt's "process": its context is cancelled and
// every view it holds (the fake source's, the destination's and the
// store wrapper) refuses every later call, so nothing it does after that
// point has an effect (a killed writer is not even closed: a dead
// process commits nothing at Close). A call already past its fault check when the crash
// happens completes, as it could in a real process.
//
// After the planned attempts, clean Syncs run until one succeeds. Then the
// simulation checks, per stream and by the guarantee package delivery
// promises it: nothing lost; no duplicates where exactly once is
// promised; final rows equal to the source's latest rows where
// effectively once is promised (and for merged exactly-once streams),
// and, read after every attempt, no merged key's row gone back to an
// older version than one visible before (the seq guard; the fake
// source's splits have keys of their own and replay in order, so only a
// destination that reorders rows can trip it today); every record visible at least once where at least once is promised; no
// row the source never had; HEAD never moved backwards except by a rewind
// (every HEAD transition is recorded), a rewind never passed an epoch the
// destination applied, and every epoch of the final log is applied; the
// final totals have read = written + quarantined (and, for an exact
// source, read = the records the source holds); quarantine files are
// published for every committed epoch; acknowledged positions are
// committed, and no rewind goes back past one.
//
// The workload and the fault plan are deterministic functions of the
// seed; goroutine interleavings are not (the real runner runs on real
// goroutines and timers), so a seed replays the same plan but may take a
// different path through it. The Report's trace says what happened.
// Running Run inside a testing/synctest bubble does not change that: the
// bubble puts the timers on a fake clock, but the paths differ by which
// goroutine runs first, which it leaves to the scheduler; and with a
// Target that waits on a network the bubble's clock would not move.
package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/sourcetest"
)

const pipelineName = "sim"

// Options tune a simulation; the zero value is the default.
type Options struct {
	// MaxRows bounds the records of each split; default 100.
	MaxRows int
	// MaxAttempts bounds the faulty attempts before the clean ones;
	// default 10.
	MaxAttempts int
	// Broken runs against a deliberately broken destination, to show the
	// simulation catches it; default sinktest.FakeCorrect.
	Broken sinktest.FakeBroken
	// NewEngine makes the engine; default engine.New (the Rust engine).
	NewEngine func(engine.Config) (engine.Engine, error)
	// Logger receives the runner's logs; default discard.
	Logger *slog.Logger
	// AttemptTimeout bounds how long one attempt may take to return
	// before the simulation reports it hung; default 60s.
	AttemptTimeout time.Duration
	// Transforms gives some streams a Go transform (etl.Builder.Transform),
	// picked by the seed: the identity, or a filter that rejects, drops,
	// adds a column to and (unless merged) doubles rows by their "id"
	// (sim/transform.go), or the engine's row filter (etl.Builder.Filter:
	// n < 500, appended streams drop what fails, merged ones delete its
	// key); the checks then expect what it makes of the source's records. The rest of a seed's workload and faults stays
	// the same. Default false.
	Transforms bool
	// flakyFilter makes the filter drop, besides, one row of a batch now
	// and then, at random: a transform that is not deterministic, which
	// the checks must catch (the package's own tests).
	flakyFilter bool
	// Routes sends some streams into shared tables (etl.Builder.Route),
	// picked by the seed from a random stream of its own: streams alike
	// in key and mode (and without a transform) share a table three
	// times in four; the checks then read each stream's rows out of its
	// table by _openetl_stream and check that every row names its
	// record's stream. The rest of a seed's workload and faults stays the
	// same. Ignored with a Target. Default false.
	Routes bool
	// Target, when set, runs the simulation against a real destination
	// instead of a sinktest.FakeDestination: the destination's Class and
	// Capabilities replace the ones the seed would pick (so the
	// simulation picks only write modes it can take), its faults are
	// injected by sinktest.WithFaults, and the checks read what it holds
	// through Target.Read. Broken must be FakeCorrect. Default nil.
	Target *Target
}

func (o Options) withDefaults() Options {
	if o.MaxRows <= 0 {
		o.MaxRows = 100
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 10
	}
	if o.NewEngine == nil {
		o.NewEngine = engine.New
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 60 * time.Second
	}
	return o
}

// Report is what one simulation did and found.
type Report struct {
	Seed uint64
	// Workload describes what the seed picked.
	Workload string
	// Trace is the log of the run: the workload, each attempt's faults,
	// each fault as it fired, each HEAD transition and attempt outcome.
	Trace []string
	// Violations lists every broken promise; empty when the run passed.
	Violations []string
	// Notes lists what a Target did that its contract (package sink)
	// does not allow but no promise depends on, e.g. a fenced Commit
	// that returned nil without applying anything.
	Notes []string
	// Attempts counts the attempts run, clean ones included.
	Attempts int
	// Faults counts the faults that fired.
	Faults int
	// Rewinds counts HEAD rewinds.
	Rewinds int
	Elapsed time.Duration
}

// ErrViolation is wrapped by Run's error when a check failed.
var ErrViolation = errors.New("sim: violation")

// String renders the report: the verdict, the violations and the trace.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d attempts, %d faults fired, %d rewinds, %v, %d violations\n",
		r.Seed, r.Attempts, r.Faults, r.Rewinds, r.Elapsed.Round(time.Millisecond), len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", v)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "NOTE: %s\n", n)
	}
	b.WriteString("trace:\n")
	for _, l := range r.Trace {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	return b.String()
}

type sim struct {
	opts Options
	seed uint64
	w    *workload
	src  *sourcetest.FakeSource
	dst  destination
	// declared is a Target's class and capabilities, learned once.
	declared *declared

	store *simStore

	// seen holds, per merged stream and key, the highest seq a read
	// between attempts saw (checkProgress).
	seen map[string]map[string]int64

	mu  sync.Mutex
	rep *Report
}

func (s *sim) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.rep.Trace = append(s.rep.Trace, line)
	if strings.Contains(line, "fault fired") {
		s.rep.Faults++
	}
	s.mu.Unlock()
}

func (s *sim) note(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.rep.Notes = append(s.rep.Notes, v)
	s.rep.Trace = append(s.rep.Trace, "NOTE: "+v)
	s.mu.Unlock()
}

func (s *sim) violate(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.rep.Violations = append(s.rep.Violations, v)
	s.rep.Trace = append(s.rep.Trace, "VIOLATION: "+v)
	s.mu.Unlock()
}

// Run simulates the workload and faults seed picks and checks the
// outcome. The error wraps ErrViolation when a check failed (the Report
// lists them); the Report is never nil.
func Run(seed uint64, opts Options) (*Report, error) {
	start := time.Now()
	opts = opts.withDefaults()
	s := &sim{opts: opts, seed: seed, rep: &Report{Seed: seed}}
	if opts.Target != nil {
		if err := s.learnTarget(); err != nil {
			s.rep.Elapsed = time.Since(start)
			return s.rep, err
		}
	}
	w := newWorkload(seed, opts, s.declared)
	s.w = w
	s.rep.Workload = w.String()
	s.logf("workload: %s", w)
	s.src = sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{
		Streams: w.streams, Replay: w.replay, SupersetMax: w.supersetMax, Seed: seed, ResumeEvery: w.resumeEvery,
		Live: true,
	})
	if opts.Target != nil {
		s.dst = &targetDest{t: opts.Target, s: s, done: map[uint64]bool{}, started: map[commitKey]uint64{}}
		s.logf("destination: %s (%v)", s.dst.name(), w.class)
	} else {
		s.dst = fakeDest{sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
			Class: w.class, Capabilities: w.caps, Broken: opts.Broken,
		})}
		s.logf("destination variant: %v", opts.Broken)
	}
	s.store = &simStore{inner: checkpoint.NewMem()}
	s.store.onRewind = func(a *attempt, from *checkpoint.Ref) {
		if from != nil && s.dst.applied(from.Epoch) {
			s.violate("attempt %d rewinds HEAD past epoch %d, which the destination has applied", a.n, from.Epoch)
		}
	}
	s.store.onRewound = func(a *attempt, to *checkpoint.Ref) { s.checkAcksAt(a, to) }
	err := s.run()
	s.rep.Elapsed = time.Since(start)
	if err != nil {
		return s.rep, err
	}
	if len(s.rep.Violations) > 0 {
		return s.rep, fmt.Errorf("%w: seed %d: %s", ErrViolation, seed, strings.Join(s.rep.Violations, "; "))
	}
	return s.rep, nil
}

// releaseOnRecover makes attempt a let the zombies early go on when it
// calls the destination's Recover, so their calls race its recovery, and
// returns the zombies still to release that way (none).
func releaseOnRecover(a *attempt, early []*attempt) []*attempt {
	if len(early) == 0 {
		return nil
	}
	a.onRecover = func() {
		for _, z := range early {
			a.logf("letting the zombie (attempt %d) go on as this attempt recovers", z.n)
			z.letGo()
		}
	}
	return nil
}

// storeLost runs attempt n with an empty checkpoint store, as if the
// store had been lost, when the destination (not deliver-ack) holds rows
// and HEAD's epoch is applied: the attempt must fail with sink.ErrAhead (not fenced)
// before it writes anything. With lostPastFence the empty store is first
// claimed as often as the real one was, so that the attempt's generation
// is above the destination's fence, which then can't refuse it. The real
// store is back for the attempts after it.
func (s *sim) storeLost(n int) error {
	head := s.store.head()
	visible := 0
	for _, st := range s.w.streams {
		vis, _, err := s.contents(st.Name, s.w.modes[st.Name] == delivery.Merge)
		if err != nil {
			return fmt.Errorf("sim: reading stream %s: %w", st.Name, err)
		}
		visible += len(vis)
	}
	switch {
	case s.w.class == sink.DeliverAck:
		s.logf("the checkpoint store would be lost, but a deliver-ack destination need not keep which epochs it applied")
		return nil
	case head == nil || !s.dst.applied(head.Epoch) || visible == 0:
		s.logf("the checkpoint store would be lost, but the destination holds nothing it could be ahead with")
		return nil
	}
	a, err := s.newAttempt(n, attemptPlan{})
	if err != nil {
		return err
	}
	lost := &simStore{inner: checkpoint.NewMem()}
	a.store = &attemptStore{s: lost, a: a}
	ctx := context.Background()
	if s.w.lostPastFence {
		g, _, err := s.store.inner.Head(ctx, pipelineName)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		for range g {
			if _, _, err := lost.inner.Claim(ctx, pipelineName); err != nil {
				return fmt.Errorf("sim: %w", err)
			}
		}
		s.logf("the checkpoint store is lost: attempt %d starts with an empty one, claimed %d times (the destination's fence is at most %d)", n, g, g)
	} else {
		s.logf("the checkpoint store is lost: attempt %d starts with an empty one", n)
	}
	s.rep.Attempts++
	a.start()
	if !a.wait() {
		a.letGo()
		s.violate("attempt %d (checkpoint store lost) did not return within %v", n, s.opts.AttemptTimeout)
		return nil
	}
	if !errors.Is(a.err, sink.ErrAhead) || errors.Is(a.err, sink.ErrFenced) || errors.Is(a.err, checkpoint.ErrFenced) {
		s.violate("attempt %d, with the checkpoint store lost while the destination has applied epoch %d, returned %v: want an error wrapping sink.ErrAhead, not fenced",
			n, head.Epoch, a.err)
	}
	s.logf("the checkpoint store is back")
	s.checkProgress(fmt.Sprintf("after attempt %d (checkpoint store lost)", n))
	return nil
}

func (s *sim) run() error {
	var zombies []*attempt
	defer func() {
		for _, z := range zombies {
			z.letGo()
		}
	}()
	releaseZombies := func() bool {
		for _, z := range zombies {
			s.logf("attempt %d: releasing the zombie", z.n)
			z.letGo()
			if !z.wait() {
				s.violate("attempt %d (a zombie) did not return within %v of its release", z.n, s.opts.AttemptTimeout)
				return false
			}
		}
		zombies = nil
		return true
	}
	// The source's log grows before each planned attempt (and halfway
	// through a Run), so every attempt has new records to read.
	maxRows := 0
	for _, st := range s.w.streams {
		maxRows = max(maxRows, st.Rows)
	}
	steps := len(s.w.attempts) + 1
	horizon := func(i int) int { return (maxRows*i + steps - 1) / steps }
	n := 0
	// early are zombies to let go as the next attempt recovers.
	var early []*attempt
	for _, p := range s.w.attempts {
		n++
		s.src.SetHorizon(horizon(n))
		s.logf("the source's log grows to %d records per split", horizon(n))
		if p.run {
			next := (horizon(n) + horizon(n+1)) / 2
			t := time.AfterFunc(p.runFor/2, func() { s.src.SetHorizon(next) })
			defer t.Stop()
		}
		if p.dropStaged {
			k, err := s.dst.dropStaged()
			if err != nil {
				return fmt.Errorf("sim: dropping the destination's staged data: %w", err)
			}
			s.logf("the destination's staged, unapplied data expires (%d lanes' or files' worth)", k)
		}
		a, err := s.newAttempt(n, p)
		if err != nil {
			return err
		}
		early = releaseOnRecover(a, early)
		s.rep.Attempts++
		a.start()
		if p.stalls() {
			select {
			case <-a.stalled:
				s.logf("attempt %d: stalled; the next attempt runs while it waits", n)
				zombies = append(zombies, a)
				if p.earlyRelease {
					early = append(early, a)
				}
				continue
			case <-a.done:
			case <-time.After(s.opts.AttemptTimeout):
				a.letGo()
				s.violate("attempt %d neither paused nor returned within %v", n, s.opts.AttemptTimeout)
				return nil
			}
		} else if !a.wait() {
			a.letGo()
			s.violate("attempt %d did not return within %v", n, s.opts.AttemptTimeout)
			return nil
		}
		if !releaseZombies() {
			return nil
		}
		s.checkProgress(fmt.Sprintf("after attempt %d", n))
	}
	if s.w.loseStore && len(zombies) == 0 {
		n++
		if err := s.storeLost(n); err != nil {
			return err
		}
	}
	s.src.SetHorizon(-1)
	s.logf("the source's log holds every record")
	// Clean attempts until one succeeds; the first runs while any zombie
	// is still paused, and at least one runs after every zombie returned.
	clean := false
	for range 4 {
		n++
		a, err := s.newAttempt(n, attemptPlan{})
		if err != nil {
			return err
		}
		early = releaseOnRecover(a, early)
		s.rep.Attempts++
		a.start()
		if !a.wait() {
			s.violate("clean attempt %d did not return within %v", n, s.opts.AttemptTimeout)
			return nil
		}
		s.checkProgress(fmt.Sprintf("after clean attempt %d", n))
		if len(zombies) > 0 {
			if !releaseZombies() {
				return nil
			}
			continue
		}
		if a.err == nil {
			clean = true
			break
		}
	}
	if !clean {
		s.violate("no clean attempt succeeded (see the trace)")
		return nil
	}
	s.check()
	return nil
}

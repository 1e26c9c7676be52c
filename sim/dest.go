package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

// Target is a real destination the simulation drives instead of its own
// sinktest.FakeDestination (Options.Target). The simulation wraps each
// attempt's destination with sinktest.WithFaults to inject its faults,
// records what each call returned, and checks the outcome through Read,
// as a reader of the destination would see it.
type Target struct {
	// Name says what the destination is, in the trace (e.g. "iceberg on
	// SQLite").
	Name string

	// Open returns a destination on the target's storage. The simulation
	// calls it once before it draws the workload, with a Setup without
	// streams, only to learn the destination's Class and Capabilities
	// (it writes nothing with that one), then once per attempt with the
	// workload's streams: each attempt stands for a process of its own,
	// so every destination Open returns must reach the same storage
	// (tables, staged files, fences) without sharing in-process state.
	// Required.
	Open func(ctx context.Context, setup Setup) (sink.Destination, error)

	// Read returns the rows of stream a reader of the destination sees
	// now (no rows and a nil error for a stream it has never written),
	// each with its _openetl_id, _openetl_seq and _openetl_op, and Values
	// holding the other columns by name: the source's ("id", "n", "s")
	// and, for a merged stream with soft deletes, "_openetl_deleted"
	// (a row whose op is "delete" or whose _openetl_deleted is true is a
	// deleted key's tombstone). sinktest.RowsFromRecord converts Arrow
	// batches read back. Required.
	Read func(ctx context.Context, stream string) ([]sinktest.Row, error)

	// DropStaged, when set, discards the target's staged data of every
	// epoch not applied (as a staging area's expiry would), while no
	// attempt runs but paused zombies, and returns how many files (or
	// other units) it removed: the next Recover must then report such an
	// epoch Lost. Nil: the simulation plans no expiry.
	DropStaged func(ctx context.Context) (int, error)

	// Unnamed, when set, returns what the target holds staged (files,
	// staging partitions) that head's committables don't name. The
	// simulation asks it after the last clean attempt, which started
	// once every zombie had returned and collected what failed attempts
	// left (sink.Collector): anything it returns then is a violation.
	// Nil: only the checkpoint store's staged side files are checked.
	Unnamed func(ctx context.Context, head *checkpoint.Record) ([]string, error)
}

// Setup is what a Target's Open gets. How each stream is written (the
// fake source's streams "orders", "users", "events", each keyed by "id";
// its write mode delivery.Append, or delivery.Merge when the
// destination's Capabilities say it can) reaches the destination's
// writers in their sink.WriterConfig, as in any pipeline: the
// destination needs no configuration of its own for it.
type Setup struct {
	Seed     uint64
	Pipeline string // the pipeline's name, "sim"
	// Attempt numbers the attempt from 1; 0 for the first call, which
	// only learns the destination's Class and Capabilities.
	Attempt int
}

// destination is what the simulation needs of the destination it drives:
// the fake (with its internal records) or a Target (through its reader
// and what the fault wrapper saw).
type destination interface {
	// name says what the destination is, for the trace.
	name() string
	// view returns the destination attempt a uses, and the function that
	// kills it.
	view(a *attempt) (sink.Destination, func(), error)
	// applied reports whether epoch is applied.
	applied(epoch uint64) bool
	// applies returns the destination's log of commits that applied an
	// epoch, when it keeps one.
	applies() ([]sinktest.FakeApply, bool)
	// dropStaged discards the staged data of unapplied epochs.
	dropStaged() (int, error)
	// unnamed returns what the destination holds staged that head
	// doesn't name (nil when it can't tell).
	unnamed(head *checkpoint.Record) ([]string, error)
	// canDropStaged reports whether dropStaged can.
	canDropStaged() bool
	// contents returns how often each _openetl_id of stream is visible
	// (history: how often it became visible, when the destination knows)
	// and, for a merged stream, the live row of each key (deleted keys'
	// rows left out; several rows of one key are a violation).
	contents(stream string, merged bool) (vis map[string]int, live []sinktest.FakeRow, err error)
	// history reports whether contents counts every time a row became
	// visible (true), or only the rows there now.
	history() bool
	// keyed returns the rows of a merged stream a reader sees now with
	// their Key and Seq, deleted keys' rows (when the destination keeps
	// them) with Op "delete".
	keyed(stream string) ([]sinktest.FakeRow, error)
}

// fakeDest is the simulation's own sinktest.FakeDestination.
type fakeDest struct{ d *sinktest.FakeDestination }

func (f fakeDest) name() string { return "sinktest.FakeDestination" }

func (f fakeDest) view(a *attempt) (sink.Destination, func(), error) {
	v := f.d.WithControl(a.destControl)
	return v, v.Kill, nil
}

func (f fakeDest) applied(epoch uint64) bool { return f.d.Applied(pipelineName, epoch) }

func (f fakeDest) applies() ([]sinktest.FakeApply, bool) { return f.d.Applies(pipelineName), true }

func (f fakeDest) dropStaged() (int, error) { return f.d.DropStaged(pipelineName), nil }

func (f fakeDest) canDropStaged() bool { return true }

func (f fakeDest) unnamed(head *checkpoint.Record) ([]string, error) {
	named := map[string]bool{}
	if head != nil {
		for _, c := range head.Committables {
			var fc struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(c, &fc); err != nil {
				return nil, fmt.Errorf("sim: committable %q: %w", c, err)
			}
			named[fc.ID] = true
		}
	}
	var out []string
	for _, id := range f.d.Staged(pipelineName) {
		if !named[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

func (f fakeDest) contents(stream string, merged bool) (map[string]int, []sinktest.FakeRow, error) {
	var live []sinktest.FakeRow
	if merged {
		for _, r := range f.d.Rows(stream) {
			if r.Op != sink.OpDelete { // a soft-deleted key's tombstone
				live = append(live, r)
			}
		}
	}
	return f.d.Visibility(stream), live, nil
}

func (f fakeDest) history() bool { return true }

func (f fakeDest) keyed(stream string) ([]sinktest.FakeRow, error) { return f.d.Rows(stream), nil }

// targetDest is a Target. What it knows of applied epochs comes from the
// fault wrapper's Observe: an epoch is applied once a Commit of it
// returned nil from the destination, or a Recover with it as HEAD
// reported Applied.
type targetDest struct {
	t    *Target
	s    *sim
	mu   sync.Mutex
	done map[uint64]bool
	// fence is the highest generation whose Recover returned; started
	// holds it as each attempt's Commit of an epoch went to the
	// destination.
	fence   uint64
	started map[commitKey]uint64
	// views are the attempts' views of the destination, for dropStaged
	// to hold.
	views []*sinktest.FaultyDestination
}

type commitKey struct {
	attempt int
	epoch   uint64
}

func (d *targetDest) name() string {
	if d.t.Name != "" {
		return d.t.Name
	}
	return "a Target"
}

func (d *targetDest) view(a *attempt) (sink.Destination, func(), error) {
	dst, err := d.t.Open(context.Background(), d.s.setup(a.n))
	if err != nil {
		return nil, nil, fmt.Errorf("sim: opening the destination for attempt %d: %w", a.n, err)
	}
	if err := d.s.sameDeclared(dst); err != nil {
		return nil, nil, err
	}
	v := sinktest.WithFaults(dst, sinktest.FaultConfig{
		Control: func(ctx context.Context, c sinktest.FakeDestCall) error {
			err := a.destControl(ctx, c) // may pause: a zombie
			if c.Op == sinktest.FakeCommit {
				d.mu.Lock()
				d.started[commitKey{a.n, c.Epoch}] = d.fence
				d.mu.Unlock()
			}
			return err
		},
		Observe: func(c sinktest.FakeDestCall, o sink.Outcome, err error) { d.observe(a, c, o, err) },
	})
	d.mu.Lock()
	d.views = append(d.views, v)
	d.mu.Unlock()
	return v, v.Kill, nil
}

func (d *targetDest) observe(a *attempt, c sinktest.FakeDestCall, o sink.Outcome, err error) {
	deferred := d.s.declared.caps.Deferred
	if deferred && err == nil && c.Op != sinktest.FakeWrite && c.Op != sinktest.FakePreCommit {
		// What the destination reports visible is applied; a Commit that
		// returned nil need not be.
		d.mu.Lock()
		for e := c.Visible; e > 0 && !d.done[e]; e-- {
			d.done[e] = true
		}
		d.mu.Unlock()
	}
	switch c.Op {
	case sinktest.FakeCommit:
		if err == nil {
			d.mu.Lock()
			if !deferred {
				d.done[c.Epoch] = true
			}
			fence := d.started[commitKey{a.n, c.Epoch}]
			d.mu.Unlock()
			if fence > uint64(c.Gen) && d.s.epochWrote(c.Epoch, c.Gen) {
				d.s.violate("attempt %d: Commit of epoch %d by generation %d returned nil, although generation %d had recovered before it started: the destination ignores its fence (package sink: Commit returns an error wrapping ErrFenced)",
					a.n, c.Epoch, c.Gen, fence)
			} else if fence > uint64(c.Gen) {
				// An epoch that wrote no row changes nothing however it
				// is committed; a destination with no data of the
				// pipeline yet may have no fence to check.
				a.logf("attempt %d: Commit of epoch %d (no rows) by generation %d returned nil after generation %d recovered",
					a.n, c.Epoch, c.Gen, fence)
			}
		} else if !errors.Is(err, sinktest.ErrFakeKilled) {
			a.logf("the destination's Commit of epoch %d (gen %d) returned %v", c.Epoch, c.Gen, err)
		}
	case sinktest.FakeRecover:
		if err != nil {
			a.logf("the destination's Recover (gen %d, HEAD epoch %d) returned %v", c.Gen, c.Epoch, err)
			return
		}
		a.logf("the destination's Recover (gen %d, HEAD epoch %d) reported %v", c.Gen, c.Epoch, o)
		d.mu.Lock()
		d.fence = max(d.fence, uint64(c.Gen))
		if o == sink.Applied && c.Epoch > 0 && !deferred {
			d.done[c.Epoch] = true
		}
		d.mu.Unlock()
	}
}

func (d *targetDest) applied(epoch uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done[epoch]
}

func (d *targetDest) applies() ([]sinktest.FakeApply, bool) { return nil, false }

func (d *targetDest) dropStaged() (int, error) {
	if d.t.DropStaged == nil {
		return 0, nil
	}
	// No attempt runs but zombies, yet a zombie paused at one call may
	// have others under way (a lane's Write stalled while the Commit of
	// an earlier epoch goes on). Staged data expires by age, never under
	// a commit that has just found its files there: every view is held
	// (its calls under way return, later ones wait) while it expires.
	d.mu.Lock()
	views := d.views
	d.mu.Unlock()
	held := make(chan func(), 1)
	go func() {
		rel := make([]func(), 0, len(views))
		for _, v := range views {
			rel = append(rel, v.Hold())
		}
		held <- func() {
			for _, r := range rel {
				r()
			}
		}
	}()
	t := time.NewTimer(d.s.opts.AttemptTimeout)
	defer t.Stop()
	select {
	case release := <-held:
		defer release()
	case <-t.C:
		return 0, fmt.Errorf("sim: a zombie's destination call did not return within %v: staged data cannot expire behind it", d.s.opts.AttemptTimeout)
	}
	return d.t.DropStaged(context.Background())
}

func (d *targetDest) canDropStaged() bool { return d.t.DropStaged != nil }

func (d *targetDest) unnamed(head *checkpoint.Record) ([]string, error) {
	if d.t.Unnamed == nil {
		return nil, nil
	}
	return d.t.Unnamed(context.Background(), head)
}

func (d *targetDest) history() bool { return false }

func (d *targetDest) keyed(stream string) ([]sinktest.FakeRow, error) {
	rows, err := d.t.Read(context.Background(), stream)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s back: %w", stream, err)
	}
	out := make([]sinktest.FakeRow, 0, len(rows))
	for _, r := range rows {
		fr := sinktest.FakeRow{Stream: stream, ID: r.ID, Op: r.Op, Seq: r.Seq}
		if isTombstone(r) {
			fr.Op = sink.OpDelete
		}
		if v, ok := r.Values["id"]; ok && v != nil {
			fr.Key = valueStr(v)
		}
		out = append(out, fr)
	}
	return out, nil
}

func (d *targetDest) contents(stream string, merged bool) (map[string]int, []sinktest.FakeRow, error) {
	rows, err := d.t.Read(context.Background(), stream)
	if err != nil {
		return nil, nil, fmt.Errorf("reading stream %s back: %w", stream, err)
	}
	vis := make(map[string]int, len(rows))
	var live []sinktest.FakeRow
	for _, r := range rows {
		vis[r.ID]++
		if !merged || isTombstone(r) {
			continue
		}
		fr := sinktest.FakeRow{Stream: stream, ID: r.ID, Op: r.Op, Seq: r.Seq, Values: map[string]any{}}
		for k, v := range r.Values {
			if strings.HasPrefix(k, sink.ReservedPrefix) {
				continue
			}
			fr.Values[k] = v
		}
		if v, ok := r.Values["id"]; ok && v != nil {
			fr.Key = valueStr(v)
		}
		live = append(live, fr)
	}
	return vis, live, nil
}

// isTombstone reports whether r is a deleted key's row.
func isTombstone(r sinktest.Row) bool {
	if r.Op == sink.OpDelete {
		return true
	}
	switch v := r.Values[sink.ColumnDeleted].(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// declared is what a Target's destination declares.
type declared struct {
	class   sink.Class
	caps    sink.Capabilities
	canDrop bool
}

// learnTarget opens the Target once to learn its class and capabilities.
func (s *sim) learnTarget() error {
	t := s.opts.Target
	if t.Open == nil || t.Read == nil {
		return errors.New("sim: Options.Target needs Open and Read")
	}
	if s.opts.Broken != sinktest.FakeCorrect {
		return errors.New("sim: Options.Broken applies to the fake destination only, not to a Target")
	}
	d, err := t.Open(context.Background(), Setup{Seed: s.seed, Pipeline: pipelineName})
	if err != nil {
		return fmt.Errorf("sim: opening the destination to learn its capabilities: %w", err)
	}
	s.declared = &declared{class: d.Class(), caps: d.Capabilities(), canDrop: t.DropStaged != nil}
	return nil
}

// setup is what Target.Open gets for attempt n.
func (s *sim) setup(n int) Setup {
	return Setup{Seed: s.seed, Pipeline: pipelineName, Attempt: n}
}

// sameDeclared checks that a Target's destination declares what the
// first one did: the workload was drawn from it.
func (s *sim) sameDeclared(d sink.Destination) error {
	if c := d.Class(); c != s.declared.class {
		return fmt.Errorf("sim: the Target's destination changed its class from %v to %v", s.declared.class, c)
	}
	if c, was := d.Capabilities(), s.declared.caps; c.Merge != was.Merge || c.SkipByID != was.SkipByID ||
		c.HardDeletes != was.HardDeletes || c.Overwrite != was.Overwrite {
		return fmt.Errorf("sim: the Target's destination changed its capabilities from %+v to %+v", s.declared.caps, c)
	}
	return nil
}

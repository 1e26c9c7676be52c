package etl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/source"
)

// Reshard changes the shard count of a sharded pipeline from S to S'
// (Builder.Shard): from are the pipelines of the S old shards, from[i]
// built with Shard(i, S); to are those of the S' new shards, to[j] built
// with Shard(j, S'), with the same source and streams, each with the
// destination it will write to (sink/parquet: a prefix per shard, as
// for any shard). S or S' may be 1, the unsharded pipeline.
//
// Stop every old shard first, on every host. Reshard retires their logs
// (step 4b): an old shard run again afterwards claims its log and stops
// with ErrRetired, reading nothing. Reshard then, in order:
//
//  1. checks that no new shard's checkpoint log has a checkpoint (a
//     reshard never overwrites a log; the count is part of each shard's
//     key, so going back to a count used before under the same name
//     needs another name, or the old count's logs removed);
//  2. settles each old shard as an attempt's start does, reading
//     nothing: it claims the shard's log (a new generation: an old shard
//     still running is fenced, and fails with checkpoint.ErrFenced at its
//     next commit) and recovers HEAD's epoch at the shard's destination
//     (raising its fence, applying an epoch committed but not applied);
//  3. reads each old shard's HEAD and takes the union of their resume
//     states, by split;
//  4. opens each new shard's source, reading nothing, to learn its
//     splits, and checks that every split with a state is read by
//     exactly one new shard;
//     4b. retires each old log: a record under the settling generation
//     (so only if nobody claimed the log since) that carries HEAD's
//     states on and says the log's splits are the new shards' now;
//  5. writes each new shard's log: a first checkpoint (epoch 1, with no
//     data to apply) holding the resume states of its own splits only,
//     so that its first Sync or Run resumes each split where the old
//     shard that read it stopped; then checks that no old shard was
//     claimed again meanwhile.
//
// Every split is read exactly once across the old and new shards when
// the destinations are exactly once. The new shards start with the
// engine state (schemas and destination names) the old shards' HEADs
// share; when they differ (the old shards saw different shapes of the
// data) the new shards start with none and infer schemas from what they
// read. Quarantined records and held values stay under the old shards'
// keys.
//
// Only sources that deal their splits into shards by identity can be
// resharded: source/kafka (partition p is shard p mod S's), where a
// split is a partition and its state an offset. A source sharded by
// configuration (source/postgres: a table group, publication and slot
// per shard, whose Shard returns the source itself) and one that is no
// source.Sharder are refused: their states belong to a slot, not to a
// split that another shard could take over.
//
// Reshard holds every given Pipeline as Sync does (ErrBusy while one of
// them runs in this process) and uses each one's own checkpoint store.
// Bad input and logs in the wrong state fail with an error wrapping
// ErrReshard before anything is written to the new logs. When an old
// shard is claimed again after the new logs were written, Reshard
// rewinds them to empty and fails (ErrReshard); should that rewind fail
// too (a new shard already started), the error says which logs to
// discard. A failure in step 5 (ctx cancelled included) rewinds the new
// logs written so far the same way; steps 1 to 4 write no record, only
// new generations, so Reshard may simply be run again. A process that
// dies during step 5 may leave some new logs with their checkpoint:
// remove those logs before running it again.
func Reshard(ctx context.Context, from, to []*Pipeline) error {
	if err := checkReshardShape(from, to); err != nil {
		return err
	}
	all := slices.Concat(from, to)
	for _, p := range all {
		end, err := p.begin()
		if err != nil {
			return fmt.Errorf("etl: reshard: %w", err)
		}
		defer end()
	}
	for _, p := range all {
		if err := checkDealt(p); err != nil {
			return err
		}
	}
	oldS, newS := len(from), len(to)

	// 1. The new logs must have no checkpoint.
	for _, p := range to {
		if _, rec, err := p.cfg.Store.Head(ctx, p.cfg.Name); err != nil {
			return fmt.Errorf("etl: reshard: new shard %q: checkpoints: %w", p.cfg.Name, err)
		} else if rec != nil {
			return reshardErr("new shard %q already has a checkpoint (epoch %d): a reshard writes only logs that have none", p.cfg.Name, rec.Epoch)
		}
	}
	// 2. Every old shard has a log; settle each.
	for _, p := range from {
		g, _, err := p.cfg.Store.Head(ctx, p.cfg.Name)
		if err != nil {
			return fmt.Errorf("etl: reshard: old shard %q: checkpoints: %w", p.cfg.Name, err)
		}
		if g == 0 {
			return reshardErr("old shard %q has no checkpoint log: was it run, with this checkpoint store and name?", p.cfg.Name)
		}
	}
	gens := make([]checkpoint.Generation, oldS)
	heads := make([]*checkpoint.Record, oldS)
	for i, p := range from {
		res, err := runner.Settle(ctx, p.cfg)
		if err != nil {
			return fmt.Errorf("etl: reshard: settle old shard %q: %w", p.cfg.Name, err)
		}
		g, rec, err := p.cfg.Store.Head(ctx, p.cfg.Name)
		if err != nil {
			return fmt.Errorf("etl: reshard: old shard %q: checkpoints: %w", p.cfg.Name, err)
		}
		if g != res.Generation {
			return claimedAgain(p, res.Generation, g)
		}
		gens[i], heads[i] = g, rec
	}
	// 3. The union of the old shards' resume states.
	union := map[source.SplitID][]byte{}
	oldOwner := map[source.SplitID]int{}
	for i, rec := range heads {
		if rec == nil {
			continue // never committed: its splits start where the new shards' would
		}
		for _, id := range slices.Sorted(maps.Keys(rec.Resume)) {
			sid := source.SplitID(id)
			if k, dup := oldOwner[sid]; dup {
				return reshardErr("split %q has a resume state in the logs of old shards %q and %q: were they shards of one pipeline?",
					id, from[k].cfg.Name, from[i].cfg.Name)
			}
			union[sid], oldOwner[sid] = rec.Resume[id], i
		}
	}
	state := commonEngine(heads)
	// 4. Which new shard reads which split.
	states := make([]map[string][]byte, newS)
	reader := map[source.SplitID]int{}
	for j, p := range to {
		ids, err := runner.SplitIDs(ctx, p.cfg, maps.Clone(union))
		if err != nil {
			return fmt.Errorf("etl: reshard: new shard %q: %w", p.cfg.Name, err)
		}
		states[j] = map[string][]byte{}
		for _, id := range ids {
			if k, dup := reader[id]; dup {
				return reshardErr("split %q is read by new shards %q and %q: the source deals a split to one shard only", id,
					to[k].cfg.Name, p.cfg.Name)
			}
			reader[id] = j
			if st, ok := union[id]; ok {
				states[j][string(id)] = st
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(oldOwner)) {
		if _, ok := reader[id]; !ok {
			return reshardErr("split %q of old shard %q is read by no new shard: were the new shards built with other streams or another source?",
				id, from[oldOwner[id]].cfg.Name)
		}
	}
	// 4b. Retire the old logs: a record that carries HEAD's states on and
	// says who has the splits now, committed under the settling
	// generation (so only if nobody claimed the log since). An old
	// shard started after this reads nothing (ErrRetired).
	retired := fmt.Sprintf("resharded from %d shards to %d: its splits are read by the shards of %d now", oldS, newS, newS)
	for i, p := range from {
		head := heads[i]
		if head != nil && head.Retired != "" {
			continue // retired by an earlier Reshard that did not finish
		}
		rec := &checkpoint.Record{Pipeline: p.cfg.Name, Epoch: 1, Generation: gens[i], Time: time.Now().UTC(),
			Committables: [][]byte{}, Retired: retired}
		if head != nil {
			ref := head.Ref()
			rec.Epoch, rec.Prev, rec.Resume, rec.Engine, rec.Totals = head.Epoch+1, &ref, head.Resume, head.Engine, head.Totals
		}
		if err := p.cfg.Store.Commit(ctx, gens[i], rec); err != nil {
			if errors.Is(err, checkpoint.ErrFenced) {
				g, _, _ := p.cfg.Store.Head(ctx, p.cfg.Name)
				return claimedAgain(p, gens[i], g)
			}
			return fmt.Errorf("etl: reshard: old shard %q: checkpoints: retire: %w", p.cfg.Name, err)
		}
		heads[i] = rec
	}
	// 5. Claim the new logs, check the old ones once more, write.
	newGens := make([]checkpoint.Generation, newS)
	for j, p := range to {
		g, rec, err := p.cfg.Store.Claim(ctx, p.cfg.Name)
		if err != nil {
			return fmt.Errorf("etl: reshard: new shard %q: checkpoints: claim: %w", p.cfg.Name, err)
		}
		if rec != nil {
			return reshardErr("new shard %q got a checkpoint (epoch %d) during the reshard: is it running?", p.cfg.Name, rec.Epoch)
		}
		newGens[j] = g
	}
	if err := stillSettled(ctx, from, gens, heads); err != nil {
		return err
	}
	now := time.Now().UTC()
	for j, p := range to {
		rec := &checkpoint.Record{Pipeline: p.cfg.Name, Epoch: 1, Generation: newGens[j], Time: now, Resume: states[j],
			Engine: state, Committables: [][]byte{}}
		if err := p.cfg.Store.Commit(ctx, newGens[j], rec); err != nil {
			return undoReshard(ctx, to[:j+1], newGens, fmt.Errorf("etl: reshard: new shard %q: checkpoints: commit: %w", p.cfg.Name, err))
		}
	}
	if err := stillSettled(ctx, from, gens, heads); err != nil {
		return undoReshard(ctx, to, newGens, err)
	}
	return nil
}

// checkReshardShape checks that from and to are every shard of one
// count each, in order, and that the counts differ.
func checkReshardShape(from, to []*Pipeline) error {
	oldS, newS := len(from), len(to)
	switch {
	case oldS == 0 || newS == 0:
		return reshardErr("from %d to %d pipelines: give every old shard and every new one (at least 1 each)", oldS, newS)
	case oldS == newS:
		return reshardErr("from %d shards to %d: the shard count is unchanged", oldS, newS)
	case newS > MaxShards:
		return reshardErr("to %d shards: at most %d", newS, MaxShards)
	}
	seen := map[*Pipeline]bool{}
	for _, side := range []struct {
		what string
		ps   []*Pipeline
	}{{"old", from}, {"new", to}} {
		for i, p := range side.ps {
			if p == nil {
				return reshardErr("%s shard %d is nil", side.what, i)
			}
			if seen[p] {
				return reshardErr("pipeline %q is given twice", p.cfg.Name)
			}
			seen[p] = true
			if sh := p.shardOf(); sh.Index != i || sh.Count != len(side.ps) {
				return reshardErr("%s shard %d of %d is pipeline %q, built as shard %d of %d: give the %s shards in order, each built with Shard(i, %d)",
					side.what, i, len(side.ps), p.cfg.Name, sh.Index, sh.Count, side.what, len(side.ps))
			}
			if p.base != side.ps[0].base {
				return reshardErr("%s shards %q and %q have different names", side.what, side.ps[0].cfg.Name, p.cfg.Name)
			}
		}
	}
	return nil
}

// shardOf is the pipeline's shard, {0, 1} when unsharded.
func (p *Pipeline) shardOf() Shard {
	if !p.shard.Sharded() {
		return Shard{Index: 0, Count: 1}
	}
	return p.shard
}

// checkDealt checks that p's source deals its splits by identity: a
// shard's source is one its Shard made (not the source itself, as a
// source sharded by configuration returns), and an unsharded pipeline's
// source is a Sharder that makes a new source for Shard(0, 1).
func checkDealt(p *Pipeline) error {
	if p.shard.Sharded() {
		if p.owned == nil {
			return reshardErr("pipeline %q: its source (%T) is sharded by configuration (its Shard returns it as it is): "+
				"each shard's resume states belong to its own configuration (a slot) and can't be dealt to other shards", p.cfg.Name, p.cfg.Source)
		}
		return nil
	}
	sh, ok := p.cfg.Source.(source.Sharder)
	if !ok {
		return reshardErr("pipeline %q: %w: its source (%T) can't deal its splits into shards (no Shard method)", p.cfg.Name,
			source.ErrUnshardable, p.cfg.Source)
	}
	s, err := sh.Shard(0, 1)
	if err != nil {
		return reshardErr("pipeline %q: its source can't be sharded: %v", p.cfg.Name, err)
	}
	if sameSource(s, p.cfg.Source) {
		return reshardErr("pipeline %q: its source (%T) is sharded by configuration (its Shard returns it as it is): "+
			"its resume states belong to its own configuration (a slot) and can't be dealt to shards", p.cfg.Name, p.cfg.Source)
	}
	closeSource(s)
	return nil
}

// commonEngine returns the engine state every old HEAD that has one
// shares, nil when they differ (or none has one). Shards that evolved a
// stream's schema apart can't lend one of theirs to a shard that reads
// the others' splits too: its names could differ from the names another
// old shard gave the same columns.
func commonEngine(heads []*checkpoint.Record) []byte {
	var state []byte
	for _, h := range heads {
		switch {
		case h == nil:
		case state == nil:
			state = h.Engine
		case !bytes.Equal(state, h.Engine):
			return nil
		}
	}
	return state
}

// stillSettled checks that no old shard was claimed again, or moved on,
// since Reshard settled it.
func stillSettled(ctx context.Context, from []*Pipeline, gens []checkpoint.Generation, heads []*checkpoint.Record) error {
	for i, p := range from {
		g, rec, err := p.cfg.Store.Head(ctx, p.cfg.Name)
		if err != nil {
			return fmt.Errorf("etl: reshard: old shard %q: checkpoints: %w", p.cfg.Name, err)
		}
		if g != gens[i] || refOf(rec) != refOf(heads[i]) {
			return claimedAgain(p, gens[i], g)
		}
	}
	return nil
}

func refOf(r *checkpoint.Record) checkpoint.Ref {
	if r == nil {
		return checkpoint.Ref{}
	}
	return r.Ref()
}

func claimedAgain(p *Pipeline, settled, now checkpoint.Generation) error {
	return reshardErr("old shard %q was claimed again during the reshard (generation %d after the reshard's %d): "+
		"stop every old shard, on every host, before resharding", p.cfg.Name, now, settled)
}

// undoReshard rewinds the new logs that Reshard wrote (generation gens[j]
// for to[j]) to empty, and returns cause; when a rewind fails, the error
// names the logs that must be discarded.
func undoReshard(ctx context.Context, to []*Pipeline, gens []checkpoint.Generation, cause error) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for j, p := range to {
		if err := p.cfg.Store.Rewind(ctx, p.cfg.Name, gens[j], checkpoint.Ref{}); err != nil {
			errs = append(errs, fmt.Errorf("new shard %q: %w", p.cfg.Name, err))
		}
	}
	if len(errs) == 0 {
		return cause
	}
	return fmt.Errorf("%w; and the new logs could not all be rewound to empty, so their checkpoints may hold stale positions: "+
		"discard those new shards' logs and destinations before resharding again: %w", cause, errors.Join(errs...))
}

func reshardErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrReshard}, args...)...)
}

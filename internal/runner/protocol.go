package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// The commit protocol, step by step (docs/commit-protocol.md tells it
// whole). An epoch moves through five steps; the first two run where the
// data flows, the last three here, on the commit goroutine (runCommit,
// then commitEpoch), one epoch at a time in epoch order:
//
//  1. Barrier: the coordinator asks for one (an interval or a byte
//     budget, coordinate); each split's pump places it right after the
//     split's next resume point, and the engine stage passes it to every
//     lane once every split has placed it (pump.go, stages.go).
//  2. PreCommit: each lane flushes its writer, which makes the epoch's
//     rows durable but invisible, and sends its committable here
//     (stages.go).
//  3. Record and HEAD: checkpointEpoch stages the epoch's side files,
//     writes the checkpoint record (resume states, engine state,
//     committables, counts) and moves HEAD to it with a compare-and-swap.
//     This is the commit point: from here the epoch is committed.
//  4. Commit: commitDest makes the epoch visible at the destination,
//     retrying; the Commit is idempotent, so a retry, or the next
//     attempt's recover, can repeat it. finishDest follows a Final epoch.
//  5. Ack: ackSource tells the source it may drop what the previous
//     epoch read (one epoch behind, so a crash before this epoch's Commit
//     can still read it again), and, for a destination whose Commit may
//     leave epochs invisible (sink.Capabilities.Deferred), nothing after
//     the newest epoch it reports visible (sink.Visibility): such an
//     epoch may still be reported Lost and the log rewound past it.
//
// An attempt starts with recover, which settles HEAD's epoch with the
// destination before any new data flows.
//
// The functions here do the protocol's work only. What is reported of
// it (logs, events, spans, metrics, status) sits beside them in
// observe.go, one call per step: commitCheckpoint, observeCommit and
// commitRetried, observeFinish, ackFailed, epochCommitted,
// epochRecovered.

// runCommit collects each epoch's committables from the lanes and takes
// the epochs, in order, through steps 3 to 5 (commitEpoch).
func (r *runner) runCommit(ctx context.Context) error {
	infos := map[uint64]*epochInfo{}
	lanes := map[uint64][][]byte{}
	extras := map[uint64][]*laneExtra{} // by lane: what their transforms did
	got := map[uint64]int{}
	next := r.firstEpoch
	ch := newCommitChain(r.head)
	acker, _ := r.cfg.Source.(source.Acker)
	for {
		var m commitMsg
		select {
		case m = <-r.toCommit:
		case <-ctx.Done():
			return nil
		}
		if m.info != nil {
			infos[m.epoch] = m.info
		} else {
			if lanes[m.epoch] == nil {
				lanes[m.epoch] = make([][]byte, r.cfg.Lanes)
			}
			lanes[m.epoch][m.lane] = m.c
			got[m.epoch]++
			if m.extra != nil {
				if extras[m.epoch] == nil {
					extras[m.epoch] = make([]*laneExtra, r.cfg.Lanes)
				}
				extras[m.epoch][m.lane] = m.extra
			}
		}
		for infos[next] != nil && got[next] == r.cfg.Lanes {
			info, cs := infos[next], lanes[next]
			mergeExtras(info, extras[next])
			delete(infos, next)
			delete(lanes, next)
			delete(got, next)
			delete(extras, next)
			c, err := r.commitEpoch(ctx, ch, next, info, cs, acker)
			if err != nil {
				return err
			}
			select {
			case r.commitCh <- c:
			case <-ctx.Done():
				return nil
			}
			next++
		}
	}
}

// commitChain is what the commit goroutine carries from one epoch to the
// next.
type commitChain struct {
	prev     *checkpoint.Ref              // the last committed record; nil: none yet
	resume   map[string][]byte            // its resume states...
	totals   map[string]checkpoint.Counts // ...totals...
	replay   []byte                       // ...replay state...
	released []byte                       // ...and account of released held values
	// unacked are the resume states of committed epochs not yet
	// acknowledged, oldest first (HEAD's at the start): the source is
	// given the newest one at or before both the epoch before the one
	// just committed and the destination's visible epoch. At most
	// maxUnacked (see addUnacked).
	unacked []epochStates
	counts  map[string]checkpoint.Counts // this attempt's, so far
	epochs  int                          // committed by this attempt
}

func newCommitChain(head *checkpoint.Record) *commitChain {
	ch := &commitChain{counts: map[string]checkpoint.Counts{}}
	if head != nil {
		ref := head.Ref()
		ch.prev, ch.resume, ch.totals, ch.replay, ch.released = &ref, head.Resume, head.Totals, head.Replay, head.Released
	}
	if head != nil && len(head.Resume) > 0 {
		ch.unacked = []epochStates{{epoch: head.Epoch, states: head.Resume}}
	}
	return ch
}

// epochStates are the resume states after an epoch.
type epochStates struct {
	epoch  uint64
	states map[string][]byte
}

// maxUnacked bounds commitChain.unacked while a Deferred destination's
// visible epoch lags (a catalog down for hours, say, while the
// checkpoint goes on).
const maxUnacked = 256

// addUnacked appends the states after epoch. Past maxUnacked it drops
// every second entry between the oldest and the newest: acknowledging
// an older state than the newest visible one is always safe (the
// source keeps more), so a long lag only coarsens the acknowledgements
// until it ends.
func (ch *commitChain) addUnacked(e epochStates) {
	ch.unacked = append(ch.unacked, e)
	if n := len(ch.unacked); n > maxUnacked {
		kept := ch.unacked[:1]
		for i := 2; i < n-1; i += 2 {
			kept = append(kept, ch.unacked[i])
		}
		kept = append(kept, ch.unacked[n-1])
		clear(ch.unacked[len(kept):])
		ch.unacked = kept
	}
}

// toAck removes from ch.unacked, and returns, the states to acknowledge
// after the Commit of epoch, given the destination's visible epoch:
// the newest of epochs up to min(epoch-1, visible); false for none.
func (ch *commitChain) toAck(epoch, visible uint64) (epochStates, bool) {
	upto := min(epoch-1, visible)
	n := 0
	for n < len(ch.unacked) && ch.unacked[n].epoch <= upto {
		n++
	}
	if n == 0 {
		return epochStates{}, false
	}
	e := ch.unacked[n-1]
	ch.unacked = ch.unacked[n:]
	return e, true
}

// commitEpoch takes epoch, which every lane has pre-committed (steps 1
// and 2), through steps 3 to 5 and returns what the attempt committed
// with it.
func (r *runner) commitEpoch(ctx context.Context, ch *commitChain, epoch uint64, info *epochInfo, cs [][]byte,
	acker source.Acker) (committed, error) {
	ectx := r.epochContext(ctx, epoch)
	// 3. Record and HEAD: the commit point.
	rec, err := r.checkpointEpoch(ectx, epoch, ch, info, cs)
	if err != nil {
		return committed{}, err
	}
	// The epoch is committed from here on, whatever the destination's
	// Commit does (a Commit that fails is rolled forward by the next
	// Recover): the attempt's Result counts it.
	ref := rec.Ref()
	ch.prev, ch.resume, ch.totals, ch.replay, ch.released = &ref, rec.Resume, rec.Totals, rec.Replay, rec.Released
	ch.counts = addCounts(ch.counts, info.counts)
	ch.epochs++
	c := committed{epoch: epoch, epochs: ch.epochs, counts: maps.Clone(ch.counts), totals: maps.Clone(ch.totals)}
	r.lastCommit.Store(&c)
	// 4. Commit: the epoch becomes visible; its side files are published
	// once it is.
	if err := r.commitDest(ectx, epoch, cs); err != nil {
		return committed{}, err
	}
	if err := r.publishFiles(ctx, rec, info.side); err != nil {
		return committed{}, err
	}
	// 5. Ack the previous epoch's positions, if it is visible.
	if acker != nil && len(rec.Resume) > 0 {
		ch.addUnacked(epochStates{epoch: epoch, states: rec.Resume})
	}
	if e, ok := ch.toAck(epoch, r.visible(epoch)); ok && !r.ackSource(ctx, acker, e) {
		// Tried again after the next Commit, or replaced by a newer one.
		ch.unacked = append([]epochStates{e}, ch.unacked...)
	}

	r.epochCommitted(ctx, rec, ch.counts)
	if info.release != nil {
		r.heldReleased(epoch, info.release) // after the status counts them
	}
	if rec.Final {
		if err := r.finishDest(ectx, epoch); err != nil {
			return committed{}, err
		}
	}
	return c, nil
}

// checkpointEpoch is step 3: the record of epoch next, following ch's
// last (none: the pipeline's first), with its side files staged under
// this generation's names, committed to the checkpoint log.
func (r *runner) checkpointEpoch(ctx context.Context, next uint64, ch *commitChain, info *epochInfo, cs [][]byte) (*checkpoint.Record, error) {
	rec := &checkpoint.Record{
		Pipeline: r.cfg.Name, Epoch: next, Generation: r.gen, Prev: ch.prev,
		Time: r.cfg.Now().UTC(), Resume: r.resumeMap(ch.resume, info.states), Replay: ch.replay, Released: ch.released,
		Engine: info.engine, Committables: cs, Counts: info.counts,
		Totals: addCounts(ch.totals, info.counts),
		Final:  next == r.completeEpoch.Load(),
	}
	if info.release != nil {
		rec.Released = info.release.state
	}
	if r.cfg.replay != nil {
		// The one split is the replay's (replay.go): the source's states
		// stay as they were, and the split's is what was replayed.
		rec.Resume, rec.Replay = maps.Clone(ch.resume), info.states[0]
	}
	// Quarantined records and held values are staged under names of this
	// generation, listed in the record, and published under the epoch's
	// name only once the epoch is committed: a crashed or fenced attempt
	// leaves nothing a reader of _quarantine/ or _held/ sees.
	for _, k := range sortedSideKeys(info.side) {
		name := stagedSideName(k, next, r.gen)
		if err := r.cfg.Store.WriteFile(ctx, r.cfg.Name, name, info.side[k]); err != nil {
			return nil, fmt.Errorf("checkpoints: stage %s file: %w", k.kind, err)
		}
		rows := info.counts[k.stream].Quarantined
		if k.kind == kindHeld {
			rows = info.counts[k.stream].Held
		}
		rec.Files = append(rec.Files, checkpoint.File{Kind: k.kind, Stream: k.stream, Path: name, Rows: rows})
	}
	if err := r.commitCheckpoint(ctx, rec); err != nil {
		return nil, fmt.Errorf("checkpoints: commit epoch %d: %w", next, err)
	}
	return rec, nil
}

// commitDest calls Commit on lane 0, retrying with backoff.
func (r *runner) commitDest(ctx context.Context, epoch uint64, cs [][]byte) (err error) {
	ctx, end := r.observeCommit(ctx, epoch)
	defer func() { end(err) }()
	committables := make([]sink.Committable, len(cs))
	for i, c := range cs {
		committables[i] = c
	}
	backoff := r.cfg.CommitBackoff
	for try := 1; ; try++ {
		err = r.writers[0].Commit(ctx, epoch, committables)
		if err == nil || errors.Is(err, sink.ErrFenced) || try > r.cfg.CommitRetries {
			break
		}
		r.commitRetried(ctx, epoch, try, err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		backoff *= 2
	}
	if err != nil {
		return fmt.Errorf("destination: commit epoch %d: %w", epoch, err)
	}
	return nil
}

// finishDest calls lane 0's Finish after the Final epoch's Commit.
func (r *runner) finishDest(ctx context.Context, epoch uint64) (err error) {
	ctx, end := r.observeFinish(ctx, epoch)
	defer func() { end(err) }()
	if err := r.writers[0].Finish(ctx, epoch); err != nil {
		return fmt.Errorf("destination: finish epoch %d: %w", epoch, err)
	}
	return nil
}

// visible is the newest epoch the destination shows readers after
// lane 0's Commit of epoch returned nil: epoch itself, unless the
// destination declares Deferred, when its writer says
// (sink.Visibility; checked when the writers were opened).
func (r *runner) visible(epoch uint64) uint64 {
	if !r.cfg.Destination.Capabilities().Deferred {
		return epoch
	}
	if v, ok := r.writers[0].(sink.Visibility); ok {
		return min(v.Visible(), epoch)
	}
	return 0
}

// ackSource is step 5: it acknowledges resume states of a committed,
// visible epoch before epoch (see commitChain.toAck) to a source that
// takes acknowledgements. It reports false when the ack failed, to be
// retried with a later epoch's.
func (r *runner) ackSource(ctx context.Context, acker source.Acker, e epochStates) bool {
	if acker == nil || len(e.states) == 0 || r.cfg.replay != nil {
		return true
	}
	if err := acker.Ack(ctx, splitIDs(e.states)); err != nil {
		r.ackFailed(e.epoch, err)
		return false
	}
	return true
}

// recover raises the destination's fence and makes sure HEAD's epoch is
// applied, rewinding the log past epochs the destination lost. A
// destination ahead of the log fails it with a *sink.AheadError.
func (r *runner) recover(ctx context.Context) error {
	for {
		out, err := r.writers[0].Recover(ctx, r.gen, r.head)
		if err != nil {
			if errors.Is(err, sink.ErrFenced) {
				err = r.fenceAhead(ctx, err)
			}
			return fmt.Errorf("destination: recover: %w", err)
		}
		if r.head == nil && out != sink.Applied {
			// Nothing was committed, so there is nothing to apply or lose.
			return fmt.Errorf("destination: recover reported %v for a pipeline with no checkpoint: only applied makes sense", out)
		}
		switch out {
		case sink.Applied:
			if r.head == nil {
				return nil
			}
			return r.publishFiles(ctx, r.head, nil)
		case sink.Recoverable:
			r.epochRecovered(out, r.head.Epoch, 0)
			if err := r.commitDest(ctx, r.head.Epoch, r.head.Committables); err != nil {
				return err
			}
			return r.publishFiles(ctx, r.head, nil)
		case sink.Lost:
			// The zero Ref rewinds to before the first record: the
			// pipeline starts over.
			var to checkpoint.Ref
			if r.head.Prev != nil {
				to = *r.head.Prev
			}
			r.epochRecovered(out, r.head.Epoch, to.Epoch)
			if err := r.cfg.Store.Rewind(ctx, r.cfg.Name, r.gen, to); err != nil {
				return fmt.Errorf("checkpoints: rewind past lost epoch %d: %w", r.head.Epoch, err)
			}
			if r.head.Prev == nil {
				r.head = nil
				continue
			}
			if r.head, err = r.cfg.Store.Get(ctx, r.cfg.Name, to); err != nil {
				return fmt.Errorf("checkpoints: read record after rewind: %w", err)
			}
		default:
			return fmt.Errorf("destination: recover returned unknown outcome %v", out)
		}
	}
}

package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// The commit protocol, step by step (docs/commit-protocol.md tells it
// whole). An epoch moves through five steps; the first two run where the
// data flows, the last three here, on the commit goroutine (runCommit),
// one epoch at a time in epoch order:
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
//     can still read it again).
//
// An attempt starts with recover, which settles HEAD's epoch with the
// destination before any new data flows.

// runCommit commits epochs in order: it writes the checkpoint record and
// moves HEAD (the commit point), applies the epoch at the destination on
// lane 0 and acknowledges the previous epoch's positions to the source.
func (r *runner) runCommit(ctx context.Context, log *slog.Logger) error {
	infos := map[uint64]*epochInfo{}
	lanes := map[uint64][][]byte{}
	got := map[uint64]int{}
	next := r.firstEpoch
	prev := r.head
	var prevRef *checkpoint.Ref
	var resume map[string][]byte
	var totals map[string]checkpoint.Counts
	if prev != nil {
		ref := prev.Ref()
		prevRef, resume, totals = &ref, prev.Resume, prev.Totals
	}
	ackStates := resume
	counts := map[string]checkpoint.Counts{}
	done := 0 // epochs committed
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
		}
		for infos[next] != nil && got[next] == r.cfg.Lanes {
			info, cs := infos[next], lanes[next]
			delete(infos, next)
			delete(lanes, next)
			delete(got, next)
			ectx := r.epochContext(ctx, next)
			rec, err := r.checkpointEpoch(ectx, next, prevRef, resume, totals, info, cs)
			if err != nil {
				return err
			}
			log.Debug("epoch committed", "epoch", next)
			t0 := time.Now()
			err = r.commitDest(ectx, next, cs, log)
			r.mon.inst.commitDur.Record(ctx, time.Since(t0).Seconds(), r.mon.destAttr)
			if err != nil {
				return err
			}
			if err := r.publishFiles(ctx, rec, info.side); err != nil {
				return err
			}
			r.ackSource(ctx, acker, ackStates, next, log)
			ackStates = rec.Resume
			ref := rec.Ref()
			prevRef, resume, totals = &ref, rec.Resume, rec.Totals
			counts = addCounts(counts, info.counts)
			r.epochCommitted(ctx, rec, counts)
			done++
			c := committed{epoch: next, epochs: done, counts: maps.Clone(counts), totals: maps.Clone(totals)}
			r.lastCommit.Store(&c)
			if rec.Final {
				if err := r.finishDest(ectx, next); err != nil {
					return err
				}
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

// checkpointEpoch is step 3: the record of epoch next, following prev
// (nil: the pipeline's first), with its side files staged under this
// generation's names, committed to the checkpoint log.
func (r *runner) checkpointEpoch(ctx context.Context, next uint64, prev *checkpoint.Ref, resume map[string][]byte,
	totals map[string]checkpoint.Counts, info *epochInfo, cs [][]byte) (*checkpoint.Record, error) {
	rec := &checkpoint.Record{
		Pipeline: r.cfg.Name, Epoch: next, Generation: r.gen, Prev: prev,
		Time: r.cfg.Now().UTC(), Resume: r.resumeMap(resume, info.states),
		Engine: info.engine, Committables: cs, Counts: info.counts,
		Totals: addCounts(totals, info.counts),
		Final:  next == r.completeEpoch.Load(),
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

// commitDest calls Commit on lane 0 with retries and backoff, in a span
// of its own.
func (r *runner) commitDest(ctx context.Context, epoch uint64, cs [][]byte, log *slog.Logger) (err error) {
	ctx, span := r.mon.tracer.Start(ctx, "openetl.commit", trace.WithAttributes(
		AttrEpoch.Int64(int64(epoch)), AttrGeneration.Int64(int64(r.gen)), AttrDestination.String(r.mon.dest)))
	defer func() { endSpan(span, err) }()
	committables := make([]sink.Committable, len(cs))
	for i, c := range cs {
		committables[i] = c
	}
	backoff := r.cfg.CommitBackoff
	for try := 0; ; try++ {
		err = r.writers[0].Commit(ctx, epoch, committables)
		if err == nil || errors.Is(err, sink.ErrFenced) || try >= r.cfg.CommitRetries {
			break
		}
		log.Warn("destination commit failed; retrying", "epoch", epoch, "try", try+1, "err", err)
		span.AddEvent("retry", trace.WithAttributes(attribute.Int("try", try+1)))
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

// finishDest calls lane 0's Finish, when the writer has one, after the
// Final epoch's Commit.
func (r *runner) finishDest(ctx context.Context, epoch uint64) (err error) {
	f, ok := r.writers[0].(sink.Finisher)
	if !ok {
		return nil
	}
	ctx, span := r.mon.tracer.Start(ctx, "openetl.finish", trace.WithAttributes(
		AttrEpoch.Int64(int64(epoch)), AttrGeneration.Int64(int64(r.gen)), AttrDestination.String(r.mon.dest)))
	defer func() { endSpan(span, err) }()
	if err := f.Finish(ctx, epoch); err != nil {
		return fmt.Errorf("destination: finish epoch %d: %w", epoch, err)
	}
	return nil
}

// ackSource is step 5: it acknowledges the resume states of the epoch
// before epoch (states; none for the attempt's first) to a source that
// takes acknowledgements. A failed ack is retried with the next epoch's.
func (r *runner) ackSource(ctx context.Context, acker source.Acker, states map[string][]byte, epoch uint64, log *slog.Logger) {
	if acker == nil || len(states) == 0 {
		return
	}
	if err := acker.Ack(ctx, splitIDs(states)); err != nil {
		log.Warn("source ack failed; retried with the next epoch", "epoch", epoch-1, "err", err)
	}
}

// recover raises the destination's fence and makes sure HEAD's epoch is
// applied, rewinding the log past epochs the destination lost. A
// destination ahead of the log fails it with a *sink.AheadError.
func (r *runner) recover(ctx context.Context, log *slog.Logger) error {
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
			log.Info("applying the last committed epoch", "epoch", r.head.Epoch)
			r.mon.emit(Event{Kind: EventEpochRecovered, Generation: r.gen, Epoch: r.head.Epoch, Outcome: out})
			if err := r.commitDest(ctx, r.head.Epoch, r.head.Committables, log); err != nil {
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
			log.Warn("rewinding past a lost epoch", "epoch", r.head.Epoch, "to", to.Epoch)
			r.mon.emit(Event{Kind: EventEpochRecovered, Generation: r.gen, Epoch: r.head.Epoch, Outcome: out})
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

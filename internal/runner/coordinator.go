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

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
)

// pipeline starts the stages and coordinates barriers until the attempt
// ends. ctx is the caller's; work is the attempt's.
func (r *runner) pipeline(ctx, work context.Context, cancelWork context.CancelCauseFunc, resume map[source.SplitID][]byte, log *slog.Logger) (Result, error) {
	cfg := r.cfg
	if err := r.startWorkers(); err != nil {
		return Result{}, err
	}
	defer r.closeWorkers()
	// Enough batches for every split's open one plus the engine's queue.
	r.freeBatches = make(chan *engine.RawBatch, 2*len(r.splits)+8)
	r.toLanes = make([]chan laneMsg, cfg.Lanes)
	for i := range r.toLanes {
		r.toLanes[i] = make(chan laneMsg, 4)
	}
	r.toCommit = make(chan commitMsg, 2*cfg.Lanes+4)
	r.alignedCh = make(chan uint64, 1)
	r.commitCh = make(chan committed, 1)
	r.budget = make(chan struct{}, 1)

	splitCtx, cancelSplits := context.WithCancelCause(work)
	defer cancelSplits(nil)
	errCh := make(chan error, len(r.splits)+len(r.workers)+cfg.Lanes+1)
	var wg sync.WaitGroup
	fail := func(err error) {
		if err != nil {
			errCh <- err
		}
	}

	seen := map[source.SplitID]bool{}
	for i, sp := range r.splits {
		id := sp.ID()
		if id == "" || seen[id] {
			return Result{}, fmt.Errorf("source: split ID %q empty or repeated", id)
		}
		seen[id] = true
		r.pumps = append(r.pumps, newPump(r, i, id, resume[id], splitCtx))
	}
	r.running()
	// splitsDone is closed when every split's Read returned nil. Splits
	// that stop with an error never count, so it is closed by the last
	// one to finish rather than by a goroutine that could wait forever.
	splitsDone := make(chan struct{})
	var reading atomic.Int64
	reading.Store(int64(len(r.splits)))
	for i, sp := range r.splits {
		p := r.pumps[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := sp.Read(splitCtx, p, r.bounded)
			switch {
			case err == nil:
				fail(p.finish())
				if reading.Add(-1) == 0 {
					close(splitsDone)
				}
			case errors.Is(err, source.ErrStopping), splitCtx.Err() != nil:
				// Stopping: the split's records after its last barrier
				// are read again by the next attempt.
			default:
				fail(fmt.Errorf("source: split %q: %w", p.id, err))
			}
		}()
	}

	wg.Add(len(r.workers) + 1 + cfg.Lanes)
	for _, w := range r.workers {
		go func() { defer wg.Done(); fail(r.runEngine(work, w)) }()
	}
	for lane := range cfg.Lanes {
		go func() { defer wg.Done(); fail(r.runLane(work, lane)) }()
	}
	commitDone := make(chan struct{})
	go func() { defer wg.Done(); defer close(commitDone); fail(r.runCommit(work)) }()

	res, err := r.coordinate(ctx, errCh, splitsDone, log)
	if err != nil {
		cancelWork(err)
	} else {
		cancelWork(nil)
	}
	cancelSplits(nil)
	wg.Wait()
	// An attempt that failed may have committed an epoch the coordinator
	// had not heard of yet (its error and the commit arrived together):
	// the Result counts what is committed.
	if c := r.lastCommit.Load(); c != nil && c.epoch > res.Epoch {
		res.Epoch, res.Streams, res.Totals, res.Epochs = c.epoch, c.counts, c.totals, c.epochs
	}
	// Lanes that stopped early leave records queued: release them (the
	// engine's records may hold memory only Release frees).
	for _, ch := range r.toLanes {
		for len(ch) > 0 {
			if m := <-ch; m.rec != nil {
				m.rec.Release()
			}
		}
	}
	return res, err
}

// coordinate requests barriers and decides when the attempt ends.
func (r *runner) coordinate(ctx context.Context, errCh chan error, splitsDone chan struct{}, log *slog.Logger) (Result, error) {
	cfg := r.cfg
	res := Result{Generation: r.gen, Epoch: r.firstEpoch - 1, Streams: map[string]checkpoint.Counts{}}
	if r.head != nil {
		res.Totals = maps.Clone(r.head.Totals)
	}
	next := r.firstEpoch
	inflight := false // a barrier is requested and not yet aligned
	stopping := false // the attempt ends after the final barrier
	var final uint64  // last epoch of the attempt, once known
	finalKnown := false
	// complete: every split was read to its end, so the final epoch's
	// record is Final (see checkpoint.Record.Final).
	complete := false
	lastBarrier := int64(0) // r.progress() at the last barrier
	first := cfg.EpochInterval
	if cfg.FirstEpoch > 0 && cfg.FirstEpoch < first {
		first = cfg.FirstEpoch
	}
	interval := time.NewTicker(first)
	defer interval.Stop()
	// phased: the ticker's period is EpochInterval. Until then it ticks
	// every FirstEpoch, and the attempt's first barrier sets the phase.
	phased := first == cfg.EpochInterval
	idle := time.NewTicker(50 * time.Millisecond)
	defer idle.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	// Cancelling Run's context stops it cleanly; cancelling Sync's
	// abandons it.
	stopCh, abortCh := ctx.Done(), (<-chan struct{})(nil)
	if r.bounded {
		stopCh, abortCh = nil, ctx.Done()
	}
	var stopTimer <-chan time.Time

	request := func(isFinal bool) {
		if !phased {
			interval.Reset(cfg.EpochInterval)
			phased = true
		}
		lastBarrier = r.progress()
		r.epochBytes.Store(0)
		r.startEpoch(next, isFinal)
		r.barriers.request(next, isFinal)
		inflight = true
		log.Debug("barrier requested", "epoch", next, "final", isFinal)
		if isFinal {
			final, finalKnown = next, true
			if complete {
				r.completeEpoch.Store(next)
			}
		}
		r.placeIdle(errCh)
	}
	// beginStop asks for the final barrier, or settles for the epochs
	// already requested when nothing was read since. A completed read
	// gets a final barrier even then (an epoch without rows) when the last
	// record isn't Final yet: this attempt's epochs, or a head whose
	// refresh the attempt took over.
	beginStop := func() {
		stopping = true
		r.stopping()
		if inflight {
			return // decided when the in-flight barrier aligns
		}
		unmarked := next > r.firstEpoch || (r.head != nil && !r.head.Final)
		if r.progress() > lastBarrier || (complete && unmarked) {
			request(true)
		} else if r.releasing(next) {
			// Only released held values to commit: the epoch ends no
			// full refresh (an overwrite table would be emptied).
			complete = false
			request(true)
		} else {
			final, finalKnown = next-1, true
			r.stopSplits()
		}
	}
	report := func() {
		if cfg.OnProgress != nil {
			cfg.OnProgress(r.progressNow(res))
		}
	}
	for {
		if finalKnown && res.Epoch >= final {
			report()
			return res, nil
		}
		select {
		case err := <-errCh:
			return res, err
		case <-abortCh:
			return res, context.Cause(ctx)
		case <-stopCh:
			stopCh = nil
			stopTimer = time.After(cfg.StopTimeout)
			log.Info("stopping: placing the final checkpoint")
			if !stopping {
				beginStop()
			}
		case <-stopTimer:
			return res, fmt.Errorf("pipeline: final checkpoint not committed within %v", cfg.StopTimeout)
		case <-splitsDone:
			splitsDone = nil
			if !stopping {
				// A replay's split ending is no complete read of the
				// source: its last epoch ends no full refresh.
				complete = r.cfg.replay == nil
				beginStop()
			}
		case <-interval.C:
			// Resume points that moved without records (a quiet table
			// on a busy database) are progress too: checkpointing them
			// lets the source acknowledge upstream.
			if !inflight && !stopping && (r.progress() > lastBarrier || r.releasing(next)) {
				request(false)
			}
		case <-r.budget:
			if !inflight && !stopping {
				request(false)
			}
		case <-idle.C:
			if inflight {
				r.placeIdle(errCh)
			}
		case <-progress.C:
			r.poll()
			report()
		case epoch := <-r.alignedCh:
			inflight = false
			next = epoch + 1
			if stopping && !finalKnown {
				beginStop()
			}
		case c := <-r.commitCh:
			res.Epoch, res.Streams, res.Totals = c.epoch, c.counts, c.totals
			res.Epochs = c.epochs
			report()
		}
	}
}

// releasing reports whether epoch next is the attempt's first and
// carries released held values (release.go), which must commit even
// when nothing is read.
func (r *runner) releasing(next uint64) bool {
	return next == r.firstEpoch && r.release != nil && len(r.release.patches) > 0
}

// progress counts records and resume points so far, over all splits.
func (r *runner) progress() int64 {
	var n int64
	for _, p := range r.pumps {
		n += p.records.Load() + p.moves.Load()
	}
	return n
}

// recordsRead counts records read so far in this attempt.
func (r *runner) recordsRead() int64 {
	var n int64
	for _, p := range r.pumps {
		n += p.records.Load()
	}
	return n
}

// placeIdle places the requested barrier for idle splits. It runs on a
// goroutine of its own, one at a time, because placing may block on a full
// engine queue and the coordinator must keep draining commits meanwhile.
func (r *runner) placeIdle(errCh chan error) {
	if !r.placing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.placing.Store(false)
		r.placeIdleNow(errCh)
	}()
}

func (r *runner) placeIdleNow(errCh chan error) {
	for _, p := range r.pumps {
		if err := p.placeIdle(); err != nil {
			select {
			case errCh <- err:
			default:
			}
			return
		}
	}
}

// stopSplits makes every split's next emit return source.ErrStopping.
func (r *runner) stopSplits() {
	for _, p := range r.pumps {
		p.mu.Lock()
		p.stopped = true
		p.mu.Unlock()
	}
}

func sortedSideKeys(m map[sideKey][]byte) []sideKey {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b sideKey) int {
		if c := strings.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		return strings.Compare(a.stream, b.stream)
	})
	return keys
}

// stagedSideName is where an epoch's side file waits for the epoch's
// commit.
func stagedSideName(k sideKey, epoch uint64, gen checkpoint.Generation) string {
	return fmt.Sprintf("_staging/%020d-%020d/%s/%s.jsonl", epoch, gen, k.kind, k.stream)
}

// QuarantineName is where the quarantined records of a committed epoch are
// published, relative to the pipeline's directory in the checkpoint store:
// _quarantine/{stream}/{epoch:020d}.jsonl, JSON lines with the stream,
// split, epoch, generation, seq, op, reason, detail, key and the raw
// payload (payload, or payload_base64 when it is not UTF-8).
func QuarantineName(stream string, epoch uint64) string {
	return fmt.Sprintf("_quarantine/%s/%020d.jsonl", stream, epoch)
}

// HeldName is where the values held back in a committed epoch (columns
// the destination can't take yet) are published, relative to the
// pipeline's directory: _held/{stream}/{epoch:020d}.jsonl, JSON lines
// with the stream, destination table, split, epoch, generation, seq, op,
// key, column and the value's text (value, or value_base64).
func HeldName(stream string, epoch uint64) string {
	return fmt.Sprintf("_held/%s/%020d.jsonl", stream, epoch)
}

func publishedName(kind, stream string, epoch uint64) string {
	if kind == kindHeld {
		return HeldName(stream, epoch)
	}
	return QuarantineName(stream, epoch)
}

// publishFiles publishes rec's staged side files; data holds their
// contents when the caller has them, else they are read back. Publishing
// is idempotent: recovery repeats it for HEAD's epoch, which a crash may
// have committed without publishing. Once a file's published copy is
// written, its staged copy is removed (when the store can: a
// checkpoint.FileDeleter), and only then: so a staged copy that is gone
// was published, and recovery passes it by.
func (r *runner) publishFiles(ctx context.Context, rec *checkpoint.Record, data map[sideKey][]byte) error {
	del, _ := r.cfg.Store.(checkpoint.FileDeleter)
	for _, f := range rec.Files {
		if f.Kind != kindQuarantine && f.Kind != kindHeld {
			continue
		}
		b, ok := data[sideKey{f.Kind, f.Stream}]
		if !ok {
			var err error
			b, err = r.cfg.Store.ReadFile(ctx, r.cfg.Name, f.Path)
			if errors.Is(err, checkpoint.ErrNotFound) && del != nil {
				continue // published, then removed
			}
			if err != nil {
				return fmt.Errorf("checkpoints: read staged %s file of epoch %d: %w", f.Kind, rec.Epoch, err)
			}
		}
		if err := r.cfg.Store.WriteFile(ctx, r.cfg.Name, publishedName(f.Kind, f.Stream, rec.Epoch), b); err != nil {
			return fmt.Errorf("checkpoints: publish %s file of epoch %d: %w", f.Kind, rec.Epoch, err)
		}
		if del != nil {
			if err := del.DeleteFile(ctx, r.cfg.Name, f.Path); err != nil && !errors.Is(err, errors.ErrUnsupported) {
				r.log.Warn("could not remove a published side file's staged copy; it is harmless but takes space",
					"epoch", rec.Epoch, "path", f.Path, "err", err)
			}
		}
	}
	return nil
}

func addCounts(a, b map[string]checkpoint.Counts) map[string]checkpoint.Counts {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]checkpoint.Counts{}
	}
	for k, v := range b {
		out[k] = out[k].Add(v)
	}
	return out
}

func splitIDs(m map[string][]byte) map[source.SplitID][]byte {
	out := make(map[source.SplitID][]byte, len(m))
	for k, v := range m {
		out[source.SplitID(k)] = v
	}
	return out
}

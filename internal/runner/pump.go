package runner

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
)

// msgKind tells what a message from a pump to the engine carries.
type msgKind uint8

const (
	msgBatch   msgKind = iota // a raw batch of one stream
	msgBarrier                // the split's barrier for an epoch, with its resume state
)

type pumpMsg struct {
	kind  msgKind
	split int
	batch *engine.RawBatch
	epoch uint64
	state []byte // resume state at the barrier; nil = from the beginning
}

// barrierControl is shared by the coordinator and the pumps: the epoch
// whose barrier is requested and a channel closed when it is aligned.
type barrierControl struct {
	mu        sync.Mutex
	requested uint64        // epoch requested; 0 = none yet
	final     bool          // the requested barrier is the last of the attempt
	aligned   chan struct{} // closed when every split placed `requested`
	reqAtomic atomic.Uint64 // mirror of requested for lock-free checks
}

func (b *barrierControl) request(epoch uint64, final bool) {
	b.mu.Lock()
	b.requested, b.final = epoch, final
	b.aligned = make(chan struct{})
	b.mu.Unlock()
	b.reqAtomic.Store(epoch)
}

// current returns the requested epoch, whether it is final, and the
// channel closed at its alignment.
func (b *barrierControl) current() (uint64, bool, chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requested, b.final, b.aligned
}

// pump is the Emitter handed to one split. Record and ResumePoint run on
// the split's goroutine; placeIdle runs on the coordinator's. mu keeps the
// two apart.
type pump struct {
	idx      int
	id       source.SplitID
	r        *runner
	ctx      context.Context // the split's reading context
	mu       sync.Mutex
	batches  map[string]*engine.RawBatch
	last     *engine.RawBatch // batch of the last stream, a fast path
	state    []byte           // last resume state
	hasState bool
	dirty    bool   // records emitted since the last resume point
	placed   uint64 // last epoch whose barrier this split placed
	wait     chan struct{}
	stopped  bool // the final barrier is placed: emit nothing more
	done     bool // Read returned
	// records and moves count records and resume points, for the
	// coordinator's "anything since the last barrier?" (per split, so
	// splits don't contend on one counter).
	records atomic.Int64
	moves   atomic.Int64
}

func newPump(r *runner, idx int, id source.SplitID, resume []byte, ctx context.Context) *pump {
	p := &pump{idx: idx, id: id, r: r, ctx: ctx, batches: map[string]*engine.RawBatch{}}
	if resume != nil {
		p.state = append([]byte(nil), resume...)
		p.hasState = true
	}
	return p
}

// Record implements source.Emitter.
func (p *pump) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	p.mu.Lock()
	for p.wait != nil {
		// Aligned barriers: after placing barrier N the split waits until
		// every split has placed it, so no later record slips into epoch N.
		// Loop: while it waited, placeIdle may have placed barrier N+1 on
		// its behalf, and this record must wait for that one too.
		w := p.wait
		p.wait = nil
		p.mu.Unlock()
		if err := p.waitAligned(w); err != nil {
			return err
		}
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	if p.stopped {
		return source.ErrStopping
	}
	if !op.Valid() {
		return fmt.Errorf("split %q emitted invalid op %d for stream %q", p.id, op, stream)
	}
	b := p.last
	if b == nil || b.Stream != stream {
		b = p.batches[stream]
		if b == nil {
			if !p.r.streamSet[stream] {
				return fmt.Errorf("split %q emitted stream %q, which is not selected or not in the catalog", p.id, stream)
			}
			b = p.r.getBatch(stream)
			p.batches[stream] = b
		}
		p.last = b
	}
	b.Append(uint8(op), seq, key, payload)
	p.dirty = true
	p.records.Add(1)
	if b.Len() >= p.r.cfg.BatchRows || b.Bytes() >= p.r.cfg.BatchBytes {
		noteFullBatch(b)
		return p.flushLocked(b)
	}
	return nil
}

// Report implements source.Reporter: a notice of the split becomes a Warn
// log line (Info for a re-snapshot's progress) and an event.
func (p *pump) Report(n source.Notice) {
	p.mu.Lock()
	epoch := p.placed + 1 // the epoch records emitted now belong to
	p.mu.Unlock()
	r := p.r
	args := []any{"kind", n.Kind, "split", string(p.id)}
	for _, kv := range [][2]string{{"stream", n.Stream}, {"column", n.Column}, {"change", n.Change}, {"to", n.To}, {"detail", n.Detail}} {
		if kv[1] != "" {
			args = append(args, kv[0], kv[1])
		}
	}
	if n.Err != nil {
		args = append(args, "err", n.Err)
	}
	switch EventKind(n.Kind) {
	case EventResnapshotStarted, EventResnapshotDone:
		r.log.Info("the source reports", args...) // progress, not trouble
	default:
		r.log.Warn("the source reports", args...)
	}
	switch kind := EventKind(n.Kind); kind {
	case EventSourceReset, EventSchemaChanged, EventResnapshotStarted, EventResnapshotDone:
		r.mon.emit(Event{Kind: kind, Generation: r.gen, Epoch: epoch, Split: string(p.id), Stream: n.Stream, Column: n.Column,
			Change: n.Change, To: n.To, Detail: n.Detail, Err: redactErr(n.Err)})
	}
}

func (p *pump) stopErr() error {
	if err := context.Cause(p.ctx); err != nil {
		return err
	}
	return source.ErrStopping
}

// flushLocked sends b to the engine and replaces it with a fresh batch.
func (p *pump) flushLocked(b *engine.RawBatch) error {
	if b.Len() == 0 {
		return nil
	}
	// The epoch's byte budget is counted per batch, not per record: the
	// counter is shared by every split.
	if n := p.r.epochBytes.Add(int64(b.Bytes())); n >= p.r.cfg.EpochBytes {
		p.r.signalBudget()
	}
	nb := p.r.getBatch(b.Stream)
	p.batches[b.Stream] = nb
	if p.last == b {
		p.last = nb
	}
	return p.send(pumpMsg{kind: msgBatch, split: p.idx, batch: b})
}

// waitAligned waits until aligned is closed: every split has placed the
// barrier and the engine stage has taken it. The engine takes it only
// after what is queued before it, so behind a stuck destination the
// wait lasts as long as the destination is stuck: it counts as waiting
// on the runner (backpressure), as a wait on the full engine queue does.
func (p *pump) waitAligned(aligned chan struct{}) error {
	select {
	case <-aligned:
		return nil
	default:
	}
	t0 := p.r.waitStart(p.idx)
	defer p.r.waitEnd(p.idx, t0)
	select {
	case <-aligned:
		return nil
	case <-p.ctx.Done():
		return p.stopErr()
	}
}

// send hands a batch to its stream's engine worker, and a barrier to
// every worker.
func (p *pump) send(m pumpMsg) error {
	if m.kind == msgBatch {
		return p.sendTo(p.r.toEngine[p.r.workerFor(m.batch.Stream)], m)
	}
	for _, ch := range p.r.toEngine {
		if err := p.sendTo(ch, m); err != nil {
			return err
		}
	}
	return nil
}

func (p *pump) sendTo(ch chan pumpMsg, m pumpMsg) error {
	select {
	case ch <- m:
		return nil
	default:
	}
	// The engine queue is full: count the wait as backpressure.
	t0 := p.r.waitStart(p.idx)
	defer p.r.waitEnd(p.idx, t0)
	select {
	case ch <- m:
		return nil
	case <-p.ctx.Done():
		if m.batch != nil {
			p.r.putBatch(m.batch)
		}
		return p.stopErr()
	}
}

func (p *pump) flushAllLocked() error {
	for _, b := range p.batches {
		if err := p.flushLocked(b); err != nil {
			return err
		}
	}
	return nil
}

// ResumePoint implements source.Emitter.
func (p *pump) ResumePoint(state []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return source.ErrStopping
	}
	if !p.hasState || !bytes.Equal(p.state, state) {
		p.moves.Add(1) // only a position that moved is progress
		p.state = append(p.state[:0], state...)
		p.hasState = true
	}
	p.dirty = false
	if p.r.barriers.reqAtomic.Load() > p.placed {
		return p.placeLocked()
	}
	return nil
}

// placeLocked places the requested barrier after the current resume
// point. The caller holds mu and the split is at a resume point.
func (p *pump) placeLocked() error {
	epoch, final, aligned := p.r.barriers.current()
	if epoch <= p.placed {
		return nil
	}
	if err := p.flushAllLocked(); err != nil {
		return err
	}
	var st []byte // nil: no state, read from the beginning
	if p.hasState {
		// Never nil, even when empty: an empty state is a state.
		st = append(make([]byte, 0, len(p.state)), p.state...)
	}
	if err := p.send(pumpMsg{kind: msgBarrier, split: p.idx, epoch: epoch, state: st}); err != nil {
		return err
	}
	p.placed = epoch
	if final {
		p.stopped = true
		return source.ErrStopping
	}
	if !p.done {
		p.wait = aligned
	}
	return nil
}

// placeIdle places the requested barrier on the coordinator's behalf for
// a split that sits at a resume point (or has finished). It never blocks
// on a busy split: a split that is emitting places the barrier itself at
// its next resume point.
func (p *pump) placeIdle() error {
	if !p.mu.TryLock() {
		return nil
	}
	defer p.mu.Unlock()
	if p.dirty || p.stopped || p.r.barriers.reqAtomic.Load() <= p.placed {
		return nil
	}
	err := p.placeLocked()
	if err == source.ErrStopping {
		return nil
	}
	return err
}

// finish marks the split's Read as returned.
func (p *pump) finish() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	p.wait = nil
	if p.dirty {
		return fmt.Errorf("split %q returned without a resume point after its last record", p.id)
	}
	return nil
}

// markAligned closes the channel that aligned splits wait on.
func (b *barrierControl) markAligned(epoch uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.requested == epoch && b.aligned != nil {
		close(b.aligned)
		b.aligned = nil
	}
}

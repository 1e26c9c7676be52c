package runner_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// fakeSource has streams "s0".."sN-1", one split each, emitting records
// 0..rows-1 with a resume point every rpEvery records. Payload "bad" marks
// records the fake engine quarantines (every badEvery-th).
type fakeSource struct {
	streams, rows, rpEvery, badEvery int
	delay                            time.Duration // per record, to slow reading
	mu                               sync.Mutex
	acks                             []map[source.SplitID][]byte
	idle                             atomic.Int32 // unbounded splits waiting at their end now
	emitted                          atomic.Int64 // records emitted, over every attempt
	openErr                          error        // Open fails with it
	failStream                       string       // this stream's split fails...
	failAt                           int          // ...before emitting this record...
	failErr                          error        // ...with this error
	failOnce                         bool         // ...the first time only
	noFinalRP                        bool         // splits return nil without a resume point at their end
	// Each split waits at its first resume point at or past record
	// holdAt (0: never) until hold is closed, so that a test can make
	// sure something happens while the read is under way, however fast
	// the machine.
	holdAt int
	hold   chan struct{}
}

func (s *fakeSource) Discover(context.Context) (source.Catalog, error) {
	var c source.Catalog
	for i := range s.streams {
		c.Streams = append(c.Streams, source.Stream{Name: fmt.Sprintf("s%d", i), PrimaryKey: []string{"id"}})
	}
	return c, nil
}

func (s *fakeSource) Replay() source.Replay { return source.ReplayExact }

func (s *fakeSource) Open(_ context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	if s.openErr != nil {
		return nil, s.openErr
	}
	var out []source.Split
	for _, st := range streams {
		sp := &fakeSplit{src: s, stream: st}
		if b, ok := resume[source.SplitID(st)]; ok {
			if len(b) != 8 {
				return nil, fmt.Errorf("bad state for %s", st)
			}
			sp.next = int(binary.BigEndian.Uint64(b))
		}
		out = append(out, sp)
	}
	return out, nil
}

func (s *fakeSource) Ack(_ context.Context, states map[source.SplitID][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acks = append(s.acks, states)
	return nil
}

type fakeSplit struct {
	src    *fakeSource
	stream string
	next   int
	held   bool
}

func (sp *fakeSplit) ID() source.SplitID { return source.SplitID(sp.stream) }

func (sp *fakeSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	var st [8]byte
	for {
		if sp.next >= sp.src.rows {
			if bounded {
				return nil
			}
			sp.src.idle.Add(1)
			<-ctx.Done()
			sp.src.idle.Add(-1)
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if sp.src.delay > 0 {
			time.Sleep(sp.src.delay) // pacing only: tests wait on signals
		}
		i := sp.next
		if sp.stream == sp.src.failStream && i == sp.src.failAt {
			sp.src.mu.Lock()
			err := sp.src.failErr
			if sp.src.failOnce {
				sp.src.failErr = nil
			}
			sp.src.mu.Unlock()
			if err != nil {
				return err
			}
		}
		payload := []byte("ok")
		if sp.src.badEvery > 0 && i%sp.src.badEvery == sp.src.badEvery-1 {
			payload = []byte("bad")
		}
		if err := e.Record(sp.stream, source.OpInsert, int64(i+1), []byte(strconv.Itoa(i)), payload); err != nil {
			return err
		}
		sp.src.emitted.Add(1)
		sp.next++
		if sp.next%sp.src.rpEvery == 0 || sp.next == sp.src.rows && !sp.src.noFinalRP {
			binary.BigEndian.PutUint64(st[:], uint64(sp.next))
			if err := e.ResumePoint(st[:]); err != nil {
				return err
			}
			if sp.src.holdAt > 0 && sp.next >= sp.src.holdAt && !sp.held {
				sp.held = true
				select {
				case <-sp.src.hold:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	}
}

// fakeEngine turns each record into a row (key utf8, seq int64) and
// quarantines payload "bad". Lanes route by key modulo.
// Its records are allocated from mem (default memory.DefaultAllocator),
// so a test can check that the runner releases every one.
type fakeEngine struct {
	lanes int
	mem   memory.Allocator
}

func newFakeEngine(cfg engine.Config) (engine.Engine, error) {
	return newFakeEngineWith(memory.DefaultAllocator)(cfg)
}

func newFakeEngineWith(mem memory.Allocator) func(engine.Config) (engine.Engine, error) {
	return func(cfg engine.Config) (engine.Engine, error) {
		if cfg.Lanes == 0 {
			cfg.Lanes = 1
		}
		return &fakeEngine{lanes: cfg.Lanes, mem: mem}, nil
	}
}

var fakeSchema = arrow.NewSchema([]arrow.Field{{Name: "key", Type: arrow.BinaryTypes.String}, {Name: "seq", Type: arrow.PrimitiveTypes.Int64}}, nil)

func (f *fakeEngine) Push(b *engine.RawBatch, _ time.Time) (engine.Output, error) {
	out := engine.Output{LaneOffsets: make([]int, f.lanes+1)}
	type row struct {
		key string
		seq int64
	}
	byLane := make([][]row, f.lanes)
	for i := 0; i < b.Len(); i++ {
		_, seq, key, payload := b.Row(i)
		if string(payload) == "bad" {
			out.Quarantined = append(out.Quarantined, engine.Quarantined{Row: i, Reason: engine.ReasonParse, Detail: "fake"})
			continue
		}
		k, _ := strconv.Atoi(string(key))
		l := k % f.lanes
		byLane[l] = append(byLane[l], row{string(key), seq})
	}
	kb := array.NewStringBuilder(f.mem)
	sb := array.NewInt64Builder(f.mem)
	defer kb.Release()
	defer sb.Release()
	n := 0
	for l, rows := range byLane {
		for _, r := range rows {
			kb.Append(r.key)
			sb.Append(r.seq)
		}
		n += len(rows)
		out.LaneOffsets[l+1] = n
	}
	if n > 0 {
		k, s := kb.NewArray(), sb.NewArray()
		out.Record = array.NewRecordBatch(fakeSchema, []arrow.Array{k, s}, int64(n))
		k.Release()
		s.Release()
	}
	return out, nil
}

func (f *fakeEngine) State() ([]byte, error) { return []byte(`{}`), nil }
func (f *fakeEngine) Close() error           { return nil }

// memDest is a stage-and-apply destination in memory: rows staged per
// (writer, epoch) become visible on Commit. Its state survives attempts,
// as a real destination's does.
type memDest struct {
	mu        sync.Mutex
	staged    map[string][]string // staging id → "stream/key/seq"
	visible   map[string]int      // "stream/key/seq" → times made visible
	applied   map[uint64]bool
	fence     checkpoint.Generation
	nextID    int
	failOnce  map[uint64]error    // Commit of that epoch fails once
	commitErr error               // every Commit fails with it while set
	writeErr  error               // every Write fails with it while set
	writers   int                 // writers made
	closed    int                 // writers closed
	configs   []sink.WriterConfig // what each Writer call got
}

func newMemDest() *memDest {
	return &memDest{staged: map[string][]string{}, visible: map[string]int{}, applied: map[uint64]bool{}, failOnce: map[uint64]error{}}
}

func (d *memDest) Class() sink.Class               { return sink.StageAndApply }
func (d *memDest) Capabilities() sink.Capabilities { return sink.Capabilities{} }
func (d *memDest) Writer(_ context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writers++
	d.configs = append(d.configs, cfg)
	return &memWriter{d: d, lane: cfg.Lane}, nil
}

// rows returns the visible rows and whether any is duplicated.
func (d *memDest) rows() (map[string]int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dup := false
	out := map[string]int{}
	for k, v := range d.visible {
		out[k] = v
		if v > 1 {
			dup = true
		}
	}
	return out, dup
}

type memWriter struct {
	d    *memDest
	lane int
	gen  checkpoint.Generation
	buf  []string
}

func (w *memWriter) Write(_ context.Context, stream string, rec arrow.RecordBatch) error {
	w.d.mu.Lock()
	err := w.d.writeErr
	w.d.mu.Unlock()
	if err != nil {
		return err
	}
	keys := rec.Column(0).(*array.String)
	seqs := rec.Column(1).(*array.Int64)
	for i := 0; i < int(rec.NumRows()); i++ {
		w.buf = append(w.buf, fmt.Sprintf("%s/%s/%d", stream, keys.Value(i), seqs.Value(i)))
	}
	return nil
}

func (w *memWriter) PreCommit(_ context.Context, epoch uint64) (sink.Committable, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	w.d.nextID++
	id := fmt.Sprintf("e%d-l%d-%d", epoch, w.lane, w.d.nextID)
	w.d.staged[id] = w.buf
	w.buf = nil
	return json.Marshal(id)
}

func (w *memWriter) Commit(_ context.Context, epoch uint64, cs []sink.Committable) error {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	if w.d.fence > w.gen {
		return fmt.Errorf("commit epoch %d by generation %d: %w", epoch, w.gen, sink.ErrFenced)
	}
	if err := w.d.failOnce[epoch]; err != nil {
		delete(w.d.failOnce, epoch)
		return err
	}
	if w.d.commitErr != nil {
		return w.d.commitErr
	}
	if w.d.applied[epoch] {
		return nil
	}
	for _, c := range cs {
		var id string
		if err := json.Unmarshal(c, &id); err != nil {
			return err
		}
		rows, ok := w.d.staged[id]
		if !ok {
			return errors.New("staged data lost: " + id)
		}
		for _, r := range rows {
			w.d.visible[r]++
		}
	}
	w.d.applied[epoch] = true
	return nil
}

func (w *memWriter) Recover(_ context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	if w.d.fence > gen {
		return 0, sink.ErrFenced
	}
	w.d.fence, w.gen = gen, gen
	if head == nil || w.d.applied[head.Epoch] {
		return sink.Applied, nil
	}
	for _, c := range head.Committables {
		var id string
		if err := json.Unmarshal(c, &id); err != nil {
			return 0, err
		}
		if _, ok := w.d.staged[id]; !ok {
			return sink.Lost, nil
		}
	}
	return sink.Recoverable, nil
}

func (w *memWriter) Finish(context.Context, uint64) error { return nil }

func (w *memWriter) Close(context.Context) error {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	w.d.closed++
	return nil
}

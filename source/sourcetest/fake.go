package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/openetl/etl/source"
)

// FakeStream describes one stream of a FakeSource.
type FakeStream struct {
	// Name of the stream; it must be a valid stream name (see
	// source.Stream).
	Name string
	// Unkeyed makes a stream without a primary key; by default the key is
	// the payload's "id" field. Unkeyed streams are never CDC.
	Unkeyed bool
	// CDC makes the stream emit updates and deletes of earlier keys as
	// well as inserts; ignored for unkeyed streams.
	CDC bool
	// Splits is the number of splits reading the stream; default 1. Each
	// split has keys of its own.
	Splits int
	// Rows is the number of records each split holds (0 is allowed: the
	// split only emits its resume point).
	Rows int
	// BadEvery, when positive, makes every BadEvery-th insert carry a
	// payload that is not JSON, which the engine quarantines. A bad
	// record's key is never updated or deleted.
	BadEvery int
}

// FakeSourceOp names the operation a FakeSource's control function is
// called before.
type FakeSourceOp uint8

// The operations of a FakeSource that a control function can fail or
// delay.
const (
	FakeDiscover    FakeSourceOp = iota + 1 // Source.Discover
	FakeOpen                                // Source.Open
	FakeRead                                // before each record a split emits
	FakeResumePoint                         // before each resume point a split emits
	FakeAck                                 // Acker.Ack
)

// String returns the operation's name.
func (o FakeSourceOp) String() string {
	switch o {
	case FakeDiscover:
		return "discover"
	case FakeOpen:
		return "open"
	case FakeRead:
		return "read"
	case FakeResumePoint:
		return "resume-point"
	case FakeAck:
		return "ack"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// FakeSourceCall describes one call a control function sees.
type FakeSourceCall struct {
	Op FakeSourceOp
	// Stream and Split are set for FakeRead and FakeResumePoint.
	Stream string
	Split  source.SplitID
	// Index is the record's index in its split (FakeRead) or the position
	// about to be declared (FakeResumePoint).
	Index int
}

// FakeRecord is one record a FakeSource holds.
type FakeRecord struct {
	Stream  string
	Split   source.SplitID
	Index   int // place in the split, from 0
	Op      source.Op
	Seq     int64
	Key     []byte // encoded primary key (the decimal "id"); nil when unkeyed
	Payload []byte
	// Bad marks a payload that is not JSON: the engine quarantines it.
	Bad bool
}

// FakeSourceConfig configures NewFakeSource.
type FakeSourceConfig struct {
	Streams []FakeStream
	// Replay is the replay class the source reports and behaves by:
	// ReplayExact reopens exactly at the resume state; ReplaySuperset may
	// restart up to SupersetMax records before it (chosen by a PCG seeded
	// with Seed); ReplayNone reopens at the furthest position any split
	// ever read, losing what was read but not committed.
	Replay source.Replay
	// SupersetMax bounds how far before the resume state a superset replay
	// restarts; default 3.
	SupersetMax int
	// Seed makes the data and the superset restarts; the same seed gives
	// the same records.
	Seed uint64
	// ResumeEvery places a resume point after every ResumeEvery-th record
	// of a split, and always after its last; default 1.
	ResumeEvery int
	// Live starts the source with no record available: SetHorizon
	// reveals them, as a live source's log grows. By default every
	// record is available from the start.
	Live bool
	// Control, when set, is called before each operation (see
	// FakeSourceOp) with the call's context. It may block (honouring ctx
	// or not, as a paused process would) and may return an error, which
	// the operation returns without effect: a disconnect is a FakeRead
	// that fails after N records. It is called from the runner's
	// goroutines, concurrently.
	Control func(ctx context.Context, call FakeSourceCall) error
}

// FakeSource is an in-memory source for tests and simulations: streams of
// JSON documents ({"id":…,"n":…,"s":…}) keyed by "id", several splits per
// stream, exact or superset replay, change-data capture with updates and
// deletes of earlier keys under increasing seq, bounded and unbounded
// reads, and per-operation fault hooks in the style of kfake's ControlKey.
//
// The data is fixed at construction from the seed, so Records and Latest
// give the state a destination must end with. A split's resume state is
// its position (the decimal count of records before it).
//
// WithControl returns a view that shares the data and the acknowledgements
// but has a control function of its own, so a test can give each attempt
// its own faults, and Kill makes a view refuse every later call, as a
// crashed process would. A FakeSource is safe for concurrent use.
type FakeSource struct {
	st      *fakeSourceState
	control func(context.Context, FakeSourceCall) error
	dead    *atomic.Bool
}

// The optional capabilities a FakeSource implements (see package
// source).
var _ source.Acker = (*FakeSource)(nil)

type fakeSourceState struct {
	cfg     FakeSourceConfig
	catalog source.Catalog
	splits  []*fakeSplitData // in catalog order
	byID    map[source.SplitID]*fakeSplitData

	mu      sync.Mutex
	rng     *rand.Rand
	acks    []map[source.SplitID][]byte
	emitted atomic.Int64
	horizon int           // records per split available; -1: all
	grown   chan struct{} // closed and replaced when horizon grows
}

type fakeSplitData struct {
	id      source.SplitID
	stream  string
	records []FakeRecord
	high    atomic.Int64 // furthest position read, for ReplayNone
}

// ErrFakeKilled is returned by every call on a killed FakeSource view.
var ErrFakeKilled = errors.New("sourcetest: fake source view killed (crashed attempt)")

// NewFakeSource makes the records of every stream and returns the source.
func NewFakeSource(cfg FakeSourceConfig) *FakeSource {
	if cfg.SupersetMax <= 0 {
		cfg.SupersetMax = 3
	}
	if cfg.ResumeEvery <= 0 {
		cfg.ResumeEvery = 1
	}
	st := &fakeSourceState{cfg: cfg, byID: map[source.SplitID]*fakeSplitData{},
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed5eed)), horizon: -1, grown: make(chan struct{})}
	for _, fs := range cfg.Streams {
		s := source.Stream{Name: fs.Name, Format: source.FormatJSON, CDC: fs.CDC && !fs.Unkeyed}
		if !fs.Unkeyed {
			s.PrimaryKey = []string{"id"}
		}
		st.catalog.Streams = append(st.catalog.Streams, s)
		n := max(fs.Splits, 1)
		for i := range n {
			sd := &fakeSplitData{id: source.SplitID(fmt.Sprintf("%s#%d", fs.Name, i)), stream: fs.Name}
			sd.records = genRecords(cfg.Seed, fs, i, sd.id)
			st.splits = append(st.splits, sd)
			st.byID[sd.id] = sd
		}
	}
	if cfg.Live {
		st.horizon = 0
	}
	return &FakeSource{st: st, control: cfg.Control, dead: new(atomic.Bool)}
}

func genRecords(seed uint64, fs FakeStream, split int, id source.SplitID) []FakeRecord {
	h := fnv.New64a()
	h.Write([]byte(id))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	cdc := fs.CDC && !fs.Unkeyed
	var live []int64 // keys that may be updated or deleted
	next := int64(split)*1_000_000 + 1
	inserts := 0
	out := make([]FakeRecord, 0, fs.Rows)
	for i := range fs.Rows {
		r := FakeRecord{Stream: fs.Name, Split: id, Index: i, Seq: int64(i + 1)}
		var key int64
		switch p := rng.IntN(10); {
		case cdc && len(live) > 0 && p < 3:
			r.Op, key = source.OpUpdate, live[rng.IntN(len(live))]
		case cdc && len(live) > 0 && p < 4:
			j := rng.IntN(len(live))
			r.Op, key = source.OpDelete, live[j]
			live = slices.Delete(live, j, j+1)
		default:
			r.Op, key = source.OpInsert, next
			next++
			inserts++
		}
		switch {
		case r.Op == source.OpInsert && fs.BadEvery > 0 && inserts%fs.BadEvery == 0:
			r.Bad = true
			r.Payload = []byte(fmt.Sprintf("not json %d", key))
		case r.Op == source.OpDelete:
			r.Payload = []byte(fmt.Sprintf(`{"id":%d}`, key))
		default:
			r.Payload = []byte(fmt.Sprintf(`{"id":%d,"n":%d,"s":"v%x"}`, key, rng.IntN(1000), rng.Uint32()))
			if r.Op == source.OpInsert && cdc {
				live = append(live, key)
			}
		}
		if !fs.Unkeyed {
			r.Key = []byte(strconv.FormatInt(key, 10))
		}
		out = append(out, r)
	}
	return out
}

// WithControl returns a view of s sharing its data and acknowledgements,
// whose operations call control instead of s's control function (nil:
// none). The view is alive even when s was killed.
func (s *FakeSource) WithControl(control func(context.Context, FakeSourceCall) error) *FakeSource {
	return &FakeSource{st: s.st, control: control, dead: new(atomic.Bool)}
}

// Kill makes this view (not others) refuse every later call with
// ErrFakeKilled; splits it opened stop at their next record.
func (s *FakeSource) Kill() { s.dead.Store(true) }

func (s *FakeSource) call(ctx context.Context, c FakeSourceCall) error {
	if s.dead.Load() {
		return ErrFakeKilled
	}
	if s.control != nil {
		if err := s.control(ctx, c); err != nil {
			return err
		}
		if s.dead.Load() {
			return ErrFakeKilled
		}
	}
	return nil
}

// Discover implements source.Source.
func (s *FakeSource) Discover(ctx context.Context) (source.Catalog, error) {
	if err := s.call(ctx, FakeSourceCall{Op: FakeDiscover}); err != nil {
		return source.Catalog{}, err
	}
	return s.Catalog(), nil
}

// Catalog returns the streams, without calling the control function.
func (s *FakeSource) Catalog() source.Catalog {
	return source.Catalog{Streams: slices.Clone(s.st.catalog.Streams)}
}

// Replay implements source.Source.
func (s *FakeSource) Replay() source.Replay { return s.st.cfg.Replay }

// Open implements source.Source: one split per configured split of each
// named stream, positioned by resume (see FakeSourceConfig.Replay).
func (s *FakeSource) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	if err := s.call(ctx, FakeSourceCall{Op: FakeOpen}); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range streams {
		if _, ok := s.st.catalog.Stream(n); !ok {
			return nil, fmt.Errorf("sourcetest: open: stream %q is not in the catalog", n)
		}
		want[n] = true
	}
	var out []source.Split
	for _, sd := range s.st.splits {
		if !want[sd.stream] {
			continue
		}
		start := 0
		if st, ok := resume[sd.id]; ok {
			pos, err := FakePosition(st)
			if err != nil || pos > len(sd.records) {
				return nil, fmt.Errorf("sourcetest: open: split %q: bad resume state %q", sd.id, st)
			}
			start = pos
		}
		switch s.st.cfg.Replay {
		case source.ReplaySuperset:
			if start > 0 {
				s.st.mu.Lock()
				start -= s.st.rng.IntN(min(s.st.cfg.SupersetMax, start) + 1)
				s.st.mu.Unlock()
			}
		case source.ReplayNone:
			start = max(start, int(sd.high.Load()))
		}
		out = append(out, &fakeSplit{src: s, d: sd, start: start})
	}
	return out, nil
}

// SetHorizon makes only the first n records of each split available,
// as a live source whose log grows (see FakeSourceConfig.Live): a bounded
// Read stops at the horizon as it was when Read began, an unbounded one
// waits for it to grow. A negative n makes every record available. The
// horizon only grows: a lower n is ignored. Records and Latest still describe
// every record.
func (s *FakeSource) SetHorizon(n int) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	h := s.st.horizon
	if h < 0 || n >= 0 && n <= h {
		return
	}
	s.st.horizon = n
	close(s.st.grown)
	s.st.grown = make(chan struct{})
}

// available returns how many of n records are available and a channel
// closed when that grows.
func (st *fakeSourceState) available(n int) (int, <-chan struct{}) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.horizon >= 0 && st.horizon < n {
		return st.horizon, st.grown
	}
	return n, nil
}

// FakePosition decodes a FakeSource resume state: the number of records
// of the split before it.
func FakePosition(state []byte) (int, error) {
	n, err := strconv.Atoi(string(state))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("sourcetest: bad fake resume state %q", state)
	}
	return n, nil
}

// Ack implements source.Acker: it records a copy of states (see Acks).
func (s *FakeSource) Ack(ctx context.Context, states map[source.SplitID][]byte) error {
	if err := s.call(ctx, FakeSourceCall{Op: FakeAck}); err != nil {
		return err
	}
	c := make(map[source.SplitID][]byte, len(states))
	for k, v := range states {
		c[k] = slices.Clone(v)
	}
	s.st.mu.Lock()
	s.st.acks = append(s.st.acks, c)
	s.st.mu.Unlock()
	return nil
}

// Acks returns every acknowledgement received by any view, in order.
func (s *FakeSource) Acks() []map[source.SplitID][]byte {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return slices.Clone(s.st.acks)
}

// Emitted counts the records emitted by every view's splits, replays
// included.
func (s *FakeSource) Emitted() int64 { return s.st.emitted.Load() }

// SplitIDs lists every split, in catalog order.
func (s *FakeSource) SplitIDs() []source.SplitID {
	out := make([]source.SplitID, len(s.st.splits))
	for i, sd := range s.st.splits {
		out[i] = sd.id
	}
	return out
}

// Records returns every record of stream, every version of every key, by
// split (in catalog order) and then by position: what an append
// destination must end with (quarantined records included; see
// FakeRecord.Bad).
func (s *FakeSource) Records(stream string) []FakeRecord {
	var out []FakeRecord
	for _, sd := range s.st.splits {
		if sd.stream == stream {
			out = append(out, sd.records...)
		}
	}
	return out
}

// SplitRecords returns the records of one split, by position.
func (s *FakeSource) SplitRecords(id source.SplitID) []FakeRecord {
	if sd := s.st.byID[id]; sd != nil {
		return slices.Clone(sd.records)
	}
	return nil
}

// Latest returns the latest version of each live key of a keyed stream,
// by the decimal key: what a merge destination must end with. Deleted
// keys and bad (quarantined) records are absent.
func (s *FakeSource) Latest(stream string) map[string]FakeRecord {
	out := map[string]FakeRecord{}
	for _, r := range s.Records(stream) {
		if r.Bad || r.Key == nil {
			continue
		}
		if r.Op == source.OpDelete {
			delete(out, string(r.Key))
			continue
		}
		if cur, ok := out[string(r.Key)]; !ok || cur.Seq < r.Seq {
			out[string(r.Key)] = r
		}
	}
	return maps.Clone(out)
}

type fakeSplit struct {
	src   *FakeSource
	d     *fakeSplitData
	start int
}

func (sp *fakeSplit) ID() source.SplitID { return sp.d.id }

// Read implements source.Split.
func (sp *fakeSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	every := sp.src.st.cfg.ResumeEvery
	recs := sp.d.records
	pos := sp.start
	resume := func() error {
		if err := sp.src.call(ctx, FakeSourceCall{Op: FakeResumePoint, Stream: sp.d.stream, Split: sp.d.id, Index: pos}); err != nil {
			return err
		}
		return e.ResumePoint([]byte(strconv.Itoa(pos)))
	}
	// A resume point first, so a split with nothing (left) to read still
	// says where it is.
	if err := resume(); err != nil {
		return err
	}
	end, grown := sp.src.st.available(len(recs))
	for {
		if pos >= end {
			if bounded || grown == nil {
				break
			}
			select { // a live source: wait for its log to grow
			case <-grown:
				end, grown = sp.src.st.available(len(recs))
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		r := &recs[pos]
		if err := sp.src.call(ctx, FakeSourceCall{Op: FakeRead, Stream: sp.d.stream, Split: sp.d.id, Index: pos}); err != nil {
			return err
		}
		if err := e.Record(r.Stream, r.Op, r.Seq, r.Key, r.Payload); err != nil {
			return err
		}
		sp.src.st.emitted.Add(1)
		pos++
		for h := sp.d.high.Load(); int64(pos) > h && !sp.d.high.CompareAndSwap(h, int64(pos)); h = sp.d.high.Load() {
		}
		if pos%every == 0 || pos == end {
			if err := resume(); err != nil {
				return err
			}
		}
	}
	if bounded {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

package sinktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
)

// FakeBroken selects a deliberately broken FakeDestination, to show that a
// test or simulation catches the bug.
type FakeBroken uint8

const (
	// FakeCorrect is the correct destination (the default).
	FakeCorrect FakeBroken = iota
	// FakeSkipFence: Commit never checks the generation fence, so a
	// zombie's Commit that overlaps a newer generation's recovery lands.
	FakeSkipFence
	// FakeDoubleApply: Commit is not idempotent: committing an applied
	// epoch again applies its rows again.
	FakeDoubleApply
	// FakeSkipAhead: Recover does not check for applied epochs after the
	// head it gets (see sink.AheadError), so a lost checkpoint log's new
	// epochs are skipped as applied.
	FakeSkipAhead
)

// String names the variant.
func (b FakeBroken) String() string {
	switch b {
	case FakeCorrect:
		return "correct"
	case FakeSkipFence:
		return "skip-fence"
	case FakeDoubleApply:
		return "double-apply"
	case FakeSkipAhead:
		return "skip-ahead"
	}
	return fmt.Sprintf("broken(%d)", uint8(b))
}

// FakeDestOp names the Writer operation a control function is called
// before.
type FakeDestOp uint8

// The operations of a FakeDestination's writers.
const (
	FakeWrite FakeDestOp = iota + 1
	FakePreCommit
	FakeCommit
	FakeRecover
	FakeClose
	// FakeFinish is sink.Finisher's Finish: only WithFaults's writers
	// see it, when the destination they wrap has one.
	FakeFinish
)

// String returns the operation's name.
func (o FakeDestOp) String() string {
	switch o {
	case FakeWrite:
		return "write"
	case FakePreCommit:
		return "precommit"
	case FakeCommit:
		return "commit"
	case FakeRecover:
		return "recover"
	case FakeClose:
		return "close"
	case FakeFinish:
		return "finish"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// FakeDestCall describes one call a control function sees.
type FakeDestCall struct {
	Op       FakeDestOp
	Pipeline string
	Lane     int
	Stream   string // FakeWrite
	Rows     int    // FakeWrite
	Epoch    uint64 // FakePreCommit, FakeCommit, FakeFinish; HEAD's epoch for FakeRecover (0: none)
	Gen      checkpoint.Generation
}

// FakeFault, returned by a control function (directly or wrapped), tells
// the operation how to fail. Any other error fails the operation before
// it has any effect.
type FakeFault struct {
	// Err is what the operation returns; default ErrFakeFault.
	Err error
	// After makes the operation take effect before it fails: a lost
	// response. For Commit the rows are applied; for Recover the fence is
	// raised; for PreCommit the data is staged.
	After bool
	// Crash kills the view (see FakeDestination.Kill) as the call fails.
	Crash bool
}

func (f *FakeFault) Error() string {
	what := "fault"
	if f.Crash {
		what = "crash"
	}
	when := "before"
	if f.After {
		when = "after"
	}
	return fmt.Sprintf("sinktest: injected %s %s effect: %v", what, when, f.err())
}

func (f *FakeFault) err() error {
	if f.Err == nil {
		return ErrFakeFault
	}
	return f.Err
}

// Unwrap returns Err.
func (f *FakeFault) Unwrap() error { return f.err() }

// Errors of FakeDestination.
var (
	// ErrFakeFault is the default error of an injected FakeFault.
	ErrFakeFault = errors.New("sinktest: injected fault")
	// ErrFakeKilled is returned by every call on a killed view.
	ErrFakeKilled = errors.New("sinktest: fake destination view killed (crashed attempt)")
	// ErrFakeStagedLost is returned by Commit when a committable's staged
	// data is gone (see DropStaged).
	ErrFakeStagedLost = errors.New("sinktest: staged data lost")
)

// FakeStreamMode is how a FakeDestination writes one stream.
type FakeStreamMode struct {
	// Mode is delivery.Append (default) or delivery.Merge (upsert by Key,
	// guarded by _openetl_seq; deletes remove the key). Overwrite is
	// treated as Append.
	Mode delivery.Mode
	// Key lists the key columns; default ["id"].
	Key []string
}

// FakeDestinationConfig configures NewFakeDestination.
type FakeDestinationConfig struct {
	Class        sink.Class
	Capabilities sink.Capabilities
	// Streams sets write modes by stream name; absent streams append.
	Streams map[string]FakeStreamMode
	// Broken selects a deliberately broken variant; default FakeCorrect.
	Broken FakeBroken
	// Control, when set, is called before each writer operation with its
	// context. It may block and may return an error: a *FakeFault says how
	// to fail, any other error fails the call before it has any effect. It
	// is called from the runner's goroutines, concurrently.
	Control func(ctx context.Context, call FakeDestCall) error
}

// FakeRow is one row a FakeDestination holds.
type FakeRow struct {
	Stream string
	ID     string // _openetl_id
	Op     string // _openetl_op
	Seq    int64  // _openetl_seq
	// Key is the key columns' values, joined by "\x1f" ("" when the key
	// column is absent or null).
	Key string
	// Values holds the source's columns: int64, float64, string, bool or
	// nil (other types as their text).
	Values map[string]any
	// Epoch and Gen say which commit made it visible (Gen 0 for
	// DeliverAck writes).
	Epoch uint64
	Gen   checkpoint.Generation
}

// FakeDestination is an in-memory destination for tests and simulations,
// of any class (sink.StageAndApply, sink.Transactional, sink.DeliverAck),
// writing each stream by append or by merge on a primary key guarded by
// _openetl_seq (a lower seq never overwrites a higher one; a delete keeps
// a tombstone so a replayed older version cannot bring the key back).
// Capabilities.SkipByID makes applying skip rows whose _openetl_id the
// table has already taken.
//
// Like a real destination, its state survives attempts: tables, staged
// data, applied epochs and the generation fence per pipeline. Recover
// raises the fence; Commit checks it and is idempotent by epoch. Commit
// reads which epochs are applied when it starts and applies at its end,
// with the control function called in between, as a commit to a real
// table format takes time: only the fence, checked when applying, stops a
// zombie's Commit that overlaps a newer generation's recovery.
// Stage-and-apply and transactional destinations stage rows at PreCommit
// (durable, invisible) and apply them at Commit; deliver-ack ones make
// rows visible at Write.
//
// WithControl returns a view sharing the state with a control function of
// its own, so each attempt can get its own faults; Kill makes a view
// refuse every later call, as a crashed process would. A FakeDestination
// is safe for concurrent use.
type FakeDestination struct {
	st      *fakeDestState
	control func(context.Context, FakeDestCall) error
	dead    *atomic.Bool
}

type fakeDestState struct {
	cfg FakeDestinationConfig

	mu        sync.Mutex
	tables    map[string]*fakeTable
	staged    map[string]fakeStaged
	nextStage int
	applied   map[string]map[uint64]bool // pipeline → epoch
	appliedLg map[string][]FakeApply
	fence     map[string]checkpoint.Generation
}

type fakeStaged struct {
	pipeline string
	epoch    uint64
	rows     []FakeRow
}

type fakeTable struct {
	mode    FakeStreamMode
	rows    []FakeRow          // append
	byKey   map[string]FakeRow // merge, tombstones included (Op "delete")
	ids     map[string]bool
	visible map[string]int // _openetl_id → times it became visible
}

// NewFakeDestination returns an empty destination.
func NewFakeDestination(cfg FakeDestinationConfig) *FakeDestination {
	st := &fakeDestState{cfg: cfg, tables: map[string]*fakeTable{}, staged: map[string]fakeStaged{},
		applied: map[string]map[uint64]bool{}, appliedLg: map[string][]FakeApply{}, fence: map[string]checkpoint.Generation{}}
	return &FakeDestination{st: st, control: cfg.Control, dead: new(atomic.Bool)}
}

// WithControl returns a view of d sharing its state, whose writers call
// control instead of d's control function (nil: none).
func (d *FakeDestination) WithControl(control func(context.Context, FakeDestCall) error) *FakeDestination {
	return &FakeDestination{st: d.st, control: control, dead: new(atomic.Bool)}
}

// Kill makes this view and its writers refuse every later call with
// ErrFakeKilled (Close included).
func (d *FakeDestination) Kill() { d.dead.Store(true) }

// Class implements sink.Destination.
func (d *FakeDestination) Class() sink.Class { return d.st.cfg.Class }

// Capabilities implements sink.Destination.
func (d *FakeDestination) Capabilities() sink.Capabilities { return d.st.cfg.Capabilities }

// Writer implements sink.Destination.
func (d *FakeDestination) Writer(_ context.Context, pipeline string, lane int) (sink.Writer, error) {
	if d.dead.Load() {
		return nil, ErrFakeKilled
	}
	return &fakeWriter{d: d, pipeline: pipeline, lane: lane}, nil
}

// before runs the control function. It returns the fault to apply after
// the effect (when After), or an error to return now.
func (d *FakeDestination) before(ctx context.Context, c FakeDestCall) (after error, now error) {
	if d.dead.Load() {
		return nil, ErrFakeKilled
	}
	if d.control == nil {
		return nil, nil
	}
	err := d.control(ctx, c)
	if err == nil {
		if d.dead.Load() {
			return nil, ErrFakeKilled
		}
		return nil, nil
	}
	var f *FakeFault
	if errors.As(err, &f) {
		if f.Crash {
			d.Kill()
		}
		if f.After {
			return err, nil
		}
	}
	return nil, err
}

type fakeWriter struct {
	d        *FakeDestination
	pipeline string
	lane     int
	gen      checkpoint.Generation
	buf      []FakeRow
}

func (w *fakeWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	after, err := w.d.before(ctx, FakeDestCall{Op: FakeWrite, Pipeline: w.pipeline, Lane: w.lane, Stream: stream, Rows: int(rec.NumRows())})
	if err != nil {
		return err
	}
	rows, err := w.d.st.rows(stream, rec)
	if err != nil {
		return err
	}
	if w.d.st.cfg.Class == sink.DeliverAck {
		w.d.st.mu.Lock()
		w.d.st.apply(rows, 0, 0)
		w.d.st.mu.Unlock()
	} else {
		w.buf = append(w.buf, rows...)
	}
	return after
}

type fakeCommittable struct {
	ID string `json:"id"`
}

func (w *fakeWriter) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	after, err := w.d.before(ctx, FakeDestCall{Op: FakePreCommit, Pipeline: w.pipeline, Lane: w.lane, Epoch: epoch})
	if err != nil {
		return nil, err
	}
	st := w.d.st
	st.mu.Lock()
	st.nextStage++
	id := fmt.Sprintf("%s/e%d/l%d/%d", w.pipeline, epoch, w.lane, st.nextStage)
	if st.cfg.Class != sink.DeliverAck {
		st.staged[id] = fakeStaged{pipeline: w.pipeline, epoch: epoch, rows: w.buf}
	}
	st.mu.Unlock()
	w.buf = nil
	c, _ := json.Marshal(fakeCommittable{ID: id})
	if after != nil {
		return nil, after
	}
	return c, nil
}

func (w *fakeWriter) Commit(ctx context.Context, epoch uint64, cs []sink.Committable) error {
	st := w.d.st
	if w.d.dead.Load() {
		return ErrFakeKilled
	}
	// The applied set is read when the commit starts...
	st.mu.Lock()
	wasApplied := st.applied[w.pipeline][epoch]
	st.mu.Unlock()
	after, err := w.d.before(ctx, FakeDestCall{Op: FakeCommit, Pipeline: w.pipeline, Lane: w.lane, Epoch: epoch, Gen: w.gen})
	if err != nil {
		return err
	}
	// ...and the rows applied at its end, under the fence.
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cfg.Broken != FakeSkipFence && st.fence[w.pipeline] > w.gen {
		return fmt.Errorf("sinktest: commit epoch %d by generation %d, fence at %d: %w", epoch, w.gen, st.fence[w.pipeline], sink.ErrFenced)
	}
	if wasApplied && st.cfg.Broken != FakeDoubleApply {
		return after
	}
	if st.cfg.Class != sink.DeliverAck {
		var rows []FakeRow
		for lane, c := range cs {
			var fc fakeCommittable
			if err := json.Unmarshal(c, &fc); err != nil {
				return fmt.Errorf("sinktest: commit epoch %d: lane %d committable %q: %w", epoch, lane, c, err)
			}
			s, ok := st.staged[fc.ID]
			if !ok {
				return fmt.Errorf("sinktest: commit epoch %d: lane %d (%s): %w", epoch, lane, fc.ID, ErrFakeStagedLost)
			}
			rows = append(rows, s.rows...)
		}
		st.apply(rows, epoch, w.gen)
	}
	if st.applied[w.pipeline] == nil {
		st.applied[w.pipeline] = map[uint64]bool{}
	}
	st.applied[w.pipeline][epoch] = true
	st.appliedLg[w.pipeline] = append(st.appliedLg[w.pipeline], FakeApply{Epoch: epoch, Gen: w.gen, Fence: st.fence[w.pipeline]})
	return after
}

func (w *fakeWriter) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	var epoch uint64
	if head != nil {
		epoch = head.Epoch
	}
	after, err := w.d.before(ctx, FakeDestCall{Op: FakeRecover, Pipeline: w.pipeline, Lane: w.lane, Epoch: epoch, Gen: gen})
	if err != nil {
		return 0, err
	}
	st := w.d.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if f := st.fence[w.pipeline]; f > gen {
		return 0, fmt.Errorf("sinktest: recover by generation %d, fence at %d: %w", gen, f, sink.ErrFenced)
	}
	if st.cfg.Broken != FakeSkipAhead {
		// Checked before the fence rises, so that the log, once restored,
		// is not fenced by the attempts that failed here.
		var last uint64
		for e := range st.applied[w.pipeline] {
			last = max(last, e)
		}
		if err := sink.CheckAhead(w.pipeline, "the fake destination", last, 0, gen, head); err != nil {
			return 0, err
		}
	}
	st.fence[w.pipeline] = gen
	w.gen = gen
	if after != nil {
		return 0, after
	}
	if head == nil || st.cfg.Class == sink.DeliverAck || st.applied[w.pipeline][head.Epoch] {
		return sink.Applied, nil
	}
	for _, c := range head.Committables {
		var fc fakeCommittable
		if err := json.Unmarshal(c, &fc); err != nil {
			return 0, fmt.Errorf("sinktest: recover epoch %d: committable %q: %w", head.Epoch, c, err)
		}
		if _, ok := st.staged[fc.ID]; !ok {
			return sink.Lost, nil
		}
	}
	return sink.Recoverable, nil
}

func (w *fakeWriter) Close(ctx context.Context) error {
	w.buf = nil
	after, err := w.d.before(ctx, FakeDestCall{Op: FakeClose, Pipeline: w.pipeline, Lane: w.lane, Gen: w.gen})
	if err != nil {
		return err
	}
	return after
}

// rows converts an Arrow batch to FakeRows.
func (st *fakeDestState) rows(stream string, rec arrow.RecordBatch) ([]FakeRow, error) {
	mode := st.mode(stream)
	n := int(rec.NumRows())
	out := make([]FakeRow, n)
	for i := range out {
		out[i] = FakeRow{Stream: stream, Values: map[string]any{}}
	}
	keyCols := map[string]int{}
	for j, k := range mode.Key {
		keyCols[k] = j
	}
	keys := make([][]string, n)
	for c, f := range rec.Schema().Fields() {
		col := rec.Column(c)
		for i := range n {
			v := cell(col, i)
			switch f.Name {
			case sink.ColumnID:
				out[i].ID, _ = v.(string)
			case sink.ColumnOp:
				out[i].Op, _ = v.(string)
			case sink.ColumnSeq:
				s, ok := v.(int64)
				if !ok {
					return nil, fmt.Errorf("sinktest: stream %q: _openetl_seq is %T, want int64", stream, v)
				}
				out[i].Seq = s
			case sink.ColumnSyncedAt, sink.ColumnDeleted:
			default:
				out[i].Values[f.Name] = v
				if j, ok := keyCols[f.Name]; ok && v != nil {
					if keys[i] == nil {
						keys[i] = make([]string, len(mode.Key))
					}
					keys[i][j] = fmt.Sprint(v)
				}
			}
		}
	}
	for i := range out {
		if keys[i] != nil {
			out[i].Key = strings.Join(keys[i], "\x1f")
		}
		if out[i].ID == "" {
			return nil, fmt.Errorf("sinktest: stream %q: row %d has no _openetl_id", stream, i)
		}
	}
	return out, nil
}

func cell(col arrow.Array, i int) any {
	if col.IsNull(i) {
		return nil
	}
	switch a := col.(type) {
	case *array.Int64:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.String:
		return strings.Clone(a.Value(i)) // the batch's memory is released after Write
	case *array.LargeString:
		return strings.Clone(a.Value(i))
	case *array.Boolean:
		return a.Value(i)
	}
	return strings.Clone(col.ValueStr(i))
}

func (st *fakeDestState) mode(stream string) FakeStreamMode {
	m := st.cfg.Streams[stream]
	if len(m.Key) == 0 {
		m.Key = []string{"id"}
	}
	return m
}

func (st *fakeDestState) table(stream string) *fakeTable {
	t := st.tables[stream]
	if t == nil {
		t = &fakeTable{mode: st.mode(stream), byKey: map[string]FakeRow{}, ids: map[string]bool{}, visible: map[string]int{}}
		st.tables[stream] = t
	}
	return t
}

// apply makes rows visible. The caller holds mu.
func (st *fakeDestState) apply(rows []FakeRow, epoch uint64, gen checkpoint.Generation) {
	for _, r := range rows {
		r.Epoch, r.Gen = epoch, gen
		t := st.table(r.Stream)
		if st.cfg.Capabilities.SkipByID && t.ids[r.ID] {
			continue
		}
		if t.mode.Mode == delivery.Merge {
			if cur, ok := t.byKey[r.Key]; ok && cur.Seq > r.Seq {
				continue // a lower seq never overwrites a higher one
			}
			t.byKey[r.Key] = r
		} else {
			t.rows = append(t.rows, r)
		}
		t.ids[r.ID] = true
		t.visible[r.ID]++
	}
}

// Rows returns the visible rows of stream: for append, every row in the
// order it became visible; for merge, the live row of each key (deleted
// keys absent), by key.
func (d *FakeDestination) Rows(stream string) []FakeRow {
	st := d.st
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.tables[stream]
	if t == nil {
		return nil
	}
	if t.mode.Mode != delivery.Merge {
		return slices.Clone(t.rows)
	}
	out := make([]FakeRow, 0, len(t.byKey))
	for _, r := range t.byKey {
		if r.Op != sink.OpDelete {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Visibility returns, for each _openetl_id of stream, how many times a row
// with it became visible (appended, or upserted including over the same
// version; a delete's tombstone counts).
func (d *FakeDestination) Visibility(stream string) map[string]int {
	d.st.mu.Lock()
	defer d.st.mu.Unlock()
	if t := d.st.tables[stream]; t != nil {
		return maps.Clone(t.visible)
	}
	return map[string]int{}
}

// FakeApply is one Commit that applied an epoch.
type FakeApply struct {
	Epoch uint64
	// Gen is the committing writer's generation; Fence the pipeline's
	// fence when the rows landed. A correct destination never applies
	// with Gen below Fence.
	Gen, Fence checkpoint.Generation
}

// Applies returns the Commits that applied an epoch of pipeline, in
// order. A correct destination applies each epoch once (an epoch
// rewritten after a rewind was never applied before).
func (d *FakeDestination) Applies(pipeline string) []FakeApply {
	d.st.mu.Lock()
	defer d.st.mu.Unlock()
	return slices.Clone(d.st.appliedLg[pipeline])
}

// Applied reports whether epoch of pipeline is applied.
func (d *FakeDestination) Applied(pipeline string, epoch uint64) bool {
	d.st.mu.Lock()
	defer d.st.mu.Unlock()
	return d.st.applied[pipeline][epoch]
}

// Fence returns pipeline's generation fence (0 before any Recover).
func (d *FakeDestination) Fence(pipeline string) checkpoint.Generation {
	d.st.mu.Lock()
	defer d.st.mu.Unlock()
	return d.st.fence[pipeline]
}

// DropStaged discards pipeline's staged data of epochs not applied, as an
// expired staging area would, and returns how many lanes' data it
// dropped. A Recover then reports such an epoch Lost.
func (d *FakeDestination) DropStaged(pipeline string) int {
	st := d.st
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for id, s := range st.staged {
		if s.pipeline == pipeline && !st.applied[pipeline][s.epoch] {
			delete(st.staged, id)
			n++
		}
	}
	return n
}

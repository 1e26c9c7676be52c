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
	// FakeFinish is the Writer's Finish: only WithFaults's writers see
	// it (a FakeDestination's own Finish calls no control function, so
	// that the plans of the simulation stay what they were).
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
	// Visible is, in a FaultConfig's Observe of a FakeRecover,
	// FakeCommit, FakeFinish or FakeClose, what the wrapped writer's
	// Visible reported right after the call when it implements
	// sink.Visibility (0 otherwise).
	Visible uint64
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

// FakeDestinationConfig configures NewFakeDestination.
type FakeDestinationConfig struct {
	Class        sink.Class
	Capabilities sink.Capabilities
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
// writing each stream as its spec says (sink.WriterConfig): by append;
// by merge on the spec's key guarded by _openetl_seq (a lower seq never
// overwrites a higher one; a delete keeps a tombstone so a replayed older
// version cannot bring the key back, visible with soft deletes, hidden
// with hard ones); or by overwrite, each epoch's rows held from Commit
// until Finish of a Final epoch replaces the table's rows with them (a
// Recover given a Final head that was not finished finishes it). A table
// takes the mode and key of the first writer that commits rows to it.
// It writes every mode whatever FakeDestinationConfig.Capabilities
// declare; the runner gives it only the modes they declare (Merge,
// HardDeletes, Overwrite), as it does any destination.
// Capabilities.SkipByID makes applying skip rows whose _openetl_id the
// table has already taken (an overwrite: the refresh has already held).
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
	held      map[string][]FakeRow // pipeline → rows of Overwrite tables applied and held for Finish
	finished  map[string]uint64    // pipeline → the last Final epoch finished
}

type fakeStaged struct {
	pipeline string
	epoch    uint64
	rows     []FakeRow
}

// fakeMode is how a table is written, from the stream's spec.
type fakeMode struct {
	merge, hard, overwrite bool
	key                    []string
}

func modeOf(spec sink.StreamSpec) fakeMode {
	return fakeMode{merge: spec.Mode == sink.Merge, hard: spec.Mode == sink.Merge && spec.Deletes == sink.HardDeletes,
		overwrite: spec.Mode == sink.Overwrite, key: spec.Key}
}

type fakeTable struct {
	mode    fakeMode
	rows    []FakeRow          // append, overwrite
	byKey   map[string]FakeRow // merge, tombstones included (Op "delete")
	ids     map[string]bool
	visible map[string]int // _openetl_id → times it became visible
}

// NewFakeDestination returns an empty destination.
func NewFakeDestination(cfg FakeDestinationConfig) *FakeDestination {
	st := &fakeDestState{cfg: cfg, tables: map[string]*fakeTable{}, staged: map[string]fakeStaged{},
		applied: map[string]map[uint64]bool{}, appliedLg: map[string][]FakeApply{}, fence: map[string]checkpoint.Generation{},
		held: map[string][]FakeRow{}, finished: map[string]uint64{}}
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

var (
	_ sink.Destination = (*FakeDestination)(nil)
	_ sink.Writer      = (*fakeWriter)(nil)
)

// Writer implements sink.Destination.
func (d *FakeDestination) Writer(_ context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	if d.dead.Load() {
		return nil, ErrFakeKilled
	}
	return &fakeWriter{d: d, pipeline: cfg.Pipeline, lane: cfg.Lane, cfg: cfg}, nil
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
	cfg      sink.WriterConfig
	gen      checkpoint.Generation
	buf      []FakeRow
}

// mode is how the writer's spec says table is written: append, unkeyed,
// when no stream of the attempt is written there.
func (w *fakeWriter) mode(table string) fakeMode {
	spec, _ := w.cfg.Spec(table)
	return modeOf(spec)
}

func (w *fakeWriter) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	after, err := w.d.before(ctx, FakeDestCall{Op: FakeWrite, Pipeline: w.pipeline, Lane: w.lane, Stream: stream, Rows: int(rec.NumRows())})
	if err != nil {
		return err
	}
	rows, err := w.d.st.rows(stream, w.mode(stream).key, rec)
	if err != nil {
		return err
	}
	if w.d.st.cfg.Class == sink.DeliverAck {
		w.d.st.mu.Lock()
		w.d.st.apply(w.pipeline, rows, 0, 0, w.mode)
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
	if err := st.applyEpoch(w.pipeline, epoch, w.gen, cs, w.mode); err != nil {
		return err
	}
	return after
}

// applyEpoch applies epoch's staged rows, given its committables, and
// records it applied. The caller holds mu.
func (st *fakeDestState) applyEpoch(pipeline string, epoch uint64, gen checkpoint.Generation, cs []sink.Committable, mode func(string) fakeMode) error {
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
		st.apply(pipeline, rows, epoch, gen, mode)
	}
	if st.applied[pipeline] == nil {
		st.applied[pipeline] = map[uint64]bool{}
	}
	st.applied[pipeline][epoch] = true
	st.appliedLg[pipeline] = append(st.appliedLg[pipeline], FakeApply{Epoch: epoch, Gen: gen, Fence: st.fence[pipeline]})
	return nil
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
	out, err := st.outcome(w.pipeline, head)
	if err != nil || out == sink.Lost || head == nil || !head.Final || st.finished[w.pipeline] >= head.Epoch ||
		!st.holdsBack(w.pipeline, w.cfg) {
		return out, err
	}
	// head ended a Sync that read everything, and the process died
	// before Finish: finish it here, applying it first if need be, so
	// that this attempt starts a new refresh.
	if out == sink.Recoverable {
		cs := make([]sink.Committable, len(head.Committables))
		for i, c := range head.Committables {
			cs[i] = c
		}
		if err := st.applyEpoch(w.pipeline, head.Epoch, gen, cs, w.mode); err != nil {
			return 0, err
		}
	}
	st.finish(w.pipeline, head.Epoch, w.cfg)
	return sink.Applied, nil
}

// holdsBack reports whether Finish has anything to do for pipeline:
// rows held, or an Overwrite stream to replace. The caller holds mu.
func (st *fakeDestState) holdsBack(pipeline string, cfg sink.WriterConfig) bool {
	return len(st.held[pipeline]) > 0 || slices.ContainsFunc(cfg.Streams, func(s sink.StreamSpec) bool { return s.Mode == sink.Overwrite })
}

// outcome is what Recover reports of head. The caller holds mu.
func (st *fakeDestState) outcome(pipeline string, head *checkpoint.Record) (sink.Outcome, error) {
	if head == nil || st.cfg.Class == sink.DeliverAck || st.applied[pipeline][head.Epoch] {
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

// Finish replaces the rows of each Overwrite table with those the
// epochs up to epoch held (none: the table is emptied), once per Final
// epoch: again, it does nothing, as it does without Overwrite tables.
// It is fenced like Commit; a killed view's fails with ErrFakeKilled.
func (w *fakeWriter) Finish(_ context.Context, epoch uint64) error {
	if w.d.dead.Load() {
		return ErrFakeKilled
	}
	st := w.d.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cfg.Broken != FakeSkipFence && st.fence[w.pipeline] > w.gen {
		return fmt.Errorf("sinktest: finish epoch %d by generation %d, fence at %d: %w", epoch, w.gen, st.fence[w.pipeline], sink.ErrFenced)
	}
	if st.finished[w.pipeline] >= epoch || !st.holdsBack(w.pipeline, w.cfg) {
		return nil
	}
	if !st.applied[w.pipeline][epoch] {
		return fmt.Errorf("sinktest: finish epoch %d of pipeline %q, which is not applied", epoch, w.pipeline)
	}
	st.finish(w.pipeline, epoch, w.cfg)
	return nil
}

// finish replaces the rows of every Overwrite table of cfg's streams,
// and of every table pipeline's applied epochs up to epoch held rows
// of, with those rows. The caller holds mu.
func (st *fakeDestState) finish(pipeline string, epoch uint64, cfg sink.WriterConfig) {
	refresh := map[string][]FakeRow{}
	for _, s := range cfg.Streams {
		if s.Mode == sink.Overwrite {
			refresh[s.Table] = nil
		}
	}
	var keep []FakeRow
	for _, r := range st.held[pipeline] {
		if r.Epoch > epoch {
			keep = append(keep, r) // the next refresh's (0: a deliver-ack write, this one's)
			continue
		}
		refresh[r.Stream] = append(refresh[r.Stream], r)
	}
	st.held[pipeline] = keep
	for name, rows := range refresh {
		t := st.table(name, func(string) fakeMode { return fakeMode{overwrite: true} })
		t.rows = rows
		t.ids = map[string]bool{}
		for _, r := range rows {
			t.ids[r.ID] = true
			t.visible[r.ID]++
		}
	}
	st.finished[pipeline] = epoch
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
func (st *fakeDestState) rows(stream string, key []string, rec arrow.RecordBatch) ([]FakeRow, error) {
	n := int(rec.NumRows())
	out := make([]FakeRow, n)
	for i := range out {
		out[i] = FakeRow{Stream: stream, Values: map[string]any{}}
	}
	keyCols := map[string]int{}
	for j, k := range key {
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
						keys[i] = make([]string, len(key))
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

func (st *fakeDestState) table(stream string, mode func(string) fakeMode) *fakeTable {
	t := st.tables[stream]
	if t == nil {
		t = &fakeTable{mode: mode(stream), byKey: map[string]FakeRow{}, ids: map[string]bool{}, visible: map[string]int{}}
		st.tables[stream] = t
	}
	return t
}

// apply makes rows of pipeline visible, or, for an Overwrite table,
// holds them for Finish. The caller holds mu.
func (st *fakeDestState) apply(pipeline string, rows []FakeRow, epoch uint64, gen checkpoint.Generation, mode func(string) fakeMode) {
	for _, r := range rows {
		r.Epoch, r.Gen = epoch, gen
		t := st.table(r.Stream, mode)
		if t.mode.overwrite {
			if st.cfg.Capabilities.SkipByID && slices.ContainsFunc(st.held[pipeline], func(h FakeRow) bool { return h.Stream == r.Stream && h.ID == r.ID }) {
				continue
			}
			st.held[pipeline] = append(st.held[pipeline], r)
			continue
		}
		if st.cfg.Capabilities.SkipByID && t.ids[r.ID] {
			continue
		}
		if t.mode.merge {
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

// Rows returns the visible rows of stream: for append and overwrite,
// every row in the order it became visible; for merge, the row of each
// key, by key: a deleted key's tombstone (Op "delete") with soft deletes,
// as a reader sees it marked _openetl_deleted, none with hard deletes.
func (d *FakeDestination) Rows(stream string) []FakeRow {
	st := d.st
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.tables[stream]
	if t == nil {
		return nil
	}
	if !t.mode.merge {
		return slices.Clone(t.rows)
	}
	out := make([]FakeRow, 0, len(t.byKey))
	for _, r := range t.byKey {
		if r.Op != sink.OpDelete || !t.mode.hard {
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

var _ sink.Collector = (*FakeDestination)(nil)

// Collect implements sink.Collector: it removes req.Pipeline's staged
// data of epochs not applied that req.Head's committables don't name
// (staged data of applied epochs stays, as FakeDoubleApply needs it),
// after asking req.Held, and counts each lane's data as one unit. A
// killed view's fails with ErrFakeKilled.
func (d *FakeDestination) Collect(ctx context.Context, req sink.CollectRequest) (sink.Collected, error) {
	if d.dead.Load() {
		return sink.Collected{}, ErrFakeKilled
	}
	st := d.st
	keep := map[string]bool{}
	if req.Head != nil {
		for _, c := range req.Head.Committables {
			var fc fakeCommittable
			if json.Unmarshal(c, &fc) == nil {
				keep[fc.ID] = true
			}
		}
	}
	return sink.CollectStaged(ctx, req,
		func(context.Context) ([]sink.Staged, error) {
			var out []sink.Staged
			for _, id := range d.Staged(req.Pipeline) {
				out = append(out, sink.Staged{Name: id})
			}
			return out, nil
		},
		func(s sink.Staged) bool { return keep[s.Name] },
		func(_ context.Context, s sink.Staged) error {
			st.mu.Lock()
			delete(st.staged, s.Name)
			st.mu.Unlock()
			return nil
		})
}

// Staged returns, sorted, the names (as their committables hold them)
// of pipeline's staged data of epochs not applied.
func (d *FakeDestination) Staged(pipeline string) []string {
	st := d.st
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for id, s := range st.staged {
		if s.pipeline == pipeline && !st.applied[pipeline][s.epoch] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
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

package sinktest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// Names of the suite's checks: each is a subtest of Run, and a key of
// Options.Skip. doc.go says what each one checks.
const (
	CheckRecoverNil    = "RecoverNil"
	CheckInvisible     = "Invisible"
	CheckCommit        = "Commit"
	CheckCommitTwice   = "CommitTwice"
	CheckEmptyEpoch    = "EmptyEpoch"
	CheckWidenSchema   = "WidenSchema"
	CheckCrash         = "Crash"
	CheckZombie        = "Zombie"
	CheckConcurrent    = "Concurrent"
	CheckLanes         = "Lanes"
	CheckCloseDiscards = "CloseDiscards"
	CheckAhead         = "Ahead"
	CheckFinish        = "Finish"
	// The checks of the write modes beyond append, each run only when
	// the destination's Capabilities declare the mode (skipped
	// otherwise, saying so).
	CheckMerge          = "Merge"
	CheckMergeReplay    = "MergeReplay"
	CheckHardDeletes    = "HardDeletes"
	CheckOverwrite      = "Overwrite"
	CheckOverwriteEmpty = "OverwriteEmpty"
	// CheckPatches runs only when the Capabilities declare Patches.
	CheckPatches = "Patches"
)

// Defaults of Options.
const (
	DefaultPipeline = "sinktest"
	DefaultLanes    = 3
	DefaultTimeout  = 30 * time.Second
)

// Row is one row as a reader of the destination sees it.
type Row struct {
	// ID is the row's _openetl_id. Required.
	ID string
	// Seq is the row's _openetl_seq. Required.
	Seq int64
	// Op is the row's _openetl_op; "" when the destination does not keep
	// it (the suite then does not check it).
	Op string
	// Values holds the row's other columns by name (a null as nil, or the
	// column absent); nil when the reader does not report them. When not
	// nil, the suite checks the stream's columns "id" (int64), "value"
	// (utf8, null on every fifth row) and, for rows written with the
	// widened schema, "note" (utf8), comparing their fmt.Sprint forms.
	Values map[string]any
}

// Options tune Run. Visible is required.
type Options struct {
	// Visible returns the rows of stream that a reader of the destination
	// sees now: no rows and a nil error for a stream that has none (or
	// does not exist yet). It reads the storage that every Destination
	// newDestination returns writes to. RowsFromRecord turns Arrow
	// batches read back into Rows.
	Visible func(ctx context.Context, stream string) ([]Row, error)

	// Pipeline prefixes the pipeline names the suite writes under (one
	// per check, "<Pipeline>-<check>"); the stream names are
	// "<check>_<x>", lowercase. Default "sinktest".
	Pipeline string

	// Lanes is the number of writer lanes of the Lanes check. Default 3.
	Lanes int

	// Timeout bounds every call the suite makes. Default 30s.
	Timeout time.Duration

	// Skip maps check names (the Check constants) to the reason they are
	// skipped; the reason is printed by t.Skip. Use it for a known bug
	// while it is being fixed, and say so in the reason.
	Skip map[string]string
}

type check struct {
	name string
	run  func(s *suite)
}

var checks = []check{
	{CheckRecoverNil, (*suite).checkRecoverNil},
	{CheckInvisible, (*suite).checkInvisible},
	{CheckCommit, (*suite).checkCommit},
	{CheckCommitTwice, (*suite).checkCommitTwice},
	{CheckEmptyEpoch, (*suite).checkEmptyEpoch},
	{CheckWidenSchema, (*suite).checkWidenSchema},
	{CheckCrash, (*suite).checkCrash},
	{CheckZombie, (*suite).checkZombie},
	{CheckConcurrent, (*suite).checkConcurrent},
	{CheckLanes, (*suite).checkLanes},
	{CheckCloseDiscards, (*suite).checkCloseDiscards},
	{CheckAhead, (*suite).checkAhead},
	{CheckFinish, (*suite).checkFinish},
	{CheckMerge, (*suite).checkMerge},
	{CheckMergeReplay, (*suite).checkMergeReplay},
	{CheckHardDeletes, (*suite).checkHardDeletes},
	{CheckOverwrite, (*suite).checkOverwrite},
	{CheckOverwriteEmpty, (*suite).checkOverwriteEmpty},
	{CheckPatches, (*suite).checkPatches},
}

// Run runs the conformance checks against the destinations
// newDestination returns, each check in a subtest of t named after it
// (see the Check constants and doc.go).
//
// newDestination is called at least once per check, and again whenever
// the suite stands for another process (a new attempt after a crash, a
// zombie and its successor): every Destination it returns must write to
// the same storage, the one opts.Visible reads. The checks keep apart by
// writing pipelines and streams of their own, so that storage must not
// hold data of an earlier Run under those names. Clean up with t.Cleanup.
func Run(t *testing.T, newDestination func(t *testing.T) sink.Destination, opts Options) {
	t.Helper()
	if opts.Visible == nil {
		t.Fatal("sinktest: Options.Visible is nil: the suite can't see what the destination makes visible")
	}
	if opts.Pipeline == "" {
		opts.Pipeline = DefaultPipeline
	}
	if opts.Lanes <= 0 {
		opts.Lanes = DefaultLanes
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	known := make(map[string]bool)
	for _, c := range checks {
		known[c.name] = true
	}
	for name := range opts.Skip {
		if !known[name] {
			t.Errorf("sinktest: Options.Skip names unknown check %q", name)
		}
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := opts.Skip[c.name]; ok {
				t.Skipf("skipped by Options.Skip: %s", reason)
			}
			s := &suite{
				t:        t,
				newDest:  newDestination,
				opts:     opts,
				pipeline: opts.Pipeline + "-" + strings.ToLower(c.name),
				prefix:   strings.ToLower(c.name),
				want:     make(map[string][]wantRow),
				next:     make(map[string]int),
				allowed:  make(map[string]bool),
				mem:      new(poisonAllocator),
			}
			t.Cleanup(s.checkReleased) // after the writers' Close
			s.dest = s.destination()
			s.class = s.dest.Class()
			c.run(s)
		})
	}
}

// RowsFromRecord returns the rows of rec, read back from a destination, as
// Rows: ID from _openetl_id (a string column), Seq from _openetl_seq (an
// integer column), Op from _openetl_op when present, and every other
// column in Values (by GetOneForMarshal; nil for a null). The Rows hold
// copies: they stay valid after rec is released.
func RowsFromRecord(rec arrow.RecordBatch) ([]Row, error) {
	sc := rec.Schema()
	col := func(name string) arrow.Array {
		if idx := sc.FieldIndices(name); len(idx) > 0 {
			return rec.Column(idx[0])
		}
		return nil
	}
	ids, seqs, ops := col(sink.ColumnID), col(sink.ColumnSeq), col(sink.ColumnOp)
	if ids == nil || seqs == nil {
		return nil, fmt.Errorf("sinktest: rows without %s or %s: the destination must keep the metadata columns (schema %s)", sink.ColumnID, sink.ColumnSeq, sc)
	}
	// Strings are copied: a Row outlives the batch it came from.
	str := func(a arrow.Array, i int) (string, bool) {
		switch a := a.(type) {
		case *array.String:
			return strings.Clone(a.Value(i)), true
		case *array.LargeString:
			return strings.Clone(a.Value(i)), true
		case *array.StringView:
			return strings.Clone(a.Value(i)), true
		case *array.Binary:
			return string(a.Value(i)), true
		}
		return "", false
	}
	rows := make([]Row, rec.NumRows())
	for i := range rows {
		id, ok := str(ids, i)
		if !ok {
			return nil, fmt.Errorf("sinktest: %s is %s, want a string column", sink.ColumnID, ids.DataType())
		}
		var seq int64
		switch a := seqs.(type) {
		case *array.Int64:
			seq = a.Value(i)
		case *array.Uint64:
			seq = int64(a.Value(i))
		case *array.Int32:
			seq = int64(a.Value(i))
		default:
			return nil, fmt.Errorf("sinktest: %s is %s, want an integer column", sink.ColumnSeq, seqs.DataType())
		}
		r := Row{ID: id, Seq: seq, Values: make(map[string]any, len(sc.Fields()))}
		if ops != nil {
			r.Op, _ = str(ops, i)
		}
		for j, f := range sc.Fields() {
			if f.Name == sink.ColumnID || f.Name == sink.ColumnSeq || f.Name == sink.ColumnOp {
				continue
			}
			v := rec.Column(j).GetOneForMarshal(i)
			switch x := v.(type) {
			case string:
				v = strings.Clone(x)
			case []byte:
				v = slices.Clone(x)
			}
			r.Values[f.Name] = v
		}
		rows[i] = r
	}
	return rows, nil
}

// suite is one check's context.
type suite struct {
	t        *testing.T
	newDest  func(t *testing.T) sink.Destination
	opts     Options
	dest     sink.Destination
	class    sink.Class
	pipeline string
	prefix   string

	// specs are the streams the writers get; nil: the append streams
	// "a", "b" and "last" (writerConfig).
	specs []sink.StreamSpec

	mu      sync.Mutex
	want    map[string][]wantRow       // stream → rows committed so far
	next    map[string]int             // stream → next row number
	allowed map[string]bool            // IDs that may be visible (once) but need not be
	written map[string]version         // _openetl_id → the version of a merged stream's key written with it
	latest  map[string]map[int]version // merged stream → key → its committed version with the highest seq

	mem *poisonAllocator // every batch's buffers (poison.go)
}

// wantRow is a row the suite wrote.
type wantRow struct {
	n    int
	id   string
	seq  int64
	wide bool
	// patched, when set, is the value a committed patch set (Patches).
	patched string
}

// exactlyOnce reports whether the class promises invisibility before
// Commit and no rows from writes that were never pre-committed.
func (s *suite) exactlyOnce() bool { return s.class != sink.DeliverAck }

func (s *suite) stream(x string) string { return s.prefix + "_" + x }

func (s *suite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	s.t.Cleanup(cancel)
	return ctx
}

func (s *suite) destination() sink.Destination {
	s.t.Helper()
	d := s.newDest(s.t)
	if d == nil {
		s.t.Fatal("newDestination returned nil")
	}
	return d
}

// lane wraps a Writer so that the test closes it once, at the end at the
// latest; its calls (poison.go) turn a writer's panic into an error.
type lane struct {
	sink.Writer
	n      int
	closed bool
	mem    *poisonAllocator
}

func (s *suite) writer(d sink.Destination, n int) *lane {
	s.t.Helper()
	w, err := d.Writer(s.ctx(), s.writerConfig(n))
	if err != nil {
		s.t.Fatalf("Writer(%q, lane %d): %v", s.pipeline, n, err)
	}
	l := &lane{Writer: w, n: n, mem: s.mem}
	s.t.Cleanup(func() {
		if !l.closed {
			_ = w.Close(context.Background())
		}
	})
	return l
}

// writerConfig is what lane n's Writer gets: the check's streams (specs),
// or by default the suite's streams a, b and last, each appended to its
// own table, keyed by "id".
func (s *suite) writerConfig(n int) sink.WriterConfig {
	cfg := sink.WriterConfig{Pipeline: s.pipeline, Lane: n}
	if s.specs != nil {
		cfg.Streams = cloneSpecs(s.specs)
		return cfg
	}
	for _, x := range []string{"a", "b", "last"} {
		name := s.stream(x)
		cfg.Streams = append(cfg.Streams, sink.StreamSpec{Stream: name, Table: name, Mode: sink.Append, Key: []string{"id"}})
	}
	return cfg
}

func (s *suite) close(l *lane) {
	s.t.Helper()
	l.closed = true
	if err := l.Close(s.ctx()); err != nil {
		s.t.Errorf("Close of lane %d: %v", l.n, err)
	}
}

func (s *suite) recoverGen(l *lane, gen checkpoint.Generation, head *checkpoint.Record) sink.Outcome {
	s.t.Helper()
	out, err := l.Recover(s.ctx(), gen, head)
	if err != nil {
		s.t.Fatalf("Recover(generation %d, head %s): %v", gen, headString(head), err)
	}
	return out
}

func headString(h *checkpoint.Record) string {
	if h == nil {
		return "nil"
	}
	return fmt.Sprintf("epoch %d of generation %d", h.Epoch, h.Generation)
}

func (s *suite) preCommit(l *lane, epoch uint64) sink.Committable {
	s.t.Helper()
	c, err := l.PreCommit(s.ctx(), epoch)
	if err != nil {
		s.t.Fatalf("PreCommit(%d) on lane %d: %v", epoch, l.n, err)
	}
	return c
}

func (s *suite) commit(l *lane, epoch uint64, cs ...sink.Committable) {
	s.t.Helper()
	if err := l.Commit(s.ctx(), epoch, cs); err != nil {
		s.t.Fatalf("Commit(%d) on lane %d: %v", epoch, l.n, err)
	}
}

// head is the checkpoint record the runner writes for epoch.
func (s *suite) head(epoch uint64, gen checkpoint.Generation, cs ...sink.Committable) *checkpoint.Record {
	r := &checkpoint.Record{Pipeline: s.pipeline, Epoch: epoch, Generation: gen, Time: time.Now().UTC(), Committables: [][]byte{}}
	for _, c := range cs {
		r.Committables = append(r.Committables, c)
	}
	return r
}

var syncedAt = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// schema is a stream's schema; wide adds the nullable column "note", as
// the engine does when a document brings a new field: after the stream's
// columns, before the metadata columns.
func schema(wide bool) *arrow.Schema {
	fs := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "value", Type: arrow.BinaryTypes.String, Nullable: true},
	}
	if wide {
		fs = append(fs, arrow.Field{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true})
	}
	fs = append(fs,
		arrow.Field{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		arrow.Field{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
		arrow.Field{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
		arrow.Field{Name: sink.ColumnSyncedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	)
	return arrow.NewSchema(fs, nil)
}

func rowID(stream string, n int) string {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return fmt.Sprintf("%016x%016x", h.Sum64(), uint64(n))
}

func valueOf(n int) (string, bool) { return fmt.Sprintf("v%d", n), n%5 != 0 }
func noteOf(n int) string          { return fmt.Sprintf("note-%d", n) }

// rows builds the next n rows of stream without recording them as
// expected.
func (s *suite) rows(stream string, n int, wide bool) (arrow.RecordBatch, []wantRow) {
	return s.rowsIn(s.mem, stream, n, wide)
}

func (s *suite) rowsIn(mem memory.Allocator, stream string, n int, wide bool) (arrow.RecordBatch, []wantRow) {
	s.mu.Lock()
	from := s.next[stream]
	s.next[stream] = from + n
	s.mu.Unlock()
	b := array.NewRecordBuilder(mem, schema(wide))
	defer b.Release()
	meta := 2
	if wide {
		meta = 3
	}
	var out []wantRow
	for k := from; k < from+n; k++ {
		w := wantRow{n: k, id: rowID(stream, k), seq: int64(k) + 1, wide: wide}
		out = append(out, w)
		b.Field(0).(*array.Int64Builder).Append(int64(k))
		if v, ok := valueOf(k); ok {
			b.Field(1).(*array.StringBuilder).Append(v)
		} else {
			b.Field(1).AppendNull()
		}
		if wide {
			b.Field(2).(*array.StringBuilder).Append(noteOf(k))
		}
		b.Field(meta).(*array.StringBuilder).Append(w.id)
		b.Field(meta + 1).(*array.StringBuilder).Append(sink.OpInsert)
		b.Field(meta + 2).(*array.Int64Builder).Append(w.seq)
		b.Field(meta + 3).(*array.TimestampBuilder).Append(arrow.Timestamp(syncedAt.UnixMicro()))
	}
	return b.NewRecordBatch(), out
}

// write writes n new rows of stream on l and returns them; the caller
// decides whether they are expected (expect) once committed.
func (s *suite) write(l *lane, stream string, n int, wide bool) []wantRow {
	s.t.Helper()
	rec, rows := s.rows(stream, n, wide)
	defer rec.Release()
	if err := l.Write(s.ctx(), stream, rec); err != nil {
		s.t.Fatalf("Write(%s, %d rows, wide=%v) on lane %d: %v", stream, n, wide, l.n, err)
	}
	return rows
}

// expect records rows as committed: Visible must show them from now on.
func (s *suite) expect(stream string, rows ...[]wantRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		s.want[stream] = append(s.want[stream], r...)
	}
}

// allow records rows that may be visible, once, without being committed:
// a deliver-ack destination's rows of a fenced zombie.
func (s *suite) allow(rows []wantRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		s.allowed[r.id] = true
	}
}

// visible reads stream through Options.Visible.
func (s *suite) visible(stream string) []Row {
	s.t.Helper()
	rows, err := s.opts.Visible(s.ctx(), stream)
	if err != nil {
		s.t.Fatalf("Visible(%s): %v", stream, err)
	}
	return rows
}

// checkVisible compares what a reader sees of each stream with the rows
// committed so far: each exactly once, with its values.
func (s *suite) checkVisible(when string, streams ...string) {
	s.t.Helper()
	for _, stream := range streams {
		s.mu.Lock()
		want := slices.Clone(s.want[stream])
		s.mu.Unlock()
		s.compare(when, stream, s.visible(stream), want)
	}
}

func (s *suite) compare(when, stream string, got []Row, want []wantRow) {
	t := s.t
	t.Helper()
	s.mu.Lock()
	allowed := maps.Clone(s.allowed)
	s.mu.Unlock()
	byID := make(map[string]wantRow, len(want))
	for _, w := range want {
		byID[w.id] = w
	}
	seen := make(map[string]int, len(got))
	bad := 0
	report := func(format string, args ...any) {
		t.Helper()
		if bad++; bad <= 5 {
			t.Errorf("%s: stream %s: "+format, append([]any{when, stream}, args...)...)
		}
	}
	poisonedRows := 0
	for _, r := range got {
		if field, v, ok := poisoned(r); ok {
			if poisonedRows++; poisonedRows == 1 {
				report("a row reads back poisoned (%s = %s): %s", field, v, poisonedMessage)
			}
			continue
		}
		seen[r.ID]++
		w, ok := byID[r.ID]
		switch {
		case !ok && allowed[r.ID]:
			if seen[r.ID] == 2 {
				report("row %s (of a fenced zombie, allowed once) is visible more than once", r.ID)
			}
			continue
		case !ok:
			report("row %s (seq %d) is visible but was never committed", r.ID, r.Seq)
			continue
		case seen[r.ID] == 2:
			report("row %s (row %d) is visible more than once", r.ID, w.n)
			continue
		case seen[r.ID] > 2:
			continue
		}
		if r.Seq != w.seq {
			report("row %s: %s = %d, want %d", r.ID, sink.ColumnSeq, r.Seq, w.seq)
		}
		if r.Op != "" && r.Op != sink.OpInsert {
			report("row %s: %s = %q, want \"insert\"", r.ID, sink.ColumnOp, r.Op)
		}
		if r.Values != nil {
			s.checkValues(r, w, report)
		}
	}
	missing := 0
	for _, w := range want {
		if seen[w.id] == 0 {
			if missing++; missing == 1 {
				report("row %s (row %d, seq %d) was committed but is not visible", w.id, w.n, w.seq)
			}
		}
	}
	if poisonedRows > 1 {
		report("%d of the %d visible rows read back poisoned", poisonedRows, len(got))
	}
	if missing > 1 {
		report("%d of the %d committed rows are not visible", missing, len(want))
	}
	if bad > 5 {
		t.Errorf("%s: stream %s: ... and %d more differences", when, stream, bad-5)
	}
}

func (s *suite) checkValues(r Row, w wantRow, report func(string, ...any)) {
	str := func(v any) string {
		if v == nil {
			return "<null>"
		}
		return fmt.Sprint(v)
	}
	if v, ok := r.Values["id"]; ok && str(v) != fmt.Sprint(w.n) {
		report("row %s: id = %s, want %d", r.ID, str(v), w.n)
	}
	want := "<null>"
	if v, ok := valueOf(w.n); ok {
		want = v
	}
	if w.patched != "" {
		want = w.patched
	}
	if v, ok := r.Values["value"]; ok && str(v) != want {
		report("row %s: value = %s, want %s", r.ID, str(v), want)
	}
	note, ok := r.Values["note"]
	switch {
	case w.wide && !ok:
		report("row %s was written with the widened schema, but its column note is not visible", r.ID)
	case w.wide && str(note) != noteOf(w.n):
		report("row %s: note = %s, want %s", r.ID, str(note), noteOf(w.n))
	case !w.wide && ok && note != nil:
		report("row %s was written without column note, but reads note = %s, want null", r.ID, str(note))
	}
}

// fenced checks that err is a fencing error.
func (s *suite) fenced(what string, err error) {
	s.t.Helper()
	switch {
	case err == nil:
		s.t.Errorf("%s: nil error, want one wrapping sink.ErrFenced", what)
	case !errors.Is(err, sink.ErrFenced):
		s.t.Errorf("%s: %v, want an error wrapping sink.ErrFenced", what, err)
	}
}

// ahead checks that err is the error of a destination ahead of the log,
// and not a fencing error.
func (s *suite) ahead(what string, err error) {
	s.t.Helper()
	var ae *sink.AheadError
	switch {
	case err == nil:
		s.t.Errorf("%s: nil error, want one wrapping a *sink.AheadError", what)
	case !errors.Is(err, sink.ErrAhead) || !errors.As(err, &ae):
		s.t.Errorf("%s: %v, want an error wrapping a *sink.AheadError (errors.Is sink.ErrAhead)", what, err)
	case errors.Is(err, sink.ErrFenced):
		s.t.Errorf("%s: %v: wraps sink.ErrFenced too, but no newer generation recovered", what, err)
	case ae.Pipeline != s.pipeline:
		s.t.Errorf("%s: %v: AheadError.Pipeline = %q, want %q", what, err, ae.Pipeline, s.pipeline)
	}
}

package etl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// col returns rec's column name, or nil.
func col(rec arrow.RecordBatch, name string) arrow.Array {
	if idx := rec.Schema().FieldIndices(name); len(idx) > 0 {
		return rec.Column(idx[0])
	}
	return nil
}

// take returns rows of rec, in order (repeats allowed), with extra
// columns appended (each as long as rows).
func take(t testing.TB, rec arrow.RecordBatch, rows []int, extra []arrow.Field, extraCols []arrow.Array) arrow.RecordBatch {
	cols := make([]arrow.Array, 0, rec.NumCols()+int64(len(extraCols)))
	for j := range int(rec.NumCols()) {
		parts := make([]arrow.Array, len(rows))
		for k, i := range rows {
			parts[k] = array.NewSlice(rec.Column(j), int64(i), int64(i+1))
		}
		c, err := array.Concatenate(parts, memory.DefaultAllocator)
		for _, p := range parts {
			p.Release()
		}
		if err != nil {
			t.Error(err)
			return nil
		}
		cols = append(cols, c)
	}
	cols = append(cols, extraCols...)
	md := rec.Schema().Metadata()
	sc := arrow.NewSchema(append(append([]arrow.Field{}, rec.Schema().Fields()...), extra...), &md)
	out := array.NewRecordBatch(sc, cols, int64(len(rows)))
	for _, c := range cols {
		c.Release()
	}
	return out
}

func strings1(vals []string) arrow.Array {
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(vals, nil)
	return b.NewArray()
}

var tagField = arrow.Field{Name: "tag", Type: arrow.BinaryTypes.String, Nullable: true}

// The test filter's rules, by the record's id (the key).
func rejects(id int64) bool { return id%7 == 0 }
func drops(id int64) bool   { return !rejects(id) && id%3 == 0 }

// filter rejects ids ≡ 0 (mod 7), drops ids ≡ 0 (mod 3) and adds a
// column tag = "t<id>" to the rows it keeps.
func filter(t testing.TB) etl.TransformFunc {
	return func(_ context.Context, b etl.TransformBatch) error {
		in := b.Record()
		ids, ok := col(in, "id").(*array.Int64)
		if !ok {
			return fmt.Errorf("no int64 id in %v", in.Schema())
		}
		var keep []int
		var tags []string
		for i := range int(in.NumRows()) {
			switch id := ids.Value(i); {
			case rejects(id):
				b.Reject(i, "divisible_by_7", "id "+strconv.FormatInt(id, 10))
			case drops(id):
			default:
				keep = append(keep, i)
				tags = append(tags, "t"+strconv.FormatInt(id, 10))
			}
		}
		out := take(t, in, keep, []arrow.Field{tagField}, []arrow.Array{strings1(tags)})
		b.Emit(out)
		out.Release()
		return nil
	}
}

// fakeID returns a good fake record's id.
func fakeID(t testing.TB, r sourcetest.FakeRecord) int64 {
	var doc struct{ ID int64 }
	if err := json.Unmarshal(r.Payload, &doc); err != nil {
		t.Fatalf("record %+v: %v", r, err)
	}
	return doc.ID
}

func newFakes(rows, badEvery int) (*sourcetest.FakeSource, *sinktest.FakeDestination) {
	src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Seed: 3, Replay: source.ReplayExact,
		Streams: []sourcetest.FakeStream{{Name: "orders", Splits: 2, Rows: rows, BadEvery: badEvery}}})
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
	return src, dst
}

// TestTransformFilter: a transform that rejects, drops and adds a column
// on two lanes: the destination holds exactly the rows it kept, with the
// new column; the rejected rows are quarantined with their row, seq and
// ID; the counts say read = written + filtered + quarantined, in the
// Result, the Status and the checkpoint's totals.
func TestTransformFilter(t *testing.T) {
	src, dst := newFakes(150, 10)
	store := checkpoint.NewMem()
	p, err := etl.NewPipeline("tf").From(src).To(dst).Checkpoints(store).Lanes(2).BatchSize(16, 0).
		Transform(filter(t), "orders").Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var bad, rejected, dropped int64
	kept := map[string]int64{} // _openetl_id → id
	byID := map[string]sourcetest.FakeRecord{}
	for _, r := range src.Records("orders") {
		if r.Bad {
			bad++
			continue
		}
		id := fakeID(t, r)
		rid := recordID("orders", r)
		byID[rid] = r
		switch {
		case rejects(id):
			rejected++
		case drops(id):
			dropped++
		default:
			kept[rid] = id
		}
	}
	if rejected == 0 || dropped == 0 || bad == 0 {
		t.Fatalf("the data should have rejects (%d), drops (%d) and bad records (%d)", rejected, dropped, bad)
	}
	want := checkpoint.Counts{Read: 300, Written: int64(len(kept)), Quarantined: bad + rejected, Filtered: dropped}
	if got := res.Streams["orders"]; got != want {
		t.Errorf("result counts %+v, want %+v", got, want)
	}
	if got := p.Status().Streams["orders"].Committed; got != want {
		t.Errorf("status counts %+v, want %+v", got, want)
	}
	cp, err := p.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := cp.Totals["orders"]; got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}
	if want.Read != want.Written+want.Filtered+want.Quarantined {
		t.Errorf("read %d != written + filtered + quarantined in %+v", want.Read, want)
	}

	rows := dst.Rows("orders")
	seen := map[string]bool{}
	for _, r := range rows {
		id, ok := kept[r.ID]
		switch {
		case !ok:
			t.Errorf("row %s (%v) should not be there", r.ID, r.Values)
		case seen[r.ID]:
			t.Errorf("row %s twice", r.ID)
		case r.Values["tag"] != "t"+strconv.FormatInt(id, 10) || r.Values["id"] != id:
			t.Errorf("row %s: values %v, want id %d and tag t%d", r.ID, r.Values, id, id)
		case r.Seq != byID[r.ID].Seq || r.Op != byID[r.ID].Op.String():
			t.Errorf("row %s: seq %d op %s, want the record's %d %v", r.ID, r.Seq, r.Op, byID[r.ID].Seq, byID[r.ID].Op)
		}
		seen[r.ID] = true
	}
	if len(rows) != len(kept) {
		t.Errorf("%d rows at the destination, want %d", len(rows), len(kept))
	}

	// The quarantine files: the engine's bad records and the transform's
	// rejects, told apart by rejected_by.
	var fromTransform, fromEngine int64
	for e := uint64(1); e <= res.Epoch; e++ {
		b, err := store.ReadFile(context.Background(), "tf", etl.QuarantineName("orders", e))
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var q map[string]any
			if err := json.Unmarshal(line, &q); err != nil {
				t.Fatalf("quarantine line %s: %v", line, err)
			}
			if q["rejected_by"] != "transform" {
				fromEngine++
				continue
			}
			fromTransform++
			id, _ := q["id"].(string)
			payload, _ := q["payload"].(string)
			r, ok := byID[id]
			var row map[string]any
			if err := json.Unmarshal([]byte(payload), &row); err != nil {
				t.Errorf("rejected row's payload %q: %v", payload, err)
			}
			if !ok || q["reason"] != "divisible_by_7" || row["id"] != float64(fakeID(t, r)) || row[sink.ColumnID] != id ||
				q["seq"] != float64(r.Seq) || q["op"] != r.Op.String() {
				t.Errorf("quarantine line %s: want the rejected record %+v", line, r)
			}
		}
	}
	if fromTransform != rejected || fromEngine != bad {
		t.Errorf("quarantine files: %d lines from the transform, %d from the engine; want %d and %d", fromTransform, fromEngine, rejected, bad)
	}
}

// recordID is the engine's _openetl_id of a fake record.
func recordID(stream string, r sourcetest.FakeRecord) string {
	return sim.RecordID(stream, r.Key, r.Payload, r.Seq)
}

// TestTransformMoreRows: a transform that writes every row twice, the
// second with a DerivedID through EmitAdded: both land, the counts say so (Added), and
// read + added = written + filtered + quarantined.
func TestTransformMoreRows(t *testing.T) {
	src, dst := newFakes(40, 0)
	double := func(_ context.Context, b etl.TransformBatch) error {
		in := b.Record()
		b.Emit(in)
		ids := col(in, sink.ColumnID).(*array.String)
		derived := make([]string, in.NumRows())
		rows := make([]int, in.NumRows())
		for i := range derived {
			derived[i], rows[i] = etl.DerivedID(ids.Value(i), 1), i
		}
		// The copy: every column but _openetl_id, which is replaced.
		cp := take(t, in, rows, nil, nil)
		defer cp.Release()
		cols := append([]arrow.Array{}, cp.Columns()...)
		idx := cp.Schema().FieldIndices(sink.ColumnID)[0]
		d := strings1(derived)
		defer d.Release()
		cols[idx] = d
		out := array.NewRecordBatch(cp.Schema(), cols, cp.NumRows())
		b.EmitAdded(out)
		out.Release()
		return nil
	}
	p, err := etl.NewPipeline("tf").From(src).To(dst).Checkpoints(checkpoint.NewMem()).BatchSize(8, 0).
		Transform(double, "orders").Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := checkpoint.Counts{Read: 80, Written: 160, Added: 80}
	if got := res.Streams["orders"]; got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	ids := map[string]bool{}
	for _, r := range dst.Rows("orders") {
		ids[r.ID] = true
	}
	if len(ids) != 160 {
		t.Errorf("%d distinct IDs at the destination, want 160", len(ids))
	}
	for _, r := range src.Records("orders") {
		id := recordID("orders", r)
		if !ids[id] || !ids[etl.DerivedID(id, 1)] {
			t.Errorf("record %s: the row or its copy is missing", id)
		}
	}
}

// TestTransformFailures: an error, a panic and output that breaks the
// rules each fail the sync, naming the stream, without committing a row;
// a refused output and a panic are permanent, the error the transform
// returned is what it is.
func TestTransformFailures(t *testing.T) {
	errOwn := errors.New("lookup service down")
	drop := func(name string) func(arrow.RecordBatch) arrow.RecordBatch {
		return func(in arrow.RecordBatch) arrow.RecordBatch {
			var fields []arrow.Field
			var cols []arrow.Array
			for i, f := range in.Schema().Fields() {
				if f.Name != name {
					fields, cols = append(fields, f), append(cols, in.Column(i))
				}
			}
			return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, in.NumRows())
		}
	}
	with := func(f arrow.Field, val func(n int) arrow.Array) func(arrow.RecordBatch) arrow.RecordBatch {
		return func(in arrow.RecordBatch) arrow.RecordBatch {
			v := val(int(in.NumRows()))
			defer v.Release()
			sc := arrow.NewSchema(append(append([]arrow.Field{}, in.Schema().Fields()...), f), nil)
			return array.NewRecordBatch(sc, append(append([]arrow.Array{}, in.Columns()...), v), in.NumRows())
		}
	}
	nulls := func(n int) arrow.Array {
		b := array.NewStringBuilder(memory.DefaultAllocator)
		defer b.Release()
		b.AppendNulls(n)
		return b.NewArray()
	}
	emitting := func(f func(arrow.RecordBatch) arrow.RecordBatch) etl.TransformFunc {
		return func(_ context.Context, b etl.TransformBatch) error {
			out := f(b.Record())
			b.Emit(out)
			out.Release()
			return nil
		}
	}
	calls := 0
	for _, c := range []struct {
		name      string
		fn        etl.TransformFunc
		want      string
		permanent bool
		is        error
	}{
		{"error", func(context.Context, etl.TransformBatch) error { return errOwn }, "lookup service down", false, errOwn},
		{"panic", func(context.Context, etl.TransformBatch) error { var m map[string]int; m["x"]++; return nil },
			"transform panicked: assignment to entry in nil map", true, nil},
		{"drops _openetl_id", emitting(drop(sink.ColumnID)), "metadata column _openetl_id dropped", true, etl.ErrTransformOutput},
		{"drops the key", emitting(drop("id")), `key column "id" dropped`, true, etl.ErrTransformOutput},
		{"retypes _openetl_seq", emitting(func(in arrow.RecordBatch) arrow.RecordBatch {
			out := drop(sink.ColumnSeq)(in)
			defer out.Release()
			return with(arrow.Field{Name: sink.ColumnSeq, Type: arrow.BinaryTypes.String}, nulls)(out)
		}), "metadata column _openetl_seq changed type from int64 to utf8", true, etl.ErrTransformOutput},
		{"nulls in _openetl_op", emitting(func(in arrow.RecordBatch) arrow.RecordBatch {
			out := drop(sink.ColumnOp)(in)
			defer out.Release()
			return with(arrow.Field{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String, Nullable: true}, nulls)(out)
		}), "column _openetl_op has", true, etl.ErrTransformOutput},
		{"adds a reserved column", emitting(with(arrow.Field{Name: "_openetl_mine", Type: arrow.BinaryTypes.String, Nullable: true}, nulls)),
			"column _openetl_mine: names starting with _openetl_ are the pipeline's own", true, etl.ErrTransformOutput},
		{"loses a column", func(_ context.Context, b etl.TransformBatch) error {
			calls++
			f := with(tagField, nulls)
			if calls > 1 {
				f = func(in arrow.RecordBatch) arrow.RecordBatch { in.Retain(); return in }
			}
			return emitting(f)(context.Background(), b)
		}, `column "tag", in the transform's earlier batches of table "orders", is missing`, true, etl.ErrTransformOutput},
		{"rejects a row twice", func(_ context.Context, b etl.TransformBatch) error {
			b.Reject(0, "x", "")
			b.Reject(0, "x", "")
			return nil
		}, "row 0 rejected twice", true, etl.ErrTransformOutput},
		{"rejects a row out of range", func(_ context.Context, b etl.TransformBatch) error {
			b.Reject(int(b.Record().NumRows()), "x", "")
			return nil
		}, ": the batch has rows 0 to", true, etl.ErrTransformOutput},
		{"emits more rows than it got", func(_ context.Context, b etl.TransformBatch) error {
			b.Emit(b.Record())
			b.Emit(b.Record())
			return nil
		}, "emit the rows made beyond those with EmitAdded", true, etl.ErrTransformOutput},
		{"emits a rejected row", func(_ context.Context, b etl.TransformBatch) error {
			b.Reject(0, "x", "")
			b.Emit(b.Record())
			return nil
		}, "emit the rows made beyond those with EmitAdded", true, etl.ErrTransformOutput},
		{"rejects without a reason", func(_ context.Context, b etl.TransformBatch) error {
			b.Reject(0, "", "")
			return nil
		}, "Reject of row 0: no reason", true, etl.ErrTransformOutput},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := sourcetest.NewFakeSource(sourcetest.FakeSourceConfig{Seed: 3, Replay: source.ReplayExact,
				Streams: []sourcetest.FakeStream{{Name: "orders", Rows: 40}}})
			dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply})
			p, err := etl.NewPipeline("tf").From(src).To(dst).Checkpoints(checkpoint.NewMem()).BatchSize(8, 0).
				Transform(c.fn, "orders").Build()
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Sync(context.Background())
			if err == nil {
				t.Fatal("the sync succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, `transform: stream "orders"`) || !strings.Contains(msg, c.want) {
				t.Errorf("error %q: want the stream named and %q", msg, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v: want it to wrap %v", err, c.is)
			}
			var pe *etl.PanicError
			if (c.name == "panic") != errors.As(err, &pe) {
				t.Errorf("error %v: PanicError found %v", err, pe != nil)
			} else if pe != nil && !bytes.Contains(pe.Stack, []byte("transform_test.go")) {
				t.Errorf("the panic's stack does not show where it was:\n%s", pe.Stack)
			}
			if got := etl.IsPermanent(err); got != c.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, c.permanent)
			}
			if n := len(dst.Rows("orders")); n > 0 || res.Epochs > 0 && c.name != "loses a column" {
				t.Errorf("%d rows visible, %d epochs committed", n, res.Epochs)
			}
		})
	}
}

// TestTransformBuild: Build refuses a nil function, no stream, two
// transforms for a stream and a stream the source doesn't have; the
// guarantees of transformed streams say so.
func TestTransformBuild(t *testing.T) {
	id := func(_ context.Context, b etl.TransformBatch) error { b.Emit(b.Record()); return nil }
	src, dst := newFakes(1, 0)
	base := func() *etl.Builder {
		return etl.NewPipeline("tf").From(src).To(dst).Checkpoints(checkpoint.NewMem())
	}
	for _, c := range []struct {
		b    *etl.Builder
		want string
	}{
		{base().Transform(nil, "orders"), "transform: nil function"},
		{base().Transform(id), "transform: no stream names"},
		{base().Transform(id, "orders").Transform(id, "orders"), `transform: stream "orders" has one already`},
		{base().Transform(id, "nope"), `transform: stream "nope" is not in the source's catalog`},
	} {
		if _, err := c.b.Build(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Build: %v, want %q", err, c.want)
		}
	}
	p, err := base().Transform(id, "orders").Build()
	if err != nil {
		t.Fatal(err)
	}
	gs := p.Guarantees()
	if len(gs) != 1 || !strings.Contains(gs[0].Reason, "through a Go transform") {
		t.Errorf("guarantees %+v: want the transform said", gs)
	}
}

// checking is a FakeDestination that can't take a column named tag.
type checking struct{ *sinktest.FakeDestination }

func (checking) CheckSchema(_ context.Context, _ string, sc *arrow.Schema) ([]sink.RejectedColumn, error) {
	if len(sc.FieldIndices("tag")) > 0 {
		return []sink.RejectedColumn{{Column: "tag", Reason: "no tags here"}}, nil
	}
	return nil, nil
}

// TestTransformSchemaChecker: a transform's new column goes through the
// destination's SchemaChecker: rejected, its values are held, not
// written.
func TestTransformSchemaChecker(t *testing.T) {
	src, fake := newFakes(30, 0)
	store := checkpoint.NewMem()
	p, err := etl.NewPipeline("tf").From(src).To(checking{fake}).Checkpoints(store).Lanes(2).
		Transform(filter(t), "orders").Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := res.Streams["orders"]
	if c.Held != c.Written || c.Written == 0 {
		t.Errorf("counts %+v: want every written row's tag held", c)
	}
	for _, r := range fake.Rows("orders") {
		if _, ok := r.Values["tag"]; ok {
			t.Fatalf("row %v has the tag the destination can't take", r.Values)
		}
	}
	var held int64
	for e := uint64(1); e <= res.Epoch; e++ {
		if b, err := store.ReadFile(context.Background(), "tf", etl.HeldName("orders", e)); err == nil {
			held += int64(bytes.Count(b, []byte(`"column":"tag"`)))
		}
	}
	if held != c.Held {
		t.Errorf("%d held lines of tag, want %d", held, c.Held)
	}
}

// TestDerivedIDVectors: DerivedID is fixed forever.
func TestDerivedIDVectors(t *testing.T) {
	for _, v := range []struct {
		id   string
		n    int
		want string
	}{
		{"79f31045bf5ab5655cdd3b5607862643", 1, "c29134d84f0b57796b9b8bcaa0f9bc66"},
		{"79f31045bf5ab5655cdd3b5607862643", 2, "edaaf5736ccef488516199b36ea3deda"},
		{"", 0, "33a44d2526a0aee342437bcc44b88e13"},
	} {
		if got := etl.DerivedID(v.id, v.n); got != v.want {
			t.Errorf("DerivedID(%q, %d) = %s, want %s", v.id, v.n, got, v.want)
		}
	}
}

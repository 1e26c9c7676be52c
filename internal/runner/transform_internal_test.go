package runner

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// nullDest takes every batch and keeps nothing.
type nullDest struct{ rows int64 }

func (*nullDest) Class() sink.Class               { return sink.StageAndApply }
func (*nullDest) Capabilities() sink.Capabilities { return sink.Capabilities{} }
func (d *nullDest) Writer(context.Context, sink.WriterConfig) (sink.Writer, error) {
	return d, nil
}
func (d *nullDest) Write(_ context.Context, _ string, rec arrow.RecordBatch) error {
	d.rows += rec.NumRows()
	return nil
}
func (*nullDest) PreCommit(context.Context, uint64) (sink.Committable, error) { return nil, nil }
func (*nullDest) Commit(context.Context, uint64, []sink.Committable) error    { return nil }
func (*nullDest) Recover(context.Context, checkpoint.Generation, *checkpoint.Record) (sink.Outcome, error) {
	return sink.Applied, nil
}
func (*nullDest) Finish(context.Context, uint64) error { return nil }
func (*nullDest) Close(context.Context) error          { return nil }

// engineLike returns a batch shaped like the engine's: id, name, then
// the metadata columns.
func engineLike(n int) arrow.RecordBatch {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
		{Name: sink.ColumnSyncedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append("name " + strconv.Itoa(i))
		b.Field(2).(*array.StringBuilder).Append(strings.Repeat("0", 31) + strconv.Itoa(i%10))
		b.Field(3).(*array.StringBuilder).Append(sink.OpInsert)
		b.Field(4).(*array.Int64Builder).Append(int64(i + 1))
		b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(i))
	}
	return b.NewRecordBatch()
}

func identity(_ context.Context, c *TransformCall) error {
	c.Emit(c.In)
	return nil
}

func newTestLane(t testing.TB, fn Transform) (*laneTransforms, *nullDest) {
	t.Helper()
	dst := &nullDest{}
	cfg := Config{Name: "t", Destination: dst, Transforms: map[string]Transform{"s": fn}}.withDefaults()
	mon := NewMonitor(cfg)
	t.Cleanup(mon.close)
	r := &runner{cfg: cfg, mon: mon, pumps: []*pump{{id: "s#0"}}, firstEpoch: 1}
	return r.newLaneTransforms(0), dst
}

// TestTransformHookAllocs: the hook's machinery allocates nothing per
// batch, however many rows, for a transform that emits its input (the
// transform's own allocations are its own).
func TestTransformHookAllocs(t *testing.T) {
	for _, rows := range []int{10, 10_000} {
		lt, dst := newTestLane(t, identity)
		rec := engineLike(rows)
		run := func() {
			rec.Retain()
			if err := lt.run(context.Background(), dst, identity, laneMsg{stream: "s", source: "s", rec: rec}); err != nil {
				t.Fatal(err)
			}
		}
		if a := testing.AllocsPerRun(200, run); a != 0 {
			t.Errorf("%d rows: %v allocations per batch, want 0", rows, a)
		}
		if c := lt.counts["s"]; c != (checkpoint.Counts{}) || dst.rows != 201*int64(rows) {
			t.Errorf("%d rows: counts %+v, %d rows written", rows, c, dst.rows)
		}
		rec.Release()
	}
}

// BenchmarkTransformHook: the hook's cost per batch of 8192 rows with
// the identity, beside a bare Write of the same batch.
func BenchmarkTransformHook(b *testing.B) {
	rec := engineLike(8192)
	defer rec.Release()
	b.Run("bare", func(b *testing.B) {
		_, dst := newTestLane(b, identity)
		for b.Loop() {
			rec.Retain()
			_ = dst.Write(context.Background(), "s", rec)
			rec.Release()
		}
	})
	b.Run("identity", func(b *testing.B) {
		lt, dst := newTestLane(b, identity)
		b.ReportAllocs()
		for b.Loop() {
			rec.Retain()
			if err := lt.run(context.Background(), dst, identity, laneMsg{stream: "s", source: "s", rec: rec}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWidens: the widenings a transform's output may go through are the
// engine's.
func TestWidens(t *testing.T) {
	i64, f64, str := arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64, arrow.BinaryTypes.String
	dec := func(p, s int32) arrow.DataType { return &arrow.Decimal128Type{Precision: p, Scale: s} }
	st := func(fs ...arrow.Field) arrow.DataType { return arrow.StructOf(fs...) }
	for _, c := range []struct {
		from, to arrow.DataType
		want     bool
	}{
		{i64, i64, true}, {i64, f64, true}, {i64, str, true}, {f64, str, true}, {arrow.Null, i64, true},
		{i64, dec(20, 1), true}, {dec(10, 2), dec(12, 3), true}, {dec(10, 2), dec(10, 3), false},
		{f64, i64, false}, {str, i64, false}, {i64, arrow.PrimitiveTypes.Int32, false},
		{st(arrow.Field{Name: "a", Type: i64}), st(arrow.Field{Name: "a", Type: f64}, arrow.Field{Name: "b", Type: str}), true},
		{st(arrow.Field{Name: "a", Type: i64}, arrow.Field{Name: "b", Type: str}), st(arrow.Field{Name: "a", Type: i64}), false},
		{arrow.ListOf(i64), arrow.ListOf(f64), true}, {arrow.ListOf(f64), arrow.ListOf(i64), false},
	} {
		if got := widens(c.from, c.to); got != c.want {
			t.Errorf("widens(%s, %s) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

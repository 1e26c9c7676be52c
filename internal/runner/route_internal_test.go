package runner

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/source"
)

func TestJoinDeclared(t *testing.T) {
	for _, tc := range []struct {
		types, a, b, want string // want "" : no join
	}{
		{source.TypesPostgres, "int4", "int4", "int4"},
		{source.TypesPostgres, "int2", "int8", "int8"},
		{source.TypesPostgres, "int4", "float4", "float8"},
		{source.TypesPostgres, "numeric(10,2)", "numeric(12,3)", "numeric(12,3)"},
		{source.TypesPostgres, "int4", "numeric(5,2)", "numeric(12,2)"},
		{source.TypesPostgres, "int8", "numeric(38,30)", "numeric"},
		{source.TypesPostgres, "numeric", "int4", "numeric"},
		{source.TypesPostgres, "varchar", "text", "text"},
		{source.TypesPostgres, "bpchar", "citext", "text"},
		{source.TypesPostgres, "float8", "numeric(5,2)", ""},
		{source.TypesPostgres, "timestamptz", "timestamp", ""},
		{source.TypesPostgres, "int4", "text", ""},
		{source.TypesPostgres, "jsonb", "text", ""},
		{source.TypesMySQL, "int(11)", "bigint(20)", "bigint"},
		{source.TypesMySQL, "int unsigned", "bigint unsigned", "bigint unsigned"},
		{source.TypesMySQL, "int unsigned", "bigint", ""},
		{source.TypesMySQL, "varchar(10)", "text", "longtext"},
		{source.TypesMySQL, "decimal(10,2)", "int", "decimal(12,2)"},
	} {
		got, ok := joinDeclared(tc.types, tc.a, tc.b)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %s ⊔ %s = %q %v, want %q", tc.types, tc.a, tc.b, got, ok, tc.want)
		}
	}
}

func TestJoinArrow(t *testing.T) {
	dec := func(p, s int32) arrow.DataType { return &arrow.Decimal128Type{Precision: p, Scale: s} }
	list := arrow.ListOf(arrow.PrimitiveTypes.Int64)
	for _, tc := range []struct {
		a, b, want arrow.DataType // want nil: no join
	}{
		{arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64},
		{arrow.Null, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int32},
		{arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64},
		{arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int32},
		{arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64},
		{dec(10, 2), dec(12, 3), dec(12, 3)},
		{arrow.PrimitiveTypes.Int32, dec(5, 2), dec(12, 2)},
		{arrow.PrimitiveTypes.Int64, dec(38, 30), arrow.BinaryTypes.String},
		{arrow.PrimitiveTypes.Float64, dec(5, 2), arrow.BinaryTypes.String},
		{arrow.FixedWidthTypes.Boolean, arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String},
		{list, list, list},
		{list, arrow.BinaryTypes.String, nil},
	} {
		got, ok := joinArrow(tc.a, tc.b)
		if ok != (tc.want != nil) || ok && !arrow.TypeEqual(got, tc.want) {
			t.Errorf("%s ⊔ %s = %v %v, want %v", tc.a, tc.b, got, ok, tc.want)
		}
	}
}

// TestConform: a batch of a shard comes out under the table's schema
// (joined, a column it lacks null, the origin column last), and the
// schema only widens.
func TestConform(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	batch := func(typ arrow.DataType, extra bool) arrow.RecordBatch {
		fields := []arrow.Field{{Name: "id", Type: typ, Nullable: true}}
		if extra {
			fields = append(fields, arrow.Field{Name: "x", Type: arrow.BinaryTypes.String, Nullable: true})
		}
		fields = append(fields, arrow.Field{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64})
		b := array.NewRecordBuilder(mem, arrow.NewSchema(fields, nil))
		defer b.Release()
		switch ib := b.Field(0).(type) {
		case *array.Int32Builder:
			ib.AppendValues([]int32{1, 2}, nil)
		case *array.Int64Builder:
			ib.AppendValues([]int64{1 << 40, 3}, nil)
		}
		if extra {
			b.Field(1).(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
		}
		b.Field(len(fields)-1).(*array.Int64Builder).AppendValues([]int64{10, 11}, nil)
		return b.NewRecordBatch()
	}
	rt := &routedTable{table: "orders"}
	out, changed, err := rt.conform("s2", batch(arrow.PrimitiveTypes.Int64, true))
	if err != nil || !changed {
		t.Fatal(err, changed)
	}
	out.Release()
	out, changed, err = rt.conform("s1", batch(arrow.PrimitiveTypes.Int32, false))
	if err != nil || changed {
		t.Fatal(err, changed)
	}
	defer out.Release()
	want := "id: type=int64, nullable; x: type=utf8, nullable; _openetl_seq: type=int64; _openetl_stream: type=utf8"
	got := ""
	for i, f := range out.Schema().Fields() {
		if i > 0 {
			got += "; "
		}
		got += f.Name + ": " + f.String()[len(f.Name)+2:]
	}
	if got != want {
		t.Errorf("schema %s\nwant %s", got, want)
	}
	if s := out.Column(0).String() + out.Column(1).String() + out.Column(3).String(); s != `[1 2][(null) (null)]["s1" "s1"]` {
		t.Errorf("columns %s", s)
	}
}

// BenchmarkConform times a routed batch's cast to its table's schema:
// 8192 rows of an int32 key cast to int64, a float64 and a string kept,
// and the origin column.
func BenchmarkConform(b *testing.B) {
	const n = 8192
	fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64}}
	rb := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer rb.Release()
	for i := range n {
		rb.Field(0).(*array.Int32Builder).Append(int32(i))
		rb.Field(1).(*array.Float64Builder).Append(float64(i) / 3)
		rb.Field(2).(*array.StringBuilder).Append("some text value")
		rb.Field(3).(*array.Int64Builder).Append(int64(i))
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	rt := &routedTable{table: "t"}
	wide := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, nil)
	if _, err := rt.widen("other_shard", wide); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rec.Retain()
		out, _, err := rt.conform("orders_2024_01", rec)
		if err != nil {
			b.Fatal(err)
		}
		out.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/row")
}

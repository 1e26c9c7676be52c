package iceberg

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	ice "github.com/apache/iceberg-go"
)

// TestPartitionerMatchesIcebergGo: for every transform and source type the
// engine path partitions itself, each row's partition value (and so its
// file's partition and path) equals iceberg-go's Transform.Apply on the
// same value — random values, nulls, and edges (before 1970, day and
// hour boundaries, the int ranges' ends, empty and multi-byte strings).
func TestPartitionerMatchesIcebergGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const n = 3000
	transforms := []ice.Transform{ice.IdentityTransform{}, ice.YearTransform{}, ice.MonthTransform{}, ice.DayTransform{},
		ice.HourTransform{}, ice.BucketTransform{NumBuckets: 16}, ice.BucketTransform{NumBuckets: 1000}, ice.TruncateTransform{Width: 10},
		ice.TruncateTransform{Width: 3}, ice.VoidTransform{}}
	types := []ice.Type{ice.PrimitiveTypes.Int32, ice.PrimitiveTypes.Int64, ice.PrimitiveTypes.Date, ice.PrimitiveTypes.Timestamp,
		ice.PrimitiveTypes.TimestampTz, ice.PrimitiveTypes.String}
	edgesInt := []int64{0, 1, -1, 9, 10, -9, -10, -11, math.MaxInt32, math.MinInt32}
	edgesMicros := []int64{0, -1, 1, microsPerDay - 1, microsPerDay, -microsPerDay, -microsPerDay - 1, microsPerHour - 1, -microsPerHour,
		-86_400_000_000 * 365 * 70, 253_402_300_799_999_999}
	strs := []string{"", "a", "abc", "héllo wörld", "日本語のテキスト", "0123456789abc", "😀😀😀😀"}
	checked := 0
	for _, typ := range types {
		for _, tr := range transforms {
			sc := ice.NewSchema(0, ice.NestedField{ID: 1, Name: "c", Type: typ})
			spec := ice.NewPartitionSpec(ice.PartitionField{SourceIDs: []int{1}, FieldID: 1000, Name: "p", Transform: tr})
			p, ok := newPartitioner(spec, sc)
			want := partitionable(tr, typ)
			if ok != want {
				t.Errorf("%s(%s): partitioner %v, want %v", tr, typ, ok, want)
				continue
			}
			if !ok {
				continue
			}
			col, lits := randomColumn(rng, typ, n, edgesInt, edgesMicros, strs)
			rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "c", Type: col.DataType(), Nullable: true}}, nil), []arrow.Array{col}, int64(n))
			if err := p.assign(rec); err != nil {
				t.Fatalf("%s(%s): %v", tr, typ, err)
			}
			for row, lit := range lits {
				var wantV any
				if lit != nil {
					if out := tr.Apply(ice.Optional[ice.Literal]{Valid: true, Val: lit}); out.Valid {
						wantV = out.Val.Any()
					}
				}
				got := p.parts[p.rows[row]].values[1000]
				if !reflect.DeepEqual(got, wantV) {
					t.Fatalf("%s(%s) of %v: %#v, iceberg-go %#v", tr, typ, lit, got, wantV)
				}
				checked++
			}
			rec.Release()
			col.Release()
		}
	}
	t.Logf("%d values checked", checked)
}

// partitionable is what newPartitioner takes.
func partitionable(tr ice.Transform, typ ice.Type) bool {
	_, isStr := typ.(ice.StringType)
	_, isDate := typ.(ice.DateType)
	_, isInt32 := typ.(ice.Int32Type)
	_, isInt64 := typ.(ice.Int64Type)
	timeish := !isStr && !isInt32 && !isInt64
	switch tr.(type) {
	case ice.YearTransform, ice.MonthTransform, ice.DayTransform:
		return timeish
	case ice.HourTransform:
		return timeish && !isDate
	case ice.TruncateTransform:
		return !timeish
	}
	return true
}

// randomColumn returns a column of typ with n values (a tenth null, a
// fifth from the edges) and each value as an iceberg-go literal (nil for
// null).
func randomColumn(rng *rand.Rand, typ ice.Type, n int, edgesInt, edgesMicros []int64, strs []string) (arrow.Array, []ice.Literal) {
	mem := memory.DefaultAllocator
	lits := make([]ice.Literal, n)
	pick := func(edges []int64, r func() int64) int64 {
		if rng.IntN(5) == 0 {
			return edges[rng.IntN(len(edges))]
		}
		return r()
	}
	switch typ.(type) {
	case ice.Int32Type:
		b := array.NewInt32Builder(mem)
		defer b.Release()
		for i := range n {
			if rng.IntN(10) == 0 {
				b.AppendNull()
				continue
			}
			v := int32(pick(edgesInt, func() int64 { return int64(int32(rng.Uint32())) }))
			b.Append(v)
			lits[i] = ice.Int32Literal(v)
		}
		return b.NewArray(), lits
	case ice.Int64Type:
		b := array.NewInt64Builder(mem)
		defer b.Release()
		for i := range n {
			if rng.IntN(10) == 0 {
				b.AppendNull()
				continue
			}
			v := pick(edgesInt, func() int64 { return int64(rng.Uint64()) })
			b.Append(v)
			lits[i] = ice.Int64Literal(v)
		}
		return b.NewArray(), lits
	case ice.DateType:
		b := array.NewDate32Builder(mem)
		defer b.Release()
		for i := range n {
			if rng.IntN(10) == 0 {
				b.AppendNull()
				continue
			}
			v := int32(pick(edgesInt[:9], func() int64 { return rng.Int64N(200_000) - 100_000 }))
			b.Append(arrow.Date32(v))
			lits[i] = ice.DateLiteral(ice.Date(v))
		}
		return b.NewArray(), lits
	case ice.TimestampType, ice.TimestampTzType:
		dt := &arrow.TimestampType{Unit: arrow.Microsecond}
		if _, ok := typ.(ice.TimestampTzType); ok {
			dt.TimeZone = "UTC"
		}
		b := array.NewTimestampBuilder(mem, dt)
		defer b.Release()
		for i := range n {
			if rng.IntN(10) == 0 {
				b.AppendNull()
				continue
			}
			v := pick(edgesMicros, func() int64 { return rng.Int64N(8_000_000_000_000_000) - 4_000_000_000_000_000 })
			b.Append(arrow.Timestamp(v))
			lits[i] = ice.TimestampLiteral(ice.Timestamp(v))
		}
		return b.NewArray(), lits
	case ice.StringType:
		b := array.NewStringBuilder(mem)
		defer b.Release()
		for i := range n {
			if rng.IntN(10) == 0 {
				b.AppendNull()
				continue
			}
			v := strs[rng.IntN(len(strs))]
			if rng.IntN(2) == 0 {
				v = fmt.Sprintf("%s-%d", v, rng.IntN(1000))
			}
			b.Append(v)
			lits[i] = ice.StringLiteral(v)
		}
		return b.NewArray(), lits
	}
	panic("type")
}

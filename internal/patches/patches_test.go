package patches_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/internal/patches"
	"github.com/openetl/etl/sink"
)

// table makes a patch table of ids and one column col of type t, whose
// values are given as JSON (null: no value).
func table(t *testing.T, col string, typ arrow.DataType, ids []string, vals string) arrow.Table {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64}, {Name: col, Type: typ, Nullable: true}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for range ids {
		b.Field(1).(*array.Int64Builder).Append(1)
	}
	b.Field(0).(*array.StringBuilder).AppendValues(ids, nil)
	if err := b.Field(2).UnmarshalJSON([]byte(vals)); err != nil {
		t.Fatal(err)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	return array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
}

// TestRead: patch tables gather into one index per column, across
// tables; a null sets nothing; a column given two types, or a table
// without ids, is an error naming it.
func TestRead(t *testing.T) {
	a := table(t, "n", arrow.PrimitiveTypes.Int64, []string{"r1", "r2"}, `[7, null]`)
	defer a.Release()
	b := table(t, "n", arrow.PrimitiveTypes.Int64, []string{"r3"}, `[9]`)
	defer b.Release()
	cols, err := patches.Read([]arrow.Table{a, b}, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer patches.Release(cols)
	n := cols["n"]
	if n == nil || len(cols) != 1 || len(n.At) != 2 {
		t.Fatalf("columns %v", cols)
	}
	vals := n.Values.(*array.Int64)
	if _, ok := n.At["r2"]; ok || vals.Value(n.At["r1"]) != 7 || vals.Value(n.At["r3"]) != 9 {
		t.Errorf("index %v over %v: want r1 → 7, r3 → 9, no r2", n.At, n.Values)
	}
	c := table(t, "n", arrow.BinaryTypes.String, []string{"r4"}, `["x"]`)
	defer c.Release()
	if _, err := patches.Read([]arrow.Table{a, c}, []string{"a", "c"}); err == nil || !strings.Contains(err.Error(), `column "n"`) {
		t.Errorf("two types of one column: %v", err)
	}
	d := array.NewTableFromSlice(arrow.NewSchema([]arrow.Field{{Name: "n", Type: arrow.PrimitiveTypes.Int64}}, nil), [][]arrow.Array{{}})
	defer d.Release()
	if _, err := patches.Read([]arrow.Table{d}, []string{"d"}); err == nil || !strings.Contains(err.Error(), "d have no "+sink.ColumnID) {
		t.Errorf("no ids: %v", err)
	}
}

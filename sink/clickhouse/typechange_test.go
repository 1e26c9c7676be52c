package clickhouse_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
)

// oneRow is a batch of one row: key id, column x of type typ holding v
// (an int32, int64, float64 or string), and the metadata columns.
func oneRow(t *testing.T, id int64, typ arrow.DataType, v any, seq int64) arrow.RecordBatch {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "x", Type: typ, Nullable: true},
		{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(id)
	switch v := v.(type) {
	case int32:
		b.Field(1).(*array.Int32Builder).Append(v)
	case int64:
		b.Field(1).(*array.Int64Builder).Append(v)
	case float64:
		b.Field(1).(*array.Float64Builder).Append(v)
	case string:
		b.Field(1).(*array.StringBuilder).Append(v)
	}
	b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("row-%d", seq))
	b.Field(3).(*array.StringBuilder).Append("insert")
	b.Field(4).(*array.Int64Builder).Append(seq)
	return b.NewRecordBatch()
}

// TestWidenColumnType: the engine widens a column int64 → float64 →
// utf8 over three epochs; the table's column follows (ALTER ... MODIFY
// COLUMN) and every value reads back. A narrowing and a key column's
// change are errors naming the column, and write nothing.
func TestWidenColumnType(t *testing.T) {
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	ctx := context.Background()
	d := newDest(t, clickhouse.Config{Conn: conn, Database: db})
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "widen"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	for epoch, r := range []struct {
		typ arrow.DataType
		v   any
	}{
		{arrow.PrimitiveTypes.Int64, int64(1)},
		{arrow.PrimitiveTypes.Float64, 2.5},
		{arrow.BinaryTypes.String, "three"},
	} {
		rec := oneRow(t, int64(epoch), r.typ, r.v, int64(epoch+1))
		err := w.Write(ctx, "w", rec)
		rec.Release()
		if err != nil {
			t.Fatalf("epoch %d (%s): %v", epoch+1, r.typ, err)
		}
		c, err := w.PreCommit(ctx, uint64(epoch+1))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, uint64(epoch+1), []sink.Committable{c}); err != nil {
			t.Fatal(err)
		}
	}
	if got := clientQuery(t, fmt.Sprintf("SELECT id, x FROM %s.w ORDER BY id", db)); got != "0\t1\n1\t2.5\n2\tthree\n" {
		t.Errorf("w after widening:\n%s", got)
	}
	if got := clientQuery(t, fmt.Sprintf("SELECT type FROM system.columns WHERE database = '%s' AND table = 'w' AND name = 'x'", db)); got != "Nullable(String)\n" {
		t.Errorf("column x is %s, want Nullable(String)", got)
	}

	// A narrowing (string → int64) is not applied.
	w2, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "widen2"})
	defer w2.Close(ctx)
	rec := oneRow(t, 9, arrow.PrimitiveTypes.Int64, int64(9), 9)
	defer rec.Release()
	if err := w2.Write(ctx, "w", rec); err == nil || !strings.Contains(err.Error(), `column "x"`) {
		t.Errorf("a narrowing of x: %v, want an error naming the column", err)
	}
	// A key column's type can't change at all.
	w3, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "widen3", Streams: []sink.StreamSpec{sink.StreamSpec{Stream: "k", Table: "k", Mode: sink.Merge, Key: []string{"x"}}}})
	defer w3.Close(ctx)
	k1 := oneRow(t, 1, arrow.PrimitiveTypes.Int32, int32(1), 1)
	defer k1.Release()
	if err := w3.Write(ctx, "k", k1); err != nil {
		t.Fatal(err)
	}
	k2 := oneRow(t, 2, arrow.PrimitiveTypes.Int64, int64(2), 2)
	defer k2.Release()
	if err := w3.Write(ctx, "k", k2); err == nil || !strings.Contains(err.Error(), "key column") {
		t.Errorf("a key column's type change: %v, want an error", err)
	}
}

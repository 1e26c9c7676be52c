package iceberg_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// oneRow is a batch of one row: v in column "x" of type dt, plus the
// metadata columns.
func oneRow(t *testing.T, dt arrow.DataType, seq int64, v any) arrow.RecordBatch {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "x", Type: dt, Nullable: true},
		{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	switch x := b.Field(0).(type) {
	case *array.Int32Builder:
		x.Append(v.(int32))
	case *array.Int64Builder:
		x.Append(v.(int64))
	case *array.Float32Builder:
		x.Append(v.(float32))
	case *array.Float64Builder:
		x.Append(v.(float64))
	case *array.StringBuilder:
		x.Append(v.(string))
	}
	b.Field(1).(*array.StringBuilder).Append(string(rune('a' + seq)))
	b.Field(2).(*array.StringBuilder).Append("insert")
	b.Field(3).(*array.Int64Builder).Append(seq)
	return b.NewRecordBatch()
}

// TestSchemaEvolution widens int → long and float → double (Iceberg's
// promotions) across epochs and within one, checks the table's column
// types and that every row reads back, and checks that a change Iceberg
// can't make (long → string) fails Write with a *SchemaError naming
// the table, leaving the table as it was.
func TestSchemaEvolution(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	d := newDest(t, wh.cat, iceberg.Config{})
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "evolve"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	write := func(name string, recs ...arrow.RecordBatch) {
		t.Helper()
		for _, r := range recs {
			if err := w.Write(ctx, name, r); err != nil {
				t.Fatal(err)
			}
			r.Release()
		}
	}
	colType := func(name string) ice.Type {
		t.Helper()
		tbl, err := wh.cat.LoadTable(ctx, table.Identifier{iceberg.DefaultNamespace, name})
		if err != nil {
			t.Fatal(err)
		}
		f, ok := tbl.Schema().FindFieldByName("x")
		if !ok {
			t.Fatalf("%s: no column x", name)
		}
		return f.Type
	}
	epoch := uint64(0)
	commit := func() error {
		epoch++
		c, err := w.PreCommit(ctx, epoch)
		if err != nil {
			return err
		}
		return w.Commit(ctx, epoch, []sink.Committable{c})
	}
	write("ints", oneRow(t, arrow.PrimitiveTypes.Int32, 1, int32(7)))
	write("floats", oneRow(t, arrow.PrimitiveTypes.Float32, 1, float32(1.5)))
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	if got := colType("ints"); !got.Equals(ice.PrimitiveTypes.Int32) {
		t.Fatalf("ints.x is %s after int32 rows, want int", got)
	}
	// Widened in the next epoch, and a narrow batch after the wide one in
	// the same epoch (an older lane's batch).
	write("ints", oneRow(t, arrow.PrimitiveTypes.Int64, 2, int64(1)<<40), oneRow(t, arrow.PrimitiveTypes.Int32, 3, int32(9)))
	write("floats", oneRow(t, arrow.PrimitiveTypes.Float64, 2, 2.25))
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	if got := colType("ints"); !got.Equals(ice.PrimitiveTypes.Int64) {
		t.Errorf("ints.x is %s after int64 rows, want long", got)
	}
	if got := colType("floats"); !got.Equals(ice.PrimitiveTypes.Float64) {
		t.Errorf("floats.x is %s after float64 rows, want double", got)
	}
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "ints")
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]string{}
	for _, r := range rows {
		got[r.Seq] = str(r.Values["x"])
	}
	if len(rows) != 3 || got[1] != "7" || got[2] != "1099511627776" || got[3] != "9" {
		t.Errorf("ints rows %v, want 7, 2^40, 9", got)
	}
	// long → string is not an Iceberg promotion: CheckSchema names it
	// beforehand, and Write (append tables evolve there) or PreCommit
	// (merge tables) refuses it with the same typed error.
	bad := oneRow(t, arrow.BinaryTypes.String, 4, "seven")
	var checker sink.SchemaChecker = d // the runner holds such columns back
	found, err := checker.CheckSchema(ctx, "ints", bad.Schema())
	if err != nil || len(found) != 1 || found[0].Column != "x" || !strings.Contains(found[0].Reason, "long → string") {
		t.Fatalf("CheckSchema(ints, x string) = %v, %v; want one conflict: ints.x long → string", found, err)
	}
	narrow := oneRow(t, arrow.PrimitiveTypes.Int32, 5, int32(1))
	for _, c := range []struct {
		table string
		sc    *arrow.Schema
	}{{"ints", narrow.Schema()}, {"floats", narrow.Schema()}, {"missing", bad.Schema()}} {
		// int into a long column: fine; int into floats' double column:
		// not a promotion; any schema for a missing table: fine.
		found, err := d.CheckSchema(ctx, c.table, c.sc)
		want := 0
		if c.table == "floats" {
			want = 1
		}
		if err != nil || len(found) != want {
			t.Errorf("CheckSchema(%s, %s) = %v, %v; want %d conflicts", c.table, c.sc, found, err, want)
		}
	}
	narrow.Release()
	err = w.Write(ctx, "ints", bad)
	bad.Release()
	if err == nil {
		err = commit()
	}
	var se *iceberg.SchemaError
	if !errors.As(err, &se) || se.Table != "ints" || se.Column != "x" || se.From != "long" || se.To != "string" {
		t.Fatalf("Write with x turned string: %v, want a *SchemaError for ints.x long → string", err)
	}
	if got := colType("ints"); !got.Equals(ice.PrimitiveTypes.Int64) {
		t.Errorf("ints.x is %s after the refused change, want long", got)
	}
}

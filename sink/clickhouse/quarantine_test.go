package clickhouse_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
)

// TestQuarantineAndAddColumn writes rows ClickHouse 18.16 can't hold (a
// date before 1970, a 39-digit decimal, a null key of a merge table) next
// to good ones, then a batch with a new column; clickhouse-client must
// read the good rows in the table, the bad ones in _openetl_quarantine
// with their reasons, and the new column.
func TestQuarantineAndAddColumn(t *testing.T) {
	conn := open(t, addr(t))
	db := freshDB(t, conn)
	ctx := context.Background()
	d := newDest(t, clickhouse.Config{Conn: conn, Database: db})
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "q", Streams: []sink.StreamSpec{sink.StreamSpec{Stream: "acct", Table: "acct", Mode: sink.Merge, Key: []string{"id"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "opened", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "balance", Type: &arrow.Decimal256Type{Precision: 60, Scale: 2}, Nullable: true},
		{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	type row struct {
		id      *int64
		days    int32
		balance string
	}
	one, two, four := int64(1), int64(2), int64(4)
	for i, r := range []row{
		{&one, 19000, "12.50"},
		{&two, -1, "3.00"},   // 1969-12-31: out of Date's range
		{nil, 19000, "1.00"}, // null key
		{&four, 19001, "1234567890123456789012345678901234567.89"}, // 39 digits
	} {
		if r.id != nil {
			b.Field(0).(*array.Int64Builder).Append(*r.id)
		} else {
			b.Field(0).AppendNull()
		}
		b.Field(1).(*array.Date32Builder).Append(arrow.Date32(r.days))
		n, err := decimal256.FromString(r.balance, 60, 2)
		if err != nil {
			t.Fatal(err)
		}
		b.Field(2).(*array.Decimal256Builder).Append(n)
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("id%d", i))
		b.Field(4).(*array.StringBuilder).Append("insert")
		b.Field(5).(*array.Int64Builder).Append(int64(i + 1))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := w.Write(ctx, "acct", rec); err != nil {
		t.Fatal(err)
	}
	// A new column, as the engine adds one.
	wide := append(fields[:3:3], arrow.Field{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true})
	wide = append(wide, fields[3:]...)
	b2 := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(wide, nil))
	defer b2.Release()
	b2.Field(0).(*array.Int64Builder).Append(5)
	b2.Field(1).(*array.Date32Builder).Append(19002)
	n, _ := decimal256.FromString("7.25", 60, 2)
	b2.Field(2).(*array.Decimal256Builder).Append(n)
	b2.Field(3).(*array.StringBuilder).Append("hello")
	b2.Field(4).(*array.StringBuilder).Append("id9")
	b2.Field(5).(*array.StringBuilder).Append("insert")
	b2.Field(6).(*array.Int64Builder).Append(10)
	rec2 := b2.NewRecordBatch()
	defer rec2.Release()
	if err := w.Write(ctx, "acct", rec2); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := clientQuery(t, fmt.Sprintf("SELECT count() FROM %s.acct", db)); strings.TrimSpace(got) != "0" {
		t.Fatalf("before Commit the table shows %s rows", got)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	got := clientQuery(t, fmt.Sprintf("SELECT id, opened, balance, note FROM %s.acct FINAL ORDER BY id", db))
	want := "1\t2022-01-08\t12.50\t\\N\n5\t2022-01-10\t7.25\thello\n"
	if got != want {
		t.Errorf("acct:\n%s\nwant\n%s", got, want)
	}
	got = clientQuery(t, fmt.Sprintf("SELECT table, column, reason, _openetl_id, _openetl_seq FROM %s._openetl_quarantine ORDER BY _openetl_seq", db))
	want = "acct\topened\tout_of_range\tid1\t2\nacct\tid\tnull_key\tid2\t3\nacct\tbalance\tout_of_range\tid3\t4\n"
	if got != want {
		t.Errorf("_openetl_quarantine:\n%s\nwant\n%s", got, want)
	}
	// The quarantined row keeps its values, untruncated.
	got = clientQuery(t, fmt.Sprintf("SELECT row FROM %s._openetl_quarantine WHERE reason = 'out_of_range' AND column = 'balance'", db))
	if !strings.Contains(got, "1234567890123456789012345678901234567.89") {
		t.Errorf("quarantined row %s lost the decimal's digits", got)
	}
	if got := clientQuery(t, fmt.Sprintf("SELECT type FROM system.columns WHERE database = '%s' AND table = 'acct' AND name IN ('id', 'balance', 'opened') ORDER BY name", db)); got != "Nullable(Decimal(38, 2))\nInt64\nNullable(Date)\n" {
		t.Errorf("column types on 18.16:\n%s", got)
	}
}

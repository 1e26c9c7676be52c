package clickhouse

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// TestUUIDIntoLegacyFixedString: a table created while uuids were
// FixedString(16) (by an older version of this package, or on a server
// without UUID) keeps taking them as FixedString(16), byte for byte,
// instead of holding the stream back as a type change.
func TestUUIDIntoLegacyFixedString(t *testing.T) {
	conn, db := testConn(t)
	ctx := context.Background()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "u", Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}, Nullable: true},
		{Name: colID, Type: arrow.BinaryTypes.String},
		{Name: colOp, Type: arrow.BinaryTypes.String},
		{Name: colSeq, Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	var head *checkpoint.Record // the log's, as the runner keeps it
	epoch := func(d *Destination, gen uint64, id int64, u []byte) {
		t.Helper()
		sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "legacy"})
		w := sw.(*writer)
		defer w.Close(ctx)
		if _, err := w.Recover(ctx, checkpoint.Generation(gen), head); err != nil {
			t.Fatal(err)
		}
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.FixedSizeBinaryBuilder).Append(u)
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprint(id))
		b.Field(3).(*array.StringBuilder).Append("insert")
		b.Field(4).(*array.Int64Builder).Append(id)
		rec := b.NewRecordBatch()
		defer rec.Release()
		if err := w.Write(ctx, "t", rec); err != nil {
			t.Fatal(err)
		}
		c, err := w.PreCommit(ctx, gen)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, gen, []sink.Committable{c}); err != nil {
			t.Fatal(err)
		}
		head = &checkpoint.Record{Pipeline: "legacy", Epoch: gen, Generation: checkpoint.Generation(gen), Committables: [][]byte{c}}
	}
	old, err := New(ctx, Config{Conn: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	old.features.UUID = false
	epoch(old, 1, 1, []byte("0123456789abcdef"))
	d, err := New(ctx, Config{Conn: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	if !d.features.UUID {
		t.Fatalf("server %s: no UUID feature", d.features.Version)
	}
	epoch(d, 2, 2, []byte("fedcba9876543210"))
	var typ string
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT type FROM system.columns WHERE database = '%s' AND table = 't' AND name = 'u'", db)).Scan(&typ); err != nil {
		t.Fatal(err)
	}
	if typ != "Nullable(FixedString(16))" {
		t.Errorf("column u is %s, want the table's Nullable(FixedString(16))", typ)
	}
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT toString(u) FROM %s.t ORDER BY id", db))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if len(got) != 2 || got[0] != "0123456789abcdef" || got[1] != "fedcba9876543210" {
		t.Errorf("read back %q, want the two values byte for byte", got)
	}
}

// TestEnumIntoStringColumn: a column created as String before its enum
// was declared (the engine started saying so later) keeps its type, and
// a LowCardinality one keeps taking plain strings: neither holds the
// stream back as a type change.
func TestEnumIntoStringColumn(t *testing.T) {
	conn, db := testConn(t)
	ctx := context.Background()
	d, err := New(ctx, Config{Conn: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "enums"})
	w := sw.(*writer)
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	enum := arrow.NewMetadata([]string{logicalTypeKey}, []string{logicalTypeEnum})
	batch := func(md1, md2 arrow.Metadata, id int64) arrow.RecordBatch {
		sc := arrow.NewSchema([]arrow.Field{
			{Name: "id", Type: arrow.PrimitiveTypes.Int64},
			{Name: "e1", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: md1},
			{Name: "e2", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: md2},
			{Name: colID, Type: arrow.BinaryTypes.String},
			{Name: colSeq, Type: arrow.PrimitiveTypes.Int64},
		}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append("a")
		b.Field(2).(*array.StringBuilder).Append("b")
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprint(id))
		b.Field(4).(*array.Int64Builder).Append(id)
		return b.NewRecordBatch()
	}
	for i, rec := range []arrow.RecordBatch{batch(arrow.Metadata{}, enum, 1), batch(enum, arrow.Metadata{}, 2)} {
		err := w.Write(ctx, "t", rec)
		rec.Release()
		if err != nil {
			t.Fatalf("batch %d: %v", i+1, err)
		}
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	var t1, t2 string
	var n uint64
	q := fmt.Sprintf("SELECT any(toTypeName(e1)), any(toTypeName(e2)), countIf(e1 = 'a' AND e2 = 'b') FROM %s.t", db)
	if err := conn.QueryRow(ctx, q).Scan(&t1, &t2, &n); err != nil {
		t.Fatal(err)
	}
	if t1 != "Nullable(String)" || t2 != "LowCardinality(Nullable(String))" || n != 2 {
		t.Errorf("e1 %s, e2 %s, %d rows right; want Nullable(String), LowCardinality(Nullable(String)), 2", t1, t2, n)
	}
}

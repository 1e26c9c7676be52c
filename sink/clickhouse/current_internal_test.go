package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
)

// Tests of what 18.16 can't show, against a current ClickHouse named by
// OPENETL_TEST_CLICKHOUSE (host:port of the native protocol, or a
// clickhouse:// DSN). scripts/servers.sh never sets it: no current server
// is to be had from the registries here. These are the only tests of the
// package skipped without a server.

// currentConn opens OPENETL_TEST_CLICKHOUSE and a fresh database on it.
func currentConn(t *testing.T) (driver.Conn, string) {
	t.Helper()
	target := os.Getenv("OPENETL_TEST_CLICKHOUSE")
	if target == "" {
		t.Skip("OPENETL_TEST_CLICKHOUSE is not set: these checks need a current ClickHouse (DateTime64, insert deduplication tokens), which scripts/servers.sh can't start")
	}
	opts := &ch.Options{Addr: []string{target}, DialTimeout: 10 * time.Second}
	if strings.Contains(target, "://") {
		var err error
		if opts, err = ch.ParseDSN(target); err != nil {
			t.Fatalf("OPENETL_TEST_CLICKHOUSE: %v", err)
		}
	}
	conn, err := ch.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := "openetl_current_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
		conn.Close()
	})
	return conn, db
}

// TestCurrentDateTime64 writes nanosecond timestamps and a 1900 date
// through the writer and reads them back exactly.
func TestCurrentDateTime64(t *testing.T) {
	conn, db := currentConn(t)
	ctx := context.Background()
	d, err := New(ctx, Config{Conn: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Features().DateTime64 || !d.Features().Date32 {
		t.Fatalf("server %s: %+v: not a current server", d.Features().Version, d.Features())
	}
	sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "dt64"})
	w := sw.(*writer)
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32},
		{Name: colID, Type: arrow.BinaryTypes.String},
		{Name: colSeq, Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	ts := time.Date(2024, 2, 29, 23, 59, 59, 123456789, time.UTC)
	b.Field(0).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixNano()))
	b.Field(1).(*array.Date32Builder).Append(arrow.Date32(-25567)) // 1900-01-01
	b.Field(2).(*array.StringBuilder).Append("a")
	b.Field(3).(*array.Int64Builder).Append(1)
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := w.Write(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	var gotTS, gotDay, typ string
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT toString(ts), toString(day), toTypeName(ts) FROM %s.t", db)).Scan(&gotTS, &gotDay, &typ); err != nil {
		t.Fatal(err)
	}
	if gotTS != "2024-02-29 23:59:59.123456789" || gotDay != "1900-01-01" || typ != "DateTime64(9, 'UTC')" {
		t.Errorf("read back %s %s (%s)", gotTS, gotDay, typ)
	}
}

// TestCurrentDedupToken sends the apply of one block twice, as a crash
// and a retry without the count would: the server's deduplication by
// insert_deduplication_token must drop the repeat.
func TestCurrentDedupToken(t *testing.T) {
	conn, db := currentConn(t)
	ctx := context.Background()
	d, err := New(ctx, Config{Conn: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Features().DedupToken {
		t.Fatalf("server %s has no insert_deduplication_token", d.Features().Version)
	}
	sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "dedup"})
	w := sw.(*writer)
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	rec := intRecord(0, 10)
	defer rec.Release()
	if err := w.Write(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	byTable, _, _ := w.decodeAll(1, []sink.Committable{c})
	blk := byTable["t"][0]
	cols, err := d.applyColumns(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := conn.Exec(ctx, applyBlock(db, "t", cols, blk.Token, blk.Rows, "dedup", 1, d.Features())); err != nil {
			t.Fatal(err)
		}
	}
	if n := countRows(t, conn, fmt.Sprintf("SELECT count() FROM %s.t", db)); n != 10 {
		t.Errorf("after the same apply twice: %d rows, want 10 (the token did not deduplicate)", n)
	}
}

// TestCurrentUUIDAndEnum writes a uuid and an enum (dictionary<utf8>) on
// a current server: UUID and LowCardinality(Nullable(String)) columns,
// the uuid read back as the source's text form.
func TestCurrentUUIDAndEnum(t *testing.T) {
	conn, db := currentConn(t)
	ctx := context.Background()
	d, err := New(ctx, Config{Conn: conn, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	if f := d.Features(); !f.UUID || !f.LowCardinality || f.ExperimentalLowCardinality {
		t.Fatalf("server %s: %+v: not a current server", f.Version, f)
	}
	sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "uuid"})
	w := sw.(*writer)
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "u", Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}, Nullable: true},
		{Name: "mood", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}, Nullable: true},
		{Name: colID, Type: arrow.BinaryTypes.String},
		{Name: colSeq, Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	u := []byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	b.Field(0).(*array.FixedSizeBinaryBuilder).Append(u)
	if err := b.Field(1).(*array.BinaryDictionaryBuilder).AppendString("happy"); err != nil {
		t.Fatal(err)
	}
	b.Field(2).(*array.StringBuilder).Append("a")
	b.Field(3).(*array.Int64Builder).Append(1)
	rec := b.NewRecordBatch()
	defer rec.Release()
	if err := w.Write(ctx, "t", rec); err != nil {
		t.Fatal(err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	var gotU, mood, ut, mt string
	q := fmt.Sprintf("SELECT toString(u), toString(mood), toTypeName(u), toTypeName(mood) FROM %s.t", db)
	if err := conn.QueryRow(ctx, q).Scan(&gotU, &mood, &ut, &mt); err != nil {
		t.Fatal(err)
	}
	if gotU != "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" || mood != "happy" || ut != "Nullable(UUID)" || mt != "LowCardinality(Nullable(String))" {
		t.Errorf("read back %s (%s), %s (%s)", gotU, ut, mood, mt)
	}
}

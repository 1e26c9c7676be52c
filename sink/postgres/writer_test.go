package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
)

// batch builds a batch of stream rows (id, value, op, seq), as the
// engine would, with the metadata columns.
type row struct {
	id    int64
	value string
	null  bool
	op    string
	seq   int64
}

func batch(t *testing.T, rows ...row) arrow.RecordBatch {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "value", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
		{Name: sink.ColumnSyncedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		if r.null {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(r.value)
		}
		b.Field(2).(*array.StringBuilder).Append(strings.Repeat("x", 3) + "-" + time.Unix(r.seq, r.id).String())
		op := r.op
		if op == "" {
			op = sink.OpInsert
		}
		b.Field(3).(*array.StringBuilder).Append(op)
		b.Field(4).(*array.Int64Builder).Append(r.seq)
		b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro()))
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	return rec
}

// commit writes one epoch on a new lane-0 writer of generation gen and
// commits it; it returns the writer (closed at the test's end).
func commit(t *testing.T, dst sink.Destination, cfg sink.WriterConfig, gen checkpoint.Generation, epoch uint64, head *checkpoint.Record, recs ...arrow.RecordBatch) sink.Writer {
	t.Helper()
	ctx := t.Context()
	w, err := dst.Writer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	if _, err := w.Recover(ctx, gen, head); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(ctx, cfg.Streams[0].Table, r); err != nil {
			t.Fatal(err)
		}
	}
	c, err := w.PreCommit(ctx, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, epoch, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	return w
}

// psql runs query with psql, the independent reader, and returns its
// unaligned output.
func psql(t *testing.T, query string) string {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), "psql", dsn(t), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-c", query).CombinedOutput()
	if err != nil {
		t.Fatalf("psql -c %q: %v\n%s", query, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A text value with a NUL is set aside with its reason, not written and
// not changed, and the epoch commits: the other rows are in the table,
// the bad one in _openetl_quarantine, as psql reads them.
func TestQuarantineNUL(t *testing.T) {
	e := newEnv(t)
	dst := e.open(t)
	cfg := sink.WriterConfig{Pipeline: "nul", Streams: []sink.StreamSpec{{Stream: "notes", Table: "notes"}}}
	commit(t, dst, cfg, 1, 1, nil, batch(t, row{id: 1, value: "fine", seq: 1}, row{id: 2, value: "a\x00b", seq: 2}, row{id: 3, null: true, seq: 3}))
	if got := psql(t, `SELECT id || ':' || coalesce(value, 'NULL') FROM `+e.schema+`.notes ORDER BY id`); got != "1:fine\n3:NULL" {
		t.Errorf("notes = %q, want rows 1 and 3", got)
	}
	got := psql(t, `SELECT table_name || ' ' || column_name || ' ' || reason || ' ' || _openetl_seq || ' ' || (strpos(row_json, '"value":"a\u0000b"') > 0)
		FROM `+e.schema+`._openetl_quarantine`)
	if got != "notes value nul_in_text 2 true" {
		t.Errorf("quarantine = %q, want the row with id 2, reason nul_in_text", got)
	}
}

// A zombie's Commit after a newer generation's Recover fails with
// sink.ErrFenced and changes nothing, on the real server.
func TestZombieFenced(t *testing.T) {
	e := newEnv(t)
	dst := e.open(t)
	ctx := t.Context()
	cfg := sink.WriterConfig{Pipeline: "zombie", Streams: []sink.StreamSpec{{Stream: "z", Table: "z"}}}
	commit(t, dst, cfg, 1, 1, nil, batch(t, row{id: 1, value: "one", seq: 1}))

	zombie, err := e.open(t).Writer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close(ctx)
	head := &checkpoint.Record{Pipeline: "zombie", Epoch: 1, Generation: 1}
	if out, err := zombie.Recover(ctx, 2, head); err != nil || out != sink.Applied {
		t.Fatalf("zombie Recover = %v, %v", out, err)
	}
	if err := zombie.Write(ctx, "z", batch(t, row{id: 2, value: "zombie", seq: 2})); err != nil {
		t.Fatal(err)
	}
	c, err := zombie.PreCommit(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The successor recovers with generation 3: the zombie is fenced.
	succ, err := e.open(t).Writer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer succ.Close(ctx)
	if _, err := succ.Recover(ctx, 3, head); err != nil {
		t.Fatal(err)
	}
	before := psql(t, `SELECT string_agg(id::text || value, ',' ORDER BY id) FROM `+e.schema+`.z`)
	if err := zombie.Commit(ctx, 2, []sink.Committable{c}); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("zombie Commit = %v, want sink.ErrFenced", err)
	}
	if after := psql(t, `SELECT string_agg(id::text || value, ',' ORDER BY id) FROM `+e.schema+`.z`); after != before || after != "1one" {
		t.Errorf("z after the fenced Commit = %q, before %q, want 1one", after, before)
	}
	if got := psql(t, `SELECT fence FROM `+e.schema+`._openetl_ledger WHERE pipeline = 'zombie'`); got != "3" {
		t.Errorf("fence = %s, want 3", got)
	}
}

// CheckSchema takes the same schema, a new column and a widening; it
// names a change that is not one (text to bigint).
func TestCheckSchema(t *testing.T) {
	e := newEnv(t)
	dst := e.open(t)
	ctx := t.Context()
	cfg := sink.WriterConfig{Pipeline: "schema", Streams: []sink.StreamSpec{{Stream: "s", Table: "s"}}}
	rec := batch(t, row{id: 1, value: "one", seq: 1})
	commit(t, dst, cfg, 1, 1, nil, rec)
	if got, err := dst.CheckSchema(ctx, "s", rec.Schema()); err != nil || len(got) != 0 {
		t.Errorf("CheckSchema of the table's own schema = %v, %v", got, err)
	}
	fields := rec.Schema().Fields()
	fields[0] = arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Float64}
	fields = append(fields, arrow.Field{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true})
	if got, err := dst.CheckSchema(ctx, "s", arrow.NewSchema(fields, nil)); err != nil || len(got) != 0 {
		t.Errorf("CheckSchema with id widened to float64 and a new column = %v, %v; want both taken", got, err)
	}
	fields[1] = arrow.Field{Name: "value", Type: arrow.PrimitiveTypes.Int64, Nullable: true}
	got, err := dst.CheckSchema(ctx, "s", arrow.NewSchema(fields, nil))
	if err != nil || len(got) != 1 || got[0].Column != "value" || !strings.Contains(got[0].Reason, "bigint") {
		t.Errorf("CheckSchema with value as int64 = %v, %v; want value rejected (text, now bigint)", got, err)
	}
	lists := arrow.NewSchema([]arrow.Field{
		{Name: "ints", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: "docs", Type: arrow.ListOf(arrow.StructOf(arrow.Field{Name: "a", Type: arrow.BinaryTypes.String})), Nullable: true},
	}, nil)
	if got, err := dst.CheckSchema(ctx, "s", lists); err != nil || len(got) != 1 || got[0].Column != "docs" {
		t.Errorf("CheckSchema of a list of int32 and a list of structs = %v, %v; want docs rejected", got, err)
	}
}

// The engine's widenings are applied in place: a bigint column becomes
// double precision, then text, with the rows of every epoch there; an
// epoch staged before the widening and committed after it lands too.
func TestWiden(t *testing.T) {
	e := newEnv(t)
	dst := e.open(t)
	ctx := t.Context()
	one := func(typ arrow.DataType, k int64, appendN func(array.Builder)) arrow.RecordBatch {
		sc := arrow.NewSchema([]arrow.Field{
			{Name: "k", Type: arrow.PrimitiveTypes.Int64},
			{Name: "n", Type: typ, Nullable: true},
			{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
			{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
			{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
		}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(k)
		appendN(b.Field(1))
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprint("id-", k))
		b.Field(3).(*array.StringBuilder).Append(sink.OpInsert)
		b.Field(4).(*array.Int64Builder).Append(k)
		rec := b.NewRecordBatch()
		t.Cleanup(rec.Release)
		return rec
	}
	cfg := sink.WriterConfig{Pipeline: "widen", Streams: []sink.StreamSpec{{Stream: "w", Table: "w"}}}
	w, err := dst.Writer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	step := func(epoch uint64, rec arrow.RecordBatch, commit bool) sink.Committable {
		t.Helper()
		if rs, err := dst.CheckSchema(ctx, "w", rec.Schema()); err != nil || len(rs) != 0 {
			t.Fatalf("CheckSchema = %v, %v", rs, err)
		}
		if err := w.Write(ctx, "w", rec); err != nil {
			t.Fatal(err)
		}
		c, err := w.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := w.Commit(ctx, epoch, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	step(1, one(arrow.PrimitiveTypes.Int64, 1, func(b array.Builder) { b.(*array.Int64Builder).Append(7) }), true)
	c2 := step(2, one(arrow.PrimitiveTypes.Int64, 2, func(b array.Builder) { b.(*array.Int64Builder).Append(8) }), false)
	c3 := step(3, one(arrow.PrimitiveTypes.Float64, 3, func(b array.Builder) { b.(*array.Float64Builder).Append(2.5) }), false)
	for i, c := range []sink.Committable{c2, c3} {
		if err := w.Commit(ctx, uint64(i+2), []sink.Committable{c}); err != nil {
			t.Fatal(err)
		}
	}
	if got := psql(t, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = '`+e.schema+`.w'::regclass AND attname = 'n'`); got != "double precision" {
		t.Errorf("n is %s after the float64 epoch, want double precision", got)
	}
	step(4, one(arrow.BinaryTypes.String, 4, func(b array.Builder) { b.(*array.StringBuilder).Append("x") }), true)
	typ := psql(t, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = '`+e.schema+`.w'::regclass AND attname = 'n'`)
	if got := typ + ": " + psql(t, `SELECT string_agg(k || '=' || n, ', ' ORDER BY k) FROM `+e.schema+`.w`); got != "text: 1=7, 2=8, 3=2.5, 4=x" {
		t.Errorf("w = %q", got)
	}
}

// Dates and timestamps outside Postgres's range are quarantined
// (out_of_range), the rest written; the epoch commits.
func TestQuarantineRange(t *testing.T) {
	e := newEnv(t)
	dst := e.open(t)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}, Nullable: true},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	add := func(id int64, d arrow.Date32, ts arrow.Timestamp) {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.Date32Builder).Append(d)
		b.Field(2).(*array.TimestampBuilder).Append(ts)
		b.Field(3).(*array.StringBuilder).Append(fmt.Sprint("id-", id))
		b.Field(4).(*array.StringBuilder).Append(sink.OpInsert)
		b.Field(5).(*array.Int64Builder).Append(id)
	}
	add(1, 0, 0)                              // 1970-01-01: fine
	add(2, math.MaxInt32, 0)                  // a date after 5874897 AD
	add(3, 0, arrow.Timestamp(math.MaxInt64)) // seconds that overflow microseconds
	add(4, -2440588, -210866803200)           // 4713-11-24 BC, Julian day 0: the first day Postgres has
	add(5, 0, arrow.Timestamp(9224286393600)) // after 294276 AD
	rec := b.NewRecordBatch()
	defer rec.Release()
	cfg := sink.WriterConfig{Pipeline: "range", Streams: []sink.StreamSpec{{Stream: "r", Table: "r"}}}
	commit(t, dst, cfg, 1, 1, nil, rec)
	if got := psql(t, `SELECT string_agg(id || ' ' || d || ' ' || ts, ', ' ORDER BY id) FROM `+e.schema+`.r`); got != "1 1970-01-01 1970-01-01 00:00:00+00, 4 4714-11-24 BC 4714-11-24 00:00:00+00 BC" {
		t.Errorf("r = %q", got)
	}
	if got := psql(t, `SELECT string_agg(_openetl_seq || ' ' || column_name || ' ' || reason, ', ' ORDER BY _openetl_seq) FROM `+e.schema+`._openetl_quarantine`); got != "2 d out_of_range, 3 ts out_of_range, 5 ts out_of_range" {
		t.Errorf("quarantine = %q", got)
	}
}

// Destinations opened at once on a fresh schema (copies of a pipeline
// starting together) all open: the schemas, the registry, the cast
// function and the ledger table are created once.
func TestNewConcurrent(t *testing.T) {
	e := newEnv(t)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			d, err := postgres.New(t.Context(), postgres.Config{Pool: e.pool, Schema: e.schema})
			if err == nil {
				d.Close()
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

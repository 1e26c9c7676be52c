package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
)

// chSchema is the arrow-clickhouse input: arrow-parquet's columns that
// ClickHouse 18.16 can hold (its timestamp column needs DateTime64, 20.1+)
// plus the metadata columns the engine hands every writer.
var chSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "user_id", Type: arrow.PrimitiveTypes.Int32},
	{Name: "amount", Type: arrow.PrimitiveTypes.Float64},
	{Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "ok", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "event", Type: arrow.BinaryTypes.String},
	{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "day", Type: arrow.FixedWidthTypes.Date32},
	{Name: "ratio", Type: arrow.PrimitiveTypes.Float32},
	{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
	{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
	{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
	{Name: "_openetl_synced_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
}, nil)

// chPlainColumns is the plain table's DDL: the types the writer gives
// chSchema on 18.16 (doc.go's type map), without its _openetl_batch.
const chPlainColumns = `id Int64, user_id Int32, amount Float64, qty Nullable(Int64), ok UInt8, event String,
	note Nullable(String), day Date, ratio Float32, _openetl_id String, _openetl_op String, _openetl_seq Int64,
	_openetl_synced_at DateTime('UTC')`

// chBatches is arrowBatches for chSchema: a template batch, each batch
// written is the template with fresh id and _openetl_seq columns (both
// the ids 1..n).
type chBatches struct {
	template arrow.RecordBatch
	ids      *array.Int64Builder
	next, n  int64
}

func newCHBatches(n int64, batchRows int) *chBatches {
	b := array.NewRecordBuilder(memory.DefaultAllocator, chSchema)
	defer b.Release()
	now := arrow.Timestamp(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).UnixMicro())
	for i := range batchRows {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Int32Builder).Append(int32(i % 100_000))
		b.Field(2).(*array.Float64Builder).Append(float64(i%10_000) + 0.25)
		if i%10 == 0 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.Int64Builder).Append(int64(i % 50))
		}
		b.Field(4).(*array.BooleanBuilder).Append(i%3 != 0)
		b.Field(5).(*array.StringBuilder).Append([...]string{"view", "click", "purchase", "refund"}[i%4])
		if i%7 == 0 {
			b.Field(6).AppendNull()
		} else {
			b.Field(6).(*array.StringBuilder).Append(fmt.Sprintf("note %d lorem ipsum dolor sit amet", i))
		}
		b.Field(7).(*array.Date32Builder).Append(arrow.Date32(20_000 + i%3000))
		b.Field(8).(*array.Float32Builder).Append(float32(i%1000) / 8)
		b.Field(9).(*array.StringBuilder).Append(fmt.Sprintf("%032x", i))
		b.Field(10).(*array.StringBuilder).Append("insert")
		b.Field(11).(*array.Int64Builder).Append(int64(i))
		b.Field(12).(*array.TimestampBuilder).Append(now)
	}
	return &chBatches{template: b.NewRecordBatch(), ids: array.NewInt64Builder(memory.DefaultAllocator), n: n}
}

// batch returns the next batch (the caller releases it), nil after n rows.
func (c *chBatches) batch() arrow.RecordBatch {
	if c.next >= c.n {
		return nil
	}
	rows := min(c.template.NumRows(), c.n-c.next)
	c.ids.Reserve(int(rows))
	for i := range rows {
		c.ids.UnsafeAppend(c.next + i + 1)
	}
	c.next += rows
	id := c.ids.NewArray()
	defer id.Release()
	cols := make([]arrow.Array, c.template.NumCols())
	for i := range cols {
		if i == 0 || i == 11 {
			cols[i] = id
			continue
		}
		cols[i] = array.NewSlice(c.template.Column(i), 0, rows)
		defer cols[i].Release()
	}
	return array.NewRecordBatch(chSchema, cols, rows)
}

// chInserted is the server's InsertedRows counter (system.events): every
// row any INSERT handed a table, whatever its engine, so it counts what
// reached a Null table too.
func chInserted(ctx context.Context, conn driver.Conn) (int64, error) {
	var v uint64 // no row before the server's first insert: sum() gives 0
	err := conn.QueryRow(ctx, "SELECT sum(value) FROM system.events WHERE event = 'InsertedRows'").Scan(&v)
	return int64(v), err
}

// procCPUSeconds is the user + system CPU of the process whose pid is in
// pidFile, 0 when unknown (the server runs elsewhere).
func procCPUSeconds(pidFile string) float64 {
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
	if err != nil {
		return 0
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return float64(u+st) / 100 // USER_HZ
}

// arrowClickHouse writes n rows of identical Arrow batches into ClickHouse
// through sink/clickhouse's writer or, with -plain, through
// clickhouse-go's columnar batch insert alone (the Arrow columns turned
// into reused Go slices, one Send per -block rows: the ceiling).
//
// Into Null tables (the default: what is measured is the client, the
// protocol and the server's parsing, not storage), the writer's leg is
// Write and PreCommit, one epoch per -epoch rows, into its staging table
// made an Engine=Null one after a first one-batch epoch created it (its
// Commit needs the staged rows, so it is not run). The check is the
// server's InsertedRows counter over the timed section, in the JSON as
// check.count (it must be n). With -store both write into MergeTree
// tables, the writer with Commit (the copy into its table) after every
// PreCommit, and the JSON names the table for the script to read back
// with clickhouse-client.
func arrowClickHouse(args []string) (*result, error) {
	fs := flag.NewFlagSet("arrow-clickhouse", flag.ExitOnError)
	addr := fs.String("addr", os.Getenv("OPENETL_TEST_CLICKHOUSE_ADDR"), "native protocol host:port")
	db := fs.String("db", "openetl_bench", "database (dropped and created again)")
	n := fs.Int64("n", 1_000_000, "rows")
	batchRows := fs.Int("batch", 8192, "rows per Arrow batch")
	block := fs.Int("block", clickhouse.DefaultBlockRows, "rows per insert block (the writer's BlockRows)")
	epoch := fs.Int64("epoch", 1_000_000, "rows per epoch (the writer's PreCommit)")
	plain := fs.Bool("plain", false, "clickhouse-go's columnar batch insert alone (the ceiling)")
	store := fs.Bool("store", false, "MergeTree tables instead of Null ones (and the writer's Commit)")
	_ = fs.Parse(args)
	if *addr == "" {
		return nil, fmt.Errorf("-addr (or OPENETL_TEST_CLICKHOUSE_ADDR) is required")
	}
	ctx := context.Background()
	conn, err := ch.Open(&ch.Options{Addr: []string{*addr}, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + *db, "CREATE DATABASE " + *db} {
		if err := conn.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	in := newCHBatches(*n, *batchRows)
	defer in.template.Release()
	serverPID := filepath.Join(os.Getenv("OPENETL_SERVERS_DIR"), "clickhouse.pid")
	var r *result
	var table string
	var before int64
	var server0 float64
	if *plain {
		engine := "Null"
		if *store {
			engine = "MergeTree ORDER BY _openetl_seq"
		}
		table = *db + ".plain"
		if err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (%s) ENGINE = %s", table, chPlainColumns, engine)); err != nil {
			return nil, err
		}
		if before, err = chInserted(ctx, conn); err != nil {
			return nil, err
		}
		server0 = procCPUSeconds(serverPID)
		t := startTimer()
		if err := plainInsert(ctx, conn, table, in, *block); err != nil {
			return nil, err
		}
		r = t.stop(*n)
	} else {
		table = *db + ".events"
		dst, err := clickhouse.New(ctx, clickhouse.Config{Conn: conn, Database: *db, BlockRows: *block})
		if err != nil {
			return nil, err
		}
		w, err := dst.Writer(ctx, sink.WriterConfig{Pipeline: "bench-ch"})
		if err != nil {
			return nil, err
		}
		defer w.Close(ctx)
		if _, err := w.Recover(ctx, 1, nil); err != nil {
			return nil, err
		}
		ep := uint64(1)
		if !*store {
			// Epoch 1 creates the tables from one batch of ids past n,
			// then the staging table becomes a Null one.
			warm := newCHBatches(int64(*batchRows), *batchRows)
			rec := warm.batch()
			err := w.Write(ctx, "events", rec)
			rec.Release()
			warm.template.Release()
			if err != nil {
				return nil, err
			}
			if _, err := w.PreCommit(ctx, ep); err != nil {
				return nil, err
			}
			ep++
			st, tmp := *db+"._openetl_stage_events", *db+".bench_null_stage"
			for _, q := range []string{fmt.Sprintf("CREATE TABLE %s AS %s ENGINE = Null", tmp, st), "DROP TABLE " + st,
				fmt.Sprintf("RENAME TABLE %s TO %s", tmp, st)} {
				if err := conn.Exec(ctx, q); err != nil {
					return nil, err
				}
			}
		}
		if before, err = chInserted(ctx, conn); err != nil {
			return nil, err
		}
		server0 = procCPUSeconds(serverPID)
		t := startTimer()
		var inEpoch int64
		end := func() error {
			c, err := w.PreCommit(ctx, ep)
			if err != nil {
				return err
			}
			if *store {
				if err := w.Commit(ctx, ep, []sink.Committable{c}); err != nil {
					return err
				}
			}
			ep++
			inEpoch = 0
			return nil
		}
		for rec := in.batch(); rec != nil; rec = in.batch() {
			inEpoch += rec.NumRows()
			err := w.Write(ctx, "events", rec)
			rec.Release()
			if err != nil {
				return nil, err
			}
			if inEpoch >= *epoch {
				if err := end(); err != nil {
					return nil, err
				}
			}
		}
		if inEpoch > 0 {
			if err := end(); err != nil {
				return nil, err
			}
		}
		r = t.stop(*n)
	}
	after, err := chInserted(ctx, conn)
	if err != nil {
		return nil, err
	}
	server := procCPUSeconds(serverPID) - server0
	r.Note = fmt.Sprintf("server InsertedRows +%d; server CPU %.2f s (%.2f s per M rows)", after-before, server, server/float64(*n)*1e6)
	r.Server = &chServer{Inserted: after - before, CPU: server, Table: table}
	return r, nil
}

// chServer is what the server saw of a run: rows its INSERTs handed to
// tables (InsertedRows; with -store the writer's Commit copies each row
// once more, from staging into the table), its CPU seconds, and the
// table the rows are in.
type chServer struct {
	Inserted int64   `json:"inserted_rows"`
	CPU      float64 `json:"cpu_seconds"`
	Table    string  `json:"table"`
}

// plainInsert is the ceiling: one clickhouse-go batch per block of at
// least block rows (whole Arrow batches, like the writer), each Arrow
// column appended as a Go slice; the slices are reused across batches.
func plainInsert(ctx context.Context, conn driver.Conn, table string, in *chBatches, block int) error {
	insert := "INSERT INTO " + table + " (id, user_id, amount, qty, ok, event, note, day, ratio, _openetl_id, _openetl_op, _openetl_seq, _openetl_synced_at)"
	var (
		qty         []*int64
		ok          []uint8
		event, note []string
		notes       []*string
		days, times []time.Time
		ids, ops    []string
	)
	grow := func(n int) {
		if cap(qty) < n {
			qty, ok, event, note, notes = make([]*int64, n), make([]uint8, n), make([]string, n), make([]string, n), make([]*string, n)
			days, times, ids, ops = make([]time.Time, n), make([]time.Time, n), make([]string, n), make([]string, n)
		}
		qty, ok, event, note, notes = qty[:n], ok[:n], event[:n], note[:n], notes[:n]
		days, times, ids, ops = days[:n], times[:n], ids[:n], ops[:n]
	}
	var batch driver.Batch
	rows := 0
	for rec := in.batch(); rec != nil; rec = in.batch() {
		if batch == nil {
			var err error
			if batch, err = conn.PrepareBatch(ctx, insert); err != nil {
				rec.Release()
				return err
			}
		}
		n := int(rec.NumRows())
		grow(n)
		qc, oc, ec, nc := rec.Column(3).(*array.Int64), rec.Column(4).(*array.Boolean), rec.Column(5).(*array.String), rec.Column(6).(*array.String)
		dc, ic, opc, tc := rec.Column(7).(*array.Date32), rec.Column(9).(*array.String), rec.Column(10).(*array.String), rec.Column(12).(*array.Timestamp)
		qv := qc.Int64Values()
		for i := range n {
			qty[i] = nil
			if qc.IsValid(i) {
				qty[i] = &qv[i]
			}
			ok[i] = 0
			if oc.Value(i) {
				ok[i] = 1
			}
			event[i] = ec.Value(i)
			notes[i] = nil
			if nc.IsValid(i) {
				note[i] = nc.Value(i)
				notes[i] = &note[i]
			}
			days[i] = dc.Value(i).ToTime()
			ids[i], ops[i] = ic.Value(i), opc.Value(i)
			times[i] = time.UnixMicro(int64(tc.Value(i))).UTC()
		}
		cols := []any{rec.Column(0).(*array.Int64).Int64Values(), rec.Column(1).(*array.Int32).Int32Values(),
			rec.Column(2).(*array.Float64).Float64Values(), qty, ok, event, notes, days,
			rec.Column(8).(*array.Float32).Float32Values(), ids, ops, rec.Column(11).(*array.Int64).Int64Values(), times}
		for j, v := range cols {
			if err := batch.Column(j).Append(v); err != nil {
				rec.Release()
				return fmt.Errorf("column %d: %w", j, err)
			}
		}
		rec.Release()
		rows += n
		if rows >= block {
			if err := batch.Send(); err != nil {
				return err
			}
			batch, rows = nil, 0
		}
	}
	if batch != nil {
		return batch.Send()
	}
	return nil
}

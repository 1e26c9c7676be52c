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

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
)

// pgArrowSchema is the arrow-postgres input: arrow-parquet's 10 columns
// and the metadata columns the engine hands every writer.
var pgArrowSchema = arrow.NewSchema(append(append([]arrow.Field(nil), arrowSchema.Fields()...),
	arrow.Field{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
	arrow.Field{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
	arrow.Field{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
	arrow.Field{Name: sink.ColumnSyncedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
), nil)

// pgPlainColumns is the plain table's DDL: the types sink/postgres gives
// pgArrowSchema (its package doc's type map).
const pgPlainColumns = `id bigint, user_id integer, amount double precision, qty bigint, ok boolean, event text, note text,
	ts timestamp with time zone, day date, ratio real, _openetl_id text, _openetl_op text, _openetl_seq bigint,
	_openetl_synced_at timestamp with time zone`

// pgBatches is arrowBatches with the metadata columns: each batch is a
// template with fresh id and _openetl_seq columns (both the ids 1..n).
type pgBatches struct {
	template arrow.RecordBatch
	ids      *array.Int64Builder
	next, n  int64
}

func newPGBatches(n int64, batchRows int) *pgBatches {
	in := newArrowBatches(int64(batchRows), batchRows)
	defer in.template.Release()
	base := in.batch()
	defer base.Release()
	meta := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(pgArrowSchema.Fields()[10:], nil))
	defer meta.Release()
	now := arrow.Timestamp(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	for i := range batchRows {
		meta.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("%032x", i))
		meta.Field(1).(*array.StringBuilder).Append(sink.OpInsert)
		meta.Field(2).(*array.Int64Builder).Append(int64(i))
		meta.Field(3).(*array.TimestampBuilder).Append(now)
	}
	m := meta.NewRecordBatch()
	defer m.Release()
	cols := append(append([]arrow.Array(nil), base.Columns()...), m.Columns()...)
	return &pgBatches{template: array.NewRecordBatch(pgArrowSchema, cols, int64(batchRows)),
		ids: array.NewInt64Builder(memory.DefaultAllocator), n: n}
}

// batch returns the next batch (the caller releases it), nil after n rows.
func (p *pgBatches) batch() arrow.RecordBatch {
	if p.next >= p.n {
		return nil
	}
	rows := min(p.template.NumRows(), p.n-p.next)
	p.ids.Reserve(int(rows))
	for i := range rows {
		p.ids.UnsafeAppend(p.next + i + 1)
	}
	p.next += rows
	id := p.ids.NewArray()
	defer id.Release()
	cols := make([]arrow.Array, p.template.NumCols())
	for i := range cols {
		if i == 0 || i == 12 {
			cols[i] = id
			continue
		}
		cols[i] = array.NewSlice(p.template.Column(i), 0, rows)
		defer cols[i].Release()
	}
	return array.NewRecordBatch(pgArrowSchema, cols, rows)
}

// arrowPostgres writes n rows of identical Arrow batches into a table of
// a fresh schema through sink/postgres's writer (Write, PreCommit and
// Commit, one epoch per -epoch rows, each committed before the next is
// written: the whole path, no overlap), appended or merged by id; or,
// with -plain, through a bare pgx CopyFrom of the same rows into a
// logged table of the same types (the Arrow values handed to pgx as Go
// values, row by row: the ceiling). The JSON names the table, for the
// script to read back with psql, and the server's CPU seconds (its
// processes, from /proc, when its data directory is readable here).
func arrowPostgres(args []string) (*result, error) {
	fs := flag.NewFlagSet("arrow-postgres", flag.ExitOnError)
	dsn := fs.String("dsn", os.Getenv("OPENETL_TEST_POSTGRES_DSN"), "connection string")
	schema := fs.String("schema", "openetl_bench_pg", "schema (dropped and created again)")
	n := fs.Int64("n", 1_000_000, "rows")
	batchRows := fs.Int("batch", 10_000, "rows per Arrow batch")
	epoch := fs.Int64("epoch", 100_000, "rows per epoch (the writer's PreCommit and Commit)")
	mode := fs.String("mode", "append", "append or merge (by id)")
	plain := fs.Bool("plain", false, "pgx CopyFrom alone (the ceiling)")
	_ = fs.Parse(args)
	if *dsn == "" {
		return nil, fmt.Errorf("-dsn (or OPENETL_TEST_POSTGRES_DSN) is required")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	stg := "_openetl_staging_" + *schema
	for _, q := range []string{`DROP SCHEMA IF EXISTS ` + *schema + ` CASCADE`, `DROP SCHEMA IF EXISTS ` + stg + ` CASCADE`,
		`CREATE SCHEMA ` + *schema} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	server, err := pgServerCPU(ctx, pool)
	if err != nil {
		return nil, err
	}
	in := newPGBatches(*n, *batchRows)
	defer in.template.Release()
	table := *schema + ".events"
	var r *result
	var server0 float64
	if *plain {
		if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (`+pgPlainColumns+`)`); err != nil {
			return nil, err
		}
		names := make([]string, pgArrowSchema.NumFields())
		for i, f := range pgArrowSchema.Fields() {
			names[i] = f.Name
		}
		server0 = server()
		t := startTimer()
		src := &arrowRows{in: in}
		defer src.release()
		got, err := pool.CopyFrom(ctx, pgx.Identifier{*schema, "events"}, names, src)
		if err != nil {
			return nil, err
		}
		if got != *n {
			return nil, fmt.Errorf("CopyFrom took %d rows of %d", got, *n)
		}
		r = t.stop(*n)
	} else {
		dst, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: *schema})
		if err != nil {
			return nil, err
		}
		defer dst.Close()
		spec := sink.StreamSpec{Stream: "events", Table: "events"}
		switch *mode {
		case "append":
		case "merge":
			spec.Mode, spec.Key = sink.Merge, []string{"id"}
		default:
			return nil, fmt.Errorf("-mode is append or merge, not %q", *mode)
		}
		w, err := dst.Writer(ctx, sink.WriterConfig{Pipeline: "bench-pg", Streams: []sink.StreamSpec{spec}})
		if err != nil {
			return nil, err
		}
		defer w.Close(ctx)
		if _, err := w.Recover(ctx, 1, nil); err != nil {
			return nil, err
		}
		server0 = server()
		t := startTimer()
		ep, inEpoch := uint64(1), int64(0)
		end := func() error {
			c, err := w.PreCommit(ctx, ep)
			if err != nil {
				return err
			}
			if err := w.Commit(ctx, ep, []sink.Committable{c}); err != nil {
				return err
			}
			ep, inEpoch = ep+1, 0
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
	cpu := server() - server0
	r.Note = fmt.Sprintf("server CPU %.2f s (%.2f s per M rows)", cpu, cpu/float64(*n)*1e6)
	r.Server = &chServer{CPU: cpu, Table: table}
	return r, nil
}

// arrowRows hands pgBatches' rows to pgx.CopyFrom as Go values.
type arrowRows struct {
	in   *pgBatches
	rec  arrow.RecordBatch
	i    int
	vals []any
	err  error
}

func (a *arrowRows) Next() bool {
	a.i++
	if a.rec == nil || a.i >= int(a.rec.NumRows()) {
		a.release()
		if a.rec = a.in.batch(); a.rec == nil {
			return false
		}
		a.i = 0
	}
	return true
}

func (a *arrowRows) Values() ([]any, error) {
	if a.vals == nil {
		a.vals = make([]any, a.rec.NumCols())
	}
	for j, col := range a.rec.Columns() {
		if col.IsNull(a.i) {
			a.vals[j] = nil
			continue
		}
		switch c := col.(type) {
		case *array.Int64:
			a.vals[j] = c.Value(a.i)
		case *array.Int32:
			a.vals[j] = c.Value(a.i)
		case *array.Float64:
			a.vals[j] = c.Value(a.i)
		case *array.Float32:
			a.vals[j] = c.Value(a.i)
		case *array.Boolean:
			a.vals[j] = c.Value(a.i)
		case *array.String:
			a.vals[j] = c.Value(a.i)
		case *array.Timestamp:
			a.vals[j] = time.UnixMicro(int64(c.Value(a.i))).UTC()
		case *array.Date32:
			a.vals[j] = c.Value(a.i).ToTime()
		default:
			return nil, fmt.Errorf("column %d: %s", j, col.DataType())
		}
	}
	return a.vals, nil
}

func (a *arrowRows) Err() error { return a.err }

func (a *arrowRows) release() {
	if a.rec != nil {
		a.rec.Release()
		a.rec = nil
	}
}

// pgServerCPU returns a function reading the server's CPU seconds: its
// postmaster's own and reaped children's, and its live children's
// (backends, WAL writer, checkpointer, autovacuum), from /proc; always 0
// when the data directory is not readable here (a server elsewhere).
func pgServerCPU(ctx context.Context, pool *pgxpool.Pool) (func() float64, error) {
	var dir string
	if err := pool.QueryRow(ctx, `SHOW data_directory`).Scan(&dir); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return func() float64 { return 0 }, nil
	}
	pm, _, _ := strings.Cut(string(raw), "\n")
	stat := func(pid string) (ppid string, own, reaped int64) {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return "", 0, 0
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 15 {
			return "", 0, 0
		}
		v := func(i int) int64 { x, _ := strconv.ParseInt(f[i], 10, 64); return x }
		return f[1], v(11) + v(12), v(13) + v(14)
	}
	return func() float64 {
		_, own, reaped := stat(pm)
		total := own + reaped
		ents, _ := os.ReadDir("/proc")
		for _, d := range ents {
			if c := d.Name()[0]; c < '0' || c > '9' {
				continue
			}
			if ppid, own, _ := stat(d.Name()); ppid == pm {
				total += own
			}
		}
		return float64(total) / 100 // USER_HZ
	}, nil
}

package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
)

// BenchmarkVsCopyFrom times the writer's whole path (Write, PreCommit,
// Commit: 100k rows in 10k-row batches, 4 columns plus the metadata),
// appended, appended with Config.UnloggedStaging and merged, against a
// bare pgx CopyFrom of the same rows into a logged table of the same
// shape, on the test server: interleaved in each iteration (each in turn
// first), so that their ratios
// come from the same minutes of a shared machine. It reports rows/s, the
// client's CPU per row (getrusage) and, when the server runs on this
// machine, the server's (its processes' CPU from /proc), and the ratios:
// append/copy (goal >= 0.5) and merge/append (goal >= 0.5, within 2x),
// by wall time and by CPU per row, client and server together.
func BenchmarkVsCopyFrom(b *testing.B) {
	e := newEnv(b)
	dst := e.open(b)
	unlogged, err := postgres.New(context.Background(), postgres.Config{Pool: e.pool, Schema: e.schema, UnloggedStaging: true})
	if err != nil {
		b.Fatal(err)
	}
	defer unlogged.Close()
	recs, rows := benchBatches(b)
	ctx := context.Background()
	server := serverCPU(b, e)
	type total struct{ wall, client, server time.Duration }
	var copyT, appendT, unloggedT, mergeT total
	var allocs uint64
	run := func(t *total, f func()) {
		s0 := server() // first: reading /proc is not the run's CPU
		start, c0 := time.Now(), cpu()
		f()
		t.wall += time.Since(start)
		t.client += cpu() - c0
		t.server += server() - s0
	}
	writer := func(dst sink.Destination, table string, mode sink.Mode) func() {
		return func() {
			spec := sink.StreamSpec{Stream: "bench", Table: table, Mode: mode}
			if mode == sink.Merge {
				spec.Key = []string{"id"}
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			writeEpoch(b, dst, sink.WriterConfig{Pipeline: spec.Table, Streams: []sink.StreamSpec{spec}}, recs)
			runtime.ReadMemStats(&m1)
			allocs += m1.Mallocs - m0.Mallocs
		}
	}
	bare := func(i int) func() {
		return func() {
			table := fmt.Sprintf("copy_%d", i)
			if _, err := e.pool.Exec(ctx, `CREATE TABLE `+e.schema+`.`+table+` (id bigint, name text, amount double precision,
			at timestamptz, _openetl_id text, _openetl_op text, _openetl_seq bigint, _openetl_synced_at timestamptz)`); err != nil {
				b.Fatal(err)
			}
			cols := []string{"id", "name", "amount", "at", sink.ColumnID, sink.ColumnOp, sink.ColumnSeq, sink.ColumnSyncedAt}
			if n, err := e.pool.CopyFrom(ctx, pgx.Identifier{e.schema, table}, cols, pgx.CopyFromRows(rows)); err != nil || n != benchRows {
				b.Fatal(n, err)
			}
		}
	}
	for i := 0; b.Loop(); i++ {
		steps := []struct {
			t *total
			f func()
		}{{&copyT, bare(i)}, {&appendT, writer(dst, fmt.Sprint("append_", i), sink.Append)},
			{&unloggedT, writer(unlogged, fmt.Sprint("unlogged_", i), sink.Append)}, {&mergeT, writer(dst, fmt.Sprint("merge_", i), sink.Merge)}}
		for k := range steps {
			s := steps[(i+k)%len(steps)]
			run(s.t, s.f)
		}
	}
	n := float64(b.N) * benchRows
	rate := func(t total) float64 { return n / t.wall.Seconds() }
	perRow := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n }
	for _, v := range []struct {
		name string
		t    total
	}{{"copy", copyT}, {"append", appendT}, {"unlogged", unloggedT}, {"merge", mergeT}} {
		b.ReportMetric(rate(v.t), v.name+"-rows/s")
		b.ReportMetric(perRow(v.t.client), v.name+"-client-ns/row")
		b.ReportMetric(perRow(v.t.server), v.name+"-server-ns/row")
	}
	b.ReportMetric(rate(appendT)/rate(copyT), "append/copy")
	b.ReportMetric(rate(unloggedT)/rate(copyT), "unlogged/copy")
	b.ReportMetric(rate(mergeT)/rate(appendT), "merge/append")
	cpuOf := func(t total) float64 { return perRow(t.client + t.server) }
	b.ReportMetric(cpuOf(copyT)/cpuOf(appendT), "append/copy-by-cpu")
	b.ReportMetric(cpuOf(appendT)/cpuOf(mergeT), "merge/append-by-cpu")
	b.ReportMetric(float64(allocs)/(3*n), "writer-allocs/row")
	b.ReportMetric(0, "ns/op")
}

// writeEpoch writes recs as one epoch of a new writer and commits it.
func writeEpoch(b *testing.B, dst sink.Destination, cfg sink.WriterConfig, recs []arrow.RecordBatch) {
	ctx := context.Background()
	w, err := dst.Writer(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, checkpoint.Generation(1), nil); err != nil {
		b.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(ctx, cfg.Streams[0].Table, r); err != nil {
			b.Fatal(err)
		}
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		b.Fatal(err)
	}
}

const (
	benchRows  = 100000
	benchBatch = 10000
)

// benchBatches returns benchRows rows as Arrow batches, and as rows for
// CopyFrom.
func benchBatches(b *testing.B) ([]arrow.RecordBatch, [][]any) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnOp, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
		{Name: sink.ColumnSyncedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var recs []arrow.RecordBatch
	var rows [][]any
	for start := 0; start < benchRows; start += benchBatch {
		bld := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		for i := start; i < start+benchBatch; i++ {
			name, id := fmt.Sprintf("customer %08d", i), fmt.Sprintf("%016x", i*7919)
			ts := at.Add(time.Duration(i) * time.Second)
			bld.Field(0).(*array.Int64Builder).Append(int64(i))
			bld.Field(1).(*array.StringBuilder).Append(name)
			bld.Field(2).(*array.Float64Builder).Append(float64(i) / 100)
			bld.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
			bld.Field(4).(*array.StringBuilder).Append(id)
			bld.Field(5).(*array.StringBuilder).Append(sink.OpInsert)
			bld.Field(6).(*array.Int64Builder).Append(int64(i))
			bld.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(at.UnixMicro()))
			rows = append(rows, []any{int64(i), name, float64(i) / 100, ts, id, sink.OpInsert, int64(i), at})
		}
		recs = append(recs, bld.NewRecordBatch())
		bld.Release()
	}
	b.Cleanup(func() {
		for _, r := range recs {
			r.Release()
		}
	})
	return recs, rows
}

// cpu returns the process's user and system CPU time.
func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns a function that reads the test server's CPU time:
// its postmaster's, with that of the children it reaped, and its live
// children's (backends, WAL writer, checkpointer, autovacuum), from
// /proc; zero when the server's data directory is not readable here.
func serverCPU(b *testing.B, e *env) func() time.Duration {
	var dir string
	if err := e.pool.QueryRow(context.Background(), `SHOW data_directory`).Scan(&dir); err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		b.Logf("server CPU not measured: %v", err)
		return func() time.Duration { return 0 }
	}
	pm, _, _ := strings.Cut(string(raw), "\n")
	tick := time.Second / 100 // USER_HZ
	// stat returns a process's parent and its CPU ticks: own, and its
	// reaped children's.
	stat := func(pid string) (ppid string, own, reaped int64) {
		s, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return "", 0, 0
		}
		f := strings.Fields(string(s[strings.LastIndexByte(string(s), ')')+2:]))
		if len(f) < 17 {
			return "", 0, 0
		}
		n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
		return f[1], n(11) + n(12), n(13) + n(14)
	}
	return func() time.Duration {
		_, own, reaped := stat(pm)
		total := own + reaped
		ents, _ := os.ReadDir("/proc")
		for _, d := range ents {
			if d.Name()[0] < '0' || d.Name()[0] > '9' {
				continue
			}
			if ppid, own, _ := stat(d.Name()); ppid == pm {
				total += own
			}
		}
		return time.Duration(total) * tick
	}
}

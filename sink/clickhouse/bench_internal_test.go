package clickhouse

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
)

// Insert throughput from the same Arrow batches (8 batches of 12,500
// rows = 100,000 rows per op, 7 columns: the shape the engine hands a
// writer): this writer against clickhouse-go's plain columnar batch
// insert, both into Engine=Null tables, so that what is measured is the
// client, the protocol and the server's parsing, not storage. Reported:
// rows/s, and CPU-seconds per million rows of this process (client) and
// of the server (from /proc, when scripts/servers.sh started it).
//
//	go test -run '^$' -bench . ./sink/clickhouse

const (
	benchBatches   = 8
	benchBatchRows = 12_500
)

func benchBatchesOf(tb testing.TB) []arrow.RecordBatch {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: colID, Type: arrow.BinaryTypes.String},
		{Name: colOp, Type: arrow.BinaryTypes.String},
		{Name: colSeq, Type: arrow.PrimitiveTypes.Int64},
		{Name: colSyncedAt, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var out []arrow.RecordBatch
	for k := range benchBatches {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		for i := k * benchBatchRows; i < (k+1)*benchBatchRows; i++ {
			b.Field(0).(*array.Int64Builder).Append(int64(i))
			if i%10 == 0 {
				b.Field(1).AppendNull()
			} else {
				b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("customer number %d", i))
			}
			b.Field(2).(*array.Float64Builder).Append(float64(i) / 100)
			b.Field(3).(*array.StringBuilder).Append(fmt.Sprintf("%032x", i))
			b.Field(4).(*array.StringBuilder).Append("insert")
			b.Field(5).(*array.Int64Builder).Append(int64(i + 1))
			b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(now))
		}
		out = append(out, b.NewRecordBatch())
		b.Release()
	}
	tb.Cleanup(func() {
		for _, r := range out {
			r.Release()
		}
	})
	return out
}

// cpu returns this process's CPU time and the server's (0 when unknown).
func cpu() (self, server time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	dir := os.Getenv("OPENETL_SERVERS_DIR")
	if dir == "" {
		return self, 0
	}
	return self, pidCPU(filepath.Join(dir, "clickhouse.pid"))
}

// pidCPU is the CPU time of the process whose PID is in file (0 when
// unknown).
func pidCPU(file string) time.Duration {
	pid, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
	if err != nil {
		return 0
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ
}

func report(b *testing.B, rows int64, elapsed, self, server time.Duration) {
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(self.Seconds()/(float64(rows)/1e6), "client-cpu-s/Mrows")
	if server > 0 {
		b.ReportMetric(server.Seconds()/(float64(rows)/1e6), "server-cpu-s/Mrows")
	}
}

// BenchmarkPlainBatchInsert is the baseline: Arrow columns turned into Go
// slices and appended to a clickhouse-go batch, one Send per 100,000 rows,
// into an Engine=Null table.
func BenchmarkPlainBatchInsert(b *testing.B) { benchPlain(b, "Null") }

// BenchmarkPlainBatchInsertMergeTree is the same into a MergeTree ordered
// by _openetl_seq: what storing the rows once costs, to compare with
// BenchmarkWriterCommitted, which stores them twice (staging, then the
// table).
func BenchmarkPlainBatchInsertMergeTree(b *testing.B) {
	benchPlain(b, "MergeTree ORDER BY _openetl_seq")
}

func benchPlain(b *testing.B, engine string) {
	conn, db := testConn(b)
	ctx := context.Background()
	recs := benchBatchesOf(b)
	ddl := fmt.Sprintf("CREATE TABLE %s.plain (id Int64, name Nullable(String), amount Nullable(Float64), _openetl_id String, _openetl_op String, _openetl_seq Int64, _openetl_synced_at DateTime('UTC')) ENGINE = %s", db, engine)
	for _, q := range []string{createDatabase(db), ddl} {
		if err := conn.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	insert := fmt.Sprintf("INSERT INTO %s.plain (id, name, amount, _openetl_id, _openetl_op, _openetl_seq, _openetl_synced_at)", db)
	b.ResetTimer()
	s0, v0 := cpu()
	t0 := time.Now()
	for range b.N {
		batch, err := conn.PrepareBatch(ctx, insert)
		if err != nil {
			b.Fatal(err)
		}
		for _, rec := range recs {
			n := int(rec.NumRows())
			names := make([]*string, n)
			nameCol := rec.Column(1).(*array.String)
			vals := make([]string, n)
			for i := range n {
				if nameCol.IsValid(i) {
					vals[i] = nameCol.Value(i)
					names[i] = &vals[i]
				}
			}
			amounts := make([]*float64, n)
			av := rec.Column(2).(*array.Float64).Float64Values()
			for i := range n {
				amounts[i] = &av[i]
			}
			ids := make([]string, n)
			ops := make([]string, n)
			times := make([]time.Time, n)
			ic, oc, tc := rec.Column(3).(*array.String), rec.Column(4).(*array.String), rec.Column(6).(*array.Timestamp)
			for i := range n {
				ids[i], ops[i] = ic.Value(i), oc.Value(i)
				times[i] = time.UnixMicro(int64(tc.Value(i))).UTC()
			}
			for j, v := range []any{rec.Column(0).(*array.Int64).Int64Values(), names, amounts, ids, ops, rec.Column(5).(*array.Int64).Int64Values(), times} {
				if err := batch.Column(j).Append(v); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := batch.Send(); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(t0)
	s1, v1 := cpu()
	report(b, int64(b.N)*benchBatches*benchBatchRows, elapsed, s1-s0, v1-v0)
}

// BenchmarkWriter is this writer's Write and PreCommit of the same
// batches, one epoch per op (its staging table swapped for an Engine=Null
// one, so that it stores nothing either). It adds _openetl_batch, checks
// every value for quarantine, and sends one block per epoch.
func BenchmarkWriter(b *testing.B) {
	conn, db := testConn(b)
	ctx := context.Background()
	recs := benchBatchesOf(b)
	d, err := New(ctx, Config{Conn: conn, Database: db, BlockRows: benchBatches * benchBatchRows})
	if err != nil {
		b.Fatal(err)
	}
	sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "bench"})
	w := sw.(*writer)
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		b.Fatal(err)
	}
	// Create the tables, then make the staging table a Null one.
	if err := w.Write(ctx, "bench", recs[0]); err != nil {
		b.Fatal(err)
	}
	if _, err := w.PreCommit(ctx, 1); err != nil {
		b.Fatal(err)
	}
	st := qualified(db, stageName("bench"))
	tmp := qualified(db, "bench_null_stage")
	for _, q := range []string{fmt.Sprintf("CREATE TABLE %s AS %s ENGINE = Null", tmp, st), "DROP TABLE " + st, fmt.Sprintf("RENAME TABLE %s TO %s", tmp, st)} {
		if err := conn.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	s0, v0 := cpu()
	t0 := time.Now()
	for i := range b.N {
		for _, rec := range recs {
			if err := w.Write(ctx, "bench", rec); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := w.PreCommit(ctx, uint64(i)+2); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(t0)
	s1, v1 := cpu()
	report(b, int64(b.N)*benchBatches*benchBatchRows, elapsed, s1-s0, v1-v0)
}

// BenchmarkWriterCommitted is the whole path with real tables: Write and
// PreCommit into the MergeTree staging table, then Commit (the copy into
// the table as one part, the epoch record, the staging partition
// dropped). Compare with BenchmarkWriter for what staging costs.
func BenchmarkWriterCommitted(b *testing.B) {
	conn, db := testConn(b)
	ctx := context.Background()
	recs := benchBatchesOf(b)
	d, err := New(ctx, Config{Conn: conn, Database: db, BlockRows: benchBatches * benchBatchRows})
	if err != nil {
		b.Fatal(err)
	}
	sw, _ := d.Writer(ctx, sink.WriterConfig{Pipeline: "bench"})
	w := sw.(*writer)
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	s0, v0 := cpu()
	t0 := time.Now()
	for i := range b.N {
		for _, rec := range recs {
			if err := w.Write(ctx, "bench", rec); err != nil {
				b.Fatal(err)
			}
		}
		c, err := w.PreCommit(ctx, uint64(i)+1)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Commit(ctx, uint64(i)+1, []sink.Committable{c}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(t0)
	s1, v1 := cpu()
	report(b, int64(b.N)*benchBatches*benchBatchRows, elapsed, s1-s0, v1-v0)
}

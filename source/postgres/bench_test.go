package postgres_test

// Benchmarks of the source against the fastest a client can go on the
// same server (issue 5's "Measure"):
//
//	BenchmarkCDCCatchUp   draining N changes (inserts, updates, deletes in
//	                      transactions of 1–10k) from a slot, against a bare
//	                      pglogrepl receive-and-parse loop on the same WAL
//	BenchmarkSnapshot     a first Read's snapshot of an N-row, 16-column
//	                      table, against COPY ... TO STDOUT (FORMAT binary)
//	                      into io.Discard
//
// Both read into a null emitter (counts records, discards them) and
// report rows/s, CPU-seconds per million rows (getrusage of this process:
// the client side only; the server shares the machine) and peak RSS
// (VmHWM, reset through /proc/self/clear_refs before each run), and the
// ratio source/ceiling. Sizes (defaults are CI-sized, a few seconds):
//
//	-pg.cdc-changes N     or OPENETL_BENCH_PG_CDC_CHANGES   (default 20000; issue: 2000000)
//	-pg.snapshot-rows N   or OPENETL_BENCH_PG_SNAPSHOT_ROWS (default 50000; issue: 5000000)
//
//	env=$(scripts/servers.sh start postgres) && eval "$env"
//	OPENETL_BENCH_PG_CDC_CHANGES=2000000 OPENETL_BENCH_PG_SNAPSHOT_ROWS=5000000 \
//	  go test -run '^$' -bench . -benchtime 1x -timeout 60m ./source/postgres/
//	scripts/servers.sh stop

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

var (
	benchCDCChanges   = flag.Int("pg.cdc-changes", envInt("OPENETL_BENCH_PG_CDC_CHANGES", 20000), "changes drained by BenchmarkCDCCatchUp")
	benchSnapshotRows = flag.Int("pg.snapshot-rows", envInt("OPENETL_BENCH_PG_SNAPSHOT_ROWS", 50000), "rows read by BenchmarkSnapshot")
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// nullEmitter counts what a split emits and discards it.
type nullEmitter struct {
	records, bytes int64
	state          []byte
}

func (e *nullEmitter) Record(_ string, _ source.Op, _ int64, key, payload []byte) error {
	e.records++
	e.bytes += int64(len(key) + len(payload))
	return nil
}

func (e *nullEmitter) ResumePoint(st []byte) error {
	e.state = append(e.state[:0], st...)
	return nil
}

// readAllSplits opens the source and reads every split to its end
// (bounded), each on a goroutine of its own as the runner does. It
// returns the records and bytes emitted and each split's last state.
func readAllSplits(ctx context.Context, src *postgres.Source, streams []string, resume map[source.SplitID][]byte) (records, bytes int64, states map[source.SplitID][]byte, err error) {
	splits, err := src.Open(ctx, streams, resume)
	if err != nil {
		return 0, 0, nil, err
	}
	ems := make([]nullEmitter, len(splits))
	errs := make([]error, len(splits))
	var wg sync.WaitGroup
	for i, sp := range splits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sp.Read(ctx, &ems[i], true)
		}()
	}
	wg.Wait()
	states = map[source.SplitID][]byte{}
	for i, sp := range splits {
		if errs[i] != nil {
			return 0, 0, nil, fmt.Errorf("split %s: %w", sp.ID(), errs[i])
		}
		records += ems[i].records
		bytes += ems[i].bytes
		if ems[i].state != nil {
			states[sp.ID()] = ems[i].state
		}
	}
	return records, bytes, states, nil
}

// measurement is one timed run.
type measurement struct {
	rows   int64
	wall   time.Duration
	cpu    time.Duration // user + system of this process
	peakKB int64         // VmHWM
}

func (m measurement) rowsPerSec() float64 { return float64(m.rows) / m.wall.Seconds() }
func (m measurement) cpuPerMillion() float64 {
	return m.cpu.Seconds() / (float64(m.rows) / 1e6)
}

func (m measurement) String() string {
	return fmt.Sprintf("%d rows in %s: %.0f rows/s, %.3f CPU-s/M rows, peak RSS %.0f MB",
		m.rows, m.wall.Round(time.Millisecond), m.rowsPerSec(), m.cpuPerMillion(), float64(m.peakKB)/1024)
}

// measure runs f, which returns the rows it read, and times it.
func measure(b *testing.B, f func() (int64, error)) measurement {
	b.Helper()
	// Reset the peak RSS (Linux ≥ 4.0) so VmHWM is this run's.
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	var r0, r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	t0 := time.Now()
	rows, err := f()
	wall := time.Since(t0)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	if err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(r1.Utime.Nano()-r0.Utime.Nano()) + time.Duration(r1.Stime.Nano()-r0.Stime.Nano())
	return measurement{rows: rows, wall: wall, cpu: cpu, peakKB: vmHWM()}
}

// vmHWM returns the process's peak resident set in KiB, or 0.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// report adds the two sides' figures to the benchmark's output.
func report(b *testing.B, src, ceil measurement, ceilName string) {
	b.Helper()
	b.ReportMetric(src.rowsPerSec(), "rows/s")
	b.ReportMetric(ceil.rowsPerSec(), ceilName+"-rows/s")
	b.ReportMetric(src.rowsPerSec()/ceil.rowsPerSec(), "ratio")
	b.ReportMetric(src.cpuPerMillion(), "cpu-s/Mrows")
	b.ReportMetric(ceil.cpuPerMillion(), ceilName+"-cpu-s/Mrows")
	b.ReportMetric(float64(src.peakKB)/1024, "peak-MB")
	b.ReportMetric(float64(ceil.peakKB)/1024, ceilName+"-peak-MB")
	b.Logf("source:  %s", src)
	b.Logf("%-8s %s", ceilName+":", ceil)
	b.Logf("ratio source/%s: %.3f", ceilName, src.rowsPerSec()/ceil.rowsPerSec())
}

// benchDSN is dsn for benchmarks.
func benchDSN(b *testing.B) string {
	b.Helper()
	d := os.Getenv("OPENETL_TEST_POSTGRES_DSN")
	if d == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			b.Skip("OPENETL_TEST_POSTGRES_DSN is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		b.Fatal("OPENETL_TEST_POSTGRES_DSN is not set: start Postgres with scripts/servers.sh start postgres, or set OPENETL_SKIP_SERVERS=1")
	}
	return d
}

// benchExec runs SQL statements on a connection of its own.
func benchExec(b *testing.B, d string, sqls ...string) {
	b.Helper()
	ctx := context.Background()
	c, err := pgconn.Connect(ctx, d)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	for _, sql := range sqls {
		if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
			b.Fatalf("%s: %v", strings.SplitN(sql, "\n", 2)[0], err)
		}
	}
}

func benchQuery(b *testing.B, d, sql string) string {
	b.Helper()
	ctx := context.Background()
	c, err := pgconn.Connect(ctx, d)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	res, err := c.Exec(ctx, sql).ReadAll()
	if err != nil || len(res) == 0 || len(res[0].Rows) == 0 {
		b.Fatalf("%s: %v", sql, err)
	}
	return string(res[0].Rows[0][0])
}

// benchSnapTable makes (once: it is kept between runs, as it takes a
// while to fill at full size) an n-row, 16-column table and a
// publication of it.
func benchSnapTable(b *testing.B, d string, n int) (tbl, pub string) {
	tbl, pub = fmt.Sprintf("bench_snap_%d", n), fmt.Sprintf("bench_snap_pub_%d", n)
	if benchQuery(b, d, fmt.Sprintf("SELECT count(*) FROM pg_publication WHERE pubname = '%s'", pub)) == "0" {
		b.Logf("filling %s with %d rows", tbl, n)
		benchExec(b, d, "DROP TABLE IF EXISTS "+tbl,
			fmt.Sprintf(`CREATE TABLE %s (id int8 PRIMARY KEY, a int4, b int8, c float8, d numeric(12,2), e text,
	f bool, g timestamptz, h date, i uuid, j text, k int2, l float4, m varchar(32), n int8, o timestamp)`, tbl),
			fmt.Sprintf(`INSERT INTO %s SELECT g, g %% 100000, g::int8 * 7919, g / 7.0, (g %% 1000000) / 100.0,
	'customer ' || g, g %% 3 = 0, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
	date '2020-01-01' + (g %% 3000), md5(g::text)::uuid, repeat('x', g %% 40), (g %% 30000)::int2,
	(g %% 1000) / 8.0, 'status-' || (g %% 7), g::int8 * 31, timestamp '2024-06-01' + g * interval '1 millisecond'
	FROM generate_series(1, %d) g`, tbl, n),
			"VACUUM ANALYZE "+tbl,
			fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	}
	return tbl, pub
}

// copyBinary is the snapshot benchmarks' ceiling: COPY (FORMAT binary)
// of the table to io.Discard.
func copyBinary(ctx context.Context, d, tbl string) (int64, error) {
	c, err := pgconn.Connect(ctx, d)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	tag, err := c.CopyTo(ctx, io.Discard, "COPY "+tbl+" TO STDOUT (FORMAT binary)")
	return tag.RowsAffected(), err
}

// BenchmarkSnapshot: a first Read's snapshot phase of an N-row, 16-column
// table into a null emitter, against COPY (FORMAT binary) to io.Discard.
func BenchmarkSnapshot(b *testing.B) { benchSnapshotRead(b, "bench_snap", nil) }

// BenchmarkSnapshotHandedOver: the same table's snapshot read by the
// change stream, as a later attempt reads one its split had not
// checkpointed (in chunks of SnapshotChunkRows under watermarks, on the
// stream's connection), against the same COPY.
func BenchmarkSnapshotHandedOver(b *testing.B) {
	benchSnapshotRead(b, "bench_hand", func(ctx context.Context, src *postgres.Source, tbl, slot string) (map[source.SplitID][]byte, error) {
		// The attempt that makes the slot checkpoints the stream alone.
		splits, err := src.Open(ctx, []string{tbl}, nil)
		if err != nil {
			return nil, err
		}
		var first nullEmitter
		if err := splits[0].Read(ctx, &first, true); err != nil || splits[0].ID() != source.SplitID("slot:"+slot) {
			return nil, fmt.Errorf("the stream's first read (split %s): %v", splits[0].ID(), err)
		}
		return map[source.SplitID][]byte{splits[0].ID(): first.state}, nil
	})
}

// benchSnapshotRead measures, per iteration, COPY of the benchmark table
// and then a new source (slot prefix-...) reading all of its splits from
// the resume states prepare returns (not measured; nil: a fresh start).
func benchSnapshotRead(b *testing.B, prefix string,
	prepare func(ctx context.Context, src *postgres.Source, tbl, slot string) (map[source.SplitID][]byte, error)) {
	d := benchDSN(b)
	n := *benchSnapshotRows
	tbl, pub := benchSnapTable(b, d, n)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ceil := measure(b, func() (int64, error) { return copyBinary(ctx, d, tbl) })
		slot := fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, i)
		src, err := postgres.New(postgres.Config{DSN: d, Publication: pub, Slot: slot})
		if err != nil {
			b.Fatal(err)
		}
		var resume map[source.SplitID][]byte
		if prepare != nil {
			if resume, err = prepare(ctx, src, tbl, slot); err != nil {
				b.Fatal(err)
			}
		}
		m := measure(b, func() (int64, error) {
			recs, _, _, err := readAllSplits(ctx, src, []string{tbl}, resume)
			return recs, err
		})
		src.Close(ctx)
		benchExec(b, d, "SELECT pg_drop_replication_slot('"+slot+"')")
		if m.rows != int64(n) || ceil.rows != int64(n) {
			b.Fatalf("source read %d rows, COPY %d, want %d", m.rows, ceil.rows, n)
		}
		report(b, m, ceil, "copy")
	}
}

// BenchmarkCDCCatchUp: N changes in the slot, drained by the source (a
// Read from the resume state after an empty snapshot) into a null
// emitter, against a bare pglogrepl loop (START_REPLICATION,
// ParseXLogData, pglogrepl.Parse, a touch of every tuple's data) on the
// same slot from the same position. Neither side moves the slot, so every
// iteration drains the same WAL.
func BenchmarkCDCCatchUp(b *testing.B) {
	d := benchDSN(b)
	n := *benchCDCChanges
	tbl, pub, slot := name("bench_cdc"), name("bench_cdc_pub"), name("bench_cdc_slot")
	benchExec(b, d, fmt.Sprintf(`CREATE TABLE %s (id int8 PRIMARY KEY, a int4, b text, c float8, d timestamptz, e numeric(12,2))`, tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	b.Cleanup(func() {
		benchExec(b, d, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '"+slot+"' AND NOT active",
			"DROP PUBLICATION IF EXISTS "+pub, "DROP TABLE IF EXISTS "+tbl)
	})
	ctx := context.Background()
	cfg := postgres.Config{DSN: d, Publication: pub, Slot: slot}

	// An empty snapshot creates the slot and gives the resume states.
	src, err := postgres.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	_, _, resume, err := readAllSplits(ctx, src, []string{tbl}, nil)
	src.Close(ctx)
	if err != nil {
		b.Fatal(err)
	}
	startLSN, err := pglogrepl.ParseLSN(benchQuery(b, d, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '"+slot+"'"))
	if err != nil {
		b.Fatal(err)
	}

	// The changes: transactions of 1–10k changes (a fixed seed), each half
	// inserts, then deletes (a fifth) and updates (three tenths) of the
	// oldest live rows.
	t0 := time.Now()
	conn, err := pgconn.Connect(ctx, d)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	next, lo, txns := int64(1), int64(1), 0
	for done := 0; done < n; txns++ {
		k := min(1+rng.IntN(10000), n-done)
		upd, del := k*3/10, k/5
		ins := k - upd - del
		sql := fmt.Sprintf(`BEGIN;
INSERT INTO %[1]s SELECT g, g %% 1000, 'row ' || g, g / 3.0, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', (g %% 100000) / 100.0
FROM generate_series(%[2]d, %[3]d) g;
DELETE FROM %[1]s WHERE id >= %[4]d AND id < %[5]d;
UPDATE %[1]s SET a = a + 1, b = b || '!' WHERE id >= %[5]d AND id < %[6]d;
COMMIT`, tbl, next, next+int64(ins)-1, lo, lo+int64(del), lo+int64(del+upd))
		if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
			b.Fatal(err)
		}
		next += int64(ins)
		lo += int64(del)
		done += k
	}
	conn.Close(ctx)
	b.Logf("%d changes in %d transactions written in %s", n, txns, time.Since(t0).Round(time.Millisecond))

	b.ResetTimer()
	for b.Loop() {
		ceil := measure(b, func() (int64, error) { return bareReceiveLoop(ctx, d, slot, pub, startLSN, int64(n)) })
		src, err := postgres.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		m := measure(b, func() (int64, error) {
			recs, _, _, err := readAllSplits(ctx, src, []string{tbl}, resume)
			return recs, err
		})
		src.Close(ctx)
		if m.rows != int64(n) || ceil.rows != int64(n) {
			b.Fatalf("source read %d changes, the bare loop %d, want %d", m.rows, ceil.rows, n)
		}
		report(b, m, ceil, "ceiling")
		if lastWalsenderCPU > 0 {
			b.Logf("the ceiling's walsender (server side): %.3f CPU-s/M rows", lastWalsenderCPU.Seconds()/(float64(n)/1e6))
		}
	}
}

// lastWalsenderCPU is the CPU time the server's walsender for the last
// bareReceiveLoop had used (user + system), read from /proc when the
// server runs on this machine; 0 when unknown.
var lastWalsenderCPU time.Duration

// procCPU returns the user + system CPU time of process pid.
func procCPU(pid uint32) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the parenthesized command: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * time.Second / 100, true // USER_HZ is 100 on Linux
}

// bareReceiveLoop is the ceiling: it streams the slot from start with
// pgoutput v1 and parses every message, touching each tuple's values,
// until it has seen want changes and their transaction's commit. It
// confirms nothing past start.
func bareReceiveLoop(ctx context.Context, d, slot, pub string, start pglogrepl.LSN, want int64) (int64, error) {
	cfg, err := pgconn.ParseConfig(d)
	if err != nil {
		return 0, err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	if err := pglogrepl.StartReplication(ctx, conn, slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"},
	}); err != nil {
		return 0, err
	}
	var changes, touched int64
	touch := func(tup *pglogrepl.TupleData) {
		if tup == nil {
			return
		}
		for _, c := range tup.Columns {
			touched += int64(len(c.Data))
		}
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return changes, err
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			if er, ok := msg.(*pgproto3.ErrorResponse); ok {
				return changes, pgconn.ErrorResponseToPgError(er)
			}
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return changes, err
			}
			if ka.ReplyRequested {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
					WALWritePosition: start, WALFlushPosition: start, WALApplyPosition: start, ClientTime: time.Now(),
				}); err != nil {
					return changes, err
				}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return changes, err
			}
			m, err := pglogrepl.Parse(xld.WALData)
			if err != nil {
				return changes, err
			}
			switch m := m.(type) {
			case *pglogrepl.InsertMessage:
				changes++
				touch(m.Tuple)
			case *pglogrepl.UpdateMessage:
				changes++
				touch(m.OldTuple)
				touch(m.NewTuple)
			case *pglogrepl.DeleteMessage:
				changes++
				touch(m.OldTuple)
			case *pglogrepl.CommitMessage:
				if changes >= want {
					if touched == 0 {
						return changes, fmt.Errorf("no tuple data")
					}
					if cpu, ok := procCPU(conn.PID()); ok {
						lastWalsenderCPU = cpu
					}
					return changes, nil
				}
			}
		}
	}
}

package mysql_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source/mysql"
)

// nullDest is a destination that drops what it is given.
type nullDest struct{}

func (nullDest) Class() sink.Class               { return sink.StageAndApply }
func (nullDest) Capabilities() sink.Capabilities { return sink.Capabilities{} }
func (nullDest) Writer(context.Context, sink.WriterConfig) (sink.Writer, error) {
	return nullWriter{}, nil
}

type nullWriter struct{}

func (nullWriter) Write(context.Context, string, arrow.RecordBatch) error { return nil }
func (nullWriter) PreCommit(context.Context, uint64) (sink.Committable, error) {
	return sink.Committable("x"), nil
}
func (nullWriter) Commit(context.Context, uint64, []sink.Committable) error { return nil }
func (nullWriter) Recover(context.Context, checkpoint.Generation, *checkpoint.Record) (sink.Outcome, error) {
	return sink.Applied, nil
}
func (nullWriter) Close(context.Context) error          { return nil }
func (nullWriter) Finish(context.Context, uint64) error { return nil }

// benchChanges is how many row changes the catch-up reads: half
// inserts, half updates, in transactions of 100k rows.
var benchChanges = 2_000_000

func nullSync(b testing.TB, d, db, ckpt string) etl.Result {
	src, err := mysql.New(mysql.Config{DSN: d, Database: db})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close(context.Background())
	store, err := checkpoint.OpenDir(ckpt)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close(context.Background())
	p, err := etl.NewPipeline("bench").From(src).To(nullDest{}).Checkpoints(store).Build()
	if err != nil {
		b.Fatal(err)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// ceilingLoop reads the binlog from start to end with a bare
// BinlogSyncer that only decodes the events (rows included), and
// returns the rows it decoded. With raw, it does not even parse them
// (the transfer alone), and returns 0.
func ceilingLoop(b testing.TB, d string, start, end gomysql.Position, raw bool) int {
	user, rest, _ := strings.Cut(d, "@")
	u, p, _ := strings.Cut(user, ":")
	addr, _, _ := strings.Cut(rest, "/")
	host, port, _ := strings.Cut(addr, ":")
	pn, _ := strconv.Atoi(port)
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: 4000000001, Flavor: "mariadb", Host: host, Port: uint16(pn),
		User: u, Password: p, TimestampStringLocation: time.UTC, DisableRetrySync: true, DiscardGTIDSet: true,
		Logger: slog.New(slog.DiscardHandler), RawModeEnabled: raw})
	defer syncer.Close()
	st, err := syncer.StartSync(start)
	if err != nil {
		b.Fatal(err)
	}
	rows := 0
	file := start.Name
	for {
		ev, err := st.GetEvent(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		switch e := ev.Event.(type) {
		case *replication.RowsEvent:
			rows += len(e.Rows)
			if e.Type() == replication.EnumRowsEventTypeUpdate {
				rows -= len(e.Rows) / 2
			}
		case *replication.RotateEvent:
			file = string(e.NextLogName)
		case *replication.GenericEvent:
			if ev.Header.EventType == replication.ROTATE_EVENT {
				file = string(e.Data[8:])
			}
		}
		if file == end.Name && ev.Header.LogPos >= end.Pos {
			return rows
		}
	}
}

// BenchmarkCatchUp measures, in one run, a binlog catch-up of 2M row
// changes (1M inserts, 1M updates of a 6-column table) through the
// source, the runner and the engine into a null writer, against a bare
// BinlogSyncer loop that only decodes the same events with go-mysql's
// decoder (the ceiling the issue names) and against go-mysql's canal with
// a no-op handler (bench/mysqlcanal, a module of its own: canal pulls in
// the TiDB parser; built here with the go command, run as a child
// process that measures itself), and reports the bare transfer (events
// not even parsed) for scale. The source decodes rows itself (decode.go),
// so it can beat that ceiling. OPENETL_BENCH_CANAL=off leaves canal out.
//
//	go test -run '^$' -bench CatchUp -benchtime 1x ./source/mysql
func BenchmarkCatchUp(b *testing.B) {
	d := dsn(b)
	if v := os.Getenv("OPENETL_BENCH_CHANGES"); v != "" {
		benchChanges, _ = strconv.Atoi(v)
	}
	db := database(b, d)
	execSQL(b, d, fmt.Sprintf(`CREATE TABLE %s.bench (id bigint PRIMARY KEY, a int, b varchar(40), c decimal(12,2),
		d datetime(6), e double)`, db))
	// The pipeline's first sync: an empty snapshot; its checkpoints are
	// the template every timed run starts from.
	tmpl := filepath.Join(b.TempDir(), "template")
	nullSync(b, d, db, tmpl)
	startRow := queryRows(b, d, "SHOW MASTER STATUS")[0]
	half := benchChanges / 2
	const chunk = 100_000
	var sqls []string
	for lo := 1; lo <= half; lo += chunk {
		hi := min(lo+chunk-1, half)
		sqls = append(sqls, fmt.Sprintf(`INSERT INTO %[1]s.bench SELECT seq, seq %% 1000, concat('customer ', seq), seq / 100,
			'2024-01-02 03:04:05.123456' + INTERVAL seq SECOND, seq / 7 FROM %[1]s.seq_%[2]d_to_%[3]d`, db, lo, hi))
	}
	for lo := 1; lo <= half; lo += chunk {
		sqls = append(sqls, fmt.Sprintf("UPDATE %s.bench SET a = a + 1, b = concat(b, '+') WHERE id BETWEEN %d AND %d", db, lo, lo+chunk-1))
	}
	t0 := time.Now()
	execSQL(b, d, sqls...)
	endRow := queryRows(b, d, "SHOW MASTER STATUS")[0]
	b.Logf("wrote %d row changes in %v; binlog %s:%s to %s:%s", 2*half, time.Since(t0), startRow[0], startRow[1], endRow[0], endRow[1])
	sp, _ := strconv.Atoi(startRow[1])
	ep, _ := strconv.Atoi(endRow[1])
	start := gomysql.Position{Name: startRow[0], Pos: uint32(sp)}
	end := gomysql.Position{Name: endRow[0], Pos: uint32(ep)}

	pipeline := func() {
		dir := filepath.Join(b.TempDir(), "run")
		if err := copyDir(tmpl, dir); err != nil {
			b.Fatal(err)
		}
		if got := nullSync(b, d, db, dir).Streams["bench"].Read; got != int64(2*half) {
			b.Fatalf("pipeline read %d changes, want %d", got, 2*half)
		}
	}
	ceiling := func() {
		if got := ceilingLoop(b, d, start, end, false); got != 2*half {
			b.Fatalf("ceiling decoded %d changes, want %d", got, 2*half)
		}
	}
	canalBin := ""
	if os.Getenv("OPENETL_BENCH_CANAL") != "off" {
		canalBin = filepath.Join(b.TempDir(), "mysqlcanal")
		build := exec.Command("go", "build", "-o", canalBin, ".")
		build.Dir = filepath.Join("..", "..", "bench", "mysqlcanal")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("build bench/mysqlcanal (OPENETL_BENCH_CANAL=off leaves it out): %v\n%s", err, out)
		}
	}
	canal := func() (wall, cpu time.Duration) {
		user, rest, _ := strings.Cut(d, "@")
		u, p, _ := strings.Cut(user, ":")
		addr, _, _ := strings.Cut(rest, "/")
		cmd := exec.Command(canalBin, "-addr", addr, "-user", u, "-password", p, "-table", db+".bench",
			"-from", fmt.Sprintf("%s:%d", start.Name, start.Pos), "-to", fmt.Sprintf("%s:%d", end.Name, end.Pos),
			"-want", strconv.Itoa(2*half))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("mysqlcanal: %v", err)
		}
		var res struct {
			Seconds    float64 `json:"seconds"`
			CPUSeconds float64 `json:"cpu_seconds"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			b.Fatalf("mysqlcanal output %q: %v", out, err)
		}
		return time.Duration(res.Seconds * float64(time.Second)), time.Duration(res.CPUSeconds * float64(time.Second))
	}
	ceiling() // warm up both (the binlog into the page cache)
	if f := os.Getenv("OPENETL_BENCH_PIPELINE_PROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		pprof.StartCPUProfile(out)
		pipeline()
		pprof.StopCPUProfile()
		out.Close()
	} else {
		pipeline()
	}
	// Wall time, and this process's CPU time (all threads, the engine's
	// included): on a machine shared with other work the CPU ratio is the
	// steadier of the two.
	var tc, tp, cc, cp, tr, tk, ck time.Duration
	b.ResetTimer()
	for range b.N {
		c0, t0 := cpuTime(), time.Now()
		ceiling()
		c1, t1 := cpuTime(), time.Now()
		pipeline()
		tc, tp = tc+t1.Sub(t0), tp+time.Since(t1)
		cc, cp = cc+c1-c0, cp+cpuTime()-c1
		t2 := time.Now()
		ceilingLoop(b, d, start, end, true)
		tr += time.Since(t2)
		if canalBin != "" {
			w, c := canal()
			tk, ck = tk+w, ck+c
		}
	}
	n := float64(2 * half * b.N)
	b.ReportMetric(n/tr.Seconds(), "transfer-rows/s")
	b.ReportMetric(n/tc.Seconds(), "ceiling-rows/s")
	b.ReportMetric(n/tp.Seconds(), "pipeline-rows/s")
	b.ReportMetric(tc.Seconds()/tp.Seconds(), "ratio")
	b.ReportMetric(n/cc.Seconds(), "ceiling-rows/cpu-s")
	b.ReportMetric(n/cp.Seconds(), "pipeline-rows/cpu-s")
	b.ReportMetric(cc.Seconds()/cp.Seconds(), "cpu-ratio")
	if canalBin != "" {
		b.ReportMetric(n/tk.Seconds(), "canal-rows/s")
		b.ReportMetric(n/ck.Seconds(), "canal-rows/cpu-s")
		b.ReportMetric(tc.Seconds()/tk.Seconds(), "canal-ratio")
		b.ReportMetric(cc.Seconds()/ck.Seconds(), "canal-cpu-ratio")
	}
}

// cpuTime is the CPU time this process used so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// copyDir copies a checkpoint directory.
func copyDir(from, to string) error {
	return filepath.WalkDir(from, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if e.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

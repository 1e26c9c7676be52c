package iceberg_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// BenchmarkMergeDeletes measures the second epoch of a table of benchRows
// rows (the first epoch inserts them, untimed): benchRows rows, 30% of
// them updates of random existing keys and 70% new keys, written by one
// lane (Write, PreCommit, Commit), as append (the same rows appended), as
// merge with position deletes (warm: the writer that committed the first
// epoch, its key index current; cold: a new writer, as after a restart,
// which builds the index from the table first) and as merge with equality
// deletes, and as merge into a format v3 table (deletion vectors). It
// reports rows/s and CPU-seconds per million rows of the
// timed epoch (user+sys of the process) and, with OPENETL_PYTHON set
// (scripts/test-tools.sh), how long pyiceberg's scan and DuckDB's
// iceberg_scan take to read the result (read-s, duckdb-s; -1 where the
// reader refuses the table, as pyiceberg 0.12 does equality deletes),
// and how long the last key index build took (index-s: the cold
// writer's, of the table's first epoch).
func BenchmarkMergeDeletes(b *testing.B) {
	rows := benchRows()
	updates := rows * 3 / 10
	first := benchBatches(rows)
	rng := rand.New(rand.NewPCG(3, 4))
	perm := rng.Perm(rows)[:updates]
	upd := benchBatchesOf(updates, func(i int) int64 { return int64(perm[i]) }, "update", int64(rows)+1)
	ins := benchBatchesOf(rows-updates, func(i int) int64 { return int64(rows + i) }, "insert", int64(rows+updates)+1)
	second := append(append([]arrow.RecordBatch{}, upd...), ins...)
	defer func() {
		for _, r := range append(first, second...) {
			r.Release()
		}
	}()
	ctx := context.Background()
	for _, v := range []struct {
		name    string
		mode    sink.Mode
		deletes iceberg.MergeDeletes
		cold    bool
		format  string
	}{
		{"append", sink.Append, 0, false, ""},
		{"position", sink.Merge, iceberg.PositionDeletes, false, ""},
		{"position-cold", sink.Merge, iceberg.PositionDeletes, true, ""},
		{"equality", sink.Merge, iceberg.EqualityDeletes, false, ""},
		{"dv-v3", sink.Merge, iceberg.PositionDeletes, false, "3"},
	} {
		b.Run(v.name, func(b *testing.B) {
			var secs, cpu, readS, duckS, indexS float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				wh := newWarehouse(b)
				name := "orders"
				spec := sink.StreamSpec{Stream: name, Table: name, Mode: v.mode, Key: []string{"id"}}
				ih := &indexTook{}
				cfg := iceberg.Config{MergeDeletes: v.deletes, Logger: slog.New(ih)}
				if v.format != "" {
					cfg.Properties = map[string]string{"format-version": v.format}
				}
				var head *checkpoint.Record
				epoch := func(w sink.Writer, e uint64, recs []arrow.RecordBatch) {
					for _, r := range recs {
						if err := w.Write(ctx, name, r); err != nil {
							b.Fatal(err)
						}
					}
					c, err := w.PreCommit(ctx, e)
					if err != nil {
						b.Fatal(err)
					}
					if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
						b.Fatal(err)
					}
					head = &checkpoint.Record{Pipeline: "bench", Epoch: e, Generation: 1, Committables: [][]byte{c}}
				}
				open := func(gen uint64) sink.Writer {
					w, err := newDest(b, wh.cat, cfg).Writer(ctx, writerConfig("bench", 0, spec))
					if err != nil {
						b.Fatal(err)
					}
					if _, err := w.Recover(ctx, checkpoint.Generation(gen), head); err != nil {
						b.Fatal(err)
					}
					return w
				}
				w := open(1)
				epoch(w, 1, first)
				if v.cold {
					w.Close(ctx)
					w = open(2)
				}
				b.StartTimer()
				t0, c0 := time.Now(), cpuSeconds()
				epoch(w, 2, second)
				secs += time.Since(t0).Seconds()
				cpu += cpuSeconds() - c0
				indexS += ih.last.Seconds()
				b.StopTimer()
				w.Close(ctx)
				want := rows + rows - updates
				if v.mode == sink.Append {
					want = 2 * rows
				}
				// DuckDB 1.5.5 takes ~50 s for equality deletes at 100k
				// rows: at larger sizes it is left out (duckdb-s 0).
				duck := v.deletes != iceberg.EqualityDeletes || rows <= 100_000
				r, d := benchRead(b, wh, name, want, duck)
				readS += r
				duckS += d
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(float64(rows)*n/secs, "rows/s")
			b.ReportMetric(cpu/(float64(rows)*n/1e6), "cpu-s/Mrows")
			b.ReportMetric(readS/n, "read-s")
			b.ReportMetric(duckS/n, "duckdb-s")
			b.ReportMetric(indexS/n, "index-s")
		})
	}
}

// benchRead times pyiceberg's scan and DuckDB's iceberg_scan of table
// name (want rows), in one Python process (DuckDB unless !duck); 0
// without OPENETL_PYTHON (or DuckDB not asked), -1 for a reader that
// refuses the table.
func benchRead(b *testing.B, wh *warehouse, name string, want int, duck bool) (pyS, duckS float64) {
	py := os.Getenv("OPENETL_PYTHON")
	if py == "" {
		return 0, 0
	}
	script := `
import glob, json, os, sys, time
from pyiceberg.catalog.sql import SqlCatalog
db, wh, ident = sys.argv[1:4]
tbl = SqlCatalog("openetl", uri="sqlite:///" + db, warehouse=wh).load_table(ident)
out = {}
t0 = time.perf_counter()
try:
    out["rows"] = tbl.scan().to_arrow().num_rows
    out["py"] = time.perf_counter() - t0
except Exception as e:
    out["py"], out["py_err"] = -1, str(e)[:200]
if sys.argv[4] != "duck":
    print(json.dumps(out))
    sys.exit(0)
import duckdb
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute("SET autoload_known_extensions = false")
for ext in ("avro", "iceberg"):
    mod = __import__("duckdb_extension_" + ext)
    con.execute("LOAD '%s'" % glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", ext + ".duckdb_extension"))[0])
t0 = time.perf_counter()
try:
    out["duck_rows"] = con.execute("SELECT count(*) FROM iceberg_scan(?)", [tbl.metadata_location.removeprefix("file://")]).fetchone()[0]
    out["duck"] = time.perf_counter() - t0
except Exception as e:
    out["duck"], out["duck_err"] = -1, str(e)[:200]
print(json.dumps(out))
`
	cmd := exec.Command(py, "-c", script, wh.dbPath, "file://"+filepath.Join(wh.dir, "warehouse"), iceberg.DefaultNamespace+"."+name, map[bool]string{true: "duck", false: "-"}[duck])
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("read back: %v", err)
	}
	var res struct {
		Rows     int     `json:"rows"`
		DuckRows int     `json:"duck_rows"`
		Py       float64 `json:"py"`
		Duck     float64 `json:"duck"`
		PyErr    string  `json:"py_err"`
		DuckErr  string  `json:"duck_err"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("read back %q: %v", out, err)
	}
	if res.PyErr != "" || res.DuckErr != "" {
		b.Logf("%s: pyiceberg: %s; DuckDB: %s", name, res.PyErr, res.DuckErr)
	}
	if res.Py >= 0 && res.Rows != want {
		b.Errorf("pyiceberg read %d rows, want %d", res.Rows, want)
	}
	if duck && res.Duck >= 0 && res.DuckRows != want {
		b.Errorf("DuckDB read %d rows, want %d", res.DuckRows, want)
	}
	return res.Py, res.Duck
}

// indexTook is a slog.Handler that keeps how long the last key index
// build took (the "took" of its log record).
type indexTook struct{ last time.Duration }

func (h *indexTook) Enabled(context.Context, slog.Level) bool { return true }
func (h *indexTook) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "iceberg: key index built") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "took" {
				h.last = a.Value.Duration()
			}
			return true
		})
	}
	return nil
}
func (h *indexTook) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *indexTook) WithGroup(string) slog.Handler      { return h }

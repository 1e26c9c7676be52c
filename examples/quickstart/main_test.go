package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/faker"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quickstart-bin")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "quickstart")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building quickstart: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the quickstart to completion and returns its output.
func run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("quickstart %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

var summaryLine = regexp.MustCompile(`(?m)^\s+(\w+)\s+written\s+(\d+)\s+quarantined\s+(\d+)\s+\(read (\d+)\)`)

type counts struct{ written, quarantined, read int64 }

func summary(t *testing.T, out string) map[string]counts {
	t.Helper()
	res := map[string]counts{}
	for _, m := range summaryLine.FindAllStringSubmatch(out, -1) {
		w, _ := strconv.ParseInt(m[2], 10, 64)
		q, _ := strconv.ParseInt(m[3], 10, 64)
		r, _ := strconv.ParseInt(m[4], 10, 64)
		res[m[1]] = counts{w, q, r}
	}
	if len(res) != 2 {
		t.Fatalf("summary lists %d streams, want 2:\n%s", len(res), out)
	}
	return res
}

// expected returns, per stream, the seq of every record the faker
// generates that is a JSON object (the others are malformed).
func expected(t *testing.T, rows int64, malformed float64) map[string][]int64 {
	t.Helper()
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows, MalformedShare: malformed})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int64{}
	var buf []byte
	for _, stream := range []string{faker.Customers, faker.Orders} {
		for i := range rows {
			_, seq, key, payload := src.Generate(stream, i, buf)
			buf = key[:0]
			if json.Valid(payload) && len(payload) > 0 && payload[0] == '{' {
				out[stream] = append(out[stream], seq)
			}
		}
	}
	return out
}

// tableFiles is what the table's current snapshot claims, read by
// pyiceberg from the catalog's metadata: the total-records of its summary
// and the data files its manifests list.
const tableFilesPy = `import json, sys
from urllib.parse import urlparse
from pyiceberg.catalog.sql import SqlCatalog
name, db, warehouse, ns = sys.argv[1:5]
cat = SqlCatalog(name, uri=f"sqlite:///{db}", warehouse=warehouse)
out = {}
for ident in cat.list_tables(ns):
    tbl = cat.load_table(ident)
    snap = tbl.current_snapshot()
    files = []
    for m in snap.manifests(tbl.io):
        for e in m.fetch_manifest_entry(tbl.io, discard_deleted=True):
            files.append(urlparse(e.data_file.file_path).path)
    out[ident[-1]] = {"total_records": int(snap.summary["total-records"]), "files": files}
print(json.dumps(out))
`

type tableFiles struct {
	TotalRecords int64    `json:"total_records"`
	Files        []string `json:"files"`
}

func readTableFiles(t *testing.T, dbPath, warehouse string) map[string]tableFiles {
	t.Helper()
	script := filepath.Join(t.TempDir(), "files.py")
	if err := os.WriteFile(script, []byte(tableFilesPy), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), script, "quickstart", dbPath, warehouse, "quickstart")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyiceberg (table files): %v", err)
	}
	var res map[string]tableFiles
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("pyiceberg output %q: %v", out, err)
	}
	return res
}

// verify checks the Iceberg tables with pyiceberg over the same SQLite
// catalog: every well-formed generated record exactly once, ids unique,
// the rows scanned equal to what the snapshot claims, every data file the
// snapshot lists present on disk (and, when clean, no other data file:
// a killed run may leave files of epochs it never committed, which
// iceberg.Destination.Maintain removes), and quarantine files holding
// exactly the malformed records.
func verify(t *testing.T, dir string, rows int64, malformed float64, sum map[string]counts, clean bool) {
	t.Helper()
	want := expected(t, rows, malformed)
	dbPath, tablesDir := filepath.Join(dir, "catalog.db"), filepath.Join(dir, "tables")
	got := testutil.ReadIcebergTables(t, "quickstart", dbPath, "file://"+tablesDir, "quickstart")
	files := readTableFiles(t, dbPath, "file://"+tablesDir)
	for stream, seqs := range want {
		st := got[stream]
		if st == nil {
			t.Fatalf("stream %s: no table", stream)
		}
		if st.FormatVersion != 2 || st.Reader != "pyiceberg-scan" {
			t.Errorf("stream %s: format version %d read by %s, want 2 and pyiceberg's scan", stream, st.FormatVersion, st.Reader)
		}
		tf := files[stream]
		if st.Rows != int64(len(seqs)) || st.DistinctIDs != st.Rows || st.DistinctSeqs != st.Rows || tf.TotalRecords != st.Rows {
			t.Errorf("stream %s: rows %d distinct ids %d distinct seqs %d snapshot total-records %d; want %d of each",
				stream, st.Rows, st.DistinctIDs, st.DistinctSeqs, tf.TotalRecords, len(seqs))
		}
		listed := map[string]bool{}
		for _, f := range tf.Files {
			listed[f] = true
			if _, err := os.Stat(f); err != nil {
				t.Errorf("stream %s: the snapshot lists %s: %v", stream, f, err)
			}
		}
		onDisk, _ := filepath.Glob(filepath.Join(tablesDir, stream, "data", "*.parquet"))
		var extra []string
		for _, f := range onDisk {
			if !listed[f] {
				extra = append(extra, f)
			}
		}
		if len(tf.Files) == 0 || (clean && len(extra) > 0) {
			t.Errorf("stream %s: %d data files listed, %d not listed on disk %v", stream, len(tf.Files), len(extra), extra)
		} else if len(extra) > 0 {
			t.Logf("stream %s: %d data files of uncommitted epochs (killed runs) beside the %d listed", stream, len(extra), len(tf.Files))
		}
		gotSeqs := make([]int64, 0, len(st.Data))
		for _, r := range st.Data {
			n, err := strconv.ParseInt(fmt.Sprint(r["_openetl_seq"]), 10, 64)
			if err != nil {
				t.Fatalf("stream %s: row %v: _openetl_seq: %v", stream, r, err)
			}
			gotSeqs = append(gotSeqs, n)
		}
		slices.Sort(gotSeqs)
		wantSeqs := slices.Sorted(slices.Values(seqs))
		for i := range min(len(wantSeqs), len(gotSeqs)) {
			if wantSeqs[i] != gotSeqs[i] {
				t.Fatalf("stream %s: %d-th seq is %d, want %d", stream, i, gotSeqs[i], wantSeqs[i])
			}
		}
		c := sum[stream]
		if c.written != st.Rows || c.read != rows || c.read != c.written+c.quarantined {
			t.Errorf("stream %s: summary %+v, pyiceberg rows %d, generated %d", stream, c, st.Rows, rows)
		}
		lines, reasons := quarantined(t, filepath.Join(dir, "checkpoints", "quickstart", "_quarantine", stream))
		if lines != rows-int64(len(seqs)) || lines != c.quarantined {
			t.Errorf("stream %s: %d quarantined lines, summary says %d, generated %d malformed", stream, lines, c.quarantined, rows-int64(len(seqs)))
		}
		if reasons["parse_error"] != lines {
			t.Errorf("stream %s: quarantine reasons %v", stream, reasons)
		}
	}
}

func quarantined(t *testing.T, dir string) (int64, map[string]int64) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var n int64
	reasons := map[string]int64{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var l struct {
				Reason  string `json:"reason"`
				Payload string `json:"payload"`
				B64     string `json:"payload_base64"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if l.Payload == "" && l.B64 == "" {
				t.Fatalf("%s: quarantined record without its raw bytes", f)
			}
			reasons[l.Reason]++
			n++
		}
	}
	return n, reasons
}

// TestQuickstartOutputReadByPyiceberg runs the quickstart and checks its
// Iceberg tables with pyiceberg; the query command it prints must run and
// count the orders; a second run adds nothing.
func TestQuickstartOutputReadByPyiceberg(t *testing.T) {
	dir := t.TempDir()
	const rows, malformed = 30_000, 0.01
	args := []string{"-dir", dir, "-rows", strconv.Itoa(rows), "-malformed", "0.01", "-epoch", "100ms"}
	out := run(t, args...)
	sum := summary(t, out)
	verify(t, dir, rows, malformed, sum, true)
	checkQuery(t, out, sum)
	// Running it again continues from the checkpoint and adds nothing.
	out2 := run(t, args...)
	if !strings.Contains(out2, "nothing new") {
		t.Errorf("second run:\n%s", out2)
	}
	verify(t, dir, rows, malformed, summary(t, out2), true)
}

var queryLine = regexp.MustCompile(`(?m)^\s+python3 -c "(.*)"$`)

// checkQuery runs the pyiceberg command the quickstart prints (with the
// test's Python) and checks its counts of orders add up to the summary.
func checkQuery(t *testing.T, out string, sum map[string]counts) {
	t.Helper()
	if !strings.Contains(out, "query them") {
		t.Fatalf("summary has no query command:\n%s", out)
	}
	m := queryLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no python3 -c command in:\n%s", out)
	}
	res, err := exec.Command(testutil.Python(t), "-c", m[1]).CombinedOutput()
	if err != nil {
		t.Fatalf("the printed query failed: %v\n%s\n%s", err, m[1], res)
	}
	c := regexp.MustCompile(`(?m)^_openetl_id_count: (\[.*)$`).FindStringSubmatch(string(res))
	if c == nil {
		t.Fatalf("the printed query printed no counts:\n%s", res)
	}
	var total int64
	for _, n := range regexp.MustCompile(`\d+`).FindAllString(c[1], -1) {
		v, _ := strconv.ParseInt(n, 10, 64)
		total += v
	}
	if total != sum[faker.Orders].written {
		t.Errorf("the printed query counts %d orders, the summary %d:\n%s", total, sum[faker.Orders].written, res)
	}
}

// seededRNG returns a random source from $OPENETL_SEED, or from the clock,
// and logs the command that replays the test with it.
func seededRNG(t *testing.T, stream uint64) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OPENETL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("OPENETL_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay: OPENETL_SEED=%d go test -run '^%s$' ./examples/quickstart)", seed, seed, t.Name())
	return rand.New(rand.NewPCG(seed, stream))
}

// startHeld starts the quickstart and blocks its output once it has
// printed its first line: its first progress report (after its first
// committed epoch, or a second in) then blocks, and with it the runner's
// coordinator, which calls OnProgress, so no later barrier comes and the
// run can't end before the test kills it, however fast the machine. The
// kill lands while its first epoch runs or commits, or with the next one
// read and written but not committed.
func startHeld(t *testing.T, args []string) *testutil.Child {
	t.Helper()
	c := testutil.StartChild(t, exec.Command(bin, args...), testutil.Hold{})
	for !strings.Contains(c.Output(), "\n") {
		select {
		case <-c.Wrote():
		case <-c.Exited():
			t.Fatalf("quickstart exited: %v\n%s", c.Err(), c.Output())
		}
	}
	if err := c.BlockOutput(); err != nil {
		t.Fatalf("%v\n%s", err, c.Output())
	}
	return c
}

// TestQuickstartSurvivesSIGKILL kills the quickstart at random points,
// reruns it to completion and checks every generated record landed
// exactly once. OPENETL_SEED replays a failing seed.
func TestQuickstartSurvivesSIGKILL(t *testing.T) {
	rng := seededRNG(t, 0)
	dir := t.TempDir()
	const rows, malformed = 80_000, 0.002
	args := []string{"-dir", dir, "-rows", strconv.Itoa(rows), "-malformed", "0.002", "-epoch", "150ms"}
	for i := range 5 {
		c := startHeld(t, args)
		time.Sleep(time.Duration(100+rng.IntN(900)) * time.Millisecond)
		if !c.Kill() {
			t.Fatalf("run %d ended before the kill: %v\n%s", i, c.Err(), c.Output())
		}
	}
	out := run(t, args...)
	verify(t, dir, rows, malformed, summary(t, out), false)
}

// TestChaosTwoCopies runs two copies of the quickstart on the same
// directory at once, again and again, SIGKILLing each at a random moment
// (epochs every 20ms, so kills land in every protocol step, Commit
// included); the younger copy fences the older, which then stops, or is
// killed first. A final run completes and every generated record must be
// there exactly once. OPENETL_SEED replays.
func TestChaosTwoCopies(t *testing.T) {
	rng := seededRNG(t, 1)
	dir := t.TempDir()
	const rows, malformed = 60_000, 0.002
	args := []string{"-dir", dir, "-rows", strconv.Itoa(rows), "-malformed", "0.002", "-epoch", "20ms"}
	killed := 0
	for round := range 8 {
		var cs [2]*testutil.Child
		for i := range cs {
			if i == 1 {
				time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
			}
			cs[i] = startHeld(t, args)
		}
		kill := [2]time.Duration{time.Duration(50+rng.IntN(700)) * time.Millisecond, time.Duration(50+rng.IntN(700)) * time.Millisecond}
		var wg sync.WaitGroup
		ended := make([]bool, 2)
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(kill[i])
				ended[i] = !c.Kill()
			}()
		}
		wg.Wait()
		for i := range cs {
			// Blocked output holds a fenced copy before it can print
			// why and exit: it too ends by the kill.
			if ended[i] {
				t.Fatalf("round %d copy %d ended before its kill: %v\n%s", round, i, cs[i].Err(), cs[i].Output())
			}
			killed++
		}
	}
	t.Logf("%d copies killed", killed)
	out := run(t, args...)
	verify(t, dir, rows, malformed, summary(t, out), false)
}

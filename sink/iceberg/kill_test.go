package iceberg_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// childEnv names the directory a child process syncs into: the test
// binary re-executed to run TestKillChild as a real pipeline.
const childEnv = "OPENETL_ICEBERG_CHILD_DIR"

const killRows = 60_000

// TestKillChild is the child process of TestSurvivesSIGKILL: it syncs the
// fake customers (merge, soft deletes) and orders (append) into a SQL
// catalog on SQLite under $OPENETL_ICEBERG_CHILD_DIR, with epochs every
// 20ms so kills land in every step of the protocol, and table commits
// grouping epochs (up to 100ms or 256 KiB), so kills also land while
// files wait in the checkpoint log for their group. It does nothing when
// run as an ordinary test.
func TestKillChild(t *testing.T) {
	dir := os.Getenv(childEnv)
	if dir == "" {
		t.Skip("child process of TestSurvivesSIGKILL")
	}
	ctx := context.Background()
	_, cat := openCatalog(t, dir)
	dst := newDest(t, cat, iceberg.Config{Grouping: &iceberg.Grouping{Bytes: 256 << 10, Interval: 100 * time.Millisecond}})
	src, err := faker.New(faker.Config{Seed: 42, Rows: killRows})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("kill").From(testutil.HoldSource(src)).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).Lanes(2).EpochEvery(20*time.Millisecond, 0).
		Require(delivery.ExactlyOnce).Build()
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("SYNC-OK epochs=%d generation=%d\n", res.Epochs, res.Generation)
}

func seededRNG(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OPENETL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("OPENETL_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (replay: OPENETL_SEED=%d go test -run '^%s$' ./sink/iceberg)", seed, seed, t.Name())
	return rand.New(rand.NewPCG(seed, 3))
}

func child(dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	return cmd
}

// TestSurvivesSIGKILL runs the pipeline in child processes, SIGKILLed at
// random moments (mid-epoch, mid-commit), some rounds two copies at once
// (the younger fences the older), then one run to completion; pyiceberg
// over the same SQLite catalog must then read every order version exactly
// once and every customer's latest version (deleted ones flagged).
// OPENETL_SEED replays a failing seed.
func TestSurvivesSIGKILL(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: the kill test runs child processes for minutes (the plain run covers it)")
	}
	rng := seededRNG(t)
	dir := t.TempDir()
	killed, fenced := killRounds(t, rng, dir, killRows, 400, child)
	t.Logf("%d children killed, %d stopped fenced", killed, fenced)
	if killed == 0 {
		t.Fatal("no child was killed before it finished")
	}
	if c := testutil.StartChild(t, child(dir), testutil.Hold{}); c.Wait() != nil || !strings.Contains(c.Output(), "SYNC-OK") {
		t.Fatalf("final run: %v\n%s", c.Err(), c.Output())
	}
	verifyFaker(t, dir)
}

// killRounds runs 6 rounds of children syncing rows records per stream
// into dir, some rounds two copies at once (the second 0-300ms after the
// first), killing them after 1 to 8 new checkpoint records, at a random
// moment of the next minMs to 5*minMs ms, or soon after the last one
// started holds, whichever comes first. Each child holds its splits
// (testutil.Hold) up to rows/16 records into what it reads, the first
// of two copies rows/16 to rows/8 (so that it still reads, and commits,
// when the second claims the pipeline, and stops fenced), so none can
// finish before the kill on a fast machine: at most 3/4 of the source is
// read by then. It returns how many were killed and how many had
// stopped, fenced by the younger copy.
func killRounds(t *testing.T, rng *rand.Rand, dir string, rows int64, minMs int, child func(string) *exec.Cmd) (killed, fenced int) {
	t.Helper()
	for round := range 6 {
		copies := 1 + round%2
		cs := make([]*testutil.Child, copies)
		for i := range cs {
			after := 1 + rng.Int64N(rows/16)
			if i > 0 {
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			} else if copies > 1 {
				after += rows / 16
			}
			cs[i] = testutil.StartChild(t, child(dir), testutil.Hold{After: after})
		}
		want := countRecords(dir) + 1 + rng.IntN(8)
		deadline := time.After(time.Duration(minMs+rng.IntN(4*minMs)) * time.Millisecond)
		tick := time.NewTicker(2 * time.Millisecond)
	wait:
		for countRecords(dir) < want {
			select {
			case <-deadline:
				break wait
			case <-cs[copies-1].Held():
				time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
				break wait
			case <-tick.C:
			}
		}
		tick.Stop()
		for _, c := range cs {
			switch {
			case c.Kill():
				killed++
			case strings.Contains(c.Output(), "fenced"):
				fenced++
			default:
				t.Fatalf("child ended before the kill: %v\n%s", c.Err(), c.Output())
			}
		}
	}
	return killed, fenced
}

// verifyFaker compares what pyiceberg reads with what the faker generates.
func verifyFaker(t *testing.T, dir string) { t.Helper(); verifyFakerRows(t, dir, killRows) }

// verifyFakerRows compares what pyiceberg reads in the warehouse under
// dir (the SQLite catalog) with the first rows records of each fake
// stream (seed 42): see verifyFakerTables; and what DuckDB reads with
// what pyiceberg read.
func verifyFakerRows(t *testing.T, dir string, rows int64) {
	t.Helper()
	verifyFakerTables(t, testutil.ReadIcebergTablesWithDuckDB(t, "openetl", filepath.Join(dir, "catalog.db"), "file://"+filepath.Join(dir, "warehouse"), iceberg.DefaultNamespace), rows)
}

// verifyFakerTables compares what pyiceberg read with what the faker
// generates for rows records per stream: every order version exactly
// once, each customer's latest version once (deleted ones flagged), the
// customers (merged) read by pyiceberg's own scan (position deletes); and
// what DuckDB read, when it was asked, with what pyiceberg read.
func verifyFakerTables(t *testing.T, got map[string]*testutil.IcebergTable, rows int64) {
	t.Helper()
	for name, tb := range got {
		if tb.DuckDBRows != nil {
			sameRows(t, name+" (DuckDB)", tb.DuckDB, tb.Data)
		}
	}
	if c := got[faker.Customers]; c != nil && c.Reader != "pyiceberg-scan" {
		t.Errorf("customers read by %s, want pyiceberg's scan", c.Reader)
	}
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	orders := got[faker.Orders]
	if orders == nil {
		t.Fatal("no orders table")
	}
	want := map[string]string{} // seq → op
	var buf []byte
	for i := range rows {
		op, seq, key, _ := src.Generate(faker.Orders, i, buf)
		buf = key[:0]
		want[fmt.Sprint(seq)] = op.String()
	}
	seen := map[string]int{}
	for _, r := range orders.Data {
		s := str(r["_openetl_seq"])
		seen[s]++
		if w, ok := want[s]; !ok || w != str(r["_openetl_op"]) {
			t.Fatalf("orders: row %v: not generated (op %q)", r, w)
		}
	}
	for s := range want {
		if seen[s] != 1 {
			t.Fatalf("orders: seq %s visible %d times, want once", s, seen[s])
		}
	}
	if orders.Rows != int64(len(want)) {
		t.Errorf("orders: %d rows, want %d", orders.Rows, len(want))
	}

	cust := got[faker.Customers]
	if cust == nil {
		t.Fatal("no customers table")
	}
	type version struct {
		seq int64
		op  string
	}
	last := map[string]version{}
	for i := range rows {
		op, seq, key, _ := src.Generate(faker.Customers, i, buf)
		k := string(key)
		buf = key[:0]
		if v, ok := last[k]; !ok || seq > v.seq {
			last[k] = version{seq, op.String()}
		}
	}
	keys := map[string]bool{}
	for _, r := range cust.Data {
		k := str(r["id"])
		if keys[k] {
			t.Fatalf("customers: key %s visible twice", k)
		}
		keys[k] = true
		v, ok := last[k]
		if !ok {
			t.Fatalf("customers: key %s never generated", k)
		}
		if str(r["_openetl_seq"]) != fmt.Sprint(v.seq) || str(r["_openetl_deleted"]) != fmt.Sprint(v.op == "delete") {
			t.Fatalf("customers: key %s: seq %v deleted %v, want seq %d after %s", k, r["_openetl_seq"], r["_openetl_deleted"], v.seq, v.op)
		}
	}
	if len(keys) != len(last) {
		t.Errorf("customers: %d keys visible, want %d", len(keys), len(last))
	}
	t.Logf("orders %d rows in %d data files; customers %d keys, %d data + %d delete files, %d snapshots",
		orders.Rows, orders.DataFiles, len(keys), cust.DataFiles, cust.DeleteFiles, cust.Snapshots)
}

var recordFile = regexp.MustCompile(`^\d{20}-\d{20}\.json$`)

// countRecords counts the checkpoint records under dir.
func countRecords(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && recordFile.MatchString(e.Name()) {
			n++
		}
		return nil
	})
	return n
}

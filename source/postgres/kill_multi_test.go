package postgres_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/postgres"
)

// multiChildEnv makes the test binary the pipeline child of
// TestKillDuringSnapshotOfManyTables, which reads its tables one at a
// time (SnapshotParallelism 1) and logs to stderr. It is caught in init,
// before TestMain, whose child (kill_test.go) has neither.
const multiChildEnv = "OPENETL_PG_MULTI_CHILD"

func init() {
	if os.Getenv(multiChildEnv) == "" {
		return
	}
	chunk, _ := strconv.Atoi(os.Getenv("OPENETL_PG_CHUNK"))
	h := &harness{d: os.Getenv("OPENETL_PG_DSN"), tables: os.Getenv("OPENETL_PG_TABLES"), ckpts: os.Getenv("OPENETL_PG_CKPTS"),
		cfg: postgres.Config{Publication: os.Getenv("OPENETL_PG_PUB"), Slot: os.Getenv("OPENETL_PG_SLOT"),
			SnapshotChunkRows: chunk, SnapshotParallelism: 1, StatusInterval: 200 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}}
	if err := h.run(context.Background(), 20*time.Millisecond); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

var killMultiSeed = flag.Uint64("pg.kill-multi-seed", 0, "seed of TestKillDuringSnapshotOfManyTables (default: from the clock)")

// handedOverWhole matches the source's log line of a snapshot split with
// no state handed over whole to the change stream (handOver), and
// captures the split.
var handedOverWhole = regexp.MustCompile(`msg="the table's snapshot is read by the change stream[^"]*".* split=(\S+)`)

// TestKillDuringSnapshotOfManyTables: four keyed tables whose first
// snapshot is read one table at a time (SnapshotParallelism 1), while a
// writer commits small transactions and updates of hundreds of rows to
// all of them, raising n only. The first child holds the first table's
// snapshot split part way, so the other splits never start; it is
// SIGKILLed once a committed checkpoint (HEAD) holds the stream's state and that split's,
// and none of the others': the next attempt must hand those over whole
// to the change stream (their snapshot under the slot's exported
// snapshot is gone, and a snapshot of their own would be newer than the
// seq their rows carry). That child is killed once it committed an
// epoch, the next ones at random moments, while the stream reads the
// tables in chunks under watermarks. After a final sync, for each table:
// the Parquet output read with pyarrow, applied in seq order, equals the
// table; no row's n falls in seq order (each version is its row's state
// at its seq); and at least one split was handed over with no state.
func TestKillDuringSnapshotOfManyTables(t *testing.T) {
	d := dsn(t)
	const (
		ntables = 4
		rows    = 25_000
		chunk   = 1000
	)
	pub, slot := name("pub"), name("slot")
	var tbls []string
	for i := range ntables {
		tbl := name(fmt.Sprintf("multi%d", i))
		tbls = append(tbls, tbl)
		execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text, n int8)", tbl),
			fmt.Sprintf("INSERT INTO %s SELECT g, md5(g::text), 0 FROM generate_series(1, %d) g", tbl, rows))
	}
	execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, strings.Join(tbls, ", ")))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: chunk, SnapshotParallelism: 1})
	seed := uint64(time.Now().UnixNano())
	if *killMultiSeed != 0 {
		seed = *killMultiSeed
	}
	t.Logf("seed %d (replay: -run TestKillDuringSnapshotOfManyTables -pg.kill-multi-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	// The writer: transactions of 1 to 20 changes to distinct rows of
	// any table, and every 10th or so an update of 500 rows of one.
	stopWriter := killWriter{tables: tbls, rows: rows, changes: 20, bulkEvery: 10, bulkRows: 500,
		next: 10_000_000, pause: true}.start(t, d, seed)
	defer stopWriter()

	start := func(hold testutil.Hold) *testutil.Child {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), multiChildEnv+"=1", "OPENETL_PG_DSN="+d, "OPENETL_PG_PUB="+pub, "OPENETL_PG_SLOT="+slot,
			"OPENETL_PG_TABLES="+h.tables, "OPENETL_PG_CKPTS="+h.ckpts, "OPENETL_PG_CHUNK="+strconv.Itoa(chunk))
		return testutil.StartChild(t, cmd, hold)
	}
	// whole collects the splits each child handed over with no state.
	whole := map[string]int{}
	var logs strings.Builder // the children's output, for a failure
	kill := func(c *testutil.Child, i int) {
		if !c.Kill() {
			t.Fatalf("child %d ended before the kill: %v\n%s", i, c.Err(), c.Output())
		}
		fmt.Fprintf(&logs, "child %d:\n%s", i, c.Output())
		for _, m := range handedOverWhole.FindAllStringSubmatch(c.Output(), -1) {
			whole[m[1]]++
		}
		testutil.Until(t, fmt.Sprintf("slot %s released by child %d", slot, i), func() bool {
			return queryOne(t, d, "SELECT COALESCE((SELECT active FROM pg_replication_slots WHERE slot_name = '"+slot+"'), false)") == "f"
		})
	}

	// Kill 1: the first table's snapshot split (whichever the runner
	// starts: one at a time) holds 1 to 5 chunks into it, with the
	// semaphore, so no other split starts; killed once a checkpoint has
	// the stream's state and that split's.
	first := start(testutil.Hold{After: int64(chunk * (1 + rng.IntN(5))), Splits: "^snapshot:"})
	var stateless []string
	testutil.Until(t, "a checkpoint with the stream and a snapshot in progress", func() bool {
		select {
		case <-first.Exited():
			t.Fatalf("child 1 ended before a checkpoint showed a snapshot in progress: %v\n%s", first.Err(), first.Output())
		default:
		}
		r := headRecord(t, h.ckpts)
		if r == nil || r.Resume["slot:"+slot] == nil {
			return false
		}
		stateless = stateless[:0]
		inProgress := ""
		for _, tbl := range tbls {
			b, ok := r.Resume["snapshot:"+tbl]
			if !ok {
				stateless = append(stateless, tbl)
				continue
			}
			var st struct {
				After []string
				Done  bool
			}
			if json.Unmarshal(b, &st) == nil && !st.Done && len(st.After) > 0 {
				inProgress = tbl
			}
		}
		if inProgress != "" {
			t.Logf("kill 1 at epoch %d: %s's snapshot in progress, %d splits with no state", r.Epoch, inProgress, len(stateless))
			return true
		}
		return false
	})
	kill(first, 1)
	if len(stateless) == 0 {
		t.Fatal("every snapshot split had a state at kill 1: with SnapshotParallelism 1 and one split held, none should")
	}
	// Kill 2: once the next attempt committed an epoch (its Open, which
	// hands the splits with no state over, is done), at a random moment
	// of the stream's chunks.
	var epoch uint64
	if r := headRecord(t, h.ckpts); r != nil {
		epoch = r.Epoch
	}
	second := start(testutil.Hold{})
	testutil.Until(t, "a checkpoint of child 2", func() bool {
		select {
		case <-second.Exited():
			t.Fatalf("child 2 ended: %v\n%s", second.Err(), second.Output())
		default:
		}
		r := headRecord(t, h.ckpts)
		return r != nil && r.Epoch > epoch
	})
	time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond)
	kill(second, 2)
	if strings.Contains(second.Output(), `msg="created slot"`) {
		t.Fatalf("child 2 made a new slot: it did not resume the checkpoint of kill 1\n%s", second.Output())
	}
	// Kills 3 to 5: at random moments, early ones included.
	for i := 3; i <= 5; i++ {
		c := start(testutil.Hold{})
		time.Sleep(time.Duration(100+rng.IntN(1500)) * time.Millisecond)
		kill(c, i)
		if r := headRecord(t, h.ckpts); r != nil {
			t.Logf("kill %d after epoch %d", i, r.Epoch)
		}
	}
	txns, err := stopWriter()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer committed %d transactions", txns)
	if _, err := h.sync(); err != nil {
		t.Fatalf("final sync: %v", err)
	}

	c, err := pgconn.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, tbl := range tbls {
		checkOutputIsTable(t, c, h.tables, tbl)
	}

	var names []string
	for split := range whole {
		names = append(names, split)
	}
	slices.Sort(names)
	t.Logf("splits handed over to the stream with no state: %d %v", len(names), names)
	for _, tbl := range stateless {
		if whole["snapshot:"+tbl] == 0 {
			t.Errorf("%s's split had no state at kill 1, and no attempt handed it over whole", tbl)
		}
	}
	if t.Failed() {
		t.Logf("the children's output:\n%s", logs.String())
	}
}

// checkOutputIsTable checks that tbl's output (id, v, n), read with
// pyarrow and applied in seq order, equals the table, and that no row's
// n falls in seq order: the writer only raises n, so a version whose n
// is below an earlier one's was read under a later snapshot than its seq
// says.
func checkOutputIsTable(t *testing.T, c *pgconn.PgConn, tables, tbl string) {
	t.Helper()
	type row struct{ v, n string }
	got := map[string]row{}
	out := readRows(t, tables, tbl)
	for _, r := range out {
		id := fmt.Sprint(r["id"])
		if r["_openetl_op"] == "delete" {
			delete(got, id)
			continue
		}
		got[id] = row{fmt.Sprint(r["v"]), fmt.Sprint(r["n"])}
	}
	res, err := c.Exec(context.Background(), fmt.Sprintf("SELECT id, v, n FROM %s", tbl)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]row{}
	for _, r := range res[0].Rows {
		want[string(r[0])] = row{string(r[1]), string(r[2])}
	}
	bad := 0
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			if bad++; bad <= 3 {
				t.Errorf("%s row %s: output %+v (present %v), table %+v; its versions in the output: %s", tbl, id, g, ok, w, versions(out, id))
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			if bad++; bad <= 6 {
				t.Errorf("%s row %s is in the output but not in the table", tbl, id)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d rows differ (of %d in the table, %d in the output after applying %d records)", tbl, bad, len(want), len(got), len(out))
	}
	last := map[string]int64{}
	falls := 0
	for _, r := range out {
		id := fmt.Sprint(r["id"])
		if r["_openetl_op"] == "delete" {
			delete(last, id)
			continue
		}
		n, err := strconv.ParseInt(fmt.Sprint(r["n"]), 10, 64)
		if err != nil {
			t.Fatalf("%s row %s: n %v: %v", tbl, id, r["n"], err)
		}
		if p, ok := last[id]; ok && n < p {
			if falls++; falls <= 3 {
				t.Errorf("%s row %s: n falls from %d to %d in seq order: %s", tbl, id, p, n, versions(out, id))
			}
		}
		last[id] = n
	}
	if falls > 0 {
		t.Errorf("%s: %d versions are not their row's state at their seq", tbl, falls)
	}
	if bad == 0 && falls == 0 {
		t.Logf("%s: %d rows equal the output's %d records applied in seq order; n never falls", tbl, len(want), len(out))
	}
}

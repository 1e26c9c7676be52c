package postgres_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/postgres"
)

// TestMain runs the pipeline child of TestKillDuringSnapshotAndStreaming
// when OPENETL_PG_CHILD is set, and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv("OPENETL_PG_CHILD") != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// child runs the pipeline the environment describes until it is killed.
func child() int {
	chunk, _ := strconv.Atoi(os.Getenv("OPENETL_PG_CHUNK"))
	// The default protocol is 2 on this server; OPENETL_PG_PROTO=1 runs
	// the test under protocol 1.
	proto, _ := strconv.Atoi(os.Getenv("OPENETL_PG_PROTO"))
	h := &harness{d: os.Getenv("OPENETL_PG_DSN"), tables: os.Getenv("OPENETL_PG_TABLES"), ckpts: os.Getenv("OPENETL_PG_CKPTS"),
		cfg: postgres.Config{Publication: os.Getenv("OPENETL_PG_PUB"), Slot: os.Getenv("OPENETL_PG_SLOT"),
			SnapshotChunkRows: chunk, StatusInterval: 200 * time.Millisecond, Protocol: proto, StreamedTxnMemory: 256 << 10}}
	if pattern, table, ok := strings.Cut(os.Getenv("OPENETL_PG_ROUTE"), "="); ok {
		h.options = func(b *etl.Builder) *etl.Builder { return b.Route(pattern, table) }
	}
	if err := h.run(context.Background(), 20*time.Millisecond); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// killSeed replays TestKillDuringSnapshotAndStreaming's choices (the
// writer's transactions, where and when each kill lands) from a seed it
// logged; the timing of the processes still varies.
var killSeed = flag.Uint64("pg.kill-seed", 0, "seed of TestKillDuringSnapshotAndStreaming (default: from the clock)")

// TestKillDuringSnapshotAndStreaming: a pipeline process is SIGKILLed
// several times, first in the middle of its snapshot (once a checkpoint
// holds a snapshot split that is not done), then at random moments of
// streaming, while a writer commits small transactions and large ones
// (thousands of rows, so kills land inside them; the child's 64kB
// logical_decoding_work_mem makes the server stream them in progress
// under protocol 2, the default here, and the child keeps 256kB of each
// in memory, the rest in a file; OPENETL_PG_PROTO=1 runs the test under
// protocol 1, where the server spills them). After a final sync,
// the Parquet output read with pyarrow, applied in seq order, equals the
// table, and no id repeats.
func TestKillDuringSnapshotAndStreaming(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("killed"), name("pub"), name("slot")
	const initial = 150_000
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text, n int8)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, md5(g::text), 0 FROM generate_series(1, %d) g", tbl, initial),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	seed := uint64(time.Now().UnixNano())
	if *killSeed != 0 {
		seed = *killSeed
	}
	t.Logf("seed %d (replay: -run TestKillDuringSnapshotAndStreaming -pg.kill-seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	// The writer: transactions of 1 to 20 changes, and every 15th or so
	// an update of 3,000 rows in one statement.
	stopWriter := killWriter{tables: []string{tbl}, rows: initial, changes: 20, bulkEvery: 15, bulkRows: 3000,
		next: 10_000_000, pause: true}.start(t, d, seed)
	defer stopWriter()

	start := func(hold testutil.Hold) *testutil.Child {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "OPENETL_PG_CHILD=1", "OPENETL_PG_DSN="+d+"&logical_decoding_work_mem=64kB", "OPENETL_PG_PUB="+pub, "OPENETL_PG_SLOT="+slot,
			"OPENETL_PG_TABLES="+h.tables, "OPENETL_PG_CKPTS="+h.ckpts, "OPENETL_PG_CHUNK=2000")
		return testutil.StartChild(t, cmd, hold)
	}
	// The child runs until it is killed (Run, not Sync).
	// A killed child's walsender goes on holding the slot until the
	// server notices the connection is gone; the next child (a host's
	// restart) would fail to start replication until then.
	kill := func(c *testutil.Child, i int) {
		if !c.Kill() {
			t.Fatalf("child %d ended before the kill: %v\n%s", i, c.Err(), c.Output())
		}
		testutil.Until(t, fmt.Sprintf("slot %s released by child %d", slot, i), func() bool {
			return queryOne(t, d, "SELECT COALESCE((SELECT active FROM pg_replication_slots WHERE slot_name = '"+slot+"'), false)") == "f"
		})
	}

	// Kill 1: inside the snapshot. The child holds the snapshot split 1
	// to 20 chunks into it (of 75), so it can't finish the snapshot
	// before a checkpoint shows it part way, however fast the machine.
	first := start(testutil.Hold{After: int64(2000 * (1 + rng.IntN(20))), Splits: "^snapshot:"})
	testutil.Until(t, "a checkpoint with the snapshot in progress", func() bool {
		select {
		case <-first.Exited():
			t.Fatalf("child 1 ended before a checkpoint showed the snapshot in progress: %v\n%s", first.Err(), first.Output())
		default:
		}
		r := headRecord(t, h.ckpts)
		if r == nil {
			return false
		}
		var st struct {
			After []string
			Done  bool
		}
		if b, ok := r.Resume["snapshot:"+tbl]; ok && json.Unmarshal(b, &st) == nil && !st.Done && len(st.After) > 0 {
			t.Logf("kill 1 at epoch %d, snapshot after key %v", r.Epoch, st.After)
			return true
		}
		return false
	})
	kill(first, 1)
	// Kills 2 to 6: at random moments.
	for i := 2; i <= 6; i++ {
		c := start(testutil.Hold{})
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
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

	st := testutil.ReadParquetTables(t, h.tables)[tbl]
	if st == nil || st.Rows != st.DistinctIDs {
		t.Fatalf("output %+v: ids repeat", st)
	}
	type row struct {
		v string
		n string
	}
	got := map[string]row{}
	out := readRows(t, h.tables, tbl)
	for _, r := range out {
		id := fmt.Sprint(r["id"])
		if r["_openetl_op"] == "delete" {
			delete(got, id)
			continue
		}
		got[id] = row{fmt.Sprint(r["v"]), fmt.Sprint(r["n"])}
	}
	c, err := pgconn.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
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
			if bad++; bad <= 5 {
				t.Errorf("row %s: output %+v (present %v), table %+v; its versions in the output: %s", id, g, ok, w, versions(out, id))
			}
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("row %s is in the output but not in the table", id)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d rows differ (of %d in the table, %d in the output after applying %d changes)", bad, len(want), len(got), st.Rows)
	}
	t.Logf("%d rows in the table equal the output's %d records applied in seq order", len(want), st.Rows)
	// Every version is its row's state at its seq: the writer only ever
	// raises n, so a row's n falls in seq order only where a snapshot
	// row was read under a later snapshot than its seq says. The rest of
	// the first snapshot, resumed or never begun when an attempt ended,
	// is read by the stream under watermarks, each row at its own seq
	// (TestSnapshotResumesAfterLastChunk, TestSnapshotWithoutStateHandedOver).
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
			t.Fatalf("row %s: n %v: %v", id, r["n"], err)
		}
		if p, ok := last[id]; ok && n < p {
			if falls++; falls <= 3 {
				t.Errorf("row %s: n falls from %d to %d in seq order: %s", id, p, n, versions(out, id))
			}
		}
		last[id] = n
	}
	if falls > 0 {
		t.Fatalf("%d versions are not their row's state at their seq", falls)
	}
}

// killWriter is the writer the kill tests run beside their children:
// transactions of 1 to changes changes to distinct rows of tables (id,
// v, n; ids 1 to rows) — inserts of new ids from next on, updates
// raising n, deletes — and, when bulkEvery > 0, about one transaction in
// bulkEvery an update raising n of bulkRows+1 rows of one table. With
// pause, up to 2 ms pass between transactions.
type killWriter struct {
	tables             []string
	rows               int64
	changes, bulkEvery int
	bulkRows, next     int64
	pause              bool
}

// start runs the writer (its choices seeded by seed) until the function
// it returns is called, which returns how many transactions committed
// and the writer's error; a second call returns the same. The writer
// stops between transactions, never in one: an Exec whose context ends
// returns at once while the server may still commit its statement,
// after the final sync has taken its end position, and the table then
// holds a change no sync was asked to read (seed 1796159316853614697
// failed so: the 2,917 rows differing were those of the writer's last,
// abandoned update of 3,001 rows).
func (w killWriter) start(t *testing.T, d string, seed uint64) func() (int, error) {
	t.Helper()
	stop := make(chan struct{})
	type result struct {
		txns int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := pgconn.Connect(context.Background(), d)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close(context.Background())
		rng := rand.New(rand.NewPCG(seed, 2))
		next := w.next
		// One table takes no draw: a seed replays as it did before the
		// writer served several tests.
		pick := func() string {
			if len(w.tables) == 1 {
				return w.tables[0]
			}
			return w.tables[rng.IntN(len(w.tables))]
		}
		for txns := 0; ; txns++ {
			select {
			case <-stop:
				done <- result{txns: txns}
				return
			default:
			}
			var sql strings.Builder
			sql.WriteString("BEGIN;")
			if w.bulkEvery > 0 && rng.IntN(w.bulkEvery) == 0 {
				lo := 1 + rng.Int64N(w.rows)
				fmt.Fprintf(&sql, "UPDATE %s SET n = n + 1 WHERE id BETWEEN %d AND %d;", pick(), lo, lo+w.bulkRows)
			} else {
				used := map[string]bool{}
				for range 1 + rng.IntN(w.changes) {
					tbl, id := pick(), 1+rng.Int64N(w.rows)
					if k := fmt.Sprint(tbl, id); used[k] {
						continue
					} else {
						used[k] = true
					}
					switch rng.IntN(3) {
					case 0:
						next++
						fmt.Fprintf(&sql, "INSERT INTO %s VALUES (%d, 'new', 0);", tbl, next)
					case 1:
						fmt.Fprintf(&sql, "UPDATE %s SET v = md5(random()::text), n = n + 1 WHERE id = %d;", tbl, id)
					default:
						fmt.Fprintf(&sql, "DELETE FROM %s WHERE id = %d;", tbl, id)
					}
				}
			}
			sql.WriteString("COMMIT")
			if _, err := c.Exec(context.Background(), sql.String()).ReadAll(); err != nil {
				done <- result{txns: txns, err: err}
				return
			}
			if w.pause {
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}
	}()
	var once sync.Once
	var res result
	return func() (int, error) {
		once.Do(func() {
			close(stop)
			res = <-done
		})
		return res.txns, res.err
	}
}

// versions lists row id's versions in out (seq order): seq, op and n.
func versions(out []map[string]any, id string) string {
	var b strings.Builder
	for _, r := range out {
		if fmt.Sprint(r["id"]) == id {
			fmt.Fprintf(&b, "[%v %v n=%v] ", r["_openetl_seq"], r["_openetl_op"], r["n"])
		}
	}
	return b.String()
}

package mysql_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/mysql"
)

// TestChildSync is the child process of the kill test: it runs one
// sync as its environment says, and is skipped otherwise.
func TestChildSync(t *testing.T) {
	env := os.Getenv("MYSQL_TEST_CHILD")
	if env == "" {
		t.Skip("only run as the child of a kill test")
	}
	var c struct {
		DSN, DB, Dir string
		Chunk        int
	}
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatal(err)
	}
	src, err := mysql.New(mysql.Config{DSN: c.DSN, Database: c.DB, SnapshotChunkRows: c.Chunk})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	if _, err := syncOnce(context.Background(), testutil.HoldSource(src), c.Dir); err != nil {
		t.Fatal(err)
	}
}

// TestKill snapshots a table of 150k rows in chunks of 2000 while a
// writer keeps committing inserts, updates (some changing the key) and
// deletes, and runs the pipeline in child processes SIGKILLed at random
// moments: three times inside the snapshot (each after a checkpoint
// showed the snapshot split part way; the next child's first checkpoint
// must show it resumed from there, not restarted), then three times while
// it streams (a backlog of 100k row changes in large transactions each
// time). Each child holds at a resume point a few chunks (or row changes)
// on (testutil.Hold), so a fast machine can't finish its work before the
// kill. Once the writer stops, a last child runs to the end; the Parquet
// output, read by pyarrow and applied in seq order (each key's latest
// version, deletes removing it), must equal the table, with no version of
// a row written twice.
func TestKill(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	d := dsn(t)
	db := database(t, d)
	const n = 150000
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.kt (id bigint PRIMARY KEY, v bigint, note varchar(40))", db),
		fmt.Sprintf("INSERT INTO %[1]s.kt SELECT seq, seq, concat('row ', seq) FROM %[1]s.seq_1_to_%[2]d", db, n))
	dir := t.TempDir()

	// The writer: a transaction every few milliseconds.
	stopWriter := startKTWriter(t, d, db, n+1, rand.New(rand.NewPCG(1, 2)))
	defer stopWriter()

	const chunk = 2000
	childEnv, _ := json.Marshal(map[string]any{"DSN": d, "DB": db, "Dir": dir, "Chunk": chunk})
	// A child holds at a resume point of the split the kill is meant for
	// (testutil.Hold), so it can't finish before the kill, however fast
	// the machine; the kill comes at a random moment after the checkpoint
	// the test waits for, or at the hold.
	start := func(h testutil.Hold) *testutil.Child {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildSync$", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), "MYSQL_TEST_CHILD="+string(childEnv))
		return testutil.StartChild(t, cmd, h)
	}
	// The checkpoint records committed so far (HEAD changes at a claim
	// already; a record is written per committed epoch).
	records := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "my", "_checkpoints", "*.json"))
		return len(m)
	}
	ckpts := filepath.Join(dir, "checkpoints")
	snapID := "snapshot:" + db + ".kt"
	// snap returns the last checkpoint record's epoch and the snapshot
	// split's state in it.
	snap := func() (epoch uint64, st snapState, ok bool) {
		r := lastRecord(ckpts)
		if r == nil {
			return 0, snapState{}, false
		}
		b, found := r.Resume[snapID]
		if !found {
			return r.Epoch, snapState{}, false
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("snapshot state %s: %v", b, err)
		}
		return r.Epoch, st, true
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const snapKills = 3
	killed, inSnapshot := 0, 0
	var prev snapState
	var prevEpoch uint64
	for i := range snapKills + 3 {
		if i >= snapKills {
			// A backlog to stream: 100k row changes in 20 transactions.
			var bulk []string
			for k := range 20 {
				bulk = append(bulk, fmt.Sprintf("UPDATE %s.kt SET v = v + 1, note = 'bulk %d' WHERE id BETWEEN %d AND %d",
					db, i, k*7500, k*7500+4999))
			}
			execSQL(t, d, bulk...)
		}
		before := records()
		var c *testutil.Child
		done := false
		if i < snapKills {
			// Inside the snapshot: held 1 to 12 chunks after where it
			// resumed (3 children take at most 36 of its 75), killed once
			// it committed a checkpoint with the snapshot part way, at a
			// random moment after it.
			c = start(testutil.Hold{After: int64(chunk * (1 + rng.IntN(12))), Splits: "^snapshot:"})
			checked := false
		snap:
			for {
				select {
				case <-c.Exited():
					done = true
					break snap
				case <-time.After(5 * time.Millisecond):
				}
				epoch, st, ok := snap()
				if !ok || epoch <= prevEpoch {
					continue
				}
				if !checked && prevEpoch > 0 {
					// The child's first checkpoint: the snapshot went on
					// from the last committed chunk.
					checked = true
					if st.Rows < prev.Rows || len(st.After) == 0 || afterKey(t, st) < afterKey(t, prev) {
						t.Fatalf("child %d restarted the snapshot: its first checkpoint has %d rows up to key %v, the last one before it %d rows up to %v",
							i, st.Rows, st.After, prev.Rows, prev.After)
					}
					t.Logf("child %d resumed the snapshot after key %d (%d rows) and was at key %d (%d rows) at its first checkpoint",
						i, afterKey(t, prev), prev.Rows, afterKey(t, st), st.Rows)
				}
				if !st.Done {
					break snap
				}
			}
			if !done {
				time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
			}
		} else {
			// While streaming: held 1,000 to 50,000 row changes into its
			// backlog (at least 95,000: the bulk updates alone), killed
			// at a random moment after it committed an epoch.
			c = start(testutil.Hold{After: int64(1000 + rng.IntN(50_000)), Splits: "^binlog:"})
		wait:
			for {
				select {
				case <-c.Exited():
					done = true
					break wait
				case <-time.After(5 * time.Millisecond):
					if records() > before {
						break wait
					}
				}
			}
			if !done {
				time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
			}
		}
		if c.Kill() {
			killed++
		} else if c.Err() != nil {
			t.Fatalf("child %d failed: %v\n%s", i, c.Err(), c.Output())
		} else {
			t.Logf("child %d ended before the kill", i)
		}
		if i < snapKills {
			epoch, st, ok := snap()
			if ok && !st.Done && len(st.After) > 0 {
				inSnapshot++
				t.Logf("child %d killed inside the snapshot: the last checkpoint (epoch %d) has %d rows, up to key %d", i, epoch, st.Rows, afterKey(t, st))
			}
			prev, prevEpoch = st, epoch
		}
	}
	if _, err := stopWriter(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	if killed < 5 || inSnapshot < snapKills {
		t.Errorf("%d children killed, %d of them inside the snapshot: want at least 5 and %d", killed, inSnapshot, snapKills)
	}
	c := start(testutil.Hold{})
	t0 := time.Now()
	if err := c.Wait(); err != nil {
		t.Fatalf("final child: %v\n%s", err, c.Output())
	}
	t.Logf("%d children SIGKILLed (%d during the snapshot); the last child took %v", killed, inSnapshot, time.Since(t0))

	checkKT(t, d, db, dir)
}

// startKTWriter commits transactions of 1 to 5 changes to db.kt (id,
// v, note), a few milliseconds apart, until the function it returns is
// called: inserts of new ids from next on, updates raising v, deletes,
// and key changes to new ids (ids are never used again). A deadlock
// rolls its transaction back and the writer goes on. The function
// returns how many transactions committed, and the writer's error; a
// second call returns the same.
func startKTWriter(t *testing.T, d, db string, next int, rng *rand.Rand) func() (int64, error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var txns atomic.Int64
	go func() {
		c := conn(t, d)
		defer c.Close()
		for i := 0; ctx.Err() == nil; i++ {
			sqls := []string{"BEGIN"}
			for range 1 + rng.IntN(5) {
				id := 1 + rng.IntN(next)
				switch rng.IntN(5) {
				case 0, 1:
					sqls = append(sqls, fmt.Sprintf("INSERT INTO %s.kt VALUES (%d, %d, 'new %d')", db, next, i, i))
					next++
				case 2:
					sqls = append(sqls, fmt.Sprintf("UPDATE %s.kt SET v = v + 1, note = 'upd %d' WHERE id = %d", db, i, id))
				case 3:
					sqls = append(sqls, fmt.Sprintf("DELETE FROM %s.kt WHERE id = %d", db, id))
				case 4:
					sqls = append(sqls, fmt.Sprintf("UPDATE IGNORE %s.kt SET id = %d WHERE id = %d", db, next, id))
					next++
				}
			}
			sqls = append(sqls, "COMMIT")
			committed := true
			for _, sql := range sqls {
				if _, err := c.Execute(sql); err != nil {
					// Bulk updates at the same time: a deadlock rolls the
					// transaction back; the writer goes on.
					var me *gomysql.MyError
					if errors.As(err, &me) && (me.Code == gomysql.ER_LOCK_DEADLOCK || me.Code == gomysql.ER_LOCK_WAIT_TIMEOUT) {
						if _, err := c.Execute("ROLLBACK"); err == nil {
							committed = false
							break
						}
					}
					done <- fmt.Errorf("%s: %w", sql, err)
					return
				}
			}
			if committed {
				txns.Add(1)
			}
			time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		}
		done <- nil
	}()
	var once gosync.Once
	var err error
	return func() (int64, error) {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return txns.Load(), err
	}
}

// checkKT checks the Parquet output under dir/tables of db.kt against
// the table: no version written twice and every file in the manifest,
// each id's latest version equal to the table's row (deleted ids
// absent), and each row's records following its history
// (checkHistories). It returns the table's row count.
func checkKT(t *testing.T, d, db, dir string) int {
	t.Helper()
	st := testutil.ReadParquetTables(t, filepath.Join(dir, "tables"))["kt"]
	if st == nil || st.Rows != st.DistinctIDs || len(st.ExtraFiles)+len(st.MissingFiles) > 0 {
		t.Fatalf("Parquet table: %+v: a version written twice, or files not in the manifest", st)
	}
	got := latestRows(t, dir, "kt")
	want := map[string]string{}
	for _, r := range queryRows(t, d, fmt.Sprintf("SELECT id, v, note FROM %s.kt", db)) {
		want[r[0]] = r[1] + " " + r[2]
	}
	var missing, wrong, extra int
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			if missing++; missing < 5 {
				t.Errorf("id %s missing (table: %s)", id, w)
			}
		case g != w:
			if wrong++; wrong < 5 {
				t.Errorf("id %s is %q, table %q", id, g, w)
			}
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			if extra++; extra < 5 {
				t.Errorf("id %s (%s) is not in the table", id, g)
			}
		}
	}
	t.Logf("%d rows in the table, %d Parquet rows; %d missing, %d wrong, %d extra", len(want), st.Rows, missing, wrong, extra)
	checkHistories(t, dir, "kt")
	return len(want)
}

// checkHistories checks that each row's records in the Parquet output of
// stream, in seq order, follow its history in the table: v, which every
// update of the writers raises (ids are never used again: inserts and
// key changes take new ones), never goes down from one record of an id
// to the next, and no record follows an id's delete. So no snapshot row
// is older than a change ordered before it: a snapshot chunk read by a
// later attempt, under a later snapshot, still yields the rows at the
// origin (see the package doc).
func checkHistories(t *testing.T, dir, stream string) {
	t.Helper()
	script := `
import json, os, sys
import pyarrow.parquet as pq
d = os.path.join(sys.argv[1], sys.argv[2])
m = sorted(f for f in os.listdir(os.path.join(d, "_manifest")) if f.endswith(".json"))[-1]
recs = []
for f in json.load(open(os.path.join(d, "_manifest", m)))["files"]:
    t = pq.read_table(os.path.join(sys.argv[1], f["key"]), columns=["id", "v", "_openetl_seq", "_openetl_op"])
    recs += zip(*(c.to_pylist() for c in t.columns))
recs.sort(key=lambda r: (r[2], r[0]))
last, bad = {}, []
for id, v, seq, op in recs:
    l = last.get(id)
    if op == "delete":
        last[id] = (seq, v, True)
        continue
    if l is not None and (l[2] or v < l[1]):
        bad.append("id %s: %s v=%s at seq %s follows v=%s (deleted %s) at seq %s" % (id, op, v, seq, l[1], l[2], l[0]))
    last[id] = (seq, v, False)
print(json.dumps({"records": len(recs), "rows": len(last), "bad": len(bad), "first": bad[:5]}))
`
	f := filepath.Join(t.TempDir(), "histories.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), f, filepath.Join(dir, "tables"), stream)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var res struct {
		Records, Rows, Bad int
		First              []string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if res.Bad > 0 {
		t.Fatalf("%d records older than a record of lower seq (of %d records, %d rows), the first: %q", res.Bad, res.Records, res.Rows, res.First)
	}
	t.Logf("the %d records of %d rows follow each row's history in seq order", res.Records, res.Rows)
}

// latestRows reads a keyed stream with pyarrow and returns, per id, the
// values ("v note") of its latest version, leaving out ids whose latest
// version is a delete.
func latestRows(t testing.TB, dir, stream string) map[string]string {
	t.Helper()
	script := `
import json, os, sys
import pyarrow.parquet as pq
d = os.path.join(sys.argv[1], sys.argv[2])
m = sorted(f for f in os.listdir(os.path.join(d, "_manifest")) if f.endswith(".json"))[-1]
latest = {}
for f in json.load(open(os.path.join(d, "_manifest", m)))["files"]:
    t = pq.read_table(os.path.join(sys.argv[1], f["key"]), columns=["id", "v", "note", "_openetl_seq", "_openetl_op"])
    for id, v, note, seq, op in zip(*(c.to_pylist() for c in t.columns)):
        if id not in latest or latest[id][0] < seq:
            latest[id] = (seq, op, v, note)
print(json.dumps({str(k): "%s %s" % (x[2], x[3]) for k, x in latest.items() if x[1] != "delete"}))
`
	f := filepath.Join(t.TempDir(), "latest.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), f, filepath.Join(dir, "tables"), stream)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var rows map[string]string
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// snapState is the part of a snapshot split's resume state the kill test
// reads.
type snapState struct {
	After [][]byte
	Done  bool
	Rows  int64
}

// afterKey is the integer key a snapshot state resumes after (0: none).
func afterKey(t testing.TB, st snapState) int64 {
	t.Helper()
	if len(st.After) == 0 {
		return 0
	}
	n, err := strconv.ParseInt(string(st.After[0]), 10, 64)
	if err != nil {
		t.Fatalf("snapshot state key %q: %v", st.After[0], err)
	}
	return n
}

var recordName = regexp.MustCompile(`^\d{20}-\d{20}\.json$`)

// lastRecord returns the checkpoint record under dir with the highest
// epoch (nil when there is none, or it is being written).
func lastRecord(dir string) *checkpoint.Record {
	var last string
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && recordName.MatchString(e.Name()) && e.Name() > filepath.Base(last) {
			last = p
		}
		return nil
	})
	if last == "" {
		return nil
	}
	b, err := os.ReadFile(last)
	if err != nil {
		return nil
	}
	var r checkpoint.Record
	if json.Unmarshal(b, &r) != nil {
		return nil
	}
	return &r
}

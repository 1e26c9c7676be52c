package mysql_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

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
	var c struct{ DSN, DB, Dir string }
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatal(err)
	}
	src, err := mysql.New(mysql.Config{DSN: c.DSN, Database: c.DB})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	if _, err := syncOnce(context.Background(), src, c.Dir); err != nil {
		t.Fatal(err)
	}
}

// TestKill snapshots a table of 300k rows while a writer keeps
// committing inserts, updates (some changing the key) and deletes, and
// runs the pipeline in child processes SIGKILLed at random moments:
// twice during the snapshot, then three times while it streams (a
// backlog of 200k row changes in large transactions each time). Once
// the writer stops, a last child runs to the end; the Parquet output,
// read by pyarrow (each key's latest version, deletes removing it), must
// equal the table, with no version of a row written twice.
func TestKill(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	d := dsn(t)
	db := database(t, d)
	const n = 300000
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.kt (id bigint PRIMARY KEY, v bigint, note varchar(40))", db),
		fmt.Sprintf("INSERT INTO %[1]s.kt SELECT seq, seq, concat('row ', seq) FROM %[1]s.seq_1_to_%[2]d", db, n))
	dir := t.TempDir()

	// The writer: a transaction every few milliseconds.
	ctx, stopWriter := context.WithCancel(context.Background())
	writerDone := make(chan error, 1)
	go func() {
		c := conn(t, d)
		defer c.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		next := n + 1
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
			for _, sql := range sqls {
				if _, err := c.Execute(sql); err != nil {
					// The bulk updates run at the same time: a deadlock
					// rolls the transaction back; the writer goes on.
					var me *gomysql.MyError
					if errors.As(err, &me) && (me.Code == gomysql.ER_LOCK_DEADLOCK || me.Code == gomysql.ER_LOCK_WAIT_TIMEOUT) {
						if _, err := c.Execute("ROLLBACK"); err == nil {
							break
						}
					}
					writerDone <- fmt.Errorf("%s: %w", sql, err)
					return
				}
			}
			time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		}
		writerDone <- nil
	}()
	defer stopWriter()

	childEnv, _ := json.Marshal(map[string]string{"DSN": d, "DB": db, "Dir": dir})
	start := func() (*exec.Cmd, *strings.Builder, chan error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildSync$", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), "MYSQL_TEST_CHILD="+string(childEnv))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		return cmd, &out, exited
	}
	// The checkpoint records committed so far (HEAD changes at a claim
	// already; a record is written per committed epoch).
	records := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "my", "_checkpoints", "*.json"))
		return len(m)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	watch := conn(t, d)
	defer watch.Close()
	snapshotRunning := func() bool {
		r, err := watch.Execute(fmt.Sprintf("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT %%FROM `%s`.`kt`%%'", db))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := r.GetInt(0, 0)
		return n > 0
	}
	killed, inSnapshot := 0, 0
	for i := range 5 {
		if i >= 2 {
			// A backlog to stream: 200k row changes in 20 transactions.
			var bulk []string
			for k := range 20 {
				bulk = append(bulk, fmt.Sprintf("UPDATE %s.kt SET v = v + 1, note = 'bulk %d' WHERE id BETWEEN %d AND %d",
					db, i, k*15000, k*15000+9999))
			}
			execSQL(t, d, bulk...)
		}
		before := records()
		cmd, out, exited := start()
		var err error
		done := false
		if i < 2 {
			// During the snapshot: once the server runs its SELECT, at a
			// random moment of it.
		snap:
			for {
				select {
				case err = <-exited:
					done = true
					break snap
				case <-time.After(5 * time.Millisecond):
					if snapshotRunning() {
						break snap
					}
				}
			}
			if !done {
				time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
			}
		} else {
			// While streaming: after the child committed an epoch.
		wait:
			for {
				select {
				case err = <-exited:
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
		if !done {
			if i < 2 && records() == 0 && snapshotRunning() {
				inSnapshot++
			}
			cmd.Process.Signal(syscall.SIGKILL)
			err = <-exited
		}
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			killed++
		} else if err != nil {
			t.Fatalf("child %d failed:\n%s", i, out)
		} else {
			t.Logf("child %d ended before the kill", i)
		}
	}
	stopWriter()
	if err := <-writerDone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if killed < 4 || inSnapshot < 2 {
		t.Errorf("%d children killed, %d of them while the snapshot's SELECT ran: want at least 4 and 2", killed, inSnapshot)
	}
	_, out, exited := start()
	t0 := time.Now()
	if err := <-exited; err != nil {
		t.Fatalf("final child: %v\n%s", err, out)
	}
	t.Logf("%d children SIGKILLed (%d during the snapshot); the last child took %v", killed, inSnapshot, time.Since(t0))

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

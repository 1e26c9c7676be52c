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
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// appliedRows applies a stream's output (seq order) by id and returns
// id -> "v n", and how many inserts above seq first of ids up to n each
// has (rows read again: the writer inserts above n only).
func appliedRows(out []map[string]any, n int64, first string) (map[string]string, map[string]int) {
	got, again := map[string]string{}, map[string]int{}
	for _, r := range out {
		id := fmt.Sprint(r["id"])
		if r["_openetl_op"] == "delete" {
			delete(got, id)
			continue
		}
		got[id] = fmt.Sprintf("%v %v", r["v"], r["n"])
		var i int64
		fmt.Sscan(id, &i)
		if r["_openetl_op"] == "insert" && i <= n && fmt.Sprint(r["_openetl_seq"]) != first {
			again[id]++
		}
	}
	return got, again
}

// TestResnapshotUnderWriter: a re-snapshot requested through
// Source.Resnapshot is read by the next Sync, in chunks of 50 rows
// between watermark rows, while a writer updates, deletes and inserts
// rows of the same table; after a final sync the output applied in seq
// order equals the table, every row not changed meanwhile is read again
// once, and the watermark table is no stream.
func TestResnapshotUnderWriter(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	const rows = 2000
	execSQL(t, d, "CREATE TABLE "+db+".t (id BIGINT PRIMARY KEY, v VARCHAR(64), n BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO "+db+".t (id, v) SELECT seq, MD5(seq) FROM "+db+".seq_1_to_2000")
	dir := t.TempDir()
	src := newSource(t, d, db, mysql.Config{SnapshotChunkRows: 50})
	if res := sync(t, src, dir); res.Streams["t"].Read != rows {
		t.Fatalf("first sync read %+v, want %d rows", res.Streams, rows)
	}
	first := fmt.Sprint(readRows(t, dir, "t")[0]["_openetl_seq"])
	if err := src.Resnapshot(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	// The writer runs while the next sync reads the table again.
	stop, done := make(chan struct{}), make(chan error, 1)
	var txns atomic.Int64
	seed := uint64(time.Now().UnixNano())
	t.Logf("writer seed %d", seed)
	go func() {
		c := conn(t, d)
		defer c.Close()
		rng := rand.New(rand.NewPCG(seed, 3))
		next := 1_000_000
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var sqls []string
			for range 1 + rng.IntN(8) {
				id := 1 + rng.IntN(rows)
				switch rng.IntN(6) {
				case 0:
					next++
					sqls = append(sqls, fmt.Sprintf("INSERT INTO %s.t (id, v) VALUES (%d, 'new')", db, next))
				case 1:
					sqls = append(sqls, fmt.Sprintf("DELETE FROM %s.t WHERE id = %d", db, id))
				default:
					sqls = append(sqls, fmt.Sprintf("UPDATE %s.t SET v = MD5(RAND()), n = n + 1 WHERE id = %d", db, id))
				}
			}
			if _, err := c.Execute("BEGIN"); err != nil {
				done <- err
				return
			}
			for _, q := range sqls {
				if _, err := c.Execute(q); err != nil {
					done <- err
					return
				}
			}
			if _, err := c.Execute("COMMIT"); err != nil {
				done <- err
				return
			}
			txns.Add(1)
		}
	}()
	var notices []string
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := syncEvents(ctx, src, dir, func(e etl.Event) {
		if strings.HasPrefix(string(e.Kind), "resnapshot.") {
			notices = append(notices, string(e.Kind)+" "+e.Stream)
		}
	})
	close(stop)
	if werr := <-done; werr != nil {
		t.Fatalf("writer: %v", werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Streams[watermarkTable]; ok {
		t.Errorf("the watermark table is a stream: %+v", res.Streams)
	}
	sync(t, src, dir)
	out := readRows(t, dir, "t")
	got, again := appliedRows(out, rows, first)
	want := map[string]string{}
	for _, r := range queryRows(t, d, "SELECT id, v, n FROM "+db+".t") {
		want[r[0]] = r[1] + " " + r[2]
	}
	bad := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if bad++; bad <= 5 {
				t.Errorf("row %s: output %q (present %v), table %q", k, g, ok, w)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("row %s is in the output but not in the table", k)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d rows differ (%d in the table, %d in the output applied)", bad, len(want), len(got))
	}
	for id, n := range again {
		if n > 1 {
			t.Fatalf("id %s read again %d times", id, n)
		}
	}
	if len(again) < rows/2 {
		t.Fatalf("%d rows read again, want most of the table's %d", len(again), rows)
	}
	if len(notices) != 2 || notices[0] != "resnapshot.started t" || notices[1] != "resnapshot.done t" {
		t.Errorf("events %q, want resnapshot.started and resnapshot.done of t", notices)
	}
	t.Logf("writer committed %d transactions; %d rows read again; %d rows in the table equal the output's %d records applied in seq order",
		txns.Load(), len(again), len(want), len(out))
}

// watermarkTable is the source's table of marks.
const watermarkTable = "_openetl_watermark"

// TestResnapshotBadInput: a stream the source doesn't have, and a table
// without a key, are refused with the contract's errors.
func TestResnapshotBadInput(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, "CREATE TABLE "+db+".k (id INT PRIMARY KEY)", "CREATE TABLE "+db+".bare (v INT)")
	src := newSource(t, d, db, mysql.Config{})
	for _, c := range []struct {
		stream string
		want   error
	}{{"nosuch", source.ErrUnknownStream}, {"bare", source.ErrNoKey}} {
		if err := src.Resnapshot(context.Background(), c.stream); !errors.Is(err, c.want) {
			t.Errorf("Resnapshot(%q) = %v, want %v", c.stream, err, c.want)
		}
	}
}

// TestResnapshotResumes: a sync stopped part way into a re-snapshot
// (held once it emitted 300 rows, then cancelled) leaves a checkpoint
// with the job's last key; the next sync, from a new source as after a
// restart, goes on from there: every row is read again exactly once,
// and the output applied in seq order equals the table.
func TestResnapshotResumes(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	const rows = 1000
	execSQL(t, d, "CREATE TABLE "+db+".t (id BIGINT PRIMARY KEY, v VARCHAR(64), n BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO "+db+".t (id, v) SELECT seq, MD5(seq) FROM "+db+".seq_1_to_1000")
	dir := t.TempDir()
	cfg := mysql.Config{SnapshotChunkRows: 50}
	sync(t, newSource(t, d, db, cfg), dir)
	first := fmt.Sprint(readRows(t, dir, "t")[0]["_openetl_seq"])
	src := newSource(t, d, db, cfg)
	if err := src.Resnapshot(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	done := make(chan error, 1)
	go func() {
		_, err := syncOnce(ctx, testutil.HoldUntil(src, 300, release), dir)
		done <- err
	}()
	var after string
	testutil.Until(t, "a checkpoint with the re-snapshot part way", func() bool {
		select {
		case err := <-done:
			t.Fatalf("sync ended before a checkpoint held the re-snapshot part way: %v", err)
		default:
		}
		r := lastRecord(filepath.Join(dir, "checkpoints"))
		if r == nil {
			return false
		}
		var st struct{ Jobs []struct{ After [][]byte } }
		if json.Unmarshal(r.Resume["binlog:"+db], &st) == nil && len(st.Jobs) == 1 && len(st.Jobs[0].After) > 0 {
			after = string(st.Jobs[0].After[0])
			return true
		}
		return false
	})
	cancel()
	<-done
	t.Logf("stopped with the re-snapshot after key %s", after)
	sync(t, newSource(t, d, db, cfg), dir)
	out := readRows(t, dir, "t")
	got, again := appliedRows(out, rows, first)
	for id, n := range again {
		if n != 1 {
			t.Fatalf("id %s read again %d times", id, n)
		}
	}
	if len(again) != rows || len(got) != rows {
		t.Fatalf("%d rows read again, %d in the output applied; want %d", len(again), len(got), rows)
	}
}

// TestResnapshotSQLRequest: a request row a host inserts in SQL reads
// the table again in the next sync, as Resnapshot does; a request for a
// table the pipeline doesn't read changes nothing.
func TestResnapshotSQLRequest(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, "CREATE TABLE "+db+".t (id BIGINT PRIMARY KEY, v VARCHAR(64), n BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO "+db+".t (id, v) SELECT seq, MD5(seq) FROM "+db+".seq_1_to_120")
	dir := t.TempDir()
	src := newSource(t, d, db, mysql.Config{SnapshotChunkRows: 25})
	sync(t, src, dir)
	// The host creates the table as the source would, and asks in SQL.
	execSQL(t, d, "CREATE TABLE IF NOT EXISTS "+db+"."+watermarkTable+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, mark VARCHAR(255) NOT NULL)",
		"INSERT INTO "+db+"."+watermarkTable+" (mark) VALUES ('request:other')")
	if res := sync(t, src, dir); res.Streams["t"].Read != 0 {
		t.Fatalf("sync after a request for another table read %d records, want none", res.Streams["t"].Read)
	}
	execSQL(t, d, "INSERT INTO "+db+"."+watermarkTable+" (mark) VALUES ('request:t')")
	if res := sync(t, src, dir); res.Streams["t"].Read != 120 {
		t.Fatalf("sync after the request read %d records, want the 120 rows again", res.Streams["t"].Read)
	}
}

// TestResnapshotKilled: a pipeline process reading a table again is
// SIGKILLed once a checkpoint records the re-snapshot part way (the
// process holds once it emitted 600 records, so the kill lands part way
// however fast the machine); the next sync goes on from the recorded
// key: every row is read again exactly once.
func TestResnapshotKilled(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	const rows = 2000
	execSQL(t, d, "CREATE TABLE "+db+".t (id BIGINT PRIMARY KEY, v VARCHAR(64), n BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO "+db+".t (id, v) SELECT seq, MD5(seq) FROM "+db+".seq_1_to_2000")
	dir := t.TempDir()
	cfg := mysql.Config{SnapshotChunkRows: 100}
	sync(t, newSource(t, d, db, cfg), dir)
	first := fmt.Sprint(readRows(t, dir, "t")[0]["_openetl_seq"])
	if err := newSource(t, d, db, cfg).Resnapshot(context.Background(), "t"); err != nil {
		t.Fatal(err)
	}
	env, _ := json.Marshal(map[string]any{"DSN": d, "DB": db, "Dir": dir, "Chunk": 100})
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildSync$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "MYSQL_TEST_CHILD="+string(env))
	child := testutil.StartChild(t, cmd, testutil.Hold{After: 600, Splits: "^binlog:"})
	var after string
	testutil.Until(t, "a checkpoint with the re-snapshot part way", func() bool {
		select {
		case <-child.Exited():
			t.Fatalf("the child ended before a checkpoint held the re-snapshot part way: %v\n%s", child.Err(), child.Output())
		default:
		}
		r := lastRecord(filepath.Join(dir, "checkpoints"))
		if r == nil {
			return false
		}
		var st struct{ Jobs []struct{ After [][]byte } }
		if json.Unmarshal(r.Resume["binlog:"+db], &st) == nil && len(st.Jobs) == 1 && len(st.Jobs[0].After) > 0 {
			after = string(st.Jobs[0].After[0])
			return true
		}
		return false
	})
	if !child.Kill() {
		t.Fatalf("the child ended before the kill: %v\n%s", child.Err(), child.Output())
	}
	t.Logf("killed with the re-snapshot after key %s", after)
	sync(t, newSource(t, d, db, cfg), dir)
	out := readRows(t, dir, "t")
	got, again := appliedRows(out, rows, first)
	for id, n := range again {
		if n != 1 {
			t.Fatalf("id %s read again %d times", id, n)
		}
	}
	if len(again) != rows || len(got) != rows {
		t.Fatalf("%d rows read again, %d in the output applied; want %d", len(again), len(got), rows)
	}
}

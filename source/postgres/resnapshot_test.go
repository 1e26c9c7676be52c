package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// resnapTable creates tbl (id, at, v, n, keyed by (id, at): the columns
// tableRows and applied read) with rows 1 to n, and a publication pub
// of it.
func resnapTable(t *testing.T, d, tbl, pub string, n int) {
	t.Helper()
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8, at int4 NOT NULL DEFAULT 0, v text, n int8 NOT NULL DEFAULT 0, PRIMARY KEY (id, at))", tbl),
		fmt.Sprintf("INSERT INTO %s (id, v) SELECT g, md5(g::text) FROM generate_series(1, %d) g", tbl, n),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl),
		"ANALYZE "+tbl) // reltuples: the estimate progress reports
}

// startWriter commits transactions of 1 to 10 changes to tbl until the
// returned function is called, which returns how many it committed:
// updates and deletes of rows 1 to n, and inserts of ids from 1,000,001
// (so every insert of an id up to n in the output is a snapshot's).
func startWriter(t *testing.T, d, tbl string, n int64) func() int {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("writer seed %d", seed)
	stop, done := make(chan struct{}), make(chan error, 1)
	var txns atomic.Int64
	go func() {
		c, err := pgconn.Connect(context.Background(), d)
		if err != nil {
			done <- err
			return
		}
		defer c.Close(context.Background())
		rng := rand.New(rand.NewPCG(seed, 2))
		next := int64(1_000_000)
		for {
			// Between transactions only: see TestKillDuringSnapshotAndStreaming.
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var sql strings.Builder
			sql.WriteString("BEGIN;")
			for range 1 + rng.IntN(10) {
				id := 1 + rng.Int64N(n)
				switch rng.IntN(6) {
				case 0:
					next++
					fmt.Fprintf(&sql, "INSERT INTO %s (id, v) VALUES (%d, 'new');", tbl, next)
				case 1:
					fmt.Fprintf(&sql, "DELETE FROM %s WHERE id = %d;", tbl, id)
				default:
					fmt.Fprintf(&sql, "UPDATE %s SET v = md5(random()::text), n = n + 1 WHERE id = %d;", tbl, id)
				}
			}
			sql.WriteString("COMMIT")
			if _, err := c.Exec(context.Background(), sql.String()).ReadAll(); err != nil {
				done <- err
				return
			}
			txns.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	var once sync.Once
	var n64 int64
	stopFn := func() int {
		once.Do(func() {
			close(stop)
			if err := <-done; err != nil {
				t.Errorf("writer: %v", err)
			}
			n64 = txns.Load()
		})
		return int(n64)
	}
	t.Cleanup(func() { stopFn() })
	return stopFn
}

// resnapJobs is the re-snapshot part of the change stream's state in a
// checkpoint (version 2: a JSON tail after 17 bytes).
type resnapJobs struct {
	Jobs []struct {
		Stream string
		After  []string
		Rows   int64
	}
	Raise map[string]uint64
}

// slotJobs returns the re-snapshots in the last checkpoint's state of
// the slot's split; ok is false without a checkpoint or a version 2
// state.
func slotJobs(t *testing.T, ckpts, slot string) (resnapJobs, bool) {
	t.Helper()
	r := headRecord(t, ckpts)
	if r == nil {
		return resnapJobs{}, false
	}
	// The state's version 3 holds re-snapshots: 21 bytes (version, two
	// LSNs, the timeline), then the jobs as JSON.
	b := r.Resume["slot:"+slot]
	if len(b) <= 21 || b[0] != 3 {
		return resnapJobs{}, false
	}
	var x resnapJobs
	if err := json.Unmarshal(b[21:], &x); err != nil {
		t.Fatalf("slot state tail %q: %v", b[21:], err)
	}
	return x, true
}

// resnapRows counts, per id up to n, the inserts in out above seq
// first: rows of a re-snapshot (the writer inserts above n only).
func resnapRows(out []map[string]any, n int64) map[int64]int {
	num := func(v any) int64 {
		i, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		return i
	}
	first := num(out[0]["_openetl_seq"]) // the slot snapshot's rows come first
	got := map[int64]int{}
	for _, r := range out {
		if id := num(r["id"]); r["_openetl_op"] == "insert" && id <= n && num(r["_openetl_seq"]) > first {
			got[id]++
		}
	}
	return got
}

// TestResnapshotUnderWriter: etl.Pipeline.Resnapshot while a Run
// streams and a writer updates, deletes and inserts rows of the same
// table. The table is read again in chunks of 100 rows; Status shows
// the read in progress (the stream's split is held part way), the
// events say when it starts and ends, and the output applied in seq
// order equals the table: every key at its latest version, deleted
// keys absent. Every row of the table not changed since the re-snapshot
// began is in the output again, once.
func TestResnapshotUnderWriter(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("resnap"), name("pub"), name("slot")
	const rows = 3000
	resnapTable(t, d, tbl, pub, rows)
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 100, StatusInterval: 100 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond})
	var events sync.Map // kind: []etl.Event
	var mu sync.Mutex
	h.onEvent = func(e etl.Event) {
		if e.Kind == etl.EventResnapshotStarted || e.Kind == etl.EventResnapshotDone {
			mu.Lock()
			v, _ := events.Load(e.Kind)
			l, _ := v.([]etl.Event)
			events.Store(e.Kind, append(l, e))
			mu.Unlock()
		}
	}
	// The stream's split is held once it emitted 3,500 records: the
	// update of every row below is 3,000, so the hold lands in the
	// re-snapshot, whatever the machine's speed.
	release := make(chan struct{})
	h.wrap = func(s source.Source) source.Source { return testutil.HoldUntil(s, 3500, release) }
	var pl atomic.Pointer[etl.Pipeline]
	h.built = func(p *etl.Pipeline) { pl.Store(p) }
	ctx, cancel := context.WithCancel(testutil.Context(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	waitSplitDone(t, h.ckpts, "snapshot:"+tbl, done)
	execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = n + 1", tbl))
	waitConfirmed(t, d, slot, done)

	p := pl.Load()
	if err := p.Resnapshot(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	stopWriter := startWriter(t, d, tbl, rows)
	testutil.Until(t, "Status to show the re-snapshot in progress", func() bool {
		s := p.Status().Streams[tbl]
		return s.Snapshotting && s.SnapshotDone > 0 && s.SnapshotDone < rows && s.SnapshotEstimated > 0
	})
	close(release)
	testutil.Until(t, "a checkpoint with the re-snapshot done", func() bool {
		x, ok := slotJobs(t, h.ckpts, slot)
		return ok && len(x.Jobs) == 0 && x.Raise[tbl] > 0
	})
	txns := stopWriter()
	waitConfirmed(t, d, slot, done)
	out, got, ops := stopAndApply(t, h, cancel, done, tbl)
	want := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl))
	sameRows(t, got, want, out)

	mu.Lock()
	started, _ := events.Load(etl.EventResnapshotStarted)
	ended, _ := events.Load(etl.EventResnapshotDone)
	mu.Unlock()
	if s, e := started.([]etl.Event), ended.([]etl.Event); len(s) != 1 || len(e) != 1 || s[0].Stream != tbl || e[0].Stream != tbl {
		t.Fatalf("events started %+v, done %+v: want one of each for %s", s, e, tbl)
	}
	again := resnapRows(out, rows)
	for id, n := range again {
		if n > 1 {
			t.Fatalf("id %d read again %d times", id, n)
		}
	}
	if len(again) < rows/2 {
		t.Fatalf("%d rows read again, want most of the table's %d", len(again), rows)
	}
	t.Logf("writer committed %d transactions; %d rows read again; %d rows in the table equal the output's %d records applied in seq order (%v)",
		txns, len(again), len(want), len(out), ops)
}

// TestResnapshotKilled: a pipeline process streaming a table under a
// writer is SIGKILLed in the middle of a re-snapshot, once a checkpoint
// records it part way; the next process goes on from the recorded chunk
// (no row is read again twice), and the output applied in seq order
// equals the table.
func TestResnapshotKilled(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("resnapk"), name("pub"), name("slot")
	const rows = 4000
	resnapTable(t, d, tbl, pub, rows)
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	start := func(hold testutil.Hold) *testutil.Child {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "OPENETL_PG_CHILD=1", "OPENETL_PG_DSN="+d, "OPENETL_PG_PUB="+pub, "OPENETL_PG_SLOT="+slot,
			"OPENETL_PG_TABLES="+h.tables, "OPENETL_PG_CKPTS="+h.ckpts, "OPENETL_PG_CHUNK=100")
		return testutil.StartChild(t, cmd, hold)
	}
	// The first child holds the stream's split once it emitted 1,500
	// records (the re-snapshot's, and the writer's changes): a kill
	// then lands part way into the re-snapshot however fast the machine.
	first := start(testutil.Hold{After: 1500, Splits: "^slot:"})
	testutil.Until(t, "the snapshot done", func() bool {
		r := headRecord(t, h.ckpts)
		var st struct{ Done bool }
		return r != nil && json.Unmarshal(r.Resume["snapshot:"+tbl], &st) == nil && st.Done
	})
	stopWriter := startWriter(t, d, tbl, rows)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	if err := src.Resnapshot(context.Background(), tbl); err != nil {
		t.Fatal(err)
	}
	var at resnapJobs
	testutil.Until(t, "a checkpoint with the re-snapshot part way", func() bool {
		select {
		case <-first.Exited():
			t.Fatalf("child 1 ended: %v\n%s", first.Err(), first.Output())
		default:
		}
		x, ok := slotJobs(t, h.ckpts, slot)
		if ok && len(x.Jobs) == 1 && len(x.Jobs[0].After) > 0 {
			at = x
			return true
		}
		return false
	})
	if !first.Kill() {
		t.Fatalf("child 1 ended before the kill: %v\n%s", first.Err(), first.Output())
	}
	t.Logf("killed with the re-snapshot after key %v, %d rows", at.Jobs[0].After, at.Jobs[0].Rows)
	testutil.Until(t, "slot released by child 1", func() bool {
		return queryOne(t, d, "SELECT COALESCE((SELECT active FROM pg_replication_slots WHERE slot_name = '"+slot+"'), false)") == "f"
	})
	second := start(testutil.Hold{})
	testutil.Until(t, "a checkpoint with the re-snapshot done", func() bool {
		select {
		case <-second.Exited():
			t.Fatalf("child 2 ended: %v\n%s", second.Err(), second.Output())
		default:
		}
		x, ok := slotJobs(t, h.ckpts, slot)
		return ok && len(x.Jobs) == 0 && x.Raise[tbl] > 0
	})
	txns := stopWriter()
	if !second.Kill() {
		t.Fatalf("child 2 ended before the kill: %v\n%s", second.Err(), second.Output())
	}
	testutil.Until(t, "slot released by child 2", func() bool {
		return queryOne(t, d, "SELECT COALESCE((SELECT active FROM pg_replication_slots WHERE slot_name = '"+slot+"'), false)") == "f"
	})
	if _, err := h.sync(); err != nil {
		t.Fatalf("final sync: %v", err)
	}
	out := readRows(t, h.tables, tbl)
	got, ops := applied(out)
	want := tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl))
	sameRows(t, got, want, out)
	again := resnapRows(out, rows)
	for id, n := range again {
		if n > 1 {
			t.Fatalf("id %d read again %d times: the second process did not go on from the recorded chunk", id, n)
		}
	}
	if len(again) < rows/2 {
		t.Fatalf("%d rows read again, want most of the table's %d", len(again), rows)
	}
	t.Logf("writer committed %d transactions; %d rows read again; %d rows in the table equal the output's %d records applied in seq order (%v)",
		txns, len(again), len(want), len(out), ops)
}

// TestResnapshotRequests: a request made while no pipeline runs is read
// by the next Sync, to the end of the table before it returns; bad
// requests fail with the errors the contract names; a transaction open
// across a re-snapshot, committed in a later sync, lands above the
// chunk's row of its key (the state keeps the chunk's seq).
func TestResnapshotRequests(t *testing.T) {
	d := dsn(t)
	tbl, bare, pub, slot := name("resnapr"), name("bare"), name("pub"), name("slot")
	resnapTable(t, d, tbl, pub, 250)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (v text)", bare), fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, bare),
		fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", bare))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 40})
	var pl *etl.Pipeline
	h.built = func(p *etl.Pipeline) { pl = p }
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	for _, c := range []struct {
		stream string
		want   error
	}{{"nosuch", source.ErrUnknownStream}, {bare, source.ErrNoKey}} {
		if err := src.Resnapshot(ctx, c.stream); !errors.Is(err, c.want) {
			t.Errorf("Resnapshot(%q) = %v, want %v", c.stream, err, c.want)
		}
		if err := pl.Resnapshot(ctx, c.stream); !errors.Is(err, c.want) {
			t.Errorf("Pipeline.Resnapshot(%q) = %v, want %v", c.stream, err, c.want)
		}
	}
	h.options = func(b *etl.Builder) *etl.Builder { return b.Streams(tbl) }
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	if err := pl.Resnapshot(ctx, bare); !errors.Is(err, source.ErrUnknownStream) {
		t.Errorf("Resnapshot of a stream the pipeline doesn't read = %v, want source.ErrUnknownStream", err)
	}

	execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = 7 WHERE id = 5", tbl), fmt.Sprintf("DELETE FROM %s WHERE id = 6", tbl))
	if err := pl.Resnapshot(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = 8 WHERE id = 5", tbl))
	res, err := h.sync()
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Streams[tbl].Read; n != 3+249 {
		t.Errorf("sync read %d records, want the 3 changes and the 249 rows read again", n)
	}
	if x, ok := slotJobs(t, h.ckpts, slot); !ok || len(x.Jobs) != 0 {
		t.Errorf("re-snapshots %+v after the sync, want none left", x)
	}
	out := readRows(t, h.tables, tbl)
	got, _ := applied(out)
	sameRows(t, got, tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl)), out)

	// A transaction open across a re-snapshot: its update, written
	// before the chunk's watermark and committed after it (and after the
	// sync that read the chunk), lands above the chunk's row of its key.
	open, err := pgconn.Connect(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(ctx)
	if _, err := open.Exec(ctx, fmt.Sprintf("BEGIN; UPDATE %s SET n = 99 WHERE id = 10", tbl)).ReadAll(); err != nil {
		t.Fatal(err)
	}
	if err := pl.Resnapshot(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := open.Exec(ctx, "COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	out = readRows(t, h.tables, tbl)
	got, _ = applied(out)
	sameRows(t, got, tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl)), out)
}

// TestResnapshotSignalTable: an INSERT into Config.SignalTable, seen
// through the change stream, reads the stream's table again in the next
// sync; the signal table is no stream; a signal naming a stream the
// pipeline doesn't read changes nothing; a signal table missing from
// the publication fails Open with an error naming it.
func TestResnapshotSignalTable(t *testing.T) {
	d := dsn(t)
	tbl, sig, pub, slot := name("resnaps"), name("signal"), name("pub"), name("slot")
	const rows = 300
	resnapTable(t, d, tbl, pub, rows)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id bigserial PRIMARY KEY, stream text NOT NULL)", sig),
		fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, sig))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 70, SignalTable: sig})
	res, err := h.sync()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Streams[sig]; ok || res.Streams[tbl].Read != rows {
		t.Fatalf("first sync read %+v: want %d rows of %s and no stream %s", res.Streams, rows, tbl, sig)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s (stream) VALUES ('nosuch')", sig))
	if res, err = h.sync(); err != nil || res.Streams[tbl].Read != 0 {
		t.Fatalf("sync after a signal for no stream read %+v, %v: want nothing", res.Streams, err)
	}
	execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = 5 WHERE id = 3", tbl),
		fmt.Sprintf("BEGIN; INSERT INTO %s (stream) VALUES ('%s'); DELETE FROM %s WHERE id = 4; COMMIT", sig, tbl, tbl))
	if res, err = h.sync(); err != nil {
		t.Fatal(err)
	}
	if n := res.Streams[tbl].Read; n != 2+rows-1 {
		t.Errorf("sync read %d records, want the 2 changes and the %d rows read again", n, rows-1)
	}
	out := readRows(t, h.tables, tbl)
	got, _ := applied(out)
	sameRows(t, got, tableRows(t, d, fmt.Sprintf("SELECT id, at, v, n FROM %s", tbl)), out)
	if again := resnapRows(out, rows); len(again) != rows-1 {
		t.Errorf("%d rows read again, want %d", len(again), rows-1)
	}

	bad := newHarness(t, d, postgres.Config{Publication: pub, Slot: name("slot"), SignalTable: "nosuch_signal"})
	if _, err := bad.sync(); err == nil || !strings.Contains(err.Error(), `signal table "nosuch_signal"`) {
		t.Errorf("sync with a signal table not in the publication: %v, want an error naming it", err)
	}
}

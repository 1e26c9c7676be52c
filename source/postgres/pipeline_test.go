package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// TestPipeline syncs a table of many types into sink/parquet: first its
// snapshot, then inserts, updates and deletes streamed from the slot, and
// checks with pyarrow that every change landed exactly once, with its op
// and its values.
func TestPipeline(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("items"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf(`CREATE TABLE %s (
	id int4 PRIMARY KEY, big int8, amount numeric(12,2), note text, ok bool,
	at timestamptz, day date, doc jsonb, tags text[])`, tbl),
		fmt.Sprintf(`INSERT INTO %s SELECT g, g * 10000000000, g + 0.25, 'note ' || g, g %% 2 = 0,
	'2024-01-02 03:04:05.123456+02'::timestamptz + g * interval '1 hour', date '2024-02-29' + g,
	jsonb_build_object('g', g), ARRAY['a', g::text] FROM generate_series(1, 50) g`, tbl),
		fmt.Sprintf(`INSERT INTO %s (id) VALUES (51)`, tbl)) // all nulls but the key
	dropSlotAtCleanup(t, d, slot)

	h := newHarness(t, d, postgres.Config{Publication: pub, CreatePublication: true, Tables: []string{tbl}, Slot: slot})
	tables := h.tables
	sync := func() etl.Result {
		t.Helper()
		res, err := h.sync()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := sync()
	if c := res.Streams[tbl]; c.Read != 51 || c.Written != 51 || c.Quarantined != 0 {
		t.Fatalf("snapshot sync counts %+v, want 51 read and written", c)
	}
	st := testutil.ReadParquetTables(t, tables)[tbl]
	if st == nil || st.Rows != 51 || st.DistinctIDs != 51 {
		t.Fatalf("after the snapshot: %+v, want 51 rows and ids", st)
	}
	rows := readRows(t, tables, tbl)
	row1 := rows[0]
	if got := fmt.Sprintf("%v %v %v %v %v %v %v %v %v", row1["id"], row1["big"], row1["amount"], row1["note"], row1["ok"], row1["at"], row1["day"], row1["doc"], row1["tags"]); got !=
		`1 10000000000 1.25 note 1 false 2024-01-02T02:04:05.123456+00:00 2024-03-01 {"g": 1} [a 1]` {
		t.Errorf("row 1 read back as %s", got)
	}
	if r := rows[50]; r["id"] != json.Number("51") || r["big"] != nil || r["tags"] != nil || r["doc"] != nil || r["_openetl_op"] != "insert" {
		t.Errorf("row 51 read back as %v", r)
	}

	// Changes, in three transactions.
	before := queryOne(t, d, "SELECT pg_current_wal_insert_lsn()")
	execSQL(t, d,
		fmt.Sprintf(`INSERT INTO %s (id, note) VALUES (100, 'new'), (101, 'newer')`, tbl),
		fmt.Sprintf(`BEGIN; UPDATE %s SET note = 'changed', amount = -1.5 WHERE id IN (1, 100); DELETE FROM %s WHERE id = 2; COMMIT`, tbl, tbl),
		fmt.Sprintf(`UPDATE %s SET note = 'twice' WHERE id = 1`, tbl))
	res = sync()
	if c := res.Streams[tbl]; c.Read != 6 || c.Written != 6 {
		t.Fatalf("change sync counts %+v, want 6 read and written", c)
	}
	st = testutil.ReadParquetTables(t, tables)[tbl]
	if st.Rows != 57 || st.DistinctIDs != 57 {
		t.Fatalf("after the changes: %+v, want 57 rows and ids", st)
	}
	var got []string
	for _, r := range readRows(t, tables, tbl)[51:] {
		got = append(got, fmt.Sprintf("%v %v %v %v", r["_openetl_op"], r["id"], r["note"], r["amount"]))
	}
	want := []string{"insert 100 new <nil>", "insert 101 newer <nil>", "update 1 changed -1.5", "update 100 changed -1.5", "delete 2 <nil> <nil>", "update 1 twice -1.5"}
	if !slices.Equal(got, want) {
		t.Errorf("changes read back as\n%q\nwant\n%q", got, want)
	}

	// Nothing new: a third sync reads nothing.
	if c := sync().Streams[tbl]; c.Read != 0 {
		t.Errorf("idle sync read %+v", c)
	}
	// One more change: its epoch's commit acknowledges the second sync's
	// state (the runner acks one checkpoint behind, and an idle sync
	// commits no epoch).
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s (id) VALUES (102)", tbl))
	if c := sync().Streams[tbl]; c.Read != 1 {
		t.Errorf("last sync read %+v, want 1", c)
	}
	// The slot confirmed past the changes.
	if ok := queryOne(t, d, "SELECT confirmed_flush_lsn > '"+before+"' FROM pg_replication_slots WHERE slot_name = '"+slot+"'"); ok != "t" {
		t.Errorf("slot did not confirm past %s: %s", before, queryOne(t, d, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '"+slot+"'"))
	}
}

// TestUnchangedToast: an update that leaves a TOASTed column alone sends
// no value for it; the row carries the unchanged marker, never a null.
func TestUnchangedToast(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("toast"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, big text, n int4)", tbl),
		fmt.Sprintf("ALTER TABLE %s ALTER big SET STORAGE EXTERNAL", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1, repeat('x', 100000), 1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	ctx := context.Background()
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := splits[0].Read(ctx, rec, true); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("UPDATE %s SET n = 2 WHERE id = 1", tbl))
	splits, err = src.Open(ctx, []string{tbl}, afterSnapshot(t, splits, string(splits[0].ID()), rec.state))
	if err != nil {
		t.Fatal(err)
	}
	rec.payloads = nil
	if err := splits[0].Read(ctx, rec, true); err != nil {
		t.Fatal(err)
	}
	if len(rec.payloads) != 1 {
		t.Fatalf("read %d changes, want 1", len(rec.payloads))
	}
	vals, err := source.DecodeRow(nil, rec.payloads[0])
	if err != nil || len(vals) != 3 {
		t.Fatalf("payload %q: %v", rec.payloads[0], err)
	}
	if string(vals[0].Text) != "1" || !vals[1].Unchanged || vals[1].Null || string(vals[2].Text) != "2" {
		t.Errorf("update decoded as %+v, want 1, unchanged, 2", vals)
	}
}

type recorder struct {
	payloads [][]byte
	state    []byte
}

func (r *recorder) Record(_ string, _ source.Op, _ int64, _, payload []byte) error {
	r.payloads = append(r.payloads, slices.Clone(payload))
	return nil
}

func (r *recorder) ResumePoint(st []byte) error { r.state = slices.Clone(st); return nil }

// queryOne returns the first value of a one-row query.
func queryOne(t *testing.T, d, sql string) string {
	t.Helper()
	rows := queryRows(t, d, sql)
	if len(rows) == 0 {
		t.Fatalf("%s: no row", sql)
	}
	return rows[0][0]
}

// queryRows returns a query's rows, each value as text.
func queryRows(t *testing.T, d, sql string) [][]string {
	t.Helper()
	c, err := pgconn.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	res, err := c.Exec(context.Background(), sql).ReadAll()
	if err != nil || len(res) == 0 {
		t.Fatalf("%s: %v", sql, err)
	}
	var out [][]string
	for _, r := range res[0].Rows {
		var vals []string
		for _, v := range r {
			vals = append(vals, string(v))
		}
		out = append(out, vals)
	}
	return out
}

// readRows reads a stream's rows with pyarrow, in _openetl_seq order
// (ties by id, a null id first), as JSON values.
func readRows(t *testing.T, tables, stream string) []map[string]any {
	t.Helper()
	script := `
import json, os, sys
import pyarrow.parquet as pq
d = os.path.join(sys.argv[1], sys.argv[2])
m = sorted(f for f in os.listdir(os.path.join(d, "_manifest")) if f.endswith(".json"))[-1]
files = json.load(open(os.path.join(d, "_manifest", m)))["files"]
rows = []
for f in files:
    rows += pq.read_table(os.path.join(sys.argv[1], f["key"])).to_pylist()
rows.sort(key=lambda r: (r["_openetl_seq"], (0, 0) if r["id"] is None else (1, r["id"])))
def conv(v):
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if type(v).__name__ == "Decimal":
        return float(v)
    return v
print(json.dumps([{k: conv(v) for k, v in r.items()} for r in rows]))
`
	f := filepath.Join(t.TempDir(), "read.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), f, tables, stream)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var rows []map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestSlotDropped: a resume state whose slot was dropped by hand fails
// Open with a *SlotError wrapping ErrSlotMissing that names the slot, and
// the slot is not recreated.
func TestSlotDropped(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("dropped"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl), fmt.Sprintf("INSERT INTO %s VALUES (1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	ctx := context.Background()
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var last []byte
	if err := splits[0].Read(ctx, emitFunc(func(st []byte) { last = st }), true); err != nil {
		t.Fatal(err)
	}
	resume := map[source.SplitID][]byte{splits[0].ID(): last}
	reopened, err := src.Open(ctx, []string{tbl}, resume)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, "SELECT pg_drop_replication_slot('"+slot+"')")
	check := func(what string, err error) {
		t.Helper()
		var se *postgres.SlotError
		if !errors.As(err, &se) || !errors.Is(err, postgres.ErrSlotMissing) || se.Slot != slot {
			t.Fatalf("%s after the slot was dropped: %v, want a *SlotError for %q wrapping ErrSlotMissing", what, err, slot)
		}
	}
	// Dropped between Open and Read, and before Open.
	check("Read", reopened[0].Read(ctx, emitFunc(func([]byte) {}), false))
	_, err = src.Open(ctx, []string{tbl}, resume)
	check("Open", err)
	t.Log(err)
	execSQL(t, d, "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '"+slot+"') THEN RAISE 'slot recreated'; END IF; END $$")

	// With PositionLostResnapshot, a slot dropped between Open and Read
	// ends the attempt for a new one (source.ErrReopen), which starts
	// over; Open starts over at once.
	re := newSource(t, d, postgres.Config{Publication: pub, Slot: slot, OnPositionLost: source.PositionLostResnapshot})
	if _, err := re.Open(ctx, []string{tbl}, nil); err != nil { // a slot to drop
		t.Fatal(err)
	}
	if reopened, err = re.Open(ctx, []string{tbl}, map[source.SplitID][]byte{splits[0].ID(): last}); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, "SELECT pg_drop_replication_slot('"+slot+"')")
	err = reopened[0].Read(ctx, emitFunc(func([]byte) {}), false)
	if !errors.Is(err, source.ErrReopen) || !errors.Is(err, postgres.ErrSlotMissing) {
		t.Fatalf("Read with PositionLostResnapshot after the slot was dropped: %v, want source.ErrReopen and ErrSlotMissing", err)
	}
	t.Log(err)
	if _, err := re.Open(ctx, []string{tbl}, resume); err != nil {
		t.Fatalf("Open with PositionLostResnapshot after the slot was dropped: %v", err)
	}
}

type emitFunc func(state []byte)

func (f emitFunc) Record(string, source.Op, int64, []byte, []byte) error { return nil }
func (f emitFunc) ResumePoint(st []byte) error                           { f(slices.Clone(st)); return nil }

// TestSlotRecreatedBeforeStart: between Read's check of the slot and
// START_REPLICATION, another process (a second copy of the pipeline
// starting fresh) drops the slot and creates it again after a change was
// committed. The server would stream from the new slot's consistent
// point, past that change; Read must fail with ErrSlotAdvanced instead.
func TestSlotRecreatedBeforeStart(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("recreated"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl), fmt.Sprintf("INSERT INTO %s VALUES (1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	ctx := testutil.Context(t)
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stream source.Split
	for _, sp := range splits {
		if strings.HasPrefix(string(sp.ID()), "slot:") {
			stream = sp
		}
	}
	if stream == nil {
		t.Fatalf("no slot split among %d", len(splits))
	}
	postgres.SetBeforeStart(func() {
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (2)", tbl),
			"SELECT pg_drop_replication_slot('"+slot+"')",
			"SELECT pg_create_logical_replication_slot('"+slot+"', 'pgoutput')")
	})
	defer postgres.SetBeforeStart(nil)
	err = stream.Read(ctx, emitFunc(func([]byte) {}), true)
	if !errors.Is(err, postgres.ErrSlotAdvanced) {
		t.Fatalf("Read from a slot created again before START_REPLICATION: %v, want ErrSlotAdvanced", err)
	}
}

// TestReadReturnsWithSlotReleased checks that a Read returns only once
// the server has let go of the slot: a restart right after it (a retry in
// the same process, a new Source) must not find the slot in use.
func TestReadReturnsWithSlotReleased(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("release"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl), fmt.Sprintf("INSERT INTO %s VALUES (1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	ctx := testutil.Context(t)
	// The check asks on a connection opened beforehand, so that nothing
	// stands between Read's return and the question.
	c, err := pgconn.Connect(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var resume map[source.SplitID][]byte
	for i := range 20 {
		// Even rounds start fresh (Open recreates the slot and refuses
		// while it is held); odd rounds resume the stream.
		if i%2 == 0 {
			resume = nil
		}
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (%d)", tbl, i+2))
		_, _, states, err := readAllSplits(ctx, newSource(t, d, postgres.Config{Publication: pub, Slot: slot}), []string{tbl}, resume)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		resume = states
		res, err := c.Exec(ctx, "SELECT active_pid FROM pg_replication_slots WHERE active AND slot_name = '"+slot+"'").ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(res[0].Rows) > 0 {
			t.Fatalf("round %d: Read returned while process %s still held the slot", i, res[0].Rows[0][0])
		}
	}
}

// TestSlotInUseIsNotDropped: a first read (no resume state) would drop and
// recreate its slot; while another process streams from a slot of that
// name, Open refuses with ErrSlotInUse and leaves the slot alone.
func TestSlotInUseIsNotDropped(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("inuse"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY)", tbl), fmt.Sprintf("INSERT INTO %s VALUES (1)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	src := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	splits, err := src.Open(ctx, []string{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The first reader takes the snapshot and keeps streaming.
	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- splits[0].Read(ctx, emitFunc(func([]byte) {
			select {
			case started <- struct{}{}:
			default:
			}
		}), false)
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("first reader stopped: %v", err)
	case <-testutil.Context(t).Done():
		t.Fatal("first reader never reached a resume point")
	}
	// A resume point can come before the walsender takes the slot: the
	// slot is in use once the server says so.
	waitStreaming(t, d, slot, done)
	other := newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	_, err = other.Open(context.Background(), []string{tbl}, nil)
	if !errors.Is(err, postgres.ErrSlotInUse) || !strings.Contains(err.Error(), slot) {
		t.Fatalf("second first-read: %v, want ErrSlotInUse naming %q", err, slot)
	}
	cancel()
	<-done
}

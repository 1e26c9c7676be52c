package postgres_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/source/postgres"
)

// TestAddColumnDefault: a column added with a default between syncs
// reaches the destination for rows not changed since: the next sync
// reads the table again (a new snapshot, whose seq is above every earlier
// version and below every later change) and says so in a schema.changed
// event; applied by key in seq order, the destination equals the table.
// A column added without a default (existing rows read null) reads
// nothing again. A table without a key can't be merged, so it is not
// read again: the event says its rows were not backfilled.
func TestAddColumnDefault(t *testing.T) {
	d := dsn(t)
	tbl, bare, pub, slot := name("addcol"), name("addbare"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, a text)", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1, 'x'), (2, 'y')", tbl),
		fmt.Sprintf("CREATE TABLE %s (id int4, a text)", bare),
		fmt.Sprintf("INSERT INTO %s VALUES (1, 'x')", bare),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s, %s", pub, tbl, bare))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	events := newEventLog()
	h.onEvent = events.add
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	events.wait(t)
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s ADD COLUMN b int4 DEFAULT 5", tbl),
		fmt.Sprintf("ALTER TABLE %s ADD COLUMN b int4 NOT NULL DEFAULT 7", bare),
		fmt.Sprintf("UPDATE %s SET a = 'z' WHERE id = 2", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (3, 'w')", tbl))
	res, err := h.sync()
	if err != nil {
		t.Fatal(err)
	}
	// The keyed table read again (rows 1, 2, 3) and its two changes.
	if c := res.Streams[tbl]; c.Read != 5 || c.Written != 5 {
		t.Errorf("%s counts %+v, want 5 read and written (3 snapshot rows, 2 changes)", tbl, c)
	}
	if c := res.Streams[bare]; c.Read != 0 {
		t.Errorf("%s counts %+v, want nothing read again", bare, c)
	}
	changed := map[string]etl.Event{}
	for _, e := range events.wait(t) {
		if e.Kind == etl.EventSchemaChanged {
			changed[e.Stream+"."+e.Column] = e
		}
	}
	if e, ok := changed[tbl+".b"]; !ok || e.Change != "added" || !strings.Contains(e.Detail, "5") || !strings.Contains(e.Detail, "snapshot") {
		t.Errorf("schema.changed for %s.b: %+v (found %v), want one saying the table is read again", tbl, e, ok)
	}
	if e, ok := changed[bare+".b"]; !ok || !strings.Contains(e.Detail, "7") || !strings.Contains(e.Detail, "not backfilled") {
		t.Errorf("schema.changed for %s.b: %+v (found %v), want one saying rows were not backfilled", bare, e, ok)
	}
	live := func() []string {
		m := map[string]string{}
		for _, r := range readRows(t, h.tables, tbl) {
			if r["_openetl_op"] == "delete" {
				delete(m, fmt.Sprint(r["id"]))
			} else {
				m[fmt.Sprint(r["id"])] = fmt.Sprintf("%v %v %v %v", r["id"], r["a"], r["b"], r["c"])
			}
		}
		var out []string
		for _, v := range m {
			out = append(out, v)
		}
		slices.Sort(out)
		return out
	}
	if got, want := live(), []string{"1 x 5 <nil>", "2 z 5 <nil>", "3 w 5 <nil>"}; !slices.Equal(got, want) {
		t.Errorf("applied by key: %q, want the table %q", got, want)
	}

	// Without a default: nothing read again, no event.
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s ADD COLUMN c text", tbl), fmt.Sprintf("UPDATE %s SET c = 'u' WHERE id = 3", tbl))
	if res, err = h.sync(); err != nil {
		t.Fatal(err)
	}
	if c := res.Streams[tbl]; c.Read != 1 {
		t.Errorf("after ADD COLUMN without a default: counts %+v, want only the update read", c)
	}
	for _, e := range events.wait(t) {
		if e.Kind == etl.EventSchemaChanged {
			t.Errorf("after ADD COLUMN without a default: %+v", e)
		}
	}
	if got, want := live(), []string{"1 x 5 <nil>", "2 z 5 <nil>", "3 w 5 u"}; !slices.Equal(got, want) {
		t.Errorf("applied by key: %q, want the table %q", got, want)
	}
	// A later sync reads nothing again.
	if res, err = h.sync(); err != nil || res.Streams[tbl].Read != 0 {
		t.Errorf("idle sync: %+v, %v", res.Streams[tbl], err)
	}
}

// TestAddColumnDefaultOpenTransaction: a transaction that changed a row
// before a table is read again, and commits after that snapshot was
// taken (so the snapshot lacks its change), still has the last word: its
// change's seq is raised above the snapshot rows'.
func TestAddColumnDefaultOpenTransaction(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("addopen"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, a text)", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1, 'x'), (2, 'y')", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s ADD COLUMN b int4 DEFAULT 5", tbl))
	ctx := t.Context()
	a, err := pgconn.Connect(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	for _, sql := range []string{"BEGIN", fmt.Sprintf("UPDATE %s SET a = 'open' WHERE id = 1", tbl)} {
		if _, err := a.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatal(err)
		}
	}
	// Read again while the update is not committed: the snapshot has row
	// 1 as it was.
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 2 {
		t.Fatalf("sync reading the table again: %+v, %v", res.Streams[tbl], err)
	}
	if _, err := a.Exec(ctx, "COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 1 {
		t.Fatalf("sync after the commit: %+v, %v", res.Streams[tbl], err)
	}
	m := map[string]string{}
	for _, r := range readRows(t, h.tables, tbl) {
		m[fmt.Sprint(r["id"])] = fmt.Sprintf("%v %v", r["a"], r["b"])
	}
	if want := map[string]string{"1": "open 5", "2": "y 5"}; fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("applied by key in seq order: %v, want the table %v", m, want)
	}
}

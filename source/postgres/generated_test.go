package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/postgres"
)

// TestGeneratedColumns: a generated column reaches the destination with
// its value, in the snapshot and in streamed inserts and updates alike,
// or not at all: never as a null the change stream left out. pgoutput
// sends no generated column before 18; on 18 it sends stored ones when
// the publication has publish_generated_columns = stored (which the
// source sets on a publication it creates) and virtual ones never.
func TestGeneratedColumns(t *testing.T) {
	d := dsn(t)
	major := serverMajor(t, d)
	for _, tc := range []struct {
		name   string
		create bool // the source creates the publication
	}{{"user publication", false}, {"created publication", true}} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, pub, slot := name("gencol"), name("pub"), name("slot")
			cols := "id int4 PRIMARY KEY, a int4, g int4 GENERATED ALWAYS AS (a * 2) STORED"
			if major >= 18 {
				cols += ", v int4 GENERATED ALWAYS AS (a * 3) VIRTUAL"
			}
			execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (%s)", tbl, cols),
				fmt.Sprintf("INSERT INTO %s (id, a) VALUES (1, 10)", tbl))
			cfg := postgres.Config{Publication: pub, Slot: slot}
			if tc.create {
				cfg.CreatePublication, cfg.Tables = true, []string{tbl}
			} else {
				execSQL(t, d, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
			}
			t.Cleanup(func() { execSQL(t, d, "DROP PUBLICATION IF EXISTS "+pub) })
			dropSlotAtCleanup(t, d, slot)

			// The declared columns: g only when the stream sends it.
			cat, err := newSource(t, d, cfg).Discover(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var declared []string
			for _, s := range cat.Streams {
				if s.Name == tbl {
					for _, c := range s.Columns {
						declared = append(declared, c.Name)
					}
				}
			}
			want := "id a"
			if major >= 18 && tc.create {
				want = "id a g"
			}
			if got := strings.Join(declared, " "); got != want {
				t.Errorf("declared columns %q, want %q", got, want)
			}

			h := newHarness(t, d, cfg)
			if _, err := h.sync(); err != nil {
				t.Fatal(err)
			}
			execSQL(t, d, fmt.Sprintf("INSERT INTO %s (id, a) VALUES (2, 20)", tbl),
				fmt.Sprintf("UPDATE %s SET a = 11 WHERE id = 1", tbl))
			res, err := h.sync()
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Streams[tbl]; c.Read != 2 || c.Written != 2 {
				t.Errorf("streamed counts %+v, want the insert and the update read and written", c)
			}
			rows := readRows(t, h.tables, tbl)
			if len(rows) != 3 {
				t.Fatalf("rows %v, want the snapshot row, the insert and the update", rows)
			}
			for _, r := range rows {
				a := fmt.Sprint(r["a"])
				var n int
				fmt.Sscan(a, &n)
				for col, times := range map[string]int{"g": 2, "v": 3} {
					v, ok := r[col]
					if !ok {
						continue // left out: never a wrong value
					}
					if got := fmt.Sprint(v); got != fmt.Sprint(n*times) {
						t.Errorf("%s row %v (%s): %s = %s, want %d or the column absent", tbl, r["id"], r["_openetl_op"], col, got, n*times)
					}
				}
			}
			if _, ok := rows[0]["g"]; ok != (major >= 18 && tc.create) {
				t.Errorf("g in the destination: %v, want it there only when the stream sends it", ok)
			}
		})
	}
}

// serverMajor returns the major version of the server at d.
func serverMajor(t *testing.T, d string) int {
	t.Helper()
	var major int
	if _, err := fmt.Sscan(strings.SplitN(version(d), ".", 2)[0], &major); err != nil {
		t.Fatalf("server version of %s: %v", d, err)
	}
	return major
}

// TestColumnLeavesStream: a declared column that the change stream
// stops sending while a pipeline runs (dropped, or left out of the
// publication's column list) ends the attempt with a *SchemaChangeError
// naming the table and column, and Run goes on in a new attempt that
// declares what the stream sends: the rows after it never carry the
// column as a null nobody read.
func TestColumnLeavesStream(t *testing.T) {
	d := dsn(t)
	for _, tc := range []struct{ name, alter string }{
		{"dropped", "ALTER TABLE %[1]s DROP COLUMN b"},
		{"column list", "ALTER PUBLICATION %[2]s SET TABLE %[1]s (id, a)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, pub, slot := name("leaves"), name("pub"), name("slot")
			execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, a text, b int4)", tbl),
				fmt.Sprintf("INSERT INTO %s VALUES (1, 'one', 11)", tbl),
				fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
			t.Cleanup(func() { execSQL(t, d, "DROP PUBLICATION IF EXISTS "+pub) })
			dropSlotAtCleanup(t, d, slot)
			h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond})
			if _, err := h.sync(); err != nil {
				t.Fatal(err)
			}
			testutil.Until(t, "slot "+slot+" released by the sync", func() bool {
				return queryOne(t, d, "SELECT active FROM pg_replication_slots WHERE slot_name = '"+slot+"'") == "f"
			})
			var logs strings.Builder
			h.logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, cancel := context.WithCancel(testutil.Context(t))
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- h.run(ctx, 50*time.Millisecond) }()
			waitStreaming(t, d, slot, done) // it read the catalog before the change
			execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (2, 'two', 22)", tbl),
				fmt.Sprintf(tc.alter, tbl, pub),
				fmt.Sprintf("INSERT INTO %s (id, a) VALUES (3, 'three')", tbl),
				fmt.Sprintf("UPDATE %s SET a = 'uno' WHERE id = 1", tbl))
			waitConfirmed(t, d, slot, done)
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
			if !strings.Contains(logs.String(), "starting a new attempt") || !strings.Contains(logs.String(), `column \"b\" is not in the change stream`) ||
				!strings.Contains(logs.String(), tbl) {
				t.Errorf("the new attempt was not logged with the table and column: %s", logs.String())
			}
			var got []string
			for _, r := range readRows(t, h.tables, tbl) {
				b, ok := r["b"]
				if !ok {
					b = "absent"
				}
				got = append(got, fmt.Sprintf("%v %v %v %v", r["_openetl_op"], r["id"], r["a"], b))
			}
			// Row 2, read before the change, has b unless the new attempt
			// read it again (from a checkpoint before it) under the new
			// declaration.
			want := []string{"insert 1 one 11", "insert 2 two 22", "insert 3 three absent", "update 1 uno absent"}
			again := slices.Clone(want)
			again[1] = "insert 2 two absent"
			if !slices.Equal(got, want) && !slices.Equal(got, again) {
				t.Errorf("rows\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// TestGeneratedColumnsPublishedLater: on 18, a publication given
// publish_generated_columns = stored between syncs makes the next sync
// declare the stored generated column and read the table again, so the
// rows not changed since get its value.
func TestGeneratedColumnsPublishedLater(t *testing.T) {
	d := dsn(t)
	if serverMajor(t, d) < 18 {
		t.Skip("publish_generated_columns is Postgres 18's")
	}
	tbl, pub, slot := name("genlater"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, a int4, g int4 GENERATED ALWAYS AS (a * 2) STORED)", tbl),
		fmt.Sprintf("INSERT INTO %s (id, a) VALUES (1, 10)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	t.Cleanup(func() { execSQL(t, d, "DROP PUBLICATION IF EXISTS "+pub) })
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	events := newEventLog()
	h.onEvent = events.add
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	events.wait(t)
	execSQL(t, d, fmt.Sprintf("ALTER PUBLICATION %s SET (publish_generated_columns = stored)", pub),
		fmt.Sprintf("INSERT INTO %s (id, a) VALUES (2, 20)", tbl))
	res, err := h.sync()
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams[tbl]; c.Read != 3 {
		t.Errorf("counts %+v, want 3 read (the table again and the insert)", c)
	}
	var schemaEvents []string
	for _, e := range events.wait(t) {
		if e.Kind == etl.EventSchemaChanged {
			schemaEvents = append(schemaEvents, e.Column+" "+e.Change+": "+e.Detail)
		}
	}
	t.Logf("schema.changed: %q", schemaEvents)
	if len(schemaEvents) != 1 || !strings.HasPrefix(schemaEvents[0], "g ") {
		t.Errorf("schema.changed events %q, want one for g", schemaEvents)
	}
	m := map[string]string{}
	for _, r := range readRows(t, h.tables, tbl) {
		m[fmt.Sprint(r["id"])] = fmt.Sprintf("%v %v", r["a"], r["g"])
	}
	if want := map[string]string{"1": "10 20", "2": "20 40"}; fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("applied by key in seq order: %v, want the table %v", m, want)
	}
}

// TestColumnList: a column outside the publication's column list (15+),
// which the change stream leaves out, is not declared: it is absent from
// snapshot and streamed rows alike, never a null nobody read.
func TestColumnList(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("collist"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, a text, b int4)", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1, 'one', 11)", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s (id, a)", pub, tbl))
	t.Cleanup(func() { execSQL(t, d, "DROP PUBLICATION IF EXISTS "+pub) })
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (2, 'two', 22)", tbl),
		fmt.Sprintf("UPDATE %s SET a = 'uno', b = 12 WHERE id = 1", tbl))
	if _, err := h.sync(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range readRows(t, h.tables, tbl) {
		b, ok := r["b"]
		if !ok {
			b = "absent"
		}
		got = append(got, fmt.Sprintf("%v %v %v %v", r["_openetl_op"], r["id"], r["a"], b))
	}
	if want := []string{"insert 1 one absent", "insert 2 two absent", "update 1 uno absent"}; !slices.Equal(got, want) {
		t.Errorf("rows\n%q\nwant\n%q", got, want)
	}
}

package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/postgres"
)

// TestEnumColumns: an enum column is declared enum('label',...) in label
// order, so the engine marks it as an enum (Arrow field metadata
// openetl.logical_type=enum, read back by pyarrow from the Parquet
// files); labels added while the pipeline streams (ALTER TYPE ... ADD
// VALUE, also BEFORE an existing label) are taken as they come, and the
// next attempt, which declares the new labels, writes the same schema.
func TestEnumColumns(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot, enum := name("enums"), name("pub"), name("slot"), name("mood")
	execSQL(t, d, fmt.Sprintf("CREATE TYPE %s AS ENUM ('sad', 'ok', 'it''s')", enum),
		fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, m %s, t text, ms %s[])", tbl, enum, enum),
		fmt.Sprintf("INSERT INTO %s VALUES (1, 'sad', 'a', '{ok,sad}'), (2, 'it''s', 'b', NULL), (3, NULL, NULL, '{}')", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	t.Cleanup(func() {
		execSQL(t, d, "DROP PUBLICATION IF EXISTS "+pub, "DROP TABLE IF EXISTS "+tbl, "DROP TYPE IF EXISTS "+enum)
	})
	cfg := postgres.Config{Publication: pub, Slot: slot, StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond}

	catalogTypes := func() []string {
		t.Helper()
		cat, err := newSource(t, d, cfg).Discover(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		st, ok := cat.Stream(tbl)
		if !ok {
			t.Fatalf("catalog %+v has no stream %s", cat, tbl)
		}
		var out []string
		for _, c := range st.Columns {
			out = append(out, c.Name+" "+c.Type)
		}
		return out
	}
	want := []string{"id int4", "m enum('sad','ok','it''s')", "t text", "ms _" + enum}
	if got := catalogTypes(); !slices.Equal(got, want) {
		t.Fatalf("catalog columns %q, want %q", got, want)
	}

	// Snapshot, then labels added while streaming: the running attempt
	// still declares the old labels and takes the new ones.
	h := newHarness(t, d, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	waitConfirmed(t, d, slot, done)
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (4, 'ok', 'c', '{it''s}')", tbl),
		fmt.Sprintf("ALTER TYPE %s ADD VALUE 'happy'", enum),
		fmt.Sprintf("ALTER TYPE %s ADD VALUE 'meh' BEFORE 'ok'", enum),
		fmt.Sprintf("INSERT INTO %s VALUES (5, 'happy', 'd', '{happy,meh}')", tbl),
		fmt.Sprintf("UPDATE %s SET m = 'meh' WHERE id = 1", tbl))
	waitConfirmed(t, d, slot, done)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run over ALTER TYPE ... ADD VALUE: %v", err)
	}

	// A new attempt declares the labels as they are now, with the same
	// Arrow schema: the Parquet table takes its files.
	want[1] = "m enum('sad','meh','ok','it''s','happy')"
	if got := catalogTypes(); !slices.Equal(got, want) {
		t.Fatalf("catalog columns after ADD VALUE %q, want %q", got, want)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (6, 'meh', 'e', NULL)", tbl))
	if _, err := h.sync(); err != nil {
		t.Fatalf("sync with the new labels declared: %v", err)
	}

	var got []string
	for _, r := range readRows(t, h.tables, tbl) {
		got = append(got, fmt.Sprintf("%v %v %v %v", r["_openetl_op"], r["id"], r["m"], r["ms"]))
	}
	wantRows := []string{"insert 1 sad [ok sad]", "insert 2 it's <nil>", "insert 3 <nil> []",
		"insert 4 ok [it's]", "insert 5 happy [happy meh]", "update 1 meh [ok sad]", "insert 6 meh <nil>"}
	if !slices.Equal(got, wantRows) {
		t.Errorf("rows\n%q\nwant\n%q", got, wantRows)
	}

	// Every file's schema marks m, and only m.
	for file, fields := range parquetFieldMetadata(t, h.tables, tbl) {
		for f, md := range fields {
			switch {
			case f == "m" && (len(md) != 1 || md["openetl.logical_type"] != "enum"):
				t.Errorf("%s: field m has metadata %v, want openetl.logical_type=enum", file, md)
			case f != "m" && len(md) != 0:
				t.Errorf("%s: field %s has metadata %v, want none", file, f, md)
			}
		}
	}
}

// parquetFieldMetadata reads, with pyarrow, the Arrow field metadata of
// every Parquet file of stream's current manifest: file → field → metadata.
func parquetFieldMetadata(t *testing.T, tables, stream string) map[string]map[string]map[string]string {
	t.Helper()
	script := `
import json, os, sys
import pyarrow.parquet as pq
d = os.path.join(sys.argv[1], sys.argv[2])
m = sorted(f for f in os.listdir(os.path.join(d, "_manifest")) if f.endswith(".json"))[-1]
out = {}
for f in json.load(open(os.path.join(d, "_manifest", m)))["files"]:
    s = pq.read_schema(os.path.join(sys.argv[1], f["key"]))
    out[f["key"]] = {fl.name: {k.decode(): v.decode() for k, v in (fl.metadata or {}).items()} for fl in s}
print(json.dumps(out))
`
	f := filepath.Join(t.TempDir(), "meta.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), f, tables, stream)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var m map[string]map[string]map[string]string
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatalf("no Parquet files for %s", stream)
	}
	return m
}

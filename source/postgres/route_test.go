package postgres_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/postgres"
)

// TestRouteShardsToParquet routes two sharded tables whose declared
// types differ (int4 and int8 keys, numeric(10,2) and numeric(12,3),
// varchar(20) and text, a column only one has) into one Parquet table,
// through a snapshot and then streamed changes, and reads it back with
// pyarrow: every file has the joined schema, every row is there once
// with its origin in _openetl_stream, equal keys of the two shards are
// two rows.
func TestRouteShardsToParquet(t *testing.T) {
	d := dsn(t)
	base := name("orders")
	s1, s2 := base+"_2024_01", base+"_2024_02"
	pub, slot := name("pub"), name("slot")
	execSQL(t, d,
		fmt.Sprintf(`CREATE TABLE %s (id int4 PRIMARY KEY, amount numeric(10,2), note varchar(20))`, s1),
		fmt.Sprintf(`CREATE TABLE %s (id int8 PRIMARY KEY, amount numeric(12,3), note text, rush bool)`, s2),
		fmt.Sprintf(`INSERT INTO %s SELECT g, g + 0.25, 'a' || g FROM generate_series(1, 30) g`, s1),
		fmt.Sprintf(`INSERT INTO %s SELECT g, g + 0.125, 'b' || g, g %% 2 = 0 FROM generate_series(1, 20) g`, s2))
	dropSlotAtCleanup(t, d, slot)

	h := newHarness(t, d, postgres.Config{Publication: pub, CreatePublication: true, Tables: []string{s1, s2}, Slot: slot})
	h.options = func(b *etl.Builder) *etl.Builder { return b.Route(base+"_2024_*", base) }
	res, err := h.sync()
	if err != nil {
		t.Fatal(err)
	}
	if c1, c2 := res.Streams[s1], res.Streams[s2]; c1.Read != 30 || c1.Written != 30 || c2.Read != 20 || c2.Written != 20 {
		t.Fatalf("snapshot counts %+v %+v, want 30 and 20 read and written", c1, c2)
	}
	check := func(want, wantIDs int64) []map[string]any {
		t.Helper()
		st := testutil.ReadParquetTables(t, h.tables)
		if st[s1] != nil || st[s2] != nil {
			t.Fatalf("tables %v: a shard got a table of its own", st)
		}
		if got := st[base]; got == nil || got.Rows != want || got.DistinctIDs != wantIDs {
			t.Fatalf("table %s read back as %+v, want %d rows and %d ids", base, got, want, wantIDs)
		}
		schemas := parquetSchemas(t, h.tables, base)
		for _, sc := range schemas {
			if sc != schemas[0] {
				t.Fatalf("files of one table differ in schema:\n%s\n%s", schemas[0], sc)
			}
		}
		wantSchema := "id: int64; amount: decimal128(12, 3); note: string; rush: bool; _openetl_id: string not null; " +
			"_openetl_op: string not null; _openetl_seq: int64 not null; _openetl_synced_at: timestamp[us, tz=UTC] not null; " +
			"_openetl_stream: string not null"
		if schemas[0] != wantSchema {
			t.Errorf("schema\n%s\nwant\n%s", schemas[0], wantSchema)
		}
		return readRows(t, h.tables, base)
	}
	rows := check(50, 50)
	byOrigin := map[string]map[string]map[string]any{} // stream → id → row
	for _, r := range rows {
		s, _ := r["_openetl_stream"].(string)
		if byOrigin[s] == nil {
			byOrigin[s] = map[string]map[string]any{}
		}
		byOrigin[s][fmt.Sprint(r["id"])] = r
	}
	if len(byOrigin[s1]) != 30 || len(byOrigin[s2]) != 20 || len(byOrigin) != 2 {
		t.Fatalf("rows by origin: %d from %s, %d from %s, %d origins", len(byOrigin[s1]), s1, len(byOrigin[s2]), s2, len(byOrigin))
	}
	if r := byOrigin[s1]["7"]; fmt.Sprintf("%v %v %v", r["amount"], r["note"], r["rush"]) != "7.25 a7 <nil>" {
		t.Errorf("row 7 of %s read back as %v", s1, r)
	}
	if r := byOrigin[s2]["7"]; fmt.Sprintf("%v %v %v", r["amount"], r["note"], r["rush"]) != "7.125 b7 false" {
		t.Errorf("row 7 of %s read back as %v", s2, r)
	}

	// Streamed changes: 3 on one shard, 2 on the other.
	execSQL(t, d,
		fmt.Sprintf(`INSERT INTO %s VALUES (100, 1.5, 'new')`, s1),
		fmt.Sprintf(`UPDATE %s SET note = 'changed' WHERE id = 1`, s1),
		fmt.Sprintf(`DELETE FROM %s WHERE id = 2`, s1),
		fmt.Sprintf(`UPDATE %s SET rush = true, amount = 99999999.999 WHERE id = 1`, s2),
		fmt.Sprintf(`INSERT INTO %s VALUES (100, 0.001, 'newer', false)`, s2))
	res, err = h.sync()
	if err != nil {
		t.Fatal(err)
	}
	if c1, c2 := res.Streams[s1], res.Streams[s2]; c1.Read != 3 || c1.Written != 3 || c2.Read != 2 || c2.Written != 2 {
		t.Fatalf("change counts %+v %+v, want 3 and 2", c1, c2)
	}
	rows = check(55, 55)
	ops := map[string]int{}
	for _, r := range rows {
		if r["_openetl_op"] != "insert" {
			ops[fmt.Sprintf("%v %v %v %v", r["_openetl_stream"] == s1, r["_openetl_op"], r["id"], r["amount"])]++
		}
	}
	want := map[string]int{"true update 1 1.25": 1, "true delete 2 <nil>": 1, "false update 1 99999999.999": 1}
	if fmt.Sprint(ops) != fmt.Sprint(want) {
		t.Errorf("changes read back as %v, want %v", ops, want)
	}

	p, closeAll, err := h.build(0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if _, err := p.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{s1, s2} {
		if got := p.Status().Streams[s].Table; got != base {
			t.Errorf("Status: stream %s's table %q, want %q", s, got, base)
		}
	}
	for _, g := range p.Guarantees() {
		if !strings.Contains(g.Reason, "routed by") || !strings.Contains(g.Reason, "_openetl_stream = \""+g.Stream+"\"") {
			t.Errorf("guarantee of %s: %q does not say it is routed", g.Stream, g.Reason)
		}
	}
}

// parquetSchemas returns each live file's schema of a table, as pyarrow
// prints it, fields joined by "; ".
func parquetSchemas(t *testing.T, tables, table string) []string {
	t.Helper()
	script := `
import json, os, sys
import pyarrow.parquet as pq
d = os.path.join(sys.argv[1], sys.argv[2])
m = sorted(f for f in os.listdir(os.path.join(d, "_manifest")) if f.endswith(".json"))[-1]
out = []
for f in json.load(open(os.path.join(d, "_manifest", m)))["files"]:
    s = pq.read_schema(os.path.join(sys.argv[1], f["key"]))
    out.append("; ".join(str(x.name) + ": " + str(x.type) + ("" if x.nullable else " not null") for x in s))
print(json.dumps(out))
`
	f := filepath.Join(t.TempDir(), "schemas.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Python(t), f, tables, table)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyarrow: %v", err)
	}
	var schemas []string
	if err := json.Unmarshal(out, &schemas); err != nil || len(schemas) == 0 {
		t.Fatalf("pyarrow schemas %s: %v", out, err)
	}
	return schemas
}

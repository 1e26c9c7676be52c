package postgres_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// heldLines returns the held values under the harness's checkpoints, as
// "key column=value reason", sorted.
func heldLines(t *testing.T, h *harness) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(h.ckpts, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.Contains(p, "_held") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l struct{ Key, Column, Value, Reason string }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			var key []string
			vals, err := source.DecodeRow(nil, []byte(l.Key))
			if err != nil {
				t.Fatalf("held line %s: key: %v", sc.Bytes(), err)
			}
			for _, v := range vals {
				key = append(key, string(v.Text))
			}
			out = append(out, fmt.Sprintf("%s %s=%s %s", strings.Join(key, ","), l.Column, l.Value, l.Reason))
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// TestOutOfRangeCellsHeld: legal Postgres values that no Arrow type of
// their column holds (time 24:00:00, the largest timestamp and
// timestamptz, past Arrow's microsecond range, infinity) cost only their
// cells: the rows land, with nulls there, and the values are held under
// _held/ with reason out_of_range, from the snapshot and from the change
// stream; a schema.blocked event (change "held") names each column.
func TestOutOfRangeCellsHeld(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("range"), name("pub"), name("slot")
	max := "294276-12-31 23:59:59.999999"
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int4 PRIMARY KEY, tm time, ts timestamp, tstz timestamptz, d date, note text)", tbl),
		fmt.Sprintf("INSERT INTO %s VALUES (1, '24:00:00', '%s', '%s+00', 'infinity', 'a'), (2, '12:00:00', '2024-01-01', '2024-01-01 00:00:00+00', '2024-01-01', 'b')",
			tbl, max, max),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	events := newEventLog()
	h.onEvent = events.add
	res, err := h.sync()
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams[tbl]; c.Read != 2 || c.Written != 2 || c.Quarantined != 0 || c.Held != 4 {
		t.Fatalf("snapshot sync counts %+v, want 2 read and written, 4 cells held", c)
	}
	blocked := map[string]bool{}
	for _, e := range events.wait(t) {
		if e.Kind == etl.EventSchemaBlocked && e.Change == "held" && e.Stream == tbl && strings.Contains(e.Detail, "out of range") {
			blocked[e.Column] = true
		}
	}
	if len(blocked) != 4 || !blocked["tm"] || !blocked["ts"] || !blocked["tstz"] || !blocked["d"] {
		t.Errorf("schema.blocked events for %v, want tm, ts, tstz and d", blocked)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (3, '24:00:00', '-infinity', '2024-01-01 00:00:00+00', '2024-01-02', 'c')", tbl))
	res, err = h.sync()
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams[tbl]; c.Read != 1 || c.Written != 1 || c.Quarantined != 0 || c.Held != 2 {
		t.Fatalf("stream sync counts %+v, want 1 read and written, 2 cells held", c)
	}
	var got []string
	for _, r := range readRows(t, h.tables, tbl) {
		got = append(got, fmt.Sprintf("%v %v %v %v %v %v %v", r["_openetl_op"], r["id"], r["tm"], r["ts"], r["tstz"], r["d"], r["note"]))
	}
	want := []string{"insert 1 <nil> <nil> <nil> <nil> a", "insert 2 12:00:00 2024-01-01T00:00:00 2024-01-01T00:00:00+00:00 2024-01-01 b",
		"insert 3 <nil> <nil> 2024-01-01T00:00:00+00:00 2024-01-02 c"}
	if !slices.Equal(got, want) {
		t.Errorf("rows\n%q\nwant\n%q", got, want)
	}
	wantHeld := []string{
		`1 d=infinity out_of_range`,
		fmt.Sprintf(`1 ts=%s out_of_range`, max),
		fmt.Sprintf(`1 tstz=%s+00 out_of_range`, max),
		`1 tm=24:00:00 out_of_range`,
		`3 tm=24:00:00 out_of_range`,
		`3 ts=-infinity out_of_range`,
	}
	slices.Sort(wantHeld)
	if got := heldLines(t, h); !slices.Equal(got, wantHeld) {
		t.Errorf("held\n%q\nwant\n%q", got, wantHeld)
	}
}

package postgres_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/openetl/etl/source/postgres"
)

// TestPartitionKeylessAttachedAgainSeq: a partition of a table without
// a key, detached and attached again, can't be handed over to the change
// stream (its rows can't be matched to changes), so its split reads it
// under a snapshot of its own: its rows carry the WAL insert position of
// the Open that reads it as seq (snapState.Again), above every version
// the destination holds, not the slot snapshot's, which is below the
// changes streamed since.
func TestPartitionKeylessAttachedAgainSeq(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("klreattach"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8, at int4) PARTITION BY LIST (at)", tbl),
		fmt.Sprintf("CREATE TABLE %s_a PARTITION OF %s FOR VALUES IN (1)", tbl, tbl),
		fmt.Sprintf("CREATE TABLE %s_b PARTITION OF %s FOR VALUES IN (2)", tbl, tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, 1 + g %% 2 FROM generate_series(1, 100) g", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 100 {
		t.Fatalf("snapshot sync: %+v, %v", res.Streams[tbl], err)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (1000, 1)", tbl),
		fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s_b", tbl, tbl))
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 1 {
		t.Fatalf("sync after the detach: %+v, %v; want the one insert", res.Streams[tbl], err)
	}
	seq := func(r map[string]any) int64 { n, _ := r["_openetl_seq"].(json.Number).Int64(); return n }
	out := readRows(t, h.tables, tbl)
	before, last := len(out), seq(out[len(out)-1])
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s_b FOR VALUES IN (2)", tbl, tbl))
	if res, err := h.sync(); err != nil || res.Streams[tbl].Read != 50 {
		t.Fatalf("sync after attaching again: %+v, %v; want _b's 50 rows read again", res.Streams[tbl], err)
	}
	out = readRows(t, h.tables, tbl)
	if len(out) != before+50 {
		t.Fatalf("%d records in the output, want %d", len(out), before+50)
	}
	for _, r := range out[before:] {
		if seq(r) <= last {
			t.Fatalf("row %v read again with seq %v, not above the last before it (%v, the insert before the detach)", r["id"], r["_openetl_seq"], last)
		}
	}
}

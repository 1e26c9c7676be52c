package iceberg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestDeletionVectorsGrouped: on a format v3 table that already has
// rows, a group of epochs in which a later epoch updates and deletes
// keys an earlier epoch of the group inserted or updated needs deletion
// vectors for data files the group itself adds. iceberg-go checks that
// a deletion vector's data file is in the table before the commit, so
// they can't share one catalog commit with the files; the group must
// still be committed, each key's last version once.
func TestDeletionVectorsGrouped(t *testing.T) {
	for _, hard := range []bool{false, true} {
		t.Run(fmt.Sprintf("hard=%v", hard), func(t *testing.T) { deletionVectorsGrouped(t, hard) })
	}
}

func deletionVectorsGrouped(t *testing.T, hard bool) {
	ctx := context.Background()
	wh := newWarehouse(t)
	spec := merged("m", "id")
	if hard {
		spec.Deletes = sink.HardDeletes
	}
	d := newDest(t, wh.cat, iceberg.Config{Properties: map[string]string{"format-version": "3"},
		Grouping: &iceberg.Grouping{Bytes: 1 << 50, Interval: 1000 * time.Hour}})
	w, err := d.Writer(ctx, writerConfig("dvg", 0, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var all []op
	seq := int64(0)
	mk := func(k int64, kind string) op {
		seq++
		return op{key: k, kind: kind, seq: seq, name: fmt.Sprintf("n%d-%d", k, seq)}
	}
	epoch := func(e uint64, ops ...op) {
		t.Helper()
		all = append(all, ops...)
		rec := batch(ops, false)
		defer rec.Release()
		if err := w.Write(ctx, "m", rec); err != nil {
			t.Fatal(err)
		}
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
			t.Fatalf("Commit(%d): %v", e, err)
		}
	}
	epoch(1, mk(1, "insert"), mk(2, "insert"))
	if err := w.Finish(ctx, 1); err != nil { // the table has rows
		t.Fatal(err)
	}
	epoch(2, mk(1, "update"), mk(3, "insert"), mk(4, "insert"))
	epoch(3, mk(1, "update"), mk(3, "update"), mk(4, "delete"), mk(2, "delete"))
	epoch(4, mk(3, "update"), mk(4, "insert"))
	if err := w.Finish(ctx, 4); err != nil {
		t.Fatalf("Finish(4): %v", err)
	}
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	if hard {
		checkRows(t, rows, all)
		return
	}
	last := map[int64]op{}
	for _, o := range all {
		last[o.key] = o
	}
	if len(rows) != len(last) {
		t.Errorf("%d rows, want %d", len(rows), len(last))
	}
	for _, r := range rows {
		k, _ := r.Values["id"].(int64)
		if o := last[k]; r.Seq != o.seq || r.Values["_openetl_deleted"] != (o.kind == "delete") {
			t.Errorf("key %d: seq %d deleted %v, want seq %d (%s)", k, r.Seq, r.Values["_openetl_deleted"], o.seq, o.kind)
		}
	}
}

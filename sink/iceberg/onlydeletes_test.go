package iceberg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestHardDeletesOfNoRow: with hard deletes, an epoch whose only changes
// to a Merge table delete keys that have no row (a row inserted and
// deleted within the epoch, or deletes of rows the table never had) has
// nothing to add or delete; its Commit must still apply it (a snapshot
// without files records its markers), alone and in a group, in both
// formats, and not fail for good on an empty row delta.
func TestHardDeletesOfNoRow(t *testing.T) {
	for _, format := range []string{"2", "3"} {
		for _, grouped := range []bool{false, true} {
			t.Run(fmt.Sprintf("v%s/grouped=%v", format, grouped), func(t *testing.T) { hardDeletesOfNoRow(t, format, grouped) })
		}
	}
}

func hardDeletesOfNoRow(t *testing.T, format string, grouped bool) {
	ctx := context.Background()
	wh := newWarehouse(t)
	spec := merged("m", "id")
	spec.Deletes = sink.HardDeletes
	cfg := iceberg.Config{Properties: map[string]string{"format-version": format}}
	if grouped {
		cfg.Grouping = &iceberg.Grouping{Bytes: 1 << 50, Interval: 1000 * time.Hour}
	}
	d := newDest(t, wh.cat, cfg)
	w, err := d.Writer(ctx, writerConfig("nr", 0, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var all []op
	epochs := [][]op{
		{{key: 1, kind: "delete", seq: 1}, {key: 2, kind: "delete", seq: 2}}, // rows the table never had
		{{key: 1, kind: "insert", seq: 3, name: "a"}, {key: 3, kind: "insert", seq: 4, name: "b"}},
		{{key: 4, kind: "insert", seq: 5, name: "c"}, {key: 4, kind: "delete", seq: 6}}, // a row of the epoch only
		{{key: 3, kind: "delete", seq: 7}},
	}
	for i, ops := range epochs {
		e := uint64(i + 1)
		all = append(all, ops...)
		rec := batch(ops, false)
		err := w.Write(ctx, "m", rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
			t.Fatalf("Commit(%d): %v", e, err)
		}
		if grouped && e == 2 {
			if err := w.Finish(ctx, e); err != nil {
				t.Fatalf("Finish(%d): %v", e, err)
			}
		}
	}
	if err := w.Finish(ctx, uint64(len(epochs))); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, rows, all)
	if p := loadTable(t, wh, "m").Properties(); p["openetl.nr.epoch"] != fmt.Sprint(len(epochs)) {
		t.Errorf("epoch marker %q, want %d", p["openetl.nr.epoch"], len(epochs))
	}
}

package iceberg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/sinktest"
)

// TestPositionDeletesAfterCompaction has compaction rewrite a Merge
// table's data files right before the commit of an epoch whose position
// deletes were found in the old files: the commit must fail its pin
// instead of being replayed on the new head (where the positions name
// files no longer in the table, and the old rows would stay visible), find
// the rows again in the compacted file and commit. The epoch updates keys
// of every earlier file, deletes some for good (hard deletes) and changes
// some keys (a delete of the old key and an insert of the new one). Then
// compaction runs between two epochs, and the next epoch's positions must
// be found in the new files.
func TestPositionDeletesAfterCompaction(t *testing.T) {
	for _, format := range []string{"2", "3"} { // 3: deletion vectors
		t.Run("v"+format, func(t *testing.T) { positionDeletesAfterCompaction(t, format) })
	}
}

func positionDeletesAfterCompaction(t *testing.T, format string) {
	ctx := context.Background()
	wh := newWarehouse(t)
	spec := merged("m", "id")
	spec.Deletes = sink.HardDeletes
	props := map[string]string{"format-version": format}
	maint := newDest(t, wh.cat, iceberg.Config{Properties: props})
	var rewritten int
	rc := &racingCatalog{Catalog: wh.cat}
	rc.before = func() {
		reps, err := maint.Maintain(ctx, iceberg.MaintainOptions{Compact: true, TargetFileBytes: 64 << 20})
		if err != nil {
			t.Error(err)
		}
		for _, r := range reps {
			rewritten += r.FilesRewritten
		}
	}
	d := newDest(t, rc, iceberg.Config{Properties: props})
	w, err := d.Writer(ctx, writerConfig("pos", 0, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var all []op
	seq := int64(0)
	epoch := func(e uint64, ops []op) {
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
	mk := func(k int64, kind string) op {
		seq++
		return op{key: k, kind: kind, seq: seq, name: fmt.Sprintf("n%d-%d", k, seq)}
	}
	for e := int64(0); e < 3; e++ { // three data files of 20 keys
		var ops []op
		for k := e * 20; k < e*20+20; k++ {
			ops = append(ops, mk(k, "insert"))
		}
		epoch(uint64(e+1), ops)
	}
	var ops []op
	for k := int64(0); k < 60; k += 2 {
		ops = append(ops, mk(k, "update"))
	}
	for k := int64(1); k < 60; k += 10 {
		ops = append(ops, mk(k, "delete"))
	}
	for k := int64(3); k < 60; k += 10 { // key k becomes k+100
		ops = append(ops, mk(k, "delete"), mk(k+100, "insert"))
	}
	rc.races.Store(1)
	epoch(4, ops)
	if rewritten < 2 {
		t.Fatalf("compaction rewrote %d files, want the 3 data files: the race did not happen", rewritten)
	}
	// Compaction between two epochs: the index the writer kept describes
	// files no longer in the table, and must be rebuilt.
	epoch(5, []op{mk(200, "insert"), mk(201, "insert")})
	rewritten = 0
	rc.before()
	if rewritten < 2 {
		t.Fatalf("the second compaction rewrote %d files, want 2 or more", rewritten)
	}
	ops = nil
	for k := int64(0); k < 60; k += 3 {
		ops = append(ops, mk(k, "update"))
	}
	epoch(6, append(ops, mk(200, "delete"), mk(5, "delete")))
	checkFormat(t, wh, "m", format)
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, rows, all)
}

// checkFormat fails unless table name is of format version format and has
// delete files of the kind it takes: position deletes (v2) or deletion
// vectors (v3).
func checkFormat(t *testing.T, wh *warehouse, name, format string) {
	t.Helper()
	tbl, err := wh.cat.LoadTable(context.Background(), table.Identifier{iceberg.DefaultNamespace, name})
	if err != nil {
		t.Fatal(err)
	}
	if v := fmt.Sprint(tbl.Metadata().Version()); v != format {
		t.Fatalf("table %s is format v%s, want v%s", name, v, format)
	}
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pos, dvs int
	for _, tk := range tasks {
		pos += len(tk.DeleteFiles)
		dvs += len(tk.DeletionVectorFiles)
		if len(tk.EqualityDeleteFiles) > 0 {
			t.Errorf("%s has equality deletes", tk.File.FilePath())
		}
	}
	if format == "3" && (dvs == 0 || pos > 0) || format == "2" && (pos == 0 || dvs > 0) {
		t.Errorf("table %s (v%s): %d position-delete files and %d deletion vectors on its data files", name, format, pos, dvs)
	}
}

// checkRows compares a hard-deleting Merge table's rows with the last
// change of each key in all.
func checkRows(t *testing.T, rows []sinktest.Row, all []op) {
	t.Helper()
	want := map[int64]op{}
	for _, o := range all {
		want[o.key] = o
	}
	for k, o := range want {
		if o.kind == "delete" {
			delete(want, k)
		}
	}
	seen := map[int64]bool{}
	for _, r := range rows {
		k, _ := r.Values["id"].(int64)
		if seen[k] {
			t.Errorf("key %d visible twice", k)
		}
		seen[k] = true
		o, ok := want[k]
		switch {
		case !ok:
			t.Errorf("key %d visible (seq %d), but deleted or never written", k, r.Seq)
		case r.Seq != o.seq:
			t.Errorf("key %d at seq %d, want %d", k, r.Seq, o.seq)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d", len(rows), len(want))
	}
}

// TestPositionDeletesNewProcess commits epochs whose position deletes
// were found by earlier writers, from new writers (as after a restart):
// each rebuilds its key index from the table, reading the data files and
// the position deletes already there, and the rows a key had before and
// the ones earlier deletes removed must not come back or stay.
func TestPositionDeletesNewProcess(t *testing.T) {
	for _, format := range []string{"2", "3"} { // 3: deletion vectors
		t.Run("v"+format, func(t *testing.T) { positionDeletesNewProcess(t, format) })
	}
}

func positionDeletesNewProcess(t *testing.T, format string) {
	ctx := context.Background()
	wh := newWarehouse(t)
	spec := merged("m", "id")
	var all []op
	seq := int64(0)
	mk := func(k int64, kind string) op {
		seq++
		return op{key: k, kind: kind, seq: seq, name: fmt.Sprintf("n%d-%d", k, seq)}
	}
	var head *checkpoint.Record
	for e := uint64(1); e <= 4; e++ {
		d := newDest(t, wh.cat, iceberg.Config{Properties: map[string]string{"format-version": format}})
		w, err := d.Writer(ctx, writerConfig("pos", 0, spec))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recover(ctx, checkpoint.Generation(e), head); err != nil {
			t.Fatal(err)
		}
		// As the runner does: the committed delete files (named like the
		// pipeline's data files) must not look unreferenced to it.
		if got, err := d.Collect(ctx, sink.CollectRequest{Pipeline: "pos", Generation: checkpoint.Generation(e), Head: head}); err != nil || got.Removed != 0 {
			t.Fatalf("Collect before epoch %d: %+v, %v; want nothing removed", e, got, err)
		}
		var ops []op
		for k := int64(0); k < 40; k++ {
			switch {
			case e == 1:
				ops = append(ops, mk(k, "insert"))
			case k%int64(e) == 0:
				ops = append(ops, mk(k, "update"))
			case k%7 == int64(e):
				ops = append(ops, mk(k, "delete"))
			}
		}
		all = append(all, ops...)
		rec := batch(ops, false)
		if err := w.Write(ctx, "m", rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
			t.Fatalf("Commit(%d): %v", e, err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		head = &checkpoint.Record{Pipeline: "pos", Epoch: e, Generation: checkpoint.Generation(e), Committables: [][]byte{c}}
	}
	checkFormat(t, wh, "m", format)
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	// Soft deletes: every key keeps its last version.
	last := map[int64]op{}
	for _, o := range all {
		last[o.key] = o
	}
	if len(rows) != len(last) {
		t.Errorf("%d rows, want %d", len(rows), len(last))
	}
	seen := map[int64]bool{}
	for _, r := range rows {
		k, _ := r.Values["id"].(int64)
		if seen[k] {
			t.Errorf("key %d visible twice", k)
		}
		seen[k] = true
		if o := last[k]; r.Seq != o.seq || r.Values["_openetl_deleted"] != (o.kind == "delete") {
			t.Errorf("key %d: seq %d deleted %v, want seq %d (%s)", k, r.Seq, r.Values["_openetl_deleted"], o.seq, o.kind)
		}
	}
}

// TestFormatV3RefusesOverwrite: a destination making v3 tables refuses
// overwritten streams up front (iceberg-go can't replace a v3 table's
// files with ours), and takes merged ones.
func TestFormatV3RefusesOverwrite(t *testing.T) {
	wh := newWarehouse(t)
	d := newDest(t, wh.cat, iceberg.Config{Properties: map[string]string{"format-version": "3"}})
	if err := d.CheckStream(sink.StreamSpec{Stream: "o", Table: "o", Mode: sink.Overwrite}); err == nil {
		t.Error("CheckStream took an overwritten stream on format v3")
	}
	if err := d.CheckStream(merged("m", "id")); err != nil {
		t.Errorf("CheckStream of a merged stream on format v3: %v", err)
	}
	if err := newDest(t, wh.cat, iceberg.Config{}).CheckStream(sink.StreamSpec{Stream: "o", Table: "o", Mode: sink.Overwrite}); err != nil {
		t.Errorf("CheckStream of an overwritten stream on format v2: %v", err)
	}
}

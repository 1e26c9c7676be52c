package iceberg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// notePatch is a patch batch setting note on the rows of ops.
func notePatch(ops []op) arrow.RecordBatch {
	md := arrow.NewMetadata([]string{sink.PatchMetadataKey}, []string{sink.PatchMetadataValue})
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: sink.ColumnID, Type: arrow.BinaryTypes.String},
		{Name: sink.ColumnSeq, Type: arrow.PrimitiveTypes.Int64},
	}, &md)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, o := range ops {
		b.Field(0).(*array.StringBuilder).Append("held-" + o.name)
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%d-%d", o.key, o.seq))
		b.Field(2).(*array.Int64Builder).Append(o.seq)
	}
	return b.NewRecordBatch()
}

// TestPatchMergeTable: patches of a Merge table (position deletes, v2
// and v3; equality deletes) in one writer: epoch 2 sets a note, a column the table does
// not have yet, on keys 0-4 and 7, and updates key 7 in the same epoch
// (its patched row is replaced: no copy of it); epoch 3 updates keys
// 0-2, whose live rows are now the patched copies, which the writer's
// key index must find. Read back: one row per key, keys 3 and 4 with
// their notes, the updated keys their new versions.
func TestPatchMergeTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  iceberg.Config
	}{
		{"v2", iceberg.Config{}},
		{"v3", iceberg.Config{Properties: map[string]string{"format-version": "3"}}},
		{"v2-equality-deletes", iceberg.Config{MergeDeletes: iceberg.EqualityDeletes}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			wh := newWarehouse(t)
			d := newDest(t, wh.cat, tc.cfg)
			w, err := d.Writer(ctx, writerConfig("pm", 0, merged("m", "id")))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recover(ctx, 1, nil); err != nil {
				t.Fatal(err)
			}
			seq := int64(0)
			mk := func(k int64, kind string) op {
				seq++
				return op{key: k, kind: kind, seq: seq, name: fmt.Sprintf("n%d-%d", k, seq)}
			}
			last := map[int64]op{}
			epoch := func(e uint64, patch []op, ops []op) {
				t.Helper()
				if len(patch) > 0 {
					rec := notePatch(patch)
					if err := w.Write(ctx, "m", rec); err != nil {
						t.Fatal(err)
					}
					rec.Release()
				}
				if len(ops) > 0 {
					rec := batch(ops, false)
					if err := w.Write(ctx, "m", rec); err != nil {
						t.Fatal(err)
					}
					rec.Release()
				}
				c, err := w.PreCommit(ctx, e)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
					t.Fatalf("Commit(%d): %v", e, err)
				}
				for _, o := range ops {
					last[o.key] = o
				}
			}
			var first []op
			for k := int64(0); k < 10; k++ {
				first = append(first, mk(k, "insert"))
			}
			epoch(1, nil, first)
			epoch(2, append(first[:5:5], first[7]), []op{mk(7, "update")})
			epoch(3, nil, []op{mk(0, "update"), mk(1, "update"), mk(2, "update")})
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}

			rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 10 {
				t.Errorf("%d rows, want 10", len(rows))
			}
			seen := map[int64]bool{}
			for _, r := range rows {
				k, _ := r.Values["id"].(int64)
				if seen[k] {
					t.Errorf("key %d visible twice", k)
				}
				seen[k] = true
				o := last[k]
				want := any(nil)
				if k == 3 || k == 4 {
					want = "held-" + o.name
				}
				if r.Seq != o.seq || r.Values["name"] != o.name || r.Values["note"] != want {
					t.Errorf("key %d: seq %d name %v note %v; want seq %d name %s note %v", k, r.Seq, r.Values["name"], r.Values["note"], o.seq, o.name, want)
				}
			}
		})
	}
}

// writeEpoch writes patch (a patch batch of ops, when set) and rows to
// table, and pre-commits epoch.
func writeEpoch(t *testing.T, w sink.Writer, table string, epoch uint64, patch, rows []op) sink.Committable {
	t.Helper()
	ctx := context.Background()
	if len(patch) > 0 {
		rec := notePatch(patch)
		if err := w.Write(ctx, table, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if len(rows) > 0 {
		rec := batch(rows, false)
		if err := w.Write(ctx, table, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	c, err := w.PreCommit(ctx, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// inserts are inserts of keys [from, to), seq = key+1.
func inserts(from, to int64) []op {
	var out []op
	for k := from; k < to; k++ {
		out = append(out, op{key: k, kind: "insert", seq: k + 1, name: fmt.Sprintf("n%d", k)})
	}
	return out
}

// notes reads table's rows: note by key (nil for a null), failing on a
// key seen twice.
func notes(t *testing.T, wh *warehouse, table string) map[int64]any {
	t.Helper()
	rows, err := scan(context.Background(), wh.cat, iceberg.DefaultNamespace, table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]any{}
	for _, r := range rows {
		k, _ := r.Values["id"].(int64)
		if _, dup := out[k]; dup {
			t.Fatalf("%s: key %d twice", table, k)
		}
		if r.Seq != k+1 {
			t.Errorf("%s: key %d has seq %d, want %d", table, k, r.Seq, k+1)
		}
		out[k] = r.Values["note"]
	}
	return out
}

// TestPatchGrouped: with Grouping, an epoch's patches wait with its
// files and the rows they patch (an earlier epoch's, waiting too): the
// group's commit applies the rows, then the patches to them.
func TestPatchGrouped(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	d := newDest(t, wh.cat, iceberg.Config{Grouping: &iceberg.Grouping{Bytes: 1 << 40, Interval: time.Hour}})
	w, err := d.Writer(ctx, writerConfig("pg", 0, appended("t")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	c1 := writeEpoch(t, w, "t", 1, nil, inserts(0, 10))
	if err := w.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	c2 := writeEpoch(t, w, "t", 2, inserts(0, 5), inserts(10, 12))
	if err := w.Commit(ctx, 2, []sink.Committable{c2}); err != nil {
		t.Fatal(err)
	}
	if got := notes(t, wh, "t"); len(got) != 0 {
		t.Fatalf("rows visible before the group's commit: %v", got)
	}
	// Epoch 3's committable carries epoch 2's patch file: it must be of
	// the format with patches, which an older version refuses.
	c3 := writeEpoch(t, w, "t", 3, nil, nil)
	var cm struct{ Format int }
	if err := json.Unmarshal(c3, &cm); err != nil || cm.Format != 4 {
		t.Fatalf("epoch 3's committable (carrying patches): format %d, %v; want 4", cm.Format, err)
	}
	if err := w.Commit(ctx, 3, []sink.Committable{c3}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil { // commits the waiting group
		t.Fatal(err)
	}
	got := notes(t, wh, "t")
	if len(got) != 12 {
		t.Errorf("%d rows, want 12", len(got))
	}
	for k := int64(0); k < 12; k++ {
		want := any(nil)
		if k < 5 {
			want = fmt.Sprintf("held-n%d", k)
		}
		if got[k] != want {
			t.Errorf("key %d: note %v, want %v", k, got[k], want)
		}
	}
}

// TestPatchedEpochTakenBack: an epoch whose patches were applied to
// table a and whose Commit failed on table b (its data file gone) is
// Lost at the next Recover, and a is taken back with it: its rows have
// their nulls again, each once.
func TestPatchedEpochTakenBack(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	d := newDest(t, wh.cat, iceberg.Config{})
	w, err := d.Writer(ctx, writerConfig("tb", 0, appended("a"), appended("b")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"a", "b"} {
		rec := batch(inserts(0, 10), false)
		if err := w.Write(ctx, tb, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	c1, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	rec := notePatch(inserts(0, 3))
	if err := w.Write(ctx, "a", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	c2 := writeEpoch(t, w, "b", 2, nil, inserts(10, 15))
	var cm struct {
		Tables []struct {
			Table string
			Data  []struct {
				Path  string
				Epoch uint64
			}
		}
	}
	if err := json.Unmarshal(c2, &cm); err != nil {
		t.Fatal(err)
	}
	gone := 0
	for _, tf := range cm.Tables {
		for _, f := range tf.Data {
			if tf.Table == "b" && f.Epoch == 2 {
				if err := os.Remove(strings.TrimPrefix(f.Path, "file://")); err != nil {
					t.Fatal(err)
				}
				gone++
			}
		}
	}
	if gone == 0 {
		t.Fatalf("no data file of b in epoch 2's committable %s", c2)
	}
	if err := w.Commit(ctx, 2, []sink.Committable{c2}); err == nil {
		t.Fatal("Commit with b's data file gone succeeded")
	}
	if got := notes(t, wh, "a"); got[0] != "held-n0" || got[2] != "held-n2" || got[3] != nil || len(got) != 10 {
		t.Fatalf("a after the patches: %v", got)
	}
	w2, err := newDest(t, wh.cat, iceberg.Config{}).Writer(ctx, writerConfig("tb", 0, appended("a"), appended("b")))
	if err != nil {
		t.Fatal(err)
	}
	head := &checkpoint.Record{Pipeline: "tb", Epoch: 2, Generation: 1, Committables: [][]byte{c2}}
	if out, err := w2.Recover(ctx, 2, head); err != nil || out != sink.Lost {
		t.Fatalf("Recover: %v, %v; want lost", out, err)
	}
	got := notes(t, wh, "a")
	if len(got) != 10 {
		t.Errorf("a after Recover: %d rows, want 10", len(got))
	}
	for k, v := range got {
		if v != nil {
			t.Errorf("a after Recover: key %d has note %v, want the original null", k, v)
		}
	}
}

// TestPatchFileRemoved: once its epoch is in the table, the staged
// patch file is removed; Collect, given that epoch's record, finds
// nothing left to remove.
func TestPatchFileRemoved(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	d := newDest(t, wh.cat, iceberg.Config{})
	w, err := d.Writer(ctx, writerConfig("pr", 0, appended("t")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	c1 := writeEpoch(t, w, "t", 1, nil, inserts(0, 10))
	if err := w.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	c2 := writeEpoch(t, w, "t", 2, inserts(0, 2), nil)
	var cm struct {
		Format int
		Tables []struct {
			Deletes []struct {
				Path  string
				Patch bool
			}
		}
	}
	if err := json.Unmarshal(c2, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Format != 4 || len(cm.Tables) != 1 || len(cm.Tables[0].Deletes) != 1 || !cm.Tables[0].Deletes[0].Patch {
		t.Fatalf("committable with patches: %s", c2)
	}
	staged := strings.TrimPrefix(cm.Tables[0].Deletes[0].Path, "file://")
	if _, err := os.Stat(staged); err != nil {
		t.Fatalf("staged patch file: %v", err)
	}
	if err := w.Commit(ctx, 2, []sink.Committable{c2}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Errorf("staged patch file after its epoch's commit: %v, want it gone", err)
	}
	if got := notes(t, wh, "t"); got[1] != "held-n1" || len(got) != 10 {
		t.Errorf("rows: %v", got)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	head := &checkpoint.Record{Pipeline: "pr", Epoch: 2, Generation: 1, Committables: [][]byte{c2}}
	if got, err := d.Collect(ctx, sink.CollectRequest{Pipeline: "pr", Generation: 2, Head: head}); err != nil || got.Removed != 0 {
		t.Errorf("Collect: %+v, %v; want nothing to remove", got, err)
	}
}

// TestPatchChangesNothing: an epoch of patches only, none of which
// sets a value (their rows have one, or there is no such row), commits
// (with the markers in properties or in snapshot summaries), and the
// next process's Recover of it reports it applied or recoverable, never
// lost.
func TestPatchChangesNothing(t *testing.T) {
	for _, fence := range []iceberg.Fence{iceberg.FenceProperties, iceberg.FenceSnapshots} {
		t.Run(fence.String(), func(t *testing.T) {
			ctx := context.Background()
			wh := newWarehouse(t)
			cfg := iceberg.Config{Fence: fence}
			w, err := newDest(t, wh.cat, cfg).Writer(ctx, writerConfig("pn", 0, appended("t")))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recover(ctx, 1, nil); err != nil {
				t.Fatal(err)
			}
			c1 := writeEpoch(t, w, "t", 1, nil, inserts(0, 10))
			if err := w.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
				t.Fatal(err)
			}
			c2 := writeEpoch(t, w, "t", 2, inserts(20, 22), nil) // no such rows
			for range 2 {
				if err := w.Commit(ctx, 2, []sink.Committable{c2}); err != nil {
					t.Fatalf("Commit(2): %v", err)
				}
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			w2, err := newDest(t, wh.cat, cfg).Writer(ctx, writerConfig("pn", 0, appended("t")))
			if err != nil {
				t.Fatal(err)
			}
			head := &checkpoint.Record{Pipeline: "pn", Epoch: 2, Generation: 1, Committables: [][]byte{c2}}
			out, err := w2.Recover(ctx, 2, head)
			if err != nil || out == sink.Lost {
				t.Fatalf("Recover: %v, %v; want applied or recoverable", out, err)
			}
			c3 := writeEpoch(t, w2, "t", 3, nil, inserts(10, 12))
			if err := w2.Commit(ctx, 3, []sink.Committable{c3}); err != nil {
				t.Fatalf("Commit(3): %v", err)
			}
			if got := notes(t, wh, "t"); len(got) != 12 {
				t.Errorf("%d rows, want 12", len(got))
			}
			_ = w2.Close(ctx)
		})
	}
}

// TestPatchRedoneCommit: after the catalog took an epoch with patches
// (the process died before it knew), a new process's Recover reports
// the epoch applied, and a Commit of it again changes nothing: no new
// snapshot, each row once, the patched values as they were.
func TestPatchRedoneCommit(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	w, err := newDest(t, wh.cat, iceberg.Config{}).Writer(ctx, writerConfig("rc", 0, appended("t")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	c1 := writeEpoch(t, w, "t", 1, nil, inserts(0, 10))
	if err := w.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	c2 := writeEpoch(t, w, "t", 2, inserts(0, 3), inserts(10, 12))
	if err := w.Commit(ctx, 2, []sink.Committable{c2}); err != nil {
		t.Fatal(err)
	}
	snaps := len(loadTable(t, wh, "t").Metadata().Snapshots())
	w2, err := newDest(t, wh.cat, iceberg.Config{}).Writer(ctx, writerConfig("rc", 0, appended("t")))
	if err != nil {
		t.Fatal(err)
	}
	head := &checkpoint.Record{Pipeline: "rc", Epoch: 2, Generation: 1, Committables: [][]byte{c2}}
	if out, err := w2.Recover(ctx, 2, head); err != nil || out != sink.Applied {
		t.Fatalf("Recover: %v, %v; want applied", out, err)
	}
	if err := w2.Commit(ctx, 2, []sink.Committable{c2}); err != nil {
		t.Fatalf("Commit(2) again: %v", err)
	}
	if got := len(loadTable(t, wh, "t").Metadata().Snapshots()); got != snaps {
		t.Errorf("%d snapshots after the redone Commit, want %d", got, snaps)
	}
	got := notes(t, wh, "t")
	if len(got) != 12 {
		t.Errorf("%d rows, want 12", len(got))
	}
	for k := int64(0); k < 12; k++ {
		want := any(nil)
		if k < 3 {
			want = fmt.Sprintf("held-n%d", k)
		}
		if got[k] != want {
			t.Errorf("key %d: note %v, want %v", k, got[k], want)
		}
	}
	_ = w2.Close(ctx)
}

package iceberg_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestLostEpochTakenBack: a Commit cut short between tables (a, a merge
// table, applied; b's data files gone) leaves epoch 2 in a only. Recover
// reports it Lost and a gives it back (rolled back to its epoch-1
// snapshot, marker 1), so when the runner writes epoch 2 again from the
// record before, with more rows this time, both tables take it: a holds
// epoch 1's rows and the new epoch 2's, none of the old epoch 2's.
// (Package sim found this class in sink/parquet with staged files
// expiring.) With the markers in snapshot summaries (FenceSnapshots) a
// snapshot on top of the one rolled back to records the marker 1 and
// the fence.
func TestLostEpochTakenBack(t *testing.T) {
	for _, fence := range []iceberg.Fence{iceberg.FenceAuto, iceberg.FenceSnapshots} {
		t.Run(fence.String(), func(t *testing.T) { lostEpochTakenBack(t, fence) })
	}
}

func lostEpochTakenBack(t *testing.T, fence iceberg.Fence) {
	ctx := context.Background()
	wh := newWarehouse(t)
	d := newDest(t, wh.cat, iceberg.Config{Fence: fence})
	rng := rand.New(rand.NewPCG(7, 7))
	var seq int64
	live := map[int64]bool{}
	epoch := func(w sink.Writer, e uint64, n int) (map[string][]int64, sink.Committable) {
		t.Helper()
		seqs := map[string][]int64{}
		for _, tb := range []string{"a", "b"} {
			ops := genOps(rng, live, &seq, n, 1_000_000_000, false)
			for i := range ops {
				ops[i].kind = "insert" // distinct keys: every row stays
				seqs[tb] = append(seqs[tb], ops[i].seq)
			}
			b := batch(ops, false)
			if err := w.Write(ctx, tb, b); err != nil {
				t.Fatal(err)
			}
			b.Release()
		}
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		return seqs, c
	}
	read := func(tb string) []int64 {
		t.Helper()
		rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, tb)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, r := range rows {
			out = append(out, r.Seq)
		}
		slices.Sort(out)
		return out
	}
	want := func(tb string, parts ...[]int64) {
		t.Helper()
		w := slices.Sorted(slices.Values(slices.Concat(parts...)))
		if got := read(tb); !slices.Equal(got, w) {
			t.Fatalf("table %s holds %d rows %v..., want %d", tb, len(got), got[:min(len(got), 5)], len(w))
		}
	}

	w, err := d.Writer(ctx, writerConfig("tb", 0, merged("a", "id"), appended("b")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	e1, c1 := epoch(w, 1, 50)
	if err := w.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	head1 := &checkpoint.Record{Pipeline: "tb", Epoch: 1, Generation: 1, Committables: [][]byte{c1}}
	_, c2 := epoch(w, 2, 30)
	head2 := &checkpoint.Record{Pipeline: "tb", Epoch: 2, Generation: 1, Committables: [][]byte{c2}}
	// b's new files go (a lifecycle rule, an orphan cleanup).
	files, err := filepath.Glob(filepath.Join(wh.dir, "warehouse", "*", "b", "data", "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	tbB, err := wh.cat.LoadTable(ctx, []string{iceberg.DefaultNamespace, "b"})
	if err != nil {
		t.Fatal(err)
	}
	inB := map[string]bool{}
	if it, err := tbB.Scan().PlanFiles(ctx); err == nil {
		for _, task := range it {
			inB[strings.TrimPrefix(task.File.FilePath(), "file://")] = true
		}
	} else {
		t.Fatal(err)
	}
	removed := 0
	for _, f := range files {
		if !inB[f] {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatalf("no new data file of b among %v (in the table: %v)", files, inB)
	}
	if err := w.Commit(ctx, 2, []sink.Committable{c2}); err == nil {
		t.Fatal("Commit with b's files gone succeeded")
	}
	w.Close(ctx)
	if got := read("a"); len(got) != 80 {
		t.Fatalf("a holds %d rows before Recover, want 80: the test wants a applied before b failed", len(got))
	}

	d2 := newDest(t, wh.cat, iceberg.Config{Fence: fence})
	w2, err := d2.Writer(ctx, writerConfig("tb", 0, merged("a", "id"), appended("b")))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	if out, err := w2.Recover(ctx, 2, head2); err != nil || out != sink.Lost {
		t.Fatalf("Recover of epoch 2: %v, %v; want lost", out, err)
	}
	want("a", e1["a"])
	want("b", e1["b"])
	if fence == iceberg.FenceSnapshots {
		// The rollback went back to a snapshot of generation 1: the
		// fence of generation 2 must be on top of it.
		tbA, err := wh.cat.LoadTable(ctx, []string{iceberg.DefaultNamespace, "a"})
		if err != nil {
			t.Fatal(err)
		}
		if p := tbA.CurrentSnapshot().Summary.Properties; p["openetl.tb.epoch"] != "1" || p["openetl.tb.fence"] != "2" {
			t.Fatalf("a's markers after the take-back: %v, want epoch 1, fence 2", p)
		}
	}
	if out, err := w2.Recover(ctx, 2, head1); err != nil || out != sink.Applied {
		t.Fatalf("Recover of epoch 1: %v, %v; want applied", out, err)
	}
	e2, c2b := epoch(w2, 2, 40)
	if err := w2.Commit(ctx, 2, []sink.Committable{c2b}); err != nil {
		t.Fatal(err)
	}
	want("a", e1["a"], e2["a"])
	want("b", e1["b"], e2["b"])
}

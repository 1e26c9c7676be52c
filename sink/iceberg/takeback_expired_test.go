package iceberg_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestTakeBackAfterExpiryRefuses: epoch 3 reached table a but not b
// (b's files were removed before its Commit), and a host's Maintain
// then expired every snapshot but the last, so the one before epoch 3's
// is gone. Recover can't roll a back to it: it fails with an error
// saying so, and a keeps every row (before, it emptied a and lost
// epochs 1 and 2).
func TestTakeBackAfterExpiryRefuses(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	d := newDest(t, wh.cat, iceberg.Config{})
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
	e1b, c1b := epoch(w, 2, 20)
	if err := w.Commit(ctx, 2, []sink.Committable{c1b}); err != nil {
		t.Fatal(err)
	}
	head1 := &checkpoint.Record{Pipeline: "tb", Epoch: 2, Generation: 1, Committables: [][]byte{c1b}}
	e2, c2 := epoch(w, 3, 30)
	head2 := &checkpoint.Record{Pipeline: "tb", Epoch: 3, Generation: 1, Committables: [][]byte{c2}}
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
	if err := w.Commit(ctx, 3, []sink.Committable{c2}); err == nil {
		t.Fatal("Commit with b's files gone succeeded")
	}
	w.Close(ctx)
	// A host's Maintain (cron) runs while the pipeline is down.
	if _, err := d.Maintain(ctx, iceberg.MaintainOptions{ExpireOlderThan: time.Nanosecond, RetainLast: 1}); err != nil {
		t.Fatal(err)
	}
	if got := read("a"); len(got) != 100 {
		t.Fatalf("a holds %d rows before Recover, want 100: the test wants a applied before b failed", len(got))
	}

	d2 := newDest(t, wh.cat, iceberg.Config{})
	w2, err := d2.Writer(ctx, writerConfig("tb", 0, merged("a", "id"), appended("b")))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	out, err := w2.Recover(ctx, 2, head2)
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Recover of epoch 3 with its parent snapshot expired: %v, %v; want an error saying so", out, err)
	}
	want("a", e1["a"], e1b["a"], e2["a"])
	_ = head1
}

package iceberg_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestLostGroupTakenBack: a merge table a waits with epoch 1's files
// (the group is not due), epoch 2 writes only b, enough to make the
// group due, and its Commit applies a (files of epoch 1 only, marker 2)
// before it finds b's new file gone. Recover of epoch 2 must report it
// Lost and give a's commit back (a's snapshot is marked with the epoch
// of its files, 1, not 2), not fail; then epochs 1 and 2, written again,
// leave each row once.
func TestLostGroupTakenBack(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	cfg := iceberg.Config{Grouping: &iceberg.Grouping{Bytes: 16 << 10, Interval: 1000 * time.Hour}}
	specs := []sink.StreamSpec{merged("a", "id"), appended("b")}
	var seq int64
	write := func(w sink.Writer, e uint64, tb string, n int) sink.Committable {
		t.Helper()
		if n > 0 {
			ops := make([]op, n)
			for i := range ops {
				seq++
				ops[i] = op{key: seq, kind: "insert", seq: seq, name: fmt.Sprintf("%x", sha256.Sum256([]byte(fmt.Sprint("row", seq))))}
			}
			b := batch(ops, false)
			defer b.Release()
			if err := w.Write(ctx, tb, b); err != nil {
				t.Fatal(err)
			}
		}
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	count := func(tb string) int {
		t.Helper()
		rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, tb)
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	d := newDest(t, wh.cat, cfg)
	w, err := d.Writer(ctx, writerConfig("tg", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	c1 := write(w, 1, "a", 10)
	if err := w.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	if n := count("a"); n != 0 {
		t.Fatalf("a holds %d rows after epoch 1, want 0 (waiting for its group)", n)
	}
	head1 := &checkpoint.Record{Pipeline: "tg", Epoch: 1, Generation: 1, Committables: [][]byte{c1}}
	c2 := write(w, 2, "b", 4000)
	head2 := &checkpoint.Record{Pipeline: "tg", Epoch: 2, Generation: 1, Committables: [][]byte{c2}}
	files, err := filepath.Glob(filepath.Join(wh.dir, "warehouse", "*", "b", "data", "*.parquet"))
	if err != nil || len(files) == 0 {
		t.Fatalf("b's data files: %v, %v", files, err)
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx, 2, []sink.Committable{c2}); err == nil {
		t.Fatal("Commit with b's files gone succeeded")
	}
	w.Close(ctx)
	if n := count("a"); n != 10 {
		t.Fatalf("a holds %d rows, want 10: the test wants a applied before b failed", n)
	}

	d2 := newDest(t, wh.cat, cfg)
	w2, err := d2.Writer(ctx, writerConfig("tg", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	if out, err := w2.Recover(ctx, 2, head2); err != nil || out != sink.Lost {
		t.Fatalf("Recover of epoch 2: %v, %v; want lost", out, err)
	}
	if n := count("a"); n != 0 {
		t.Fatalf("a holds %d rows after the take-back, want 0", n)
	}
	if out, err := w2.Recover(ctx, 2, head1); err != nil || out != sink.Recoverable {
		t.Fatalf("Recover of epoch 1: %v, %v; want recoverable", out, err)
	}
	c2b := write(w2, 2, "b", 5)
	if err := w2.Commit(ctx, 2, []sink.Committable{c2b}); err != nil {
		t.Fatal(err)
	}
	if err := w2.Finish(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if a, b := count("a"), count("b"); a != 10 || b != 5 {
		t.Fatalf("a holds %d rows, b %d; want 10 and 5", a, b)
	}
}

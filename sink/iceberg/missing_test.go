package iceberg_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestCommitRefusesMissingFiles: a Commit whose data files were removed
// after PreCommit (by an orphan cleanup, or a lifecycle rule) fails
// naming the file and adds nothing, so readers never meet a snapshot
// that points at a missing file; the next Recover reports the epoch Lost.
func TestCommitRefusesMissingFiles(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	d := newDest(t, wh.cat, iceberg.Config{})
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var seq int64
	ops := genOps(rand.New(rand.NewPCG(5, 5)), map[int64]bool{}, &seq, 100, 1_000_000, false)
	for i := range ops {
		ops[i].kind = "insert"
	}
	b := batch(ops, false)
	if err := w.Write(ctx, "t", b); err != nil {
		t.Fatal(err)
	}
	b.Release()
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(wh.dir, "warehouse", "*", "t", "data", "*.parquet"))
	if err != nil || len(files) == 0 {
		t.Fatalf("data files %v (%v)", files, err)
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	err = w.Commit(ctx, 1, []sink.Committable{c})
	if err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("Commit after its files were removed: %v, want an error naming the missing file", err)
	}
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "t")
	if err != nil || len(rows) != 0 {
		t.Fatalf("the table shows %d rows (scan error %v), want none and a readable table", len(rows), err)
	}
	w2, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	out, err := w2.Recover(ctx, 2, &checkpoint.Record{Pipeline: "gone", Epoch: 1, Generation: 1, Committables: [][]byte{c}})
	if err != nil || out != sink.Lost {
		t.Fatalf("Recover: %v, %v; want Lost", out, err)
	}
}

package iceberg_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestScheduledMaintenanceLeavesOtherPipelines: pipeline A's scheduled
// maintenance (an orphan age far below B's group interval) runs on A's
// tables only: pipeline B's file waiting for its group in the same
// namespace stays, and B's Recover finds its epoch. Before, A removed
// it and B's epoch came back lost. (The sleeps only age the files past
// OrphansOlderThan; a slow machine ages them more.)
func TestScheduledMaintenanceLeavesOtherPipelines(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	never := &iceberg.Grouping{Bytes: 1 << 50, Interval: 1000 * time.Hour}
	dB := newDest(t, wh.cat, iceberg.Config{Grouping: never})
	wB, err := dB.Writer(ctx, writerConfig("pb", 0, appended("b")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wB.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	bb := batch([]op{{key: 1, kind: "insert", seq: 1, name: "x"}}, false)
	if err := wB.Write(ctx, "b", bb); err != nil {
		t.Fatal(err)
	}
	bb.Release()
	cB, err := wB.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := wB.Commit(ctx, 1, []sink.Committable{cB}); err != nil {
		t.Fatal(err)
	}
	before, _ := filepath.Glob(filepath.Join(wh.dir, "warehouse", "*", "b", "data", "*.parquet"))
	if len(before) == 0 {
		t.Fatal("B wrote no data file")
	}
	time.Sleep(20 * time.Millisecond)

	dA := newDest(t, wh.cat, iceberg.Config{Maintenance: &iceberg.Maintenance{Every: time.Millisecond,
		Options: iceberg.MaintainOptions{OrphansOlderThan: 10 * time.Millisecond}}})
	wA, err := dA.Writer(ctx, writerConfig("pa", 0, appended("a")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wA.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	ba := batch([]op{{key: 1, kind: "insert", seq: 1, name: "y"}}, false)
	if err := wA.Write(ctx, "a", ba); err != nil {
		t.Fatal(err)
	}
	ba.Release()
	cA, err := wA.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := wA.Commit(ctx, 1, []sink.Committable{cA}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(before[0]); err != nil {
		t.Fatalf("pipeline B's waiting file after A's scheduled maintenance: %v", err)
	}
	head := &checkpoint.Record{Pipeline: "pb", Epoch: 1, Generation: 1, Committables: [][]byte{cB}}
	wB2, err := dB.Writer(ctx, writerConfig("pb", 0, appended("b")))
	if err != nil {
		t.Fatal(err)
	}
	defer wB2.Close(ctx)
	if out, err := wB2.Recover(ctx, 2, head); err != nil || out == sink.Lost {
		t.Fatalf("B's Recover of epoch 1: %v %v; want it found", out, err)
	}
}

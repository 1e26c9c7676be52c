package iceberg_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/catalog"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestZombieEmptyEpochFenced: a zombie's Commit of an epoch it wrote no
// row in (an idle epoch, its record written before the newer attempt
// claimed the pipeline) fails with sink.ErrFenced once the newer
// attempt has recovered, like a Commit with files, instead of returning
// nil and letting the zombie's runner go on (and acknowledge its
// source).
//
// A shard's pipeline name holds a '.' (etl.ShardKey: name.shard-i-of-S):
// the same steps run under one, beside the unsharded pipeline's markers
// in the same tables.
func TestZombieEmptyEpochFenced(t *testing.T) {
	for _, fence := range []iceberg.Fence{iceberg.FenceAuto, iceberg.FenceSnapshots} {
		t.Run(fence.String(), func(t *testing.T) {
			dir := t.TempDir()
			open := func() catalog.Catalog { _, cat := openCatalog(t, dir); return cat }
			zombieEmptyEpochFenced(t, open, iceberg.Config{Fence: fence})
			zombieEmptyEpochFencedAs(t, open, iceberg.Config{Fence: fence}, "fence.shard-1-of-2")
		})
	}
}

// zombieEmptyEpochFenced runs TestZombieEmptyEpochFenced's steps with
// cfg, each process on its own catalog handle from open.
func zombieEmptyEpochFenced(t *testing.T, open func() catalog.Catalog, cfg iceberg.Config) {
	zombieEmptyEpochFencedAs(t, open, cfg, "fence")
}

// zombieEmptyEpochFencedAs is zombieEmptyEpochFenced for pipeline.
func zombieEmptyEpochFencedAs(t *testing.T, open func() catalog.Catalog, cfg iceberg.Config, pipeline string) {
	ctx := context.Background()
	cfg.Grouping = &iceberg.Grouping{}
	specs := []sink.StreamSpec{appended("a"), merged("m", "id")}
	old, err := newDest(t, open(), cfg).Writer(ctx, writerConfig(pipeline, 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	if _, err := old.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "m"} {
		rec := batch([]op{{key: 1, kind: "insert", seq: 1, name: "a1"}}, false)
		if err := old.Write(ctx, name, rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	c1, err := old.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatalf("Commit(1): %v", err)
	}
	empty, err := old.PreCommit(ctx, 2) // no rows
	if err != nil {
		t.Fatal(err)
	}

	// A newer attempt, in another process.
	young, err := newDest(t, open(), cfg).Writer(ctx, writerConfig(pipeline, 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer young.Close(ctx)
	head := &checkpoint.Record{Pipeline: pipeline, Epoch: 2, Generation: 1, Committables: [][]byte{empty}}
	if out, err := young.Recover(ctx, 2, head); err != nil || out != sink.Applied {
		t.Fatalf("Recover(2): %v, %v; want Applied", out, err)
	}
	if err := old.Commit(ctx, 2, []sink.Committable{empty}); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("zombie Commit of an empty epoch: %v, want an error wrapping sink.ErrFenced", err)
	}
	// The newer attempt's own empty epoch commits.
	empty3, err := young.PreCommit(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := young.Commit(ctx, 3, []sink.Committable{empty3}); err != nil {
		t.Fatalf("Commit(3) of an empty epoch by the newer attempt: %v", err)
	}
}

// TestFenceConfig: a Fence value New does not know is an error naming
// the field.
func TestFenceConfig(t *testing.T) {
	_, err := iceberg.New(iceberg.Config{Catalog: newWarehouse(t).cat, Fence: iceberg.FenceSnapshots + 1})
	if err == nil || !strings.Contains(err.Error(), "Config.Fence") {
		t.Errorf("New with Fence %d: %v, want an error naming Config.Fence", iceberg.FenceSnapshots+1, err)
	}
}

// TestFenceSnapshotsAfterProperties: a pipeline whose tables have their
// markers in table properties (FenceProperties) goes on with
// FenceSnapshots: the next attempt reads the properties too, so it
// finds the last epoch applied (Recover reports Applied, a replayed
// Commit adds nothing) and raises the fence above the properties' one.
func TestFenceSnapshotsAfterProperties(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	specs := []sink.StreamSpec{appended("a")}
	old, err := newDest(t, wh.cat, iceberg.Config{Fence: iceberg.FenceProperties}).Writer(ctx, writerConfig("mig", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	if _, err := old.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	ops := []op{{key: 1, kind: "insert", seq: 1, name: "a1"}, {key: 2, kind: "insert", seq: 2, name: "b1"}}
	rec := batch(ops, false)
	if err := old.Write(ctx, "a", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	c1, err := old.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	young, err := newDest(t, wh.cat, iceberg.Config{Fence: iceberg.FenceSnapshots}).Writer(ctx, writerConfig("mig", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer young.Close(ctx)
	head := &checkpoint.Record{Pipeline: "mig", Epoch: 1, Generation: 1, Committables: [][]byte{c1}}
	if out, err := young.Recover(ctx, 2, head); err != nil || out != sink.Applied {
		t.Fatalf("Recover(2) with FenceSnapshots of an epoch applied with FenceProperties: %v, %v; want Applied", out, err)
	}
	if err := young.Commit(ctx, 1, []sink.Committable{c1}); err != nil {
		t.Fatal(err)
	}
	if rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "a"); err != nil || len(rows) != len(ops) {
		t.Fatalf("after a replayed Commit(1): %d rows (%v), want %d", len(rows), err, len(ops))
	}
	stale, err := newDest(t, wh.cat, iceberg.Config{Fence: iceberg.FenceSnapshots}).Writer(ctx, writerConfig("mig", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close(ctx)
	if _, err := stale.Recover(ctx, 1, head); !errors.Is(err, sink.ErrFenced) {
		t.Fatalf("Recover(1) after generation 2's: %v, want sink.ErrFenced", err)
	}
}

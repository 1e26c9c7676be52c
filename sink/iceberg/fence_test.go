package iceberg_test

import (
	"context"
	"errors"
	"testing"

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
func TestZombieEmptyEpochFenced(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, cat := openCatalog(t, dir)
	specs := []sink.StreamSpec{appended("a"), merged("m", "id")}
	const pipeline = "fence"
	old, err := newDest(t, cat, iceberg.Config{Grouping: &iceberg.Grouping{}}).Writer(ctx, writerConfig(pipeline, 0, specs...))
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
	_, cat2 := openCatalog(t, dir)
	young, err := newDest(t, cat2, iceberg.Config{Grouping: &iceberg.Grouping{}}).Writer(ctx, writerConfig(pipeline, 0, specs...))
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

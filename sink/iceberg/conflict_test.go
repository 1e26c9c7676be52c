package iceberg_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// racingCatalog runs before() ahead of the first `races` commits that
// add a snapshot, so each of those commits loses the race for the table:
// another writer moved the branch after it was loaded.
type racingCatalog struct {
	catalog.Catalog
	races  atomic.Int32
	before func()
}

func (c *racingCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	adds := false
	for _, u := range updates {
		if u.Action() == "add-snapshot" {
			adds = true
		}
	}
	if adds && c.races.Add(-1) >= 0 {
		c.before()
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}

// TestConflictRetried has another pipeline commit to the same tables
// (append and merge) right before each of this pipeline's first commits,
// so they fail their branch requirement ("branch main has changed"); the
// commits must be redone on the new head, and both pipelines' rows be
// there exactly once.
func TestConflictRetried(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	cfg := iceberg.Config{}
	specs := []sink.StreamSpec{appended("a"), merged("m", "id")}
	plain := newDest(t, wh.cat, cfg)
	other, err := plain.Writer(ctx, writerConfig("other", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var otherEpoch uint64
	var otherOps []op
	seqOther := int64(1_000_000)
	rc := &racingCatalog{Catalog: wh.cat}
	rc.races.Store(4)
	rc.before = func() {
		otherEpoch++
		ops := []op{{key: 1000 + int64(otherEpoch), kind: "insert", seq: seqOther + int64(otherEpoch), name: "other"}}
		otherOps = append(otherOps, ops...)
		for _, tname := range []string{"a", "m"} {
			rec := batch(ops, false)
			if err := other.Write(ctx, tname, rec); err != nil {
				t.Error(err)
			}
			rec.Release()
		}
		c, err := other.PreCommit(ctx, otherEpoch)
		if err != nil {
			t.Error(err)
			return
		}
		if err := other.Commit(ctx, otherEpoch, []sink.Committable{c}); err != nil {
			t.Error(err)
		}
	}
	d := newDest(t, rc, cfg)
	w, err := d.Writer(ctx, writerConfig("mine", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var mine []op
	for epoch := uint64(1); epoch <= 3; epoch++ {
		ops := []op{{key: int64(epoch), kind: "insert", seq: int64(epoch), name: "mine"}, {key: 1, kind: "update", seq: 100 + int64(epoch), name: "mine"}}
		mine = append(mine, ops...)
		for _, tname := range []string{"a", "m"} {
			rec := batch(ops, false)
			if err := w.Write(ctx, tname, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		c, err := w.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, epoch, []sink.Committable{c}); err != nil {
			t.Fatalf("Commit(%d) after losing races: %v", epoch, err)
		}
	}
	if otherEpoch != 4 {
		t.Fatalf("the other pipeline committed %d times, want 4 (one per lost race)", otherEpoch)
	}
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := len(mine) + len(otherOps); len(rows) != want {
		t.Errorf("append table: %d rows, want %d (each pipeline's exactly once)", len(rows), want)
	}
	seen := map[int64]int{}
	for _, r := range rows {
		seen[r.Seq]++
	}
	for _, o := range append(mine, otherOps...) {
		if seen[o.seq] != 1 {
			t.Errorf("append table: seq %d visible %d times", o.seq, seen[o.seq])
		}
	}
	mrows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	// keys 1, 2, 3 (1 updated to seq 103) and the other pipeline's four.
	if len(mrows) != 3+len(otherOps) {
		t.Errorf("merge table: %d rows, want %d: %+v", len(mrows), 3+len(otherOps), mrows)
	}
	for _, r := range mrows {
		if r.Values["id"] == int64(1) && r.Seq != 103 {
			t.Errorf("merge table: key 1 at seq %d, want 103", r.Seq)
		}
	}
}

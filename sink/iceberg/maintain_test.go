package iceberg_test

import (
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestMaintainKeepsMarkers writes many small epochs, runs compaction,
// snapshot expiry and orphan cleanup, and checks the rows read the same,
// the markers survive (a repeated Commit of the last epoch adds nothing,
// Recover reports it applied), an uncommitted epoch's files are removed
// as orphans, and the pipeline carries on; with the markers in table
// properties (the default), and in snapshot summaries (FenceSnapshots:
// compaction's snapshot carries them over, and expiry leaves them on the
// current snapshot).
func TestMaintainKeepsMarkers(t *testing.T) {
	for _, fence := range []iceberg.Fence{iceberg.FenceAuto, iceberg.FenceSnapshots} {
		t.Run(fence.String(), func(t *testing.T) { maintainKeepsMarkers(t, fence) })
	}
}

func maintainKeepsMarkers(t *testing.T, fence iceberg.Fence) {
	ctx := context.Background()
	wh := newWarehouse(t)
	cfg := iceberg.Config{Fence: fence}
	specs := []sink.StreamSpec{appended("a"), merged("m", "id")}
	d := newDest(t, wh.cat, cfg)
	w, err := d.Writer(ctx, writerConfig("maint", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[int64]bool{}
	var seq int64
	var all []op
	var last sink.Committable
	const epochs = 8
	for epoch := uint64(1); epoch <= epochs; epoch++ {
		ops := genOps(rng, live, &seq, 50, 40, false)
		all = append(all, ops...)
		for _, tname := range []string{"a", "m"} {
			rec := batch(ops, false)
			if err := w.Write(ctx, tname, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		if last, err = w.PreCommit(ctx, epoch); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, epoch, []sink.Committable{last}); err != nil {
			t.Fatal(err)
		}
	}
	// An epoch pre-committed and never committed: its files are orphans.
	rec := batch(genOps(rng, live, &seq, 10, 40, false), false)
	if err := w.Write(ctx, "a", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if _, err := w.PreCommit(ctx, epochs+1); err != nil {
		t.Fatal(err)
	}
	files := func(name string) int {
		m, _ := filepath.Glob(filepath.Join(wh.dir, "warehouse", iceberg.DefaultNamespace+".db", name, "data", "*.parquet"))
		return len(m)
	}
	beforeA, beforeM := files("a"), files("m")
	wantA, _ := scan(ctx, wh.cat, iceberg.DefaultNamespace, "a")
	wantM, _ := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	// Orphan cleanup only takes files older than the cutoff: age every
	// file written so far by an hour, so that those and only those are
	// old enough, however long Maintain itself takes.
	hourAgo := time.Now().Add(-time.Hour)
	if err := filepath.WalkDir(filepath.Join(wh.dir, "warehouse"), func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		return os.Chtimes(path, hourAgo, hourAgo)
	}); err != nil {
		t.Fatal(err)
	}
	reports, err := d.Maintain(ctx, iceberg.MaintainOptions{Compact: true, ExpireOlderThan: time.Nanosecond, OrphansOlderThan: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reports {
		t.Logf("%+v", r)
		if r.FilesRewritten == 0 || r.ExpiredSnapshots == 0 || (r.Table == "a") != (r.OrphansDeleted > 0) {
			t.Errorf("table %s: %+v: want files rewritten, snapshots expired, and orphans deleted in a only", r.Table, r)
		}
	}
	if a, m := files("a"), files("m"); a >= beforeA || m >= beforeM {
		t.Errorf("data files: a %d → %d, m %d → %d: want fewer", beforeA, a, beforeM, m)
	}
	gotA, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "a")
	if err != nil {
		t.Fatal(err)
	}
	gotM, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(gotA) != len(wantA) || len(gotA) != len(all) || len(gotM) != len(wantM) {
		t.Fatalf("after maintenance: %d/%d rows in a (want %d), %d/%d in m", len(gotA), len(wantA), len(all), len(gotM), len(wantM))
	}
	for _, name := range []string{"a", "m"} {
		tbl, err := wh.cat.LoadTable(ctx, table.Identifier{iceberg.DefaultNamespace, name})
		if err != nil {
			t.Fatal(err)
		}
		p := tbl.Properties()
		if fence == iceberg.FenceSnapshots {
			checkNoMarkers(t, name, p)
			p = tbl.CurrentSnapshot().Summary.Properties
		}
		if p["openetl.maint.epoch"] != "8" || p["openetl.maint.fence"] != "1" {
			t.Errorf("%s: markers after maintenance: %v", name, p)
		}
	}
	// The markers still make the last epoch applied, for this process and
	// the next.
	if err := w.Commit(ctx, epochs, []sink.Committable{last}); err != nil {
		t.Fatal(err)
	}
	w2, err := newDest(t, wh.cat, cfg).Writer(ctx, writerConfig("maint", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	out, err := w2.Recover(ctx, 2, &checkpoint.Record{Pipeline: "maint", Epoch: epochs, Generation: 1, Committables: [][]byte{last}})
	if err != nil || out != sink.Applied {
		t.Fatalf("Recover after maintenance: %v, %v; want applied", out, err)
	}
	if again, _ := scan(ctx, wh.cat, iceberg.DefaultNamespace, "a"); len(again) != len(all) {
		t.Fatalf("a repeated Commit after maintenance changed a: %d rows, want %d", len(again), len(all))
	}
	ops := genOps(rng, live, &seq, 20, 40, false)
	rec = batch(ops, false)
	if err := w2.Write(ctx, "a", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	c, err := w2.PreCommit(ctx, epochs+1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Commit(ctx, epochs+1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	if got, _ := scan(ctx, wh.cat, iceberg.DefaultNamespace, "a"); len(got) != len(all)+len(ops) {
		t.Fatalf("after the next epoch: %d rows, want %d", len(got), len(all)+len(ops))
	}
}

// TestMaintainExpiryKeepsSummaryMarkers: with the markers in snapshot
// summaries (FenceSnapshots), another writer's snapshot on top of the
// pipeline's (here an empty append) carries none of them; Maintain's
// expiry, keeping only the current snapshot, first records them on a
// snapshot of their own, so the next attempt still reads them: Recover
// reports the last epoch applied instead of failing with unreadable
// markers.
func TestMaintainExpiryKeepsSummaryMarkers(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	cfg := iceberg.Config{Fence: iceberg.FenceSnapshots}
	specs := []sink.StreamSpec{appended("a")}
	d := newDest(t, wh.cat, cfg)
	w, err := d.Writer(ctx, writerConfig("exp", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	ops := []op{{key: 1, kind: "insert", seq: 1, name: "a1"}}
	rec := batch(ops, false)
	if err := w.Write(ctx, "a", rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	// Another writer's snapshot.
	ident := table.Identifier{iceberg.DefaultNamespace, "a"}
	tbl, err := wh.cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	as, err := table.SchemaToArrowSchema(tbl.Schema(), nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := array.NewRecordReader(as, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.Append(ctx, rdr, nil); err != nil {
		t.Fatal(err)
	}
	rdr.Release()
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Maintain(ctx, iceberg.MaintainOptions{ExpireOlderThan: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = wh.cat.LoadTable(ctx, ident); err != nil {
		t.Fatal(err)
	}
	if n := len(tbl.Metadata().Snapshots()); n != 1 {
		t.Errorf("%d snapshots after expiry, want 1", n)
	}
	w2, err := newDest(t, wh.cat, cfg).Writer(ctx, writerConfig("exp", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	out, err := w2.Recover(ctx, 2, &checkpoint.Record{Pipeline: "exp", Epoch: 1, Generation: 1, Committables: [][]byte{c}})
	if err != nil || out != sink.Applied {
		t.Fatalf("Recover after expiry: %v, %v; want Applied", out, err)
	}
}

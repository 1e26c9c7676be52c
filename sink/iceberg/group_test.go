package iceberg_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// groupRows is TestSyncCommitsGroupAtEnd's rows per stream: a third of
// the kill test's, enough for dozens of epochs at 10ms; each of its three
// readbacks reads them all.
const groupRows = killRows / 3

// TestSyncCommitsGroupAtEnd syncs the fake orders (append) and customers
// (merge) through the real runner with a grouping that is never due (the
// default's 128 MiB, and 1000h rather than 60s so a slow machine can't
// reach it) and a barrier every 32 KiB of payload read in batches of
// 256 rows, so the epoch count depends on the data, not on how fast the
// machine reads it: no table commit is due during the sync, so everything becomes visible when the runner closes lane 0's
// writer at the end of Sync. pyiceberg must then read every
// order once and every customer's latest version, in fewer snapshots
// than epochs; a second Sync with nothing new changes nothing.
func TestSyncCommitsGroupAtEnd(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: two syncs take minutes under -race (the plain run covers it)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	_, cat := openCatalog(t, dir)
	dst, err := iceberg.New(iceberg.Config{Catalog: cat, Grouping: &iceberg.Grouping{Bytes: iceberg.DefaultGrouping.Bytes, Interval: 1000 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(ctx)
	sync := func() etl.Result {
		t.Helper()
		src, err := faker.New(faker.Config{Seed: 42, Rows: groupRows})
		if err != nil {
			t.Fatal(err)
		}
		p, err := etl.NewPipeline("kill").From(src).To(dst).Checkpoints(store).
			Mode(delivery.Merge, faker.Customers).Lanes(2).EpochEvery(1000*time.Hour, 32<<10).BatchSize(256, 0).
			Require(delivery.ExactlyOnce).Build()
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := sync()
	t.Logf("the first sync took %d epochs", res.Epochs)
	if res.Epochs < 3 {
		t.Fatalf("the sync took %d epochs: too few to group", res.Epochs)
	}
	verifyFakerRows(t, dir, groupRows)
	got := testutil.ReadIcebergTables(t, "openetl", filepath.Join(dir, "catalog.db"), "file://"+filepath.Join(dir, "warehouse"), iceberg.DefaultNamespace)
	if n := got[faker.Orders].Snapshots; n != 1 {
		t.Errorf("orders: %d snapshots after %d epochs, want 1 (one group)", n, res.Epochs)
	}
	sync()
	verifyFakerRows(t, dir, groupRows)
}

// TestGroupingKnobs checks each knob of Grouping on one lane and an
// Append table: with Bytes reached by the first epoch, every Commit makes
// its epoch visible; with neither reached, Commit leaves epochs waiting
// and the second Commit after Interval has passed (the test sleeps past
// it) makes both visible in one snapshot; negative knobs are an error.
func TestGroupingKnobs(t *testing.T) {
	ctx := context.Background()
	if _, err := iceberg.New(iceberg.Config{Catalog: newWarehouse(t).cat, Grouping: &iceberg.Grouping{Bytes: -1}}); err == nil {
		t.Error("New with a negative Grouping.Bytes: no error")
	}
	run := func(t *testing.T, g iceberg.Grouping, sleep time.Duration, want []int) {
		wh := newWarehouse(t)
		d := newDest(t, wh.cat, iceberg.Config{Grouping: &g})
		w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "knobs"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close(ctx)
		if _, err := w.Recover(ctx, 1, nil); err != nil {
			t.Fatal(err)
		}
		var seq int64
		for e := uint64(1); e <= uint64(len(want)); e++ {
			ops := make([]op, 50)
			for i := range ops {
				seq++
				ops[i] = op{key: seq, kind: "insert", seq: seq, name: "x"}
			}
			rec := batch(ops, false)
			if err := w.Write(ctx, "t", rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
			c, err := w.PreCommit(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("epoch %d: committable of %d bytes", e, len(c))
			if e > 1 {
				time.Sleep(sleep)
			}
			if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
				t.Fatal(err)
			}
			rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "t")
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != want[e-1] {
				t.Fatalf("after Commit(%d): %d rows visible, want %d", e, len(rows), want[e-1])
			}
		}
	}
	t.Run("bytes", func(t *testing.T) {
		run(t, iceberg.Grouping{Bytes: 1, Interval: 1000 * time.Hour}, 0, []int{50, 100, 150})
	})
	t.Run("interval", func(t *testing.T) {
		run(t, iceberg.Grouping{Bytes: 1 << 50, Interval: 50 * time.Millisecond}, 100*time.Millisecond, []int{0, 100})
	})
	t.Run("neither", func(t *testing.T) {
		run(t, iceberg.Grouping{Bytes: 1 << 50, Interval: 1000 * time.Hour}, 0, []int{0, 0, 0})
	})
}

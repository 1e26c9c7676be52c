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
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// TestSyncCommitsGroupAtEnd syncs the fake orders (append) and customers
// (merge) through the real runner with the default grouping (128 MiB or
// 60s, neither reached) and epochs every 10ms: no table commit is due
// during the sync, so everything becomes visible when the runner closes
// lane 0's writer at the end of Sync. pyiceberg must then read every
// order once and every customer's latest version, in fewer snapshots
// than epochs; a second Sync with nothing new changes nothing.
func TestSyncCommitsGroupAtEnd(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: two syncs of the kill test's rows take minutes under -race (the plain run covers it)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	_, cat := openCatalog(t, dir)
	dst, err := iceberg.New(iceberg.Config{Catalog: cat, Tables: map[string]iceberg.TableConfig{
		faker.Customers: {Mode: iceberg.Merge, Key: []string{"id"}},
	}}) // Grouping nil: DefaultGrouping
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
		src, err := faker.New(faker.Config{Seed: 42, Rows: killRows})
		if err != nil {
			t.Fatal(err)
		}
		p, err := etl.NewPipeline("kill").From(src).To(dst).Checkpoints(store).
			Mode(delivery.Merge, faker.Customers).Lanes(2).EpochEvery(10*time.Millisecond, 0).
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
	if res.Epochs < 3 {
		t.Fatalf("the sync took %d epochs: too few to group", res.Epochs)
	}
	verifyFaker(t, dir)
	got := testutil.ReadIcebergTables(t, "openetl", filepath.Join(dir, "catalog.db"), "file://"+filepath.Join(dir, "warehouse"), iceberg.DefaultNamespace)
	if n := got[faker.Orders].Snapshots; n != 1 {
		t.Errorf("orders: %d snapshots after %d epochs, want 1 (one group)", n, res.Epochs)
	}
	sync()
	verifyFaker(t, dir)
}

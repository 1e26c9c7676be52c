package iceberg_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// TestBuilderModeMerges: Builder.Mode(delivery.Merge, "orders") alone
// makes the orders table a merge table (the destination has no mode of
// its own): pyiceberg reads one row per order, its latest version,
// while customers, appended, has every version. Before writers got their
// streams' specs, this built and appended every version of every order
// while Guarantees said the stream was merged.
func TestBuilderModeMerges(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	const rows = 2000
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("merge").From(src).To(newDest(t, wh.cat, iceberg.Config{})).Checkpoints(checkpoint.NewMem()).
		Mode(delivery.Merge, faker.Orders).Lanes(2).Require(delivery.ExactlyOnce).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := testutil.ReadIcebergTables(t, "openetl", wh.dbPath, "file://"+filepath.Join(wh.dir, "warehouse"), iceberg.DefaultNamespace)
	latest := map[string]int64{} // order id → highest seq
	var buf []byte
	for i := range int64(rows) {
		_, seq, key, _ := src.Generate(faker.Orders, i, buf)
		if seq > latest[string(key)] {
			latest[string(key)] = seq
		}
		buf = key[:0]
	}
	orders := got[faker.Orders]
	if orders == nil {
		t.Fatal("no orders table")
	}
	seen := map[string]bool{}
	for _, r := range orders.Data {
		id := str(r["id"])
		if seen[id] {
			t.Fatalf("orders: id %s twice: the table was appended to, not merged", id)
		}
		seen[id] = true
		if str(r["_openetl_seq"]) != fmt.Sprint(latest[id]) {
			t.Fatalf("orders: id %s at seq %v, want its latest, %d", id, r["_openetl_seq"], latest[id])
		}
	}
	if len(seen) != len(latest) || len(latest) == rows {
		t.Fatalf("orders: %d ids visible, want %d (of %d versions)", len(seen), len(latest), rows)
	}
	if cust := got[faker.Customers]; cust == nil || cust.Rows != rows {
		t.Fatalf("customers (appended): %v, want %d rows", cust, rows)
	}
}

// TestCheckStream: Build fails, naming the stream, for a merged stream
// whose table Config.Tables partitions by a column outside the stream's
// key; every mode, and hard deletes, build.
func TestCheckStream(t *testing.T) {
	wh := newWarehouse(t)
	build := func(cfg iceberg.Config, b func(*etl.Builder) *etl.Builder) error {
		src, err := faker.New(faker.Config{Rows: 10})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b(etl.NewPipeline("spec").From(src).To(newDest(t, wh.cat, cfg)).Checkpoints(checkpoint.NewMem())).Build()
		return err
	}
	byCountry := iceberg.Config{Tables: map[string]iceberg.TableConfig{
		faker.Customers: {Partition: []iceberg.PartitionField{{Column: "country", Transform: "identity"}}}}}
	err := build(byCountry, func(b *etl.Builder) *etl.Builder { return b.Mode(delivery.Merge, faker.Customers) })
	for _, w := range []string{`stream "customers"`, `Config.Tables["customers"].Partition uses "country"`, `key columns ["id"]`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Build: %v; want an error with %q", err, w)
		}
	}
	for name, b := range map[string]func(*etl.Builder) *etl.Builder{
		"append partitioned": func(b *etl.Builder) *etl.Builder { return b },
		"merge hard deletes": func(b *etl.Builder) *etl.Builder {
			return b.Mode(delivery.Merge, faker.Orders).Deletes(sink.HardDeletes, faker.Orders)
		},
		"overwrite": func(b *etl.Builder) *etl.Builder { return b.Mode(delivery.Overwrite, faker.Customers) },
	} {
		if err := build(byCountry, b); err != nil {
			t.Errorf("%s: Build: %v", name, err)
		}
	}
}

package iceberg_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// soakEnv sets how long TestContinuousRunFiles runs (a Go duration, e.g.
// 10m); unset, the test is skipped. OPENETL_ICEBERG_SOAK_RATE sets the
// faker's records per second per stream (default 2000).
const soakEnv = "OPENETL_ICEBERG_SOAK"

// TestContinuousRunFiles is a measurement, not a check run by make test:
// a continuous Run of the fake customers (merge) and orders (append)
// into a local warehouse with the pipeline's default epochs (10s) and
// the destination's default grouping (128 MiB or 60s), for $OPENETL_ICEBERG_SOAK,
// then a report of each table's snapshots, data and delete files and
// their average size. It fails if a table is missing or holds no rows.
func TestContinuousRunFiles(t *testing.T) {
	d := os.Getenv(soakEnv)
	if d == "" {
		t.Skip(soakEnv + " is not set: a measurement run (e.g. " + soakEnv + "=10m)")
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("%s=%q: %v", soakEnv, d, err)
	}
	rate := 2000.0
	if s := os.Getenv(soakEnv + "_RATE"); s != "" {
		if rate, err = strconv.ParseFloat(s, 64); err != nil {
			t.Fatalf("%s_RATE=%q: %v", soakEnv, s, err)
		}
	}
	dir := t.TempDir()
	_, cat := openCatalog(t, dir)
	dst, err := iceberg.New(iceberg.Config{Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	src, err := faker.New(faker.Config{Seed: 7, Rows: 1 << 40, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := etl.NewPipeline("soak").From(src).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).Lanes(2).Require(delivery.ExactlyOnce).Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	start := time.Now()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("ran %v at %.0f records/s per stream, lanes 2, epochs every 10s, grouping %d MiB / %v",
		time.Since(start).Round(time.Second), rate, iceberg.DefaultGrouping.Bytes>>20, iceberg.DefaultGrouping.Interval)
	for _, name := range []string{faker.Orders, faker.Customers} {
		tbl, err := cat.LoadTable(context.Background(), table.Identifier{iceberg.DefaultNamespace, name})
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := tbl.Scan().PlanFiles(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var files, bytes, rows int64
		deletes := map[string]int64{}
		for _, task := range tasks {
			files++
			bytes += task.File.FileSizeBytes()
			rows += task.File.Count()
			for _, df := range append(append(task.DeleteFiles, task.EqualityDeleteFiles...), task.DeletionVectorFiles...) {
				deletes[df.FilePath()] = df.FileSizeBytes()
			}
		}
		if rows == 0 {
			t.Fatalf("%s: no rows", name)
		}
		var delBytes int64
		for _, b := range deletes {
			delBytes += b
		}
		avgDel := int64(0)
		if len(deletes) > 0 {
			avgDel = delBytes / int64(len(deletes))
		}
		t.Logf("%s: %d snapshots, %d data files (avg %.1f KiB, %d rows), %d delete files (avg %.1f KiB)",
			name, len(tbl.Metadata().Snapshots()), files, float64(bytes)/float64(files)/1024, rows, len(deletes), float64(avgDel)/1024)
	}
}

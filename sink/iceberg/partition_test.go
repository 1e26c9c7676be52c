package iceberg_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestPartitioned writes an append table partitioned by
// day(_openetl_synced_at), bucket[4](id) and truncate[100](amount), and a
// merge table partitioned by bucket[4](id) over two lanes and several
// epochs, then checks the specs, that files landed in several
// partitions, and what pyiceberg (append) and iceberg-go (merge) read.
func TestPartitioned(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	cfg := iceberg.Config{Tables: map[string]iceberg.TableConfig{
		"pa":  {Partition: []iceberg.PartitionField{{Column: "_openetl_synced_at", Transform: "day"}, {Column: "id", Transform: "bucket[4]"}, {Column: "amount", Transform: "truncate[100]"}}},
		"pm":  {Partition: []iceberg.PartitionField{{Column: "id", Transform: "bucket[4]"}}},
		"bad": {Partition: []iceberg.PartitionField{{Column: "name", Transform: "identity"}}},
	}}
	d := newDest(t, wh.cat, cfg)
	if err := d.CheckStream(merged("bad", "id")); err == nil || !strings.Contains(err.Error(), `only be partitioned by its key columns ["id"]`) {
		t.Errorf("CheckStream of a merged table partitioned by a column outside its key: %v", err)
	}
	if err := d.CheckStream(appended("bad")); err != nil {
		t.Errorf("CheckStream of an appended table partitioned by any column: %v", err)
	}
	specs := []sink.StreamSpec{appended("pa"), merged("pm", "id")}
	ws := make([]sink.Writer, 2)
	for i := range ws {
		w, err := d.Writer(ctx, writerConfig("part", i, specs...))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close(ctx)
		ws[i] = w
	}
	if _, err := ws[0].Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	live := map[int64]bool{}
	var seq int64
	var all []op
	for epoch := uint64(1); epoch <= 4; epoch++ {
		ops := genOps(rng, live, &seq, 200, 60, false)
		all = append(all, ops...)
		var cs []sink.Committable
		for lane, w := range ws {
			var mine []op
			for _, o := range ops {
				if int(o.key)%2 == lane {
					mine = append(mine, o)
				}
			}
			for _, tname := range []string{"pa", "pm"} {
				rec := batch(mine, false)
				if err := w.Write(ctx, tname, rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
			}
			c, err := w.PreCommit(ctx, epoch)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		if err := ws[0].Commit(ctx, epoch, cs); err != nil {
			t.Fatalf("Commit(%d): %v", epoch, err)
		}
	}
	for name, n := range map[string]int{"pa": 3, "pm": 1} {
		tbl, err := wh.cat.LoadTable(ctx, table.Identifier{iceberg.DefaultNamespace, name})
		if err != nil {
			t.Fatal(err)
		}
		spec := tbl.Spec()
		if got := spec.NumFields(); got != n {
			t.Errorf("%s: spec %s has %d fields, want %d", name, spec.String(), got, n)
		}
	}
	got := testutil.ReadIcebergTables(t, "openetl", wh.dbPath, "file://"+filepath.Join(wh.dir, "warehouse"), iceberg.DefaultNamespace)
	if got["pa"] == nil || got["pa"].DataFiles < 8 {
		t.Errorf("pa: %+v: want data files in several partitions per epoch", got["pa"])
	}
	checkAppend(t, got["pa"], all)
	checkMerge(t, "pm", got["pm"], all, false)
}

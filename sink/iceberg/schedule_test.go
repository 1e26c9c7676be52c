package iceberg_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestScheduledMaintenanceBoundsFiles merges 40 epochs into one table,
// each updating every one of 20 keys (a data file and a position-delete
// file per epoch), with Config.Maintenance running compaction, snapshot
// expiry and orphan removal from lane 0 after every Commit: the files
// under the table's data directory stay few, the table reads back as
// the last epoch's rows, and the pipeline's markers survive. Without
// the schedule the directory holds 80 files.
func TestScheduledMaintenanceBoundsFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, cat := openCatalog(t, dir)
	const epochs, keys = 40, 20
	dst := newDest(t, cat, iceberg.Config{Grouping: &iceberg.Grouping{}, Maintenance: &iceberg.Maintenance{
		Every: time.Nanosecond, // after every Commit
		Options: iceberg.MaintainOptions{Compact: true, ExpireOlderThan: time.Nanosecond,
			OrphansOlderThan: time.Nanosecond},
	}})
	w, err := dst.Writer(ctx, writerConfig("sched", 0, merged("m", "id")))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	dataFiles := func() int {
		n := 0
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.Contains(p, string(filepath.Separator)+"data"+string(filepath.Separator)) {
				n++
			}
			return nil
		})
		return n
	}
	most := 0
	for e := uint64(1); e <= epochs; e++ {
		ops := make([]op, keys)
		for k := range ops {
			kind := "update"
			if e == 1 {
				kind = "insert"
			}
			ops[k] = op{key: int64(k), kind: kind, seq: int64(e)*100 + int64(k), name: fmt.Sprintf("k%d-e%d", k, e)}
		}
		rec := batch(ops, false)
		if err := w.Write(ctx, "m", rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
			t.Fatalf("Commit(%d): %v", e, err)
		}
		most = max(most, dataFiles())
	}
	if n := dataFiles(); n > 6 || most > 8 {
		t.Errorf("%d files under the data directory after %d epochs (at most %d on the way), want a handful", n, epochs, most)
	}
	rows, err := scan(ctx, cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != keys {
		t.Fatalf("%d rows, want %d", len(rows), keys)
	}
	for _, r := range rows {
		if want := fmt.Sprintf("k%v-e%d", r.Values["id"], epochs); fmt.Sprint(r.Values["name"]) != want {
			t.Errorf("key %v: name %v, want %s", r.Values["id"], r.Values["name"], want)
		}
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{iceberg.DefaultNamespace, "m"})
	if err != nil {
		t.Fatal(err)
	}
	if got := tbl.Properties()["openetl.sched.epoch"]; got != fmt.Sprint(epochs) {
		t.Errorf("epoch marker %q after maintenance, want %d", got, epochs)
	}
	t.Logf("%d files under the data directory after %d epochs, at most %d; %d snapshots", dataFiles(), epochs, most, len(tbl.Metadata().Snapshots()))
}

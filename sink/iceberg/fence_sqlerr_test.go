package iceberg_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// busyCatalog fails the next `fail` commits that add a snapshot with
// the error a SQL catalog's database gives when it is briefly busy.
type busyCatalog struct {
	catalog.Catalog
	fail atomic.Int32
}

func (c *busyCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	for _, u := range updates {
		if u.Action() == "add-snapshot" && c.fail.Add(-1) >= 0 {
			return nil, "", errors.New("database is locked (5) (SQLITE_BUSY)")
		}
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}

// TestFenceAutoSQLErrorKeepsProperties: under the default FenceAuto, a
// SQL catalog's commit that fails for a moment (its database busy) is no
// refusal of the pipeline's table properties (a SQL catalog keeps any
// property): the epoch's Commit fails and is retried with them, and
// the markers stay in the table's properties, instead of the whole
// Destination moving them to snapshot summaries for good.
func TestFenceAutoSQLErrorKeepsProperties(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	bc := &busyCatalog{Catalog: wh.cat}
	d := newDest(t, bc, iceberg.Config{})
	w, err := d.Writer(ctx, writerConfig("busy", 0, merged("m", "id"), appended("a")))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var seq int64
	for e := uint64(1); e <= 2; e++ {
		for _, tb := range []string{"m", "a"} {
			seq++
			rec := batch([]op{{key: seq, kind: "insert", seq: seq, name: "x"}}, false)
			if err := w.Write(ctx, tb, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if e == 1 {
			bc.fail.Store(1)
		}
		for try := 0; ; try++ { // as the runner retries a failed Commit
			if err = w.Commit(ctx, e, []sink.Committable{c}); err == nil || try == 2 {
				break
			}
		}
		if err != nil {
			t.Fatalf("Commit(%d): %v", e, err)
		}
	}
	for _, tb := range []string{"a", "m"} {
		tbl, err := wh.cat.LoadTable(ctx, table.Identifier{iceberg.DefaultNamespace, tb})
		if err != nil {
			t.Fatal(err)
		}
		if p := tbl.Properties(); p["openetl.busy.epoch"] != "2" || p["openetl.busy.fence"] != "1" {
			t.Errorf("table %s's markers in its properties: epoch %q, fence %q; want 2 and 1", tb, p["openetl.busy.epoch"], p["openetl.busy.fence"])
		}
		rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, tb)
		if err != nil || len(rows) != 2 {
			t.Errorf("table %s: %d rows (err %v), want 2", tb, len(rows), err)
		}
	}
}

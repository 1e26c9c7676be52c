package iceberg_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// tookItCatalog fails the next `fail` commits after the catalog took
// them, as a connection lost on the way back does.
type tookItCatalog struct {
	catalog.Catalog
	fail atomic.Int32
}

func (c *tookItCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	m, l, err := c.Catalog.CommitTable(ctx, ident, reqs, updates)
	if err == nil && c.fail.Add(-1) >= 0 {
		return nil, "", errors.New("read tcp: connection reset by peer")
	}
	return m, l, err
}

// TestCommitTakenThenFailed: the catalog takes the commit of an epoch
// that updates and deletes keys, and the Commit gets an error back. The
// position-delete file (v2) or deletion vector (v3) the commit added is
// the table's now and must stay: the Commit (or the runner's retry)
// finds the epoch applied, readers and the next epoch read the table,
// and each key has its last version once.
func TestCommitTakenThenFailed(t *testing.T) {
	for _, format := range []string{"2", "3"} {
		t.Run("v"+format, func(t *testing.T) { commitTakenThenFailed(t, format) })
	}
}

func commitTakenThenFailed(t *testing.T, format string) {
	ctx := context.Background()
	wh := newWarehouse(t)
	tc := &tookItCatalog{Catalog: wh.cat}
	spec := merged("m", "id")
	spec.Deletes = sink.HardDeletes
	d := newDest(t, tc, iceberg.Config{Properties: map[string]string{"format-version": format}})
	w, err := d.Writer(ctx, writerConfig("took", 0, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	var all []op
	seq := int64(0)
	mk := func(k int64, kind string) op {
		seq++
		return op{key: k, kind: kind, seq: seq, name: fmt.Sprintf("n%d-%d", k, seq)}
	}
	epoch := func(e uint64, failing bool, ops ...op) {
		t.Helper()
		all = append(all, ops...)
		rec := batch(ops, false)
		defer rec.Release()
		if err := w.Write(ctx, "m", rec); err != nil {
			t.Fatal(err)
		}
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if failing {
			tc.fail.Store(1)
		}
		// The writer finds the epoch applied on the table it reloads, or
		// the runner retries the Commit.
		err = w.Commit(ctx, e, []sink.Committable{c})
		if err != nil && failing {
			err = w.Commit(ctx, e, []sink.Committable{c})
		}
		if err != nil {
			t.Fatalf("Commit(%d): %v", e, err)
		}
		if failing && tc.fail.Load() > 0 {
			t.Fatalf("Commit(%d) made no commit", e)
		}
	}
	epoch(1, false, mk(1, "insert"), mk(2, "insert"), mk(3, "insert"))
	epoch(2, true, mk(1, "update"), mk(2, "delete"))
	epoch(3, false, mk(1, "update"), mk(3, "update"))
	rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "m")
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, rows, all)
}

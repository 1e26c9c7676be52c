package iceberg_test

import (
	"context"
	"testing"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestRecoverReshardRecord: the first record etl.Reshard writes to a
// new shard's log (epoch 1, no committables) recovers Applied for a
// pipeline the destination never saw, also on a table another pipeline
// (an old shard) writes, and the new shard's next epochs commit: both
// pipelines' rows are in the table. (The names are shard keys with '-'
// for '.': this destination refuses a '.' in a pipeline name, and so
// etl.ShardKey's keys for now.)
func TestRecoverReshardRecord(t *testing.T) {
	ctx := context.Background()
	w := newWarehouse(t)
	d := newDest(t, w.cat, iceberg.Config{})
	specs := []sink.StreamSpec{appended("a")}
	write := func(wr sink.Writer, epoch uint64, name string) {
		t.Helper()
		rec := batch([]op{{key: int64(epoch), kind: "insert", seq: int64(epoch), name: name}}, false)
		if err := wr.Write(ctx, "a", rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		c, err := wr.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := wr.Commit(ctx, epoch, []sink.Committable{c}); err != nil {
			t.Fatalf("Commit(%d): %v", epoch, err)
		}
	}
	old, err := d.Writer(ctx, writerConfig("orders-shard-0-of-2", 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	if _, err := old.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	write(old, 1, "old")

	const pipeline = "orders-shard-0-of-3"
	nw, err := d.Writer(ctx, writerConfig(pipeline, 0, specs...))
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close(ctx)
	head := &checkpoint.Record{Pipeline: pipeline, Epoch: 1, Generation: 1, Committables: [][]byte{},
		Resume: map[string][]byte{"t/0": {0, 0, 0, 0, 0, 0, 0, 9}}}
	if out, err := nw.Recover(ctx, 2, head); err != nil || out != sink.Applied {
		t.Fatalf("Recover of a reshard's first record: %v, %v; want Applied", out, err)
	}
	write(nw, 2, "new")
	rows, err := scan(ctx, w.cat, iceberg.DefaultNamespace, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("table a holds %d rows, want the old shard's and the new one's: %v", len(rows), rows)
	}
}

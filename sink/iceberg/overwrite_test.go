package iceberg_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestOverwrite runs three full refreshes of an Overwrite table, each on
// two lanes, and reads the table with pyiceberg in between:
//   - refresh 1 (generation 1, epochs 1-3): nothing is visible after each
//     Commit; after Finish(3) the table holds refresh 1's rows;
//   - refresh 2 starts (generation 2, epochs 4-5) and its process dies
//     after epoch 5's record is HEAD, before Commit(5): readers still see
//     refresh 1, whole;
//   - generation 3 recovers (Recoverable), carries epochs 4-5 on, writes
//     epoch 6 and closes without Finish (a stopped Run, a cancelled
//     Sync): still refresh 1;
//   - generation 4 recovers (Recoverable), writes epoch 7, whose record
//     is Final, commits it and dies before Finish: still refresh 1;
//   - generation 5's Recover, given that Final record, finishes refresh 2
//     (Applied): the table holds exactly epochs 4-7, none of refresh 1;
//     then refresh 3 (epoch 8) and Finish replace it with refresh 3 only,
//     not added to refresh 2.
func TestOverwrite(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	// Commit every epoch: an Overwrite table still waits for the end.
	d := newDest(t, wh.cat, iceberg.Config{Grouping: &iceberg.Grouping{}})
	snap := sink.StreamSpec{Stream: "snap", Table: "snap", Mode: sink.Overwrite}
	read := func() *testutil.IcebergTable {
		t.Helper()
		got := testutil.ReadIcebergTables(t, "openetl", wh.dbPath, "file://"+filepath.Join(wh.dir, "warehouse"), iceberg.DefaultNamespace)
		tb := got["snap"]
		if tb == nil {
			t.Fatal("no table snap")
		}
		return tb
	}
	rng := rand.New(rand.NewPCG(3, 3))
	var seq int64
	attempt := func(gen checkpoint.Generation, head *checkpoint.Record, want sink.Outcome) []sink.Writer {
		t.Helper()
		ws := make([]sink.Writer, 2)
		for i := range ws {
			w, err := d.Writer(ctx, writerConfig("ow", i, snap))
			if err != nil {
				t.Fatal(err)
			}
			ws[i] = w
		}
		out, err := ws[0].Recover(ctx, gen, head)
		if err != nil || out != want {
			t.Fatalf("Recover(%d): %v, %v; want %v", gen, out, err, want)
		}
		return ws
	}
	// epoch writes 200 rows over both lanes, pre-commits and, unless
	// dies, commits; it returns the rows and the epoch's record.
	epoch := func(ws []sink.Writer, gen checkpoint.Generation, e uint64, dies bool) ([]op, *checkpoint.Record) {
		t.Helper()
		ops := genOps(rng, map[int64]bool{}, &seq, 200, 1_000_000, false)
		for i := range ops {
			ops[i].kind = "insert" // a snapshot of the source's rows
		}
		rec := &checkpoint.Record{Pipeline: "ow", Epoch: e, Generation: gen}
		var cs []sink.Committable
		for lane, w := range ws {
			part := ops[lane*100 : (lane+1)*100]
			b := batch(part, false)
			if err := w.Write(ctx, "snap", b); err != nil {
				t.Fatal(err)
			}
			b.Release()
			c, err := w.PreCommit(ctx, e)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
			rec.Committables = append(rec.Committables, c)
		}
		if !dies {
			if err := ws[0].Commit(ctx, e, cs); err != nil {
				t.Fatalf("Commit(%d): %v", e, err)
			}
		}
		return ops, rec
	}
	closeAll := func(ws []sink.Writer) {
		t.Helper()
		for _, w := range ws {
			if err := w.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
	}

	finish := func(w sink.Writer, e uint64) {
		t.Helper()
		if err := w.Finish(ctx, e); err != nil {
			t.Fatalf("Finish(%d): %v", e, err)
		}
	}
	recommit := func(ws []sink.Writer, head *checkpoint.Record) {
		t.Helper()
		cs := make([]sink.Committable, len(head.Committables))
		for i, c := range head.Committables {
			cs[i] = c
		}
		if err := ws[0].Commit(ctx, head.Epoch, cs); err != nil {
			t.Fatal(err)
		}
	}

	// Refresh 1.
	ws := attempt(1, nil, sink.Applied)
	var first []op
	var head *checkpoint.Record
	for e := uint64(1); e <= 3; e++ {
		var ops []op
		ops, head = epoch(ws, 1, e, false)
		first = append(first, ops...)
		if rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "snap"); err != nil || len(rows) != 0 {
			t.Fatalf("refresh 1, after Commit(%d): %d rows visible (err %v), want none before the refresh ends", e, len(rows), err)
		}
	}
	head.Final = true
	finish(ws[0], 3)
	closeAll(ws)
	checkAppend(t, read(), first)

	// Refresh 2, killed after epoch 5's record.
	ws = attempt(2, head, sink.Applied)
	var second []op
	for e := uint64(4); e <= 5; e++ {
		var ops []op
		ops, head = epoch(ws, 2, e, e == 5)
		second = append(second, ops...)
	}
	// No Close: the process died. Readers see refresh 1, whole.
	checkAppend(t, read(), first)

	// Generation 3 goes on with refresh 2 and stops without finishing.
	ws = attempt(3, head, sink.Recoverable)
	recommit(ws, head)
	ops, head := epoch(ws, 3, 6, false)
	second = append(second, ops...)
	closeAll(ws)
	checkAppend(t, read(), first)

	// Generation 4 reads refresh 2 to its end (epoch 7, Final) and dies
	// before Finish.
	ws = attempt(4, head, sink.Recoverable)
	recommit(ws, head)
	ops, head = epoch(ws, 4, 7, false)
	head.Final = true
	second = append(second, ops...)
	checkAppend(t, read(), first)

	// Generation 5: Recover finishes refresh 2.
	ws = attempt(5, head, sink.Applied)
	tb := read()
	checkAppend(t, tb, second)
	if tb.Properties["openetl.ow.epoch"] != "7" || tb.Properties["openetl.ow.generation"] != "5" {
		t.Errorf("markers %v, want epoch 7 of generation 5", tb.Properties)
	}
	// Refresh 3 replaces refresh 2.
	third, _ := epoch(ws, 5, 8, false)
	checkAppend(t, read(), second)
	finish(ws[0], 8)
	finish(ws[0], 8) // again: nothing changes
	closeAll(ws)
	tb = read()
	checkAppend(t, tb, third)
	if tb.Properties["openetl.ow.epoch"] != "8" || tb.Properties["openetl.ow.generation"] != "5" {
		t.Errorf("markers %v, want epoch 8 of generation 5", tb.Properties)
	}
	if tb.Snapshots != 3 {
		t.Errorf("%d snapshots, want 3 (one per refresh)", tb.Snapshots)
	}
}

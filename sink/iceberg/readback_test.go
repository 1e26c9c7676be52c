package iceberg_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// op is one change of a keyed source row, as the engine hands it over.
type op struct {
	key  int64
	kind string // insert, update, delete
	seq  int64
	name string
	note string // "" = null; set only in widened batches
	wide bool
}

// rowsSchema is the engine's batch schema for the test tables: the
// stream's columns, then the metadata columns; wide adds "note".
func rowsSchema(wide bool) *arrow.Schema {
	fs := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}
	if wide {
		fs = append(fs, arrow.Field{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true})
	}
	return arrow.NewSchema(append(fs,
		arrow.Field{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
		arrow.Field{Name: "_openetl_synced_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	), nil)
}

func batch(ops []op, wide bool) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, rowsSchema(wide))
	defer b.Release()
	m := 3
	if wide {
		m = 4
	}
	for _, o := range ops {
		b.Field(0).(*array.Int64Builder).Append(o.key)
		if o.kind == "delete" {
			b.Field(1).AppendNull()
			b.Field(2).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(o.name)
			b.Field(2).(*array.Int32Builder).Append(int32(o.seq % 1000))
		}
		if wide {
			if o.note == "" {
				b.Field(3).AppendNull()
			} else {
				b.Field(3).(*array.StringBuilder).Append(o.note)
			}
		}
		b.Field(m).(*array.StringBuilder).Append(fmt.Sprintf("%d-%d", o.key, o.seq))
		b.Field(m + 1).(*array.StringBuilder).Append(o.kind)
		b.Field(m + 2).(*array.Int64Builder).Append(o.seq)
		b.Field(m + 3).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()))
	}
	return b.NewRecordBatch()
}

// genOps makes n changes over keys [0, keys): a key's first change is an
// insert, later ones updates or deletes (a deleted key comes back with an
// insert).
func genOps(rng *rand.Rand, live map[int64]bool, seq *int64, n, keys int, wide bool) []op {
	out := make([]op, 0, n)
	for range n {
		k := int64(rng.IntN(keys))
		*seq++
		o := op{key: k, seq: *seq, name: fmt.Sprintf("n%d-%d", k, *seq), wide: wide}
		switch {
		case !live[k]:
			o.kind = "insert"
			live[k] = true
		case rng.IntN(4) == 0:
			o.kind = "delete"
			live[k] = false
		default:
			o.kind = "update"
		}
		if wide && o.kind != "delete" && rng.IntN(2) == 0 {
			o.note = fmt.Sprintf("note%d", *seq)
		}
		out = append(out, o)
	}
	return out
}

// TestReadBackWithPyiceberg writes six epochs of keyed changes (inserts,
// updates, deletes; a column added at epoch 4) on two lanes into two
// Merge tables (soft and hard deletes) and an Append table, and compares
// what pyiceberg reads with the changes:
//   - every-epoch: Grouping{}, a table commit per epoch;
//   - grouped: nothing is due before the end, lane 0's Close commits the
//     six epochs, from the last Commit's committables alone (so the lanes
//     must have carried the earlier epochs' files), Merge tables with a
//     row-delta snapshot per epoch so later deletes hide earlier rows;
//   - grouped-crash: the process dies after the sixth PreCommit, with
//     nothing committed; a new process recovers from the HEAD record
//     (Recoverable), commits it and closes; the dead process's lane 0,
//     closed late as a zombie, is fenced and adds nothing.
func TestReadBackWithPyiceberg(t *testing.T) {
	if raceEnabled {
		t.Skip("-race: most of its time is pyiceberg's; the writer it drives is TestConformance's, which runs under -race (the plain run covers this one)")
	}
	never := &iceberg.Grouping{Bytes: 1 << 50, Interval: 1000 * time.Hour}
	for _, tc := range []struct {
		name    string
		group   *iceberg.Grouping
		crash   bool
		deletes iceberg.MergeDeletes
	}{
		{"every-epoch", &iceberg.Grouping{}, false, iceberg.MergeDeletesDefault},
		{"grouped", never, false, iceberg.MergeDeletesDefault},
		{"grouped-crash", never, true, iceberg.MergeDeletesDefault},
		{"grouped-crash-equality", never, true, iceberg.EqualityDeletes},
	} {
		t.Run(tc.name, func(t *testing.T) { readBack(t, tc.group, tc.crash, tc.deletes, 2) })
	}
	// Format v3: position deletes are deletion vectors.
	t.Run("grouped-crash-v3", func(t *testing.T) { readBack(t, never, true, iceberg.MergeDeletesDefault, 3) })
}

// readBack writes the tables and reads them with pyiceberg; the default
// position deletes with DuckDB too (which reads equality deletes of this
// kind with its own rules, not tested here).
func readBack(t *testing.T, group *iceberg.Grouping, crash bool, deletes iceberg.MergeDeletes, format int) {
	ctx := context.Background()
	wh := newWarehouse(t)
	hard := merged("orders_hard", "id")
	hard.Deletes = sink.HardDeletes
	specs := []sink.StreamSpec{merged("orders_soft", "id"), hard, appended("events")}
	props := map[string]string{"format-version": fmt.Sprint(format)}
	d := newDest(t, wh.cat, iceberg.Config{Grouping: group, MergeDeletes: deletes, Properties: props})
	const lanes = 2
	ws := make([]sink.Writer, lanes)
	for i := range ws {
		w, err := d.Writer(ctx, writerConfig("readback", i, specs...))
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	if _, err := ws[0].Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	live := map[int64]bool{}
	var seq int64
	var all []op
	var cs []sink.Committable
	const epochs = 6
	for epoch := uint64(1); epoch <= epochs; epoch++ {
		wide := epoch >= 4
		ops := genOps(rng, live, &seq, 300, 120, wide)
		all = append(all, ops...)
		cs = nil
		for lane, w := range ws {
			var mine []op
			for _, o := range ops {
				if int(o.key)%lanes == lane {
					mine = append(mine, o)
				}
			}
			// Two batches per lane and table, so a key can change in both.
			for _, part := range [][]op{mine[:len(mine)/2], mine[len(mine)/2:]} {
				for _, tname := range []string{"orders_soft", "orders_hard", "events"} {
					rec := batch(part, wide)
					if err := w.Write(ctx, tname, rec); err != nil {
						t.Fatal(err)
					}
					rec.Release()
				}
			}
			c, err := w.PreCommit(ctx, epoch)
			if err != nil {
				t.Fatalf("PreCommit(%d) lane %d: %v", epoch, lane, err)
			}
			cs = append(cs, c)
		}
		if crash && epoch == epochs {
			break // the process dies before Commit
		}
		if err := ws[0].Commit(ctx, epoch, cs); err != nil {
			t.Fatalf("Commit(%d): %v", epoch, err)
		}
		if group == nil || group.Bytes == 0 {
			continue
		}
		if rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "events"); err != nil || len(rows) != 0 {
			t.Fatalf("after Commit(%d) of a group not due: %d rows visible (err %v), want none", epoch, len(rows), err)
		}
	}
	gen := 1
	if crash {
		d2 := newDest(t, wh.cat, iceberg.Config{Grouping: group, MergeDeletes: deletes, Properties: props})
		w, err := d2.Writer(ctx, writerConfig("readback", 0, specs...))
		if err != nil {
			t.Fatal(err)
		}
		head := &checkpoint.Record{Pipeline: "readback", Epoch: epochs, Generation: 1}
		for _, c := range cs {
			head.Committables = append(head.Committables, c)
		}
		out, err := w.Recover(ctx, 2, head)
		if err != nil || out != sink.Recoverable {
			t.Fatalf("Recover after the crash: %v, %v; want recoverable", out, err)
		}
		if err := w.Commit(ctx, epochs, cs); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatalf("Close of the new attempt's lane 0: %v", err)
		}
		// The dead attempt's lane 0 goes on as a zombie: its Close would
		// apply epoch 5's committables.
		if err := ws[0].Close(ctx); !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("zombie's Close: %v, want sink.ErrFenced", err)
		}
		gen = 2
	} else {
		for _, w := range ws {
			if err := w.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
	}

	read, wantReader := testutil.ReadIcebergTablesWithDuckDB, "pyiceberg-scan"
	if deletes == iceberg.EqualityDeletes {
		read, wantReader = testutil.ReadIcebergTables, "pyiceberg-metadata+spec-equality-deletes"
	}
	got := read(t, "openetl", wh.dbPath, "file://"+filepath.Join(wh.dir, "warehouse"), iceberg.DefaultNamespace)
	checkAppend(t, got["events"], all)
	checkMerge(t, "orders_soft", got["orders_soft"], all, false)
	checkMerge(t, "orders_hard", got["orders_hard"], all, true)
	for _, name := range []string{"orders_soft", "orders_hard"} {
		if tb := got[name]; tb.DeleteFiles == 0 || tb.Reader != wantReader {
			t.Errorf("%s: %d delete files, read by %s: want %s", name, tb.DeleteFiles, tb.Reader, wantReader)
		}
	}
	if deletes != iceberg.EqualityDeletes {
		for _, name := range []string{"orders_soft", "orders_hard", "events"} {
			sameRows(t, name+" (DuckDB)", got[name].DuckDB, got[name].Data)
		}
	}
	for name, tb := range got {
		if tb.FormatVersion != format {
			t.Errorf("%s: format version %d, want %d", name, tb.FormatVersion, format)
		}
		if tb.Properties["openetl.readback.epoch"] != "6" || tb.Properties["openetl.readback.generation"] != fmt.Sprint(gen) {
			t.Errorf("%s: markers %v, want epoch 6 of generation %d", name, tb.Properties, gen)
		}
	}
	wantSnaps := epochs
	if group.Bytes != 0 {
		wantSnaps = 1 // the whole group in one append snapshot
	}
	if got["events"].Snapshots != wantSnaps {
		t.Errorf("events: %d snapshots, want %d", got["events"].Snapshots, wantSnaps)
	}
}

func str(v any) string {
	if v == nil {
		return "<null>"
	}
	return fmt.Sprint(v)
}

func checkAppend(t *testing.T, tb *testutil.IcebergTable, all []op) {
	t.Helper()
	if tb == nil {
		t.Fatal("events: no table")
	}
	if tb.Rows != int64(len(all)) || tb.DistinctIDs != tb.Rows || tb.DistinctSeqs != tb.Rows {
		t.Errorf("events: %d rows, %d distinct ids, %d distinct seqs; want %d of each", tb.Rows, tb.DistinctIDs, tb.DistinctSeqs, len(all))
	}
	bySeq := map[string]op{}
	for _, o := range all {
		bySeq[fmt.Sprint(o.seq)] = o
	}
	bad := 0
	for _, r := range tb.Data {
		o, ok := bySeq[str(r["_openetl_seq"])]
		switch {
		case !ok:
			t.Errorf("events: row with seq %v was never written", r["_openetl_seq"])
		case str(r["_openetl_op"]) != o.kind || str(r["id"]) != fmt.Sprint(o.key):
			t.Errorf("events: row %v, want %+v", r, o)
		case o.wide && str(r["note"]) != str(nilIfEmpty(o.note)):
			t.Errorf("events: row %v: note, want %q", r, o.note)
		default:
			continue
		}
		if bad++; bad > 5 {
			t.FailNow()
		}
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func checkMerge(t *testing.T, name string, tb *testutil.IcebergTable, all []op, hard bool) {
	t.Helper()
	if tb == nil {
		t.Fatalf("%s: no table", name)
	}
	last := map[int64]op{}
	for _, o := range all {
		if p, ok := last[o.key]; !ok || o.seq > p.seq {
			last[o.key] = o
		}
	}
	want := map[string]op{}
	for k, o := range last {
		if hard && o.kind == "delete" {
			continue
		}
		want[fmt.Sprint(k)] = o
	}
	seen := map[string]bool{}
	for _, r := range tb.Data {
		k := str(r["id"])
		if seen[k] {
			t.Errorf("%s: key %s appears more than once", name, k)
			continue
		}
		seen[k] = true
		o, ok := want[k]
		if !ok {
			t.Errorf("%s: key %s is visible, but its last change is a delete (hard) or it never existed: %v", name, k, r)
			continue
		}
		if str(r["_openetl_seq"]) != fmt.Sprint(o.seq) || str(r["_openetl_op"]) != o.kind {
			t.Errorf("%s: key %s: seq %v op %v, want seq %d op %s", name, k, r["_openetl_seq"], r["_openetl_op"], o.seq, o.kind)
		}
		del := str(r["_openetl_deleted"])
		if hard {
			if _, has := r["_openetl_deleted"]; has {
				t.Errorf("%s: hard deletes should not add _openetl_deleted", name)
			}
		} else if del != fmt.Sprint(o.kind == "delete") {
			t.Errorf("%s: key %s: _openetl_deleted = %s after %s", name, k, del, o.kind)
		}
		if o.kind != "delete" && str(r["name"]) != o.name {
			t.Errorf("%s: key %s: name %v, want %s", name, k, r["name"], o.name)
		}
		if o.wide && str(r["note"]) != str(nilIfEmpty(o.note)) {
			t.Errorf("%s: key %s: note %v, want %q", name, k, r["note"], o.note)
		}
	}
	var missing []string
	for k := range want {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s: %d keys missing, e.g. %v", name, len(missing), missing[:min(5, len(missing))])
	}
	if tb.Rows != int64(len(want)) {
		t.Errorf("%s: %d rows, want %d", name, tb.Rows, len(want))
	}
}

// sameRows fails unless got and want hold the same rows, as multisets.
func sameRows(t *testing.T, what string, got, want []map[string]any) {
	t.Helper()
	count := func(rows []map[string]any) map[string]int {
		m := map[string]int{}
		for _, r := range rows {
			b, err := json.Marshal(r) // keys sorted
			if err != nil {
				t.Fatal(err)
			}
			m[string(b)]++
		}
		return m
	}
	g, w := count(got), count(want)
	bad := 0
	for r, n := range w {
		if g[r] != n {
			if bad++; bad <= 3 {
				t.Errorf("%s: row %s: %d times, want %d", what, r, g[r], n)
			}
		}
	}
	for r, n := range g {
		if _, ok := w[r]; !ok {
			if bad++; bad <= 3 {
				t.Errorf("%s: row %s: %d times, want none", what, r, n)
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	}
}

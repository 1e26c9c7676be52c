package iceberg_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	ice "github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestDeletionVectorsMergePositionDeletes: Merge tables written on format
// v2 (position-delete files, one of them for two data files) are upgraded
// to v3 by another tool, and their next epochs write deletion vectors for
// data files that have those position deletes. The v3 spec has readers
// ignore a data file's position-delete files once it has a DV (iceberg-go
// does), so each DV must hold them, whether the writer's key index was
// kept across the upgrade, kept across its own DV commits (a data file
// whose first DV comes later) or rebuilt by a new process.
//
// On table "other" a second writer then adds DVs that leave out the
// position deletes of their files (as this package's writer did before
// it merged them): the next epoch's DV of one of them must hold those,
// the other writer's and its own positions, and the other file, which
// the epoch doesn't change, must get its DV repaired too.
//
// Rows are read back with iceberg-go's scan, pyiceberg's and DuckDB's:
// exactly each key's last version.
func TestDeletionVectorsMergePositionDeletes(t *testing.T) {
	ctx := context.Background()
	wh := newWarehouse(t)
	specs := []sink.StreamSpec{merged("up", "id"), merged("other", "id")}
	for i := range specs {
		specs[i].Deletes = sink.HardDeletes
	}
	all := map[string][]op{}
	var seq int64
	mk := func(k int64, kind string) op {
		seq++
		return op{key: k, kind: kind, seq: seq, name: fmt.Sprintf("n%d-%d", k, seq)}
	}
	keys := func(kind string, ks ...int64) []op {
		var out []op
		for _, k := range ks {
			out = append(out, mk(k, kind))
		}
		return out
	}
	var head *checkpoint.Record
	var gen checkpoint.Generation
	open := func() sink.Writer {
		t.Helper()
		gen++
		d := newDest(t, wh.cat, iceberg.Config{}) // the table's format: v2, then v3 once upgraded
		w, err := d.Writer(ctx, writerConfig("dvm", 0, specs...))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recover(ctx, gen, head); err != nil {
			t.Fatal(err)
		}
		return w
	}
	epoch := func(w sink.Writer, e uint64, ops map[string][]op) {
		t.Helper()
		for tb, o := range ops {
			all[tb] = append(all[tb], o...)
			rec := batch(o, false)
			if err := w.Write(ctx, tb, rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		c, err := w.PreCommit(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, e, []sink.Committable{c}); err != nil {
			t.Fatalf("Commit(%d): %v", e, err)
		}
		head = &checkpoint.Record{Pipeline: "dvm", Epoch: e, Generation: gen, Committables: [][]byte{c}}
	}
	both := func(ops []op) map[string][]op { return map[string][]op{"up": ops, "other": ops} }

	w := open()
	// F: keys 0..9. G: new versions of 0 and 1 (position deletes of F's)
	// and keys 10..14. Epoch 3's position-delete file covers F and G.
	epoch(w, 1, both(keys("insert", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)))
	epoch(w, 2, both(append(keys("update", 0, 1), keys("insert", 10, 11, 12, 13, 14)...)))
	epoch(w, 3, both(keys("update", 2, 10, 0)))
	for _, tb := range []string{"up", "other"} {
		if n := positionDeleteFiles(t, wh, tb); n != 2 {
			t.Fatalf("%s: %d position-delete files before the upgrade, want 2", tb, n)
		}
		upgradeV3(t, wh, tb)
	}
	// The other writer: DVs of F (key 5) and G (key 14) without the
	// position deletes of their files.
	otherWriterDVs(t, wh, "other", 5, 14)
	all["other"] = append(all["other"], mk(5, "delete"), mk(14, "delete"))

	// The same writer, its index built before the upgrade: F's first DV.
	epoch(w, 4, map[string][]op{"up": keys("update", 3), "other": keys("update", 6)})
	// G's first DV, and F's second one.
	epoch(w, 5, map[string][]op{"up": keys("update", 11, 4)})
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		for _, tb := range []string{"up", "other"} {
			t.Run(tb+" "+when, func(t *testing.T) {
				checkDVsHoldPositionDeletes(t, wh, tb)
				rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, tb)
				if err != nil {
					t.Fatal(err)
				}
				checkRows(t, rows, all[tb]) // iceberg-go's scan
			})
		}
	}
	check("before the restart")
	// A new process: the index is rebuilt from DVs and position deletes.
	w = open()
	epoch(w, 6, map[string][]op{"up": keys("update", 5, 12), "other": keys("update", 7, 8)})
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	check("after it")
	got := testutil.ReadIcebergTablesWithDuckDB(t, "openetl", wh.dbPath, "file://"+filepath.Join(wh.dir, "warehouse"), iceberg.DefaultNamespace)
	for _, tb := range []string{"up", "other"} {
		if got[tb] == nil || got[tb].FormatVersion != 3 || got[tb].Reader != "pyiceberg-scan" {
			t.Fatalf("%s: read %+v, want format v3 by pyiceberg's scan", tb, got[tb])
		}
		checkMerge(t, tb+" (pyiceberg)", got[tb], all[tb], true)
		sameRows(t, tb+" (DuckDB)", got[tb].DuckDB, got[tb].Data)
	}
}

func loadTable(t *testing.T, wh *warehouse, name string) *table.Table {
	t.Helper()
	tbl, err := wh.cat.LoadTable(context.Background(), table.Identifier{iceberg.DefaultNamespace, name})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// upgradeV3 upgrades table name to format v3 as another tool would.
func upgradeV3(t *testing.T, wh *warehouse, name string) {
	t.Helper()
	tx := loadTable(t, wh, name).NewTransaction()
	if err := tx.UpgradeFormatVersion(3); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// positionDeleteFiles counts the live position-delete files (not DVs) of
// table name.
func positionDeleteFiles(t *testing.T, wh *warehouse, name string) int {
	t.Helper()
	n := 0
	for _, e := range liveDeletes(t, wh, name) {
		if !table.IsDeletionVector(e.DataFile()) {
			n++
		}
	}
	return n
}

func liveDeletes(t *testing.T, wh *warehouse, name string) []ice.ManifestEntry {
	t.Helper()
	tbl := loadTable(t, wh, name)
	fsys, err := tbl.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := tbl.CurrentSnapshot().Manifests(fsys)
	if err != nil {
		t.Fatal(err)
	}
	var out []ice.ManifestEntry
	for _, mf := range mfs {
		if mf.ManifestContent() != ice.ManifestContentDeletes {
			continue
		}
		es, err := mf.FetchEntries(fsys, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, es...)
	}
	return out
}

// checkDVsHoldPositionDeletes fails unless every DV of table name holds
// every position its data file's live position-delete files list, and
// two data files or more have one.
func checkDVsHoldPositionDeletes(t *testing.T, wh *warehouse, name string) {
	t.Helper()
	ctx := context.Background()
	tbl := loadTable(t, wh, name)
	fsys, err := tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string][]int64{} // data file → positions of position-delete files
	for _, e := range liveDeletes(t, wh, name) {
		if df := e.DataFile(); !table.IsDeletionVector(df) {
			readPositionDeletes(t, fsys, df.FilePath(), pos)
		}
	}
	dvs := 0
	for _, tk := range tasks {
		if len(tk.DeletionVectorFiles) != 1 {
			continue
		}
		dvs++
		bm, err := dv.ReadDV(fsys, tk.DeletionVectorFiles[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pos[tk.File.FilePath()] {
			if !bm.Contains(uint64(p)) {
				t.Errorf("the DV of %s leaves out position %d, which a position-delete file of it deletes", tk.File.FilePath(), p)
			}
		}
	}
	if dvs < 2 {
		t.Errorf("%d data files with a DV, want 2 or more", dvs)
	}
}

func readPositionDeletes(t *testing.T, fsys iceio.IO, path string, into map[string][]int64) {
	t.Helper()
	tb := readParquet(t, fsys, path)
	defer tb.Release()
	tr := array.NewTableReader(tb, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		fp, ps := rec.Column(0), rec.Column(1).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			p := fp.(interface{ ValueStr(int) string }).ValueStr(i)
			into[p] = append(into[p], ps.Value(i))
		}
	}
}

func readParquet(t *testing.T, fsys iceio.IO, path string) arrow.Table {
	t.Helper()
	f, err := fsys.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// otherWriterDVs commits, as another writer, a DV for the data file of
// each of ks (one row each in the table), deleting its row and nothing
// else: the position deletes of that file are left out.
func otherWriterDVs(t *testing.T, wh *warehouse, name string, ks ...int64) {
	t.Helper()
	ctx := context.Background()
	tbl := loadTable(t, wh, name)
	fsys, err := tbl.FS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	meta := tbl.Metadata()
	dw := dv.NewDVWriter(fsys.(iceio.WriteFileIO), func(id int32) *ice.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	want := map[int64]bool{}
	for _, k := range ks {
		want[k] = true
	}
	found := 0
	for _, tk := range tasks {
		if len(tk.DeletionVectorFiles) > 0 {
			t.Fatalf("%s already has a DV", tk.File.FilePath())
		}
		tb := readParquet(t, fsys, tk.File.FilePath())
		ids := tb.Column(tb.Schema().FieldIndices("id")[0]).Data()
		pos := int64(0)
		for _, c := range ids.Chunks() {
			a := c.(*array.Int64)
			for i := 0; i < a.Len(); i++ {
				if want[a.Value(i)] {
					if err := dw.Add(tk.File.FilePath(), []int64{pos}, tk.File.SpecID(), tk.File.Partition()); err != nil {
						t.Fatal(err)
					}
					found++
				}
				pos++
			}
		}
		tb.Release()
	}
	if found != len(ks) {
		t.Fatalf("found %d rows of keys %v, want %d", found, ks, len(ks))
	}
	path := strings.TrimSuffix(tbl.Location(), "/") + "/data/other-writer-dv.puffin"
	dvs, err := dw.Flush(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	tx := tbl.NewTransaction()
	if err := tx.NewRowDelta(nil).AddDeletes(dvs...).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

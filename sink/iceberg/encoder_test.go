package iceberg_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestEncoders: with EncoderAuto a table's data files are the engine's
// (their footer says so), partitioned ones too (one file per partition
// at least, each file's rows all of the partition its manifest entry
// names, by iceberg-go's transforms), a gzip table's are iceberg-go's,
// as are all of them with EncoderIcebergGo; the engine's files roll at
// the first row group past TargetFileBytes. Either way the manifest
// carries each file's row count and column bounds (the merge path
// locates keys by them), iceberg-go's scan and pyiceberg read the rows
// written, and a Merge table's epoch hides the rows it replaces.
func TestEncoders(t *testing.T) {
	if !engine.ParquetAvailable() {
		t.Skip("the engine's Parquet writer is not in this build (no cgo)")
	}
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		cfg    iceberg.Config
		engine bool // the files are the engine's
	}{
		{"auto", iceberg.Config{}, true},
		{"auto-small-files", iceberg.Config{TargetFileBytes: 4 << 10, Properties: map[string]string{table.ParquetRowGroupLimitKey: "500"}}, true},
		{"engine-snappy", iceberg.Config{Encoder: iceberg.EncoderEngine, Properties: map[string]string{table.ParquetCompressionKey: "snappy"}}, true},
		{"gzip", iceberg.Config{Properties: map[string]string{table.ParquetCompressionKey: "gzip"}}, false},
		{"partitioned", iceberg.Config{Tables: map[string]iceberg.TableConfig{
			"a": {Partition: []iceberg.PartitionField{{Column: "amount", Transform: "bucket[4]"}}},
			"m": {Partition: []iceberg.PartitionField{{Column: "id", Transform: "bucket[4]"}}}}}, true},
		{"partitioned-many", iceberg.Config{TargetFileBytes: 4 << 10, Properties: map[string]string{table.ParquetRowGroupLimitKey: "500"},
			Tables: map[string]iceberg.TableConfig{
				"a": {Partition: []iceberg.PartitionField{{Column: "_openetl_synced_at", Transform: "day"}, {Column: "name", Transform: "truncate[2]"}, {Column: "amount", Transform: "bucket[3]"}}},
				"m": {Partition: []iceberg.PartitionField{{Column: "id", Transform: "truncate[100]"}, {Column: "_openetl_synced_at", Transform: "hour"}}}}}, true},
		{"partitioned-iceberg-go", iceberg.Config{Encoder: iceberg.EncoderIcebergGo, Tables: map[string]iceberg.TableConfig{
			"a": {Partition: []iceberg.PartitionField{{Column: "amount", Transform: "bucket[4]"}}},
			"m": {Partition: []iceberg.PartitionField{{Column: "id", Transform: "bucket[4]"}}}}}, false},
		{"iceberg-go", iceberg.Config{Encoder: iceberg.EncoderIcebergGo}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			wh := newWarehouse(t)
			d := newDest(t, wh.cat, c.cfg)
			w, err := d.Writer(ctx, writerConfig("enc", 0, appended("a"), merged("m", "id")))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close(ctx)
			if _, err := w.Recover(ctx, 1, nil); err != nil {
				t.Fatal(err)
			}
			const n = 2000
			for epoch := uint64(1); epoch <= 2; epoch++ {
				var ops []op
				for k := int64(0); k < n; k++ {
					s := int64(epoch)*n + k
					ops = append(ops, op{key: k, kind: []string{"", "insert", "update"}[epoch], seq: s, name: "n" + strconv.FormatInt(s, 10)})
				}
				for _, tbl := range []string{"a", "m"} {
					rec := batch(ops, false)
					err := w.Write(ctx, tbl, rec)
					rec.Release()
					if err != nil {
						t.Fatal(err)
					}
				}
				pc, err := w.PreCommit(ctx, epoch)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Commit(ctx, epoch, []sink.Committable{pc}); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Finish(ctx, 2); err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]int{"a": 2 * n, "m": n} {
				tbl, err := wh.cat.LoadTable(ctx, table.Identifier{iceberg.DefaultNamespace, name})
				if err != nil {
					t.Fatal(err)
				}
				tasks, err := tbl.Scan().PlanFiles(ctx)
				if err != nil {
					t.Fatal(err)
				}
				fsys, err := tbl.FS(ctx)
				if err != nil {
					t.Fatal(err)
				}
				files := 0
				for _, task := range tasks {
					df := task.File
					files++
					f, err := fsys.Open(df.FilePath())
					if err != nil {
						t.Fatal(err)
					}
					b, err := io.ReadAll(f)
					f.Close()
					if err != nil {
						t.Fatal(err)
					}
					pr, err := file.NewParquetReader(bytes.NewReader(b))
					if err != nil {
						t.Fatalf("%s: %v", df.FilePath(), err)
					}
					by := pr.MetaData().GetCreatedBy()
					if mine := by == "openetl (iceberg)"; mine != c.engine {
						t.Errorf("%s: %s written by %q, want the engine's: %v", name, df.FilePath(), by, c.engine)
					}
					if df.Count() != pr.NumRows() || df.FileSizeBytes() != int64(len(b)) {
						t.Errorf("%s: manifest says %d rows, %d bytes; the file has %d, %d", df.FilePath(), df.Count(), df.FileSizeBytes(), pr.NumRows(), len(b))
					}
					checkPartition(t, tbl, df, pr)
					pr.Close()
					idField, _ := tbl.Schema().FindFieldByName("id")
					if len(df.LowerBoundValues()[idField.ID]) == 0 || len(df.UpperBoundValues()[idField.ID]) == 0 {
						t.Errorf("%s: no bounds for id in the manifest", df.FilePath())
					}
				}
				if c.name == "auto-small-files" && files < 4 {
					t.Errorf("%s: %d data files with a 4 KiB target", name, files)
				}
				rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, name)
				if err != nil || len(rows) != want {
					t.Fatalf("%s: scan: %d rows, %v; want %d", name, len(rows), err, want)
				}
				py := testutil.ReadIcebergTables(t, "openetl", wh.dbPath, "file://"+filepath.Join(wh.dir, "warehouse"), iceberg.DefaultNamespace)[name]
				if py == nil {
					t.Fatalf("%s: pyiceberg did not read the table", name)
				}
				var names []string
				for _, r := range py.Data {
					names = append(names, r["name"].(string))
				}
				slices.Sort(names)
				if len(names) != want || (name == "m" && names[0] != "n"+strconv.Itoa(2*n)) {
					t.Errorf("%s: pyiceberg read %d rows (first name %v), want %d of the latest epoch's", name, len(names), names[:min(1, len(names))], want)
				}
			}
		})
	}
}

// checkPartition checks that every row of df's file (pr) is of the
// partition df's manifest entry names: each spec field's transform, as
// iceberg-go applies it, of the row's source value.
func checkPartition(t *testing.T, tbl *table.Table, df ice.DataFile, pr *file.Reader) {
	t.Helper()
	spec := tbl.Spec()
	if spec.IsUnpartitioned() {
		return
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Release()
	for _, pf := range spec.Fields() {
		src, _ := tbl.Schema().FindFieldByID(pf.SourceID())
		idx := tb.Schema().FieldIndices(src.Name)
		if len(idx) != 1 {
			t.Fatalf("%s: no column %s", df.FilePath(), src.Name)
		}
		want := df.Partition()[pf.FieldID]
		for _, chunk := range tb.Column(idx[0]).Data().Chunks() {
			for row := range chunk.Len() {
				var lit ice.Literal
				switch a := chunk.(type) {
				case *array.Int32:
					lit = ice.Int32Literal(a.Value(row))
				case *array.Int64:
					lit = ice.Int64Literal(a.Value(row))
				case *array.String:
					lit = ice.StringLiteral(a.Value(row))
				case *array.Timestamp:
					lit = ice.TimestampLiteral(ice.Timestamp(a.Value(row)))
				default:
					t.Fatalf("%s: column %s is %s", df.FilePath(), src.Name, chunk.DataType())
				}
				got := pf.Transform.Apply(ice.Optional[ice.Literal]{Valid: true, Val: lit})
				if !got.Valid || fmt.Sprint(got.Val.Any()) != fmt.Sprint(want) {
					t.Fatalf("%s: a row's %s is %v, partition %v; the manifest says %v", df.FilePath(), src.Name, lit, got.Val, want)
				}
			}
		}
	}
}

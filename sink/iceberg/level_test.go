package iceberg_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// TestDefaultCompressionLevel: tables the destination creates get zstd
// at DefaultZstdLevel unless Config.Properties chooses a codec or level,
// and their files read back.
func TestDefaultCompressionLevel(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		props map[string]string
		want  string // the table's write.parquet.compression-level; "" absent
	}{
		{"default", nil, strconv.Itoa(iceberg.DefaultZstdLevel)},
		{"codec", map[string]string{table.ParquetCompressionKey: "snappy"}, ""},
		{"level", map[string]string{table.ParquetCompressionLevelKey: "9"}, "9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wh := newWarehouse(t)
			d := newDest(t, wh.cat, iceberg.Config{Properties: c.props})
			w, err := d.Writer(ctx, writerConfig("lvl", 0, appended("t")))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close(ctx)
			if _, err := w.Recover(ctx, 1, nil); err != nil {
				t.Fatal(err)
			}
			var ops []op
			for k := int64(0); k < 100; k++ {
				ops = append(ops, op{key: k, kind: "insert", seq: k + 1, name: "n" + strconv.FormatInt(k, 10)})
			}
			rec := batch(ops, false)
			defer rec.Release()
			if err := w.Write(ctx, "t", rec); err != nil {
				t.Fatal(err)
			}
			pc, err := w.PreCommit(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(ctx, 1, []sink.Committable{pc}); err != nil {
				t.Fatal(err)
			}
			tbl, err := wh.cat.LoadTable(ctx, table.Identifier{iceberg.DefaultNamespace, "t"})
			if err != nil {
				t.Fatal(err)
			}
			got, ok := tbl.Properties()[table.ParquetCompressionLevelKey]
			if got != c.want || ok != (c.want != "") {
				t.Errorf("%s = %q (set %v), want %q", table.ParquetCompressionLevelKey, got, ok, c.want)
			}
			rows, err := scan(ctx, wh.cat, iceberg.DefaultNamespace, "t")
			if err != nil || len(rows) != 100 {
				t.Fatalf("scan: %d rows, %v; want 100", len(rows), err)
			}
		})
	}
}

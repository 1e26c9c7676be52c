package parquet_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
)

// A writer lane stages an epoch, lane 0 commits it, and a reader follows
// the stream's manifest. In a pipeline the runner makes the sink calls.
func Example() {
	ctx := context.Background()
	bucket := memblob.OpenBucket(nil) // or blob.OpenBucket(ctx, "s3://...")
	defer bucket.Close()

	dest, err := parquet.New(parquet.Config{Bucket: bucket, Prefix: "lake"})
	if err != nil {
		panic(err)
	}
	w, _ := dest.Writer(ctx, sink.WriterConfig{Pipeline: "shop"})
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		panic(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator,
		arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil))
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	rec := b.NewRecordBatch()
	_ = w.Write(ctx, "orders", rec)
	rec.Release()
	c, _ := w.PreCommit(ctx, 1)
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		panic(err)
	}

	// The reader's side: the current manifest lists every file once.
	m, err := parquet.ReadManifest(ctx, bucket, "lake", "orders")
	if err != nil {
		panic(err)
	}
	for _, f := range m.Files {
		data, _ := bucket.ReadAll(ctx, f.Key)
		pf, _ := file.NewParquetReader(bytes.NewReader(data))
		fr, _ := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		tbl, _ := fr.ReadTable(ctx)
		fmt.Println("epoch", f.Epoch, "rows", tbl.NumRows(), "columns", tbl.Schema().Field(0).Name)
		tbl.Release()
	}
	// Output: epoch 1 rows 3 columns id
}

package parquet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
)

// benchBatches makes rows rows of 10 columns (4 int64, 2 float64, 3
// strings, a timestamp, some nulls) in batches of 8192, like a table of
// orders.
func benchBatches(b *testing.B, rows int) (recs []arrow.RecordBatch, bytes int64) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "customer_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "quantity", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "version", Type: arrow.PrimitiveTypes.Int64},
		{Name: "price", Type: arrow.PrimitiveTypes.Float64},
		{Name: "discount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "status", Type: arrow.BinaryTypes.String},
		{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "created_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	statuses := []string{"new", "paid", "shipped", "delivered", "cancelled"}
	bld := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer bld.Release()
	const per = 8192
	for id := 0; id < rows; {
		for i := 0; i < per && id < rows; i, id = i+1, id+1 {
			bld.Field(0).(*array.Int64Builder).Append(int64(id))
			bld.Field(1).(*array.Int64Builder).Append(rng.Int64N(100_000))
			if id%10 == 0 {
				bld.Field(2).AppendNull()
			} else {
				bld.Field(2).(*array.Int64Builder).Append(rng.Int64N(20) + 1)
			}
			bld.Field(3).(*array.Int64Builder).Append(1)
			bld.Field(4).(*array.Float64Builder).Append(float64(rng.IntN(100_000)) / 100)
			if id%3 == 0 {
				bld.Field(5).AppendNull()
			} else {
				bld.Field(5).(*array.Float64Builder).Append(rng.Float64() / 4)
			}
			bld.Field(6).(*array.StringBuilder).Append(statuses[rng.IntN(len(statuses))])
			bld.Field(7).(*array.StringBuilder).Append(fmt.Sprintf("user%d@example.com", rng.IntN(100_000)))
			if id%4 == 0 {
				bld.Field(8).(*array.StringBuilder).Append(fmt.Sprintf("please deliver after %d pm, ring twice", rng.IntN(12)))
			} else {
				bld.Field(8).AppendNull()
			}
			bld.Field(9).(*array.TimestampBuilder).Append(arrow.Timestamp(1_740_000_000_000_000 + int64(id)*1_000_000))
		}
		rec := bld.NewRecordBatch()
		bytes += recordSize(rec)
		recs = append(recs, rec)
	}
	return recs, bytes
}

// BenchmarkWriteCommit measures one lane writing an epoch of 1M rows × 10
// columns to a fileblob bucket: Write, PreCommit (close = durable) and
// Commit (copy to the final key, manifest). MB/s is Arrow bytes in.
func BenchmarkWriteCommit(b *testing.B) {
	const rows = 1_000_000
	recs, inBytes := benchBatches(b, rows)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	bucket, err := parquet.OpenDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer bucket.Close()
	d, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.SetBytes(inBytes)
	b.ResetTimer()
	var fileBytes int64
	for i := 0; b.Loop(); i++ {
		w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: fmt.Sprintf("p%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Recover(ctx, 1, nil); err != nil {
			b.Fatal(err)
		}
		stream := fmt.Sprintf("orders%d", i)
		for _, r := range recs {
			if err := w.Write(ctx, stream, r); err != nil {
				b.Fatal(err)
			}
		}
		c, err := w.PreCommit(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
			b.Fatal(err)
		}
		w.Close(ctx)
		b.StopTimer()
		m, err := parquet.ReadManifest(ctx, bucket, "", stream)
		if err != nil {
			b.Fatal(err)
		}
		fileBytes = 0
		for _, f := range m.Files {
			fileBytes += f.Bytes
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(fileBytes)/1e6, "fileMB")
	b.ReportMetric(float64(inBytes)/1e6, "arrowMB")
}

// recordSize is the bytes of rec's buffers.
func recordSize(rec arrow.RecordBatch) int64 {
	var n int64
	for _, col := range rec.Columns() {
		for _, buf := range col.Data().Buffers() {
			if buf != nil {
				n += int64(buf.Len())
			}
		}
	}
	return n
}

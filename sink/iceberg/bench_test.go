package iceberg_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
)

// benchRows is the epoch size of the benchmarks (OPENETL_BENCH_ROWS
// overrides it, e.g. 10000000).
func benchRows() int {
	if s := os.Getenv("OPENETL_BENCH_ROWS"); s != "" {
		var n int
		if _, err := fmt.Sscan(s, &n); err == nil && n > 0 {
			return n
		}
	}
	return 1_000_000
}

// benchBatches makes rows rows like the engine's output for a table of
// orders: 10 columns (4 int64, 2 float64, 3 strings, a timestamp, some
// nulls) and the metadata columns, in batches of 8192. Keys are unique.
func benchBatches(rows int) []arrow.RecordBatch {
	return benchBatchesOf(rows, func(i int) int64 { return int64(i) }, "insert", 1)
}

// benchBatchesOf makes rows rows like benchBatches, the i-th with key
// id(i), operation op and _openetl_seq seq0+i.
func benchBatchesOf(rows int, key func(int) int64, op string, seq0 int64) []arrow.RecordBatch {
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
		{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_openetl_synced_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	statuses := []string{"new", "paid", "shipped", "delivered", "cancelled"}
	bld := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer bld.Release()
	var recs []arrow.RecordBatch
	const per = 8192
	for id := 0; id < rows; {
		for i := 0; i < per && id < rows; i, id = i+1, id+1 {
			bld.Field(0).(*array.Int64Builder).Append(key(id))
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
			bld.Field(10).(*array.StringBuilder).Append(fmt.Sprintf("%032x", seq0+int64(id)))
			bld.Field(11).(*array.StringBuilder).Append(op)
			bld.Field(12).(*array.Int64Builder).Append(seq0 + int64(id))
			bld.Field(13).(*array.TimestampBuilder).Append(arrow.Timestamp(1_750_000_000_000_000))
		}
		recs = append(recs, bld.NewRecordBatch())
	}
	return recs
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkEpoch measures one lane writing one epoch of benchRows rows to
// a local warehouse (SQL catalog on SQLite): Write, PreCommit (data files)
// and Commit (one snapshot), in append and merge mode (merge: unique keys,
// so every row is kept and every key goes into the equality deletes),
// each with the default encoder (the engine's) and iceberg-go's;
// and, as the ceiling, the same batches written straight to one Parquet
// file with pqarrow (zstd, as iceberg-go's default). It reports rows/s
// and CPU-seconds per million rows (user+sys of the whole process).
// benchPartition is the partitioned runs' spec: a day of created_at and
// a bucket of the customer, 8 buckets.
var benchPartition = []iceberg.PartitionField{{Column: "created_at", Transform: "day"}, {Column: "customer_id", Transform: "bucket[8]"}}

func BenchmarkEpoch(b *testing.B) {
	rows := benchRows()
	recs := benchBatches(rows)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	ctx := context.Background()
	tables := 0
	report := func(b *testing.B, cpu float64) {
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		b.ReportMetric(cpu/(float64(rows)*float64(b.N)/1e6), "cpu-s/Mrows")
	}
	for _, run := range []struct {
		name string
		mode sink.Mode
		enc  iceberg.Encoder
		part []iceberg.PartitionField
	}{
		{"append", sink.Append, iceberg.EncoderAuto, nil},
		{"append-iceberg-go", sink.Append, iceberg.EncoderIcebergGo, nil},
		{"merge", sink.Merge, iceberg.EncoderAuto, nil},
		{"merge-iceberg-go", sink.Merge, iceberg.EncoderIcebergGo, nil},
		{"append-partitioned", sink.Append, iceberg.EncoderAuto, benchPartition},
		{"append-partitioned-iceberg-go", sink.Append, iceberg.EncoderIcebergGo, benchPartition},
	} {
		mode := run.mode
		b.Run(run.name, func(b *testing.B) {
			wh := newWarehouse(b)
			cpu0 := cpuSeconds()
			for b.Loop() {
				// A table and pipeline of their own each time: a
				// pipeline's Recover finds its other tables' epochs.
				tables++
				name := fmt.Sprintf("orders%d", tables)
				cfg := iceberg.Config{Encoder: run.enc}
				if run.part != nil {
					cfg.Tables = map[string]iceberg.TableConfig{name: {Partition: run.part}}
				}
				d := newDest(b, wh.cat, cfg)
				w, err := d.Writer(ctx, writerConfig(name, 0, sink.StreamSpec{Stream: name, Table: name, Mode: mode, Key: []string{"id"}}))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Recover(ctx, checkpoint1, nil); err != nil {
					b.Fatal(err)
				}
				for _, r := range recs {
					if err := w.Write(ctx, name, r); err != nil {
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
			}
			report(b, cpuSeconds()-cpu0)
		})
	}
	b.Run("pqarrow-ceiling", func(b *testing.B) {
		dir := b.TempDir()
		props := pq.NewWriterProperties(pq.WithCompression(compress.Codecs.Zstd), pq.WithMaxRowGroupLength(1<<20))
		cpu0 := cpuSeconds()
		for i := 0; b.Loop(); i++ {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d.parquet", i)))
			if err != nil {
				b.Fatal(err)
			}
			fw, err := pqarrow.NewFileWriter(recs[0].Schema(), f, props, pqarrow.DefaultWriterProps())
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range recs {
				if err := fw.WriteBuffered(r); err != nil {
					b.Fatal(err)
				}
			}
			if err := fw.Close(); err != nil {
				b.Fatal(err)
			}
		}
		report(b, cpuSeconds()-cpu0)
	})
}

const checkpoint1 = 1

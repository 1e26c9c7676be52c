package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/openetl/etl/internal/pqdict"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
)

// arrowBatches builds the identical input of both arrow-parquet legs: a
// 10-column template batch of batchRows rows; each batch written is the
// template with a fresh id column (ids 1..n, so the output can be
// checked).
type arrowBatches struct {
	template arrow.RecordBatch
	ids      *array.Int64Builder
	next     int64
	n        int64
}

var arrowSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "user_id", Type: arrow.PrimitiveTypes.Int32},
	{Name: "amount", Type: arrow.PrimitiveTypes.Float64},
	{Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "ok", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "event", Type: arrow.BinaryTypes.String},
	{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "day", Type: arrow.FixedWidthTypes.Date32},
	{Name: "ratio", Type: arrow.PrimitiveTypes.Float32},
}, nil)

func newArrowBatches(n int64, batchRows int) *arrowBatches {
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrowSchema)
	defer b.Release()
	for i := range batchRows {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Int32Builder).Append(int32(i % 100_000))
		b.Field(2).(*array.Float64Builder).Append(float64(i%10_000) + 0.25)
		if i%10 == 0 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.Int64Builder).Append(int64(i % 50))
		}
		b.Field(4).(*array.BooleanBuilder).Append(i%3 != 0)
		b.Field(5).(*array.StringBuilder).Append([...]string{"view", "click", "purchase", "refund"}[i%4])
		if i%7 == 0 {
			b.Field(6).AppendNull()
		} else {
			b.Field(6).(*array.StringBuilder).Append(fmt.Sprintf("note %d lorem ipsum dolor sit amet", i))
		}
		b.Field(7).(*array.TimestampBuilder).Append(arrow.Timestamp(1_764_000_000_000_000 + int64(i)*1000))
		b.Field(8).(*array.Date32Builder).Append(arrow.Date32(20_000 + i%3000))
		b.Field(9).(*array.Float32Builder).Append(float32(i%1000) / 8)
	}
	return &arrowBatches{template: b.NewRecordBatch(), ids: array.NewInt64Builder(memory.DefaultAllocator), n: n}
}

// batch returns the next batch (the caller releases it), nil after n rows.
func (a *arrowBatches) batch() arrow.RecordBatch {
	if a.next >= a.n {
		return nil
	}
	rows := min(a.template.NumRows(), a.n-a.next)
	a.ids.Reserve(int(rows))
	for i := range rows {
		a.ids.UnsafeAppend(a.next + i + 1)
	}
	a.next += rows
	id := a.ids.NewArray()
	defer id.Release()
	cols := make([]arrow.Array, a.template.NumCols())
	cols[0] = id
	for i := 1; i < len(cols); i++ {
		cols[i] = array.NewSlice(a.template.Column(i), 0, rows)
		defer cols[i].Release()
	}
	return array.NewRecordBatch(arrowSchema, cols, rows)
}

// arrowParquet writes n rows of identical Arrow batches as Parquet,
// through sink/parquet's writer (Write, PreCommit, Commit: one epoch) or,
// with -plain, through pqarrow's FileWriter alone with the same
// properties (zstd, 131,072-row groups, and sink/parquet's default
// DictionaryAuto: dictionaries only for the columns internal/pqdict picks
// from the first batch): the ceiling.
func arrowParquet(args []string) (*result, error) {
	fs := flag.NewFlagSet("arrow-parquet", flag.ExitOnError)
	n := fs.Int64("n", 1_000_000, "rows")
	batchRows := fs.Int("batch", 8192, "rows per batch")
	out := fs.String("out", "", "fresh output directory")
	plain := fs.Bool("plain", false, "pqarrow FileWriter straight to a file (the ceiling)")
	_ = fs.Parse(args)
	if *out == "" {
		return nil, fmt.Errorf("-out is required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return nil, err
	}
	ctx := context.Background()
	in := newArrowBatches(*n, *batchRows)
	defer in.template.Release()
	if *plain {
		path := filepath.Join(*out, "plain.parquet")
		t := startTimer()
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		first := in.batch()
		props := []pq.WriterProperty{pq.WithCompression(compress.Codecs.Zstd),
			pq.WithMaxRowGroupLength(parquet.DefaultRowGroupRows), pq.WithDictionaryDefault(false)}
		for _, name := range pqdict.Columns(first) {
			props = append(props, pq.WithDictionaryFor(name, true))
		}
		w, err := pqarrow.NewFileWriter(arrowSchema, f, pq.NewWriterProperties(props...),
			pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
		if err != nil {
			first.Release()
			return nil, err
		}
		for rec := first; rec != nil; rec = in.batch() {
			err := w.WriteBuffered(rec)
			rec.Release()
			if err != nil {
				return nil, err
			}
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		r := t.stop(*n)
		r.Files = []string{path}
		return r, nil
	}
	dir := filepath.Join(*out, "tables")
	bucket, err := parquet.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		return nil, err
	}
	t := startTimer()
	w, err := dst.Writer(ctx, sink.WriterConfig{Pipeline: "bench-arrow"})
	if err != nil {
		return nil, err
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		return nil, err
	}
	for rec := in.batch(); rec != nil; rec = in.batch() {
		err := w.Write(ctx, "events", rec)
		rec.Release()
		if err != nil {
			return nil, err
		}
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		return nil, err
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		return nil, err
	}
	r := t.stop(*n)
	m, err := parquet.ReadManifest(ctx, bucket, "", "events")
	if err != nil {
		return nil, err
	}
	for _, f := range m.Files {
		r.Files = append(r.Files, filepath.Join(dir, filepath.FromSlash(f.Key)))
	}
	return r, nil
}

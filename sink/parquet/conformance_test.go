package parquet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"gocloud.dev/blob"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
)

// The conformance suite every destination passes, on each bucket backend,
// with and without a prefix. Every Destination of one run shares one
// bucket (a new parquet.New on it stands for a new process); Visible reads
// what a reader sees: the files the stream's current manifest lists.
func TestConformance(t *testing.T) {
	for _, bk := range buckets {
		for _, prefix := range []string{"", "lake/tables"} {
			t.Run(fmt.Sprintf("%s/prefix=%q", bk.name, prefix), func(t *testing.T) {
				b := bk.open(t)
				sinktest.Run(t, func(t *testing.T) sink.Destination {
					return newDest(t, b, parquet.Config{Prefix: prefix, RowGroupRows: 16})
				}, sinktest.Options{
					Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
						return visible(ctx, b, prefix, stream)
					},
				})
			})
		}
	}
}

// visible reads every file of stream's current manifest with pqarrow.
func visible(ctx context.Context, b *blob.Bucket, prefix, stream string) ([]sinktest.Row, error) {
	m, err := parquet.ReadManifest(ctx, b, prefix, stream)
	if errors.Is(err, parquet.ErrNoManifest) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rows []sinktest.Row
	for _, f := range m.Files {
		data, err := b.ReadAll(ctx, f.Key)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f.Key, err)
		}
		pf, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", f.Key, err)
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1000}, memory.DefaultAllocator)
		if err != nil {
			return nil, err
		}
		tbl, err := fr.ReadTable(ctx)
		if err != nil {
			return nil, fmt.Errorf("read table %s: %w", f.Key, err)
		}
		if tbl.NumRows() != f.Rows {
			return nil, fmt.Errorf("%s: %d rows, the manifest says %d", f.Key, tbl.NumRows(), f.Rows)
		}
		tr := array.NewTableReader(tbl, 0)
		for tr.Next() {
			rs, err := sinktest.RowsFromRecord(tr.RecordBatch())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.Key, err)
			}
			rows = append(rows, rs...)
		}
		tr.Release()
		tbl.Release()
		pf.Close()
	}
	return rows, nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
)

// syncToParquet runs one Sync of src into Parquet files under out (a
// fresh directory: data under out/tables, checkpoints under
// out/checkpoints) and returns the timed result with the files of every
// stream's current manifest, for the script's independent check.
func syncToParquet(ctx context.Context, name string, src source.Source, out string, lanes int) (*result, error) {
	tables, ckpt := filepath.Join(out, "tables"), filepath.Join(out, "checkpoints")
	for _, d := range []string{tables, ckpt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	bucket, err := parquet.OpenDir(tables)
	if err != nil {
		return nil, err
	}
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		return nil, err
	}
	store, err := checkpoint.OpenDir(ckpt)
	if err != nil {
		return nil, err
	}
	defer store.Close(ctx)
	b := etl.NewPipeline(name).From(src).To(dst).Checkpoints(store)
	if lanes > 0 {
		b = b.Lanes(lanes)
	}
	p, err := b.Build()
	if err != nil {
		return nil, err
	}
	t := startTimer()
	res, err := p.Sync(ctx)
	if err != nil {
		return nil, err
	}
	var rows int64
	for _, c := range res.Streams {
		rows += c.Written
	}
	r := t.stop(rows)
	streams := make([]string, 0, len(res.Streams))
	for s := range res.Streams {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	for _, s := range streams {
		m, err := parquet.ReadManifest(ctx, bucket, "", s)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", s, err)
		}
		for _, f := range m.Files {
			r.Files = append(r.Files, filepath.Join(tables, filepath.FromSlash(f.Key)))
		}
	}
	return r, nil
}

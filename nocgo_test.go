//go:build !cgo

package etl_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// TestBuildWithoutCgo: a binary built with CGO_ENABLED=0 has no engine;
// Build says so instead of failing to link (make test runs this file).
func TestBuildWithoutCgo(t *testing.T) {
	src, err := faker.New(faker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := parquet.New(parquet.Config{Bucket: memblob.OpenBucket(nil)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = etl.NewPipeline("p").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Build()
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "CGO_ENABLED=1") {
		t.Fatalf("Build without cgo: %v; want engine.ErrUnavailable naming CGO_ENABLED=1", err)
	}

	// sink/parquet still writes, with arrow-go, and says so when the
	// engine's encoder is asked for.
	if _, err := parquet.New(parquet.Config{Bucket: memblob.OpenBucket(nil), Encoder: parquet.EncoderEngine}); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("parquet.New(EncoderEngine) without cgo: %v; want engine.ErrUnavailable", err)
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	dst, err = parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := dst.Writer(ctx, sink.WriterConfig{Pipeline: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil), strings.NewReader(`[{"id":1},{"id":2}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if err := w.Write(ctx, "s", rec); err != nil {
		t.Fatalf("parquet Write without cgo: %v", err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	m, err := parquet.ReadManifest(ctx, bucket, "", "s")
	if err != nil || len(m.Files) != 1 || m.Files[0].Rows != 2 {
		t.Fatalf("manifest without cgo: %+v, %v; want one file of 2 rows", m, err)
	}
}

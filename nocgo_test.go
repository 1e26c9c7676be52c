//go:build !cgo

package etl_test

import (
	"errors"
	"strings"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/engine"
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
}

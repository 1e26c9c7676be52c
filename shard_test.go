package etl_test

import (
	"errors"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// TestShardBuild: a source that is no source.Sharder can't be sharded
// (ErrUnshardable, named in the BuildError), a bad index or count fails
// Build, and shard 0 of 1 is the unsharded pipeline under its own name.
func TestShardBuild(t *testing.T) {
	src, err := faker.New(faker.Config{Rows: 10})
	if err != nil {
		t.Fatal(err)
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	build := func(i, n int) (*etl.Pipeline, error) {
		return etl.NewPipeline("p").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Shard(i, n).Build()
	}
	if _, err := build(0, 2); !errors.Is(err, source.ErrUnshardable) {
		t.Errorf("Shard(0, 2) of a faker source: %v, want ErrUnshardable", err)
	}
	for _, c := range []struct{ i, n int }{{2, 2}, {-1, 2}, {0, 0}, {0, etl.MaxShards + 1}} {
		var be *etl.BuildError
		if _, err := build(c.i, c.n); !errors.As(err, &be) {
			t.Errorf("Shard(%d, %d): %v, want a BuildError", c.i, c.n, err)
		}
	}
	p, err := build(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "p" || p.Shard() != (etl.Shard{}) || p.Status().Shard.Sharded() {
		t.Errorf("shard 0 of 1: Name %q, Shard %+v; want the unsharded pipeline", p.Name(), p.Shard())
	}
	if got := etl.ShardKey("orders", 2, 4); got != "orders.shard-2-of-4" {
		t.Errorf("ShardKey = %q", got)
	}
	if err := checkpoint.ValidPipeline(etl.ShardKey("orders", 4095, 4096)); err != nil {
		t.Error(err)
	}
}

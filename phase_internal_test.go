package etl

import (
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// shardableFaker is a faker source that deals every shard all of itself.
type shardableFaker struct{ *faker.Source }

func (s shardableFaker) Shard(int, int) (source.Source, error) { return s, nil }

// TestShardsStartOutOfPhase: shard i of S closes its first epoch
// (i+1)/S of the interval after its start, so shards started together
// commit apart; an unsharded pipeline's first epoch keeps the interval.
func TestShardsStartOutOfPhase(t *testing.T) {
	bucket, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{CreateDir: true, Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		t.Fatal(err)
	}
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	src, err := faker.New(faker.Config{Rows: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		every        time.Duration
		index, count int
		want         time.Duration
	}{
		{8 * time.Second, 0, 4, 2 * time.Second},
		{8 * time.Second, 3, 4, 8 * time.Second},
		{0, 1, 2, 10 * time.Second}, // the default interval
		{0, 0, 3, 10 * time.Second / 3},
		{8 * time.Second, 0, 1, 0}, // not sharded
	} {
		b := NewPipeline("phase").From(shardableFaker{src}).To(dst).Checkpoints(checkpoint.NewMem()).EpochEvery(tc.every, 0)
		if tc.count > 1 {
			b = b.Shard(tc.index, tc.count)
		}
		p, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		if p.cfg.FirstEpoch != tc.want {
			t.Errorf("shard %d of %d, epochs every %v: first epoch after %v, want %v", tc.index, tc.count, tc.every, p.cfg.FirstEpoch, tc.want)
		}
		p.Close(t.Context())
	}
}

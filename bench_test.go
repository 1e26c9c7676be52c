package etl_test

import (
	"context"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// BenchmarkSyncFakerToParquet measures a whole sync, faker → engine →
// Parquet (zstd) in memory, 2 × 100k records per iteration: the
// quickstart's path without the disk.
func BenchmarkSyncFakerToParquet(b *testing.B) {
	for _, lanes := range []int{1, 2} {
		b.Run("lanes="+string(rune('0'+lanes)), func(b *testing.B) {
			const rows = 100_000
			var records int64
			for b.Loop() {
				src, err := faker.New(faker.Config{Rows: rows})
				if err != nil {
					b.Fatal(err)
				}
				bucket := memblob.OpenBucket(nil)
				dst, err := parquet.New(parquet.Config{Bucket: bucket})
				if err != nil {
					b.Fatal(err)
				}
				p, err := etl.NewPipeline("bench").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Lanes(lanes).Build()
				if err != nil {
					b.Fatal(err)
				}
				res, err := p.Sync(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range res.Streams {
					records += c.Read
				}
				bucket.Close()
			}
			b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

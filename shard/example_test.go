package shard_test

import (
	"context"
	"log"
	"os"
	"strconv"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/checkpoint/object"
	"github.com/openetl/etl/shard"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// A StatefulSet pod runs the shard its ordinal names.
func ExampleFromHostname() {
	var (
		src   source.Source    // e.g. a kafka.Source
		dst   sink.Destination // e.g. a parquet.Destination with a prefix of this shard's
		store checkpoint.Store // e.g. cloud.NewBucketStore
	)
	count, _ := strconv.Atoi(os.Getenv("SHARDS"))
	index, err := shard.FromHostname(count) // "orders-2" → 2
	if err != nil {
		log.Fatal(err) // an *IndexError
	}
	p, err := etl.NewPipeline("orders").From(src).To(dst).Checkpoints(store).Shard(index, count).Build()
	if err != nil {
		log.Fatal(err)
	}
	_ = p.Run(context.Background())
}

// Every host runs the same program; leases in a shared bucket decide
// which shards each runs.
func ExampleLeases() {
	var (
		src    source.Source
		dst    func(shard int) sink.Destination // a destination per shard (its own prefix)
		store  checkpoint.Store
		bucket object.Bucket // cloud.NewBucket(s3bucket, "etl"), or object.NewDir on a shared mount
	)
	host, _ := os.Hostname()
	leases, err := shard.NewLeases(shard.LeaseConfig{Bucket: bucket, Prefix: "orders/_leases", Host: host, Shards: 8})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background() // cancel it to stop: the leases are freed for the other hosts
	_ = leases.Run(ctx, func(ctx context.Context, i int) error {
		p, err := etl.NewPipeline("orders").From(src).To(dst(i)).Checkpoints(store).Shard(i, 8).BuildContext(ctx)
		if err != nil {
			return err
		}
		defer p.Close(context.WithoutCancel(ctx))
		return p.Run(ctx) // returns once the lease is lost or given up
	})
}

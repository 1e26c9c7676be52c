package etl_test

import (
	"context"
	"fmt"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// Embedding a pipeline: fake data into Parquet files, in memory here; use
// fileblob/s3blob buckets and checkpoint.OpenDir or checkpoint.Open for
// real runs.
func Example() {
	ctx := context.Background()
	src, err := faker.New(faker.Config{Rows: 1000, MalformedShare: 0.01})
	if err != nil {
		panic(err)
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		panic(err)
	}

	p, err := etl.NewPipeline("orders").
		From(src).
		To(dst).
		Checkpoints(checkpoint.NewMem()).
		Build()
	if err != nil {
		panic(err)
	}
	res, err := p.Sync(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range []string{"customers", "orders"} {
		c := res.Streams[s]
		fmt.Printf("%s: read %d, written %d, quarantined %d\n", s, c.Read, c.Written, c.Quarantined)
	}
	m, err := parquet.ReadManifest(ctx, bucket, "", "orders")
	if err != nil {
		panic(err)
	}
	var rows int64
	for _, f := range m.Files {
		rows += f.Rows
	}
	fmt.Println("orders rows in the manifest:", rows)
	// Output:
	// customers: read 1000, written 994, quarantined 6
	// orders: read 1000, written 993, quarantined 7
	// orders rows in the manifest: 993
}

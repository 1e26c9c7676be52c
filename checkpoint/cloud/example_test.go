package cloud_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob/s3blob"

	"github.com/openetl/etl/checkpoint/cloud"
)

// A host that configures its own S3 client (here for an S3-compatible
// server on a private endpoint) hands the bucket to NewBucketStore. The
// host keeps owning the bucket and closes it itself.
func ExampleNewBucketStore() {
	ctx := context.Background()
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String("https://s3.internal.example:9000"),
		UsePathStyle: true,
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("ACCESS_KEY", "SECRET_KEY", ""),
		// Many S3-compatible servers reject the SDK's default checksums.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
	})
	bucket, err := s3blob.OpenBucket(ctx, client, "etl-state",
		&s3blob.Options{RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired})
	if err != nil {
		log.Fatal(err)
	}
	defer bucket.Close()

	store, err := cloud.NewBucketStore(bucket, "prod")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(ctx)
	// store.Claim(ctx, "orders") ... as in the package example.
}

// Open takes a URL; these reach the local servers of scripts/servers.sh.
func ExampleOpen() {
	ctx := context.Background()
	for _, u := range []string{
		"s3://openetl-test/etl?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1&disable_https=true",
		"gs://openetl-test/etl", // with STORAGE_EMULATOR_HOST=127.0.0.1:4443
		"azblob://openetl-test/etl?protocol=http&domain=127.0.0.1:10000&localemu=true", // AZURE_STORAGE_ACCOUNT/KEY set
	} {
		store, err := cloud.Open(ctx, u)
		if err != nil {
			log.Fatal(err)
		}
		defer store.Close(ctx)
	}
}

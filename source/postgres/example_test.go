package postgres_test

import (
	"context"
	"log"
	"os"
	"strings"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/postgres"
)

// A table synced into Parquet: the first Sync reads a snapshot, later
// ones the changes since the last one.
func Example() {
	ctx := context.Background()
	src, err := postgres.New(postgres.Config{
		DSN:               "postgres://etl@127.0.0.1:5432/app?sslmode=disable",
		Publication:       "etl_orders",
		CreatePublication: true,
		Tables:            []string{"orders"},
		Slot:              "etl_orders",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close(ctx)
	bucket, err := parquet.OpenDir("/data/tables")
	if err != nil {
		log.Fatal(err)
	}
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		log.Fatal(err)
	}
	store, err := checkpoint.OpenDir("/data/checkpoints")
	if err != nil {
		log.Fatal(err)
	}
	p, err := etl.NewPipeline("orders").From(src).To(dst).Checkpoints(store).Build()
	if err != nil {
		log.Fatal(err)
	}
	res, err := p.Sync(ctx)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("orders: %d rows", res.Streams["orders"].Written)
}

// Credentials read at each login from a file that a secret agent
// rewrites when it rotates the password. For an RDS or Aurora IAM token,
// return the token of the AWS SDK's auth.BuildAuthToken as the password.
func ExampleConfig_credentials() {
	src, err := postgres.New(postgres.Config{
		DSN:         "postgres://etl@db.internal:5432/app?sslmode=verify-full",
		Publication: "etl_orders",
		Slot:        "etl_orders",
		Credentials: func(ctx context.Context) (postgres.Credentials, error) {
			b, err := os.ReadFile("/run/secrets/etl-password")
			if err != nil {
				return postgres.Credentials{}, err // retryable: the next attempt asks again
			}
			return postgres.Credentials{Password: strings.TrimSpace(string(b))}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close(context.Background())
	// etl.NewPipeline(...).From(src) ...
}

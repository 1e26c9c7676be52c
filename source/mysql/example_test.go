package mysql_test

import (
	"context"
	"log"
	"os"
	"strings"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/mysql"
)

// Two tables synced into Parquet: the first Sync reads a snapshot, later
// ones the binlog since the last one.
func Example() {
	ctx := context.Background()
	src, err := mysql.New(mysql.Config{
		DSN:    "etl:secret@127.0.0.1:3306/app",
		Tables: []string{"orders", "customers"},
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
	p, err := etl.NewPipeline("app").From(src).To(dst).Checkpoints(store).Build()
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
	src, err := mysql.New(mysql.Config{
		DSN: "etl@db.internal:3306/app",
		Credentials: func(ctx context.Context) (mysql.Credentials, error) {
			b, err := os.ReadFile("/run/secrets/etl-password")
			if err != nil {
				return mysql.Credentials{}, err // retryable: the next attempt asks again
			}
			return mysql.Credentials{Password: strings.TrimSpace(string(b))}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close(context.Background())
	// etl.NewPipeline(...).From(src) ...
}

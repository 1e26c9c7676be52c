package clickhouse_test

import (
	"context"
	"log"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/source/faker"
)

// Customers merged by id (read them with FINAL), orders appended, both
// exactly once from the faker (an exact-replay source).
func Example() {
	ctx := context.Background()
	conn, err := ch.Open(&ch.Options{Addr: []string{"127.0.0.1:9000"}})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	dst, err := clickhouse.New(ctx, clickhouse.Config{
		Conn:     conn,
		Database: "shop",
	})
	if err != nil {
		log.Fatal(err)
	}
	src, err := faker.New(faker.Config{Rows: 100_000})
	if err != nil {
		log.Fatal(err)
	}
	store, err := checkpoint.OpenDir("checkpoints")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("shop").From(src).To(dst).Checkpoints(store).
		Mode(delivery.Merge, "customers").
		Require(delivery.ExactlyOnce).
		Build()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Sync(ctx); err != nil {
		log.Fatal(err)
	}
	// SELECT * FROM shop.customers FINAL WHERE _openetl_deleted = 0
}

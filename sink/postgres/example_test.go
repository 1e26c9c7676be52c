package postgres_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink/postgres"
	"github.com/openetl/etl/source/faker"
)

// Sync the fake customers (merged by key, soft deletes) and orders
// (appended) into schema raw of a Postgres database.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://etl@localhost/analytics")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	dst, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: "raw"})
	if err != nil {
		log.Fatal(err)
	}
	defer dst.Close()
	src, err := faker.New(faker.Config{Seed: 1, Rows: 1000})
	if err != nil {
		log.Fatal(err)
	}
	store, err := checkpoint.OpenDir("/var/lib/myservice/checkpoints")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("fake-to-pg").From(src).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).EpochEvery(10*time.Second, 0).Build()
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.Sync(ctx); err != nil {
		log.Fatal(err)
	}
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl/source/postgres"
)

// pgSnapshot reads a table's snapshot (the first Sync of a new pipeline,
// which ends at the WAL position of its start) into Parquet.
func pgSnapshot(args []string) (*result, error) {
	fs := flag.NewFlagSet("pg-snapshot", flag.ExitOnError)
	dsn := fs.String("dsn", os.Getenv("OPENETL_TEST_POSTGRES_DSN"), "connection string")
	table := fs.String("table", "bench16", "table to read")
	pub := fs.String("pub", "bench16_pub", "publication (created when missing)")
	slot := fs.String("slot", "bench16_slot", "replication slot (dropped and created again)")
	out := fs.String("out", "", "fresh output directory")
	lanes := fs.Int("lanes", 0, "writer lanes (0: the default)")
	chunk := fs.Int("chunk", 0, "SnapshotChunkRows (0: the default)")
	_ = fs.Parse(args)
	if *dsn == "" || *out == "" {
		return nil, fmt.Errorf("-dsn and -out are required")
	}
	ctx := context.Background()
	src, err := postgres.New(postgres.Config{
		DSN: *dsn, Publication: *pub, CreatePublication: true, Tables: []string{*table},
		Slot: *slot, SnapshotChunkRows: *chunk,
	})
	if err != nil {
		return nil, err
	}
	defer src.Close(ctx)
	return syncToParquet(ctx, "bench-pg-snapshot", src, *out, *lanes)
}

// pgCDC runs one Sync of the pipeline whose state is under -out. The
// first (a new -out; the script calls it while the table is empty) reads
// the snapshot and creates the slot; a later one drains the changes
// waiting in the slot up to the WAL position of its start: the catch-up
// that is timed.
func pgCDC(args []string) (*result, error) {
	fs := flag.NewFlagSet("pg-cdc", flag.ExitOnError)
	dsn := fs.String("dsn", os.Getenv("OPENETL_TEST_POSTGRES_DSN"), "connection string")
	table := fs.String("table", "bench_cdc", "table to read")
	pub := fs.String("pub", "bench_cdc_pub", "publication (created when missing)")
	slot := fs.String("slot", "bench_cdc_slot", "replication slot")
	out := fs.String("out", "", "output directory, the same for the first Sync and the catch-up")
	lanes := fs.Int("lanes", 0, "writer lanes (0: the default)")
	_ = fs.Parse(args)
	if *dsn == "" || *out == "" {
		return nil, fmt.Errorf("-dsn and -out are required")
	}
	ctx := context.Background()
	src, err := postgres.New(postgres.Config{
		DSN: *dsn, Publication: *pub, CreatePublication: true, Tables: []string{*table}, Slot: *slot,
	})
	if err != nil {
		return nil, err
	}
	defer src.Close(ctx)
	return syncToParquet(ctx, "bench-pg-cdc", src, *out, *lanes)
}

// pgCopy is the snapshot's ceiling: COPY (FORMAT binary) of the whole
// table into io.Discard over one connection.
func pgCopy(args []string) (*result, error) {
	fs := flag.NewFlagSet("pg-copy", flag.ExitOnError)
	dsn := fs.String("dsn", os.Getenv("OPENETL_TEST_POSTGRES_DSN"), "connection string")
	table := fs.String("table", "bench16", "table to read")
	_ = fs.Parse(args)
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, *dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	t := startTimer()
	tag, err := conn.CopyTo(ctx, io.Discard, fmt.Sprintf("COPY %s TO STDOUT (FORMAT binary)", *table))
	if err != nil {
		return nil, err
	}
	return t.stop(tag.RowsAffected()), nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

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

// pgCDCCeiling is the CDC catch-up's ceiling: a bare pglogrepl loop that
// streams a slot (made before the changes) with pgoutput v2 and
// streaming 'on' (as source/postgres asks on servers 14+; -proto 1: v1,
// no streaming), parses every message and reads each change's id (the
// first column, as text), until
// it has passed the WAL position -to: the commit of a transaction ending
// at or past it, or a keepalive saying the server has sent everything up
// to it. It confirms nothing. The JSON's check has the count, the sum,
// min and max of the ids and the changes per kind, in the shape
// bench/check_parquet.py --ops gives, so the script checks it the same
// way as OpenETL's output.
func pgCDCCeiling(args []string) (*result, error) {
	fs := flag.NewFlagSet("pg-cdc-ceiling", flag.ExitOnError)
	dsn := fs.String("dsn", os.Getenv("OPENETL_TEST_POSTGRES_DSN"), "connection string")
	slot := fs.String("slot", "bench_cdc_bare", "logical replication slot (pgoutput), made before the changes")
	pub := fs.String("pub", "bench_cdc_pub", "publication")
	to := fs.String("to", "", "WAL position to read up to (pg_current_wal_lsn() after the changes)")
	want := fs.Int64("n", 0, "expected changes (sizes the check)")
	proto := fs.Int("proto", 2, "pgoutput protocol: 1, or 2 with streaming 'on' (PostgreSQL 14+)")
	_ = fs.Parse(args)
	end, err := pglogrepl.ParseLSN(*to)
	if err != nil {
		return nil, fmt.Errorf("-to: %w", err)
	}
	ctx := context.Background()
	cfg, err := pgconn.ParseConfig(*dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	t := startTimer()
	plugin := []string{"proto_version '" + strconv.Itoa(*proto) + "'", "publication_names '" + *pub + "'"}
	if *proto >= 2 {
		plugin = append(plugin, "streaming 'on'")
	}
	if err := pglogrepl.StartReplication(ctx, conn, *slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: plugin}); err != nil {
		return nil, err
	}
	sum := newIDSum(*want)
	ops := map[string]int64{}
	var bad int64
	id := func(tup *pglogrepl.TupleData) {
		if tup == nil || len(tup.Columns) == 0 {
			bad++
			return
		}
		v, err := strconv.ParseInt(string(tup.Columns[0].Data), 10, 64)
		if err != nil {
			bad++
			return
		}
		sum.add(v)
	}
	// inTx: a transaction is open (Begin, or a streamed one's first
	// StreamStart, until its commit); inStream: between StreamStart and
	// StreamStop, where v2 changes carry an xid.
	inTx, inStream := false, false
	for done := false; !done; {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return nil, err
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			if er, ok := msg.(*pgproto3.ErrorResponse); ok {
				return nil, pgconn.ErrorResponseToPgError(er)
			}
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return nil, err
			}
			if !inTx && ka.ServerWALEnd >= end {
				done = true
			}
			if ka.ReplyRequested {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: 0, ClientTime: time.Now()}); err != nil {
					return nil, err
				}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return nil, err
			}
			var m pglogrepl.Message
			if *proto >= 2 {
				m, err = pglogrepl.ParseV2(xld.WALData, inStream)
			} else {
				m, err = pglogrepl.Parse(xld.WALData)
			}
			if err != nil {
				return nil, err
			}
			switch m := m.(type) {
			case *pglogrepl.BeginMessage:
				inTx = true
			case *pglogrepl.StreamStartMessageV2:
				inTx, inStream = true, true
			case *pglogrepl.StreamStopMessageV2:
				inStream = false
			case *pglogrepl.InsertMessage:
				ops["insert"]++
				id(m.Tuple)
			case *pglogrepl.InsertMessageV2:
				ops["insert"]++
				id(m.Tuple)
			case *pglogrepl.UpdateMessage:
				ops["update"]++
				id(m.NewTuple)
			case *pglogrepl.UpdateMessageV2:
				ops["update"]++
				id(m.NewTuple)
			case *pglogrepl.DeleteMessage:
				ops["delete"]++
				id(m.OldTuple)
			case *pglogrepl.DeleteMessageV2:
				ops["delete"]++
				id(m.OldTuple)
			case *pglogrepl.StreamAbortMessageV2:
				return nil, fmt.Errorf("streamed transaction %d aborted: its changes were counted (the benchmark's changes never abort)", m.Xid)
			case *pglogrepl.CommitMessage:
				inTx = false
				if m.TransactionEndLSN >= end {
					done = true
				}
			case *pglogrepl.StreamCommitMessageV2:
				inTx = false
				if m.TransactionEndLSN >= end {
					done = true
				}
			}
		}
	}
	r := t.stop(sum.Count)
	sum.Bad = bad
	r.Check = sum
	r.Ops = ops
	return r, nil
}

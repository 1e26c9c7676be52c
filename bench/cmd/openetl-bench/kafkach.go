package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/source/kafka"
)

// kafkaClickHouse syncs a topic of the benchmark's JSON messages into a
// ClickHouse MergeTree table: through the pipeline (source/kafka with
// DecodeJSON → sink/clickhouse, their defaults, one Sync to the high
// watermarks at the start) or, with -plain, the baseline: a franz-go
// consumer fetches the same n messages, each value is decoded with
// encoding/json into a struct of the nine fields, and clickhouse-go's
// batch insert sends them (with the record's seq) in blocks of -block
// rows. Both time everything from the client's start to the last block
// stored; the JSON names the table for the script to read back with
// clickhouse-client.
func kafkaClickHouse(args []string) (*result, error) {
	fs := flag.NewFlagSet("kafka-clickhouse", flag.ExitOnError)
	brokers := fs.String("brokers", "", "seed brokers")
	topic := fs.String("topic", "bench", "topic")
	n := fs.Int64("n", 100_000, "messages in the topic (the baseline reads this many)")
	addr := fs.String("addr", os.Getenv("OPENETL_TEST_CLICKHOUSE_ADDR"), "native protocol host:port")
	db := fs.String("db", "openetl_bench_kafka", "database (dropped and created again)")
	out := fs.String("out", "", "fresh directory for the pipeline's checkpoints")
	block := fs.Int("block", clickhouse.DefaultBlockRows, "rows per insert block (baseline)")
	plain := fs.Bool("plain", false, "the baseline: franz-go fetch, encoding/json, clickhouse-go batch insert")
	shards := fs.String("shards", "", "a cluster instead of -addr: native addresses, shards separated by ';', replicas by ','")
	nshards := fs.Int("nshards", 0, "with -shards: its first nshards shards only (0: all)")
	_ = fs.Parse(args)
	ctx := context.Background()
	if *shards != "" {
		if *brokers == "" || *out == "" || *plain {
			return nil, fmt.Errorf("-shards needs -brokers and -out, and has no -plain")
		}
		return kafkaCHCluster(ctx, *brokers, *topic, *shards, *nshards, *db, *out)
	}
	if *brokers == "" || *addr == "" {
		return nil, fmt.Errorf("-brokers and -addr (or OPENETL_TEST_CLICKHOUSE_ADDR) are required")
	}
	conn, err := ch.Open(&ch.Options{Addr: []string{*addr}, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + *db, "CREATE DATABASE " + *db} {
		if err := conn.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	serverPID := filepath.Join(os.Getenv("OPENETL_SERVERS_DIR"), "clickhouse.pid")
	var r *result
	var table string
	var server0 float64
	if *plain {
		table = *db + ".plain"
		if err := conn.Exec(ctx, "CREATE TABLE "+table+` (id Int64, user String, event String, ts String,
			amount Float64, ok UInt8, ratio Float64, country String, note String, _openetl_seq Int64)
			ENGINE = MergeTree ORDER BY _openetl_seq`); err != nil {
			return nil, err
		}
		server0 = procCPUSeconds(serverPID)
		t := startTimer()
		if err := kafkaPlainInsert(ctx, *brokers, *topic, *n, conn, table, *block); err != nil {
			return nil, err
		}
		r = t.stop(*n)
	} else {
		if *out == "" {
			return nil, fmt.Errorf("-out is required")
		}
		table = *db + "." + *topic
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return nil, err
		}
		dst, err := clickhouse.New(ctx, clickhouse.Config{Conn: conn, Database: *db})
		if err != nil {
			return nil, err
		}
		server0 = procCPUSeconds(serverPID)
		if r, err = kafkaCHSync(ctx, *brokers, *topic, dst, *out); err != nil {
			return nil, err
		}
	}
	server := procCPUSeconds(serverPID) - server0
	r.Note = fmt.Sprintf("server CPU %.2f s (%.2f s per M rows)", server, server/float64(*n)*1e6)
	r.Server = &chServer{CPU: server, Table: table}
	return r, nil
}

// benchEvent is one benchmark message (message) as the baseline decodes it.
type benchEvent struct {
	ID      int64   `json:"id"`
	User    string  `json:"user"`
	Event   string  `json:"event"`
	TS      string  `json:"ts"`
	Amount  float64 `json:"amount"`
	OK      bool    `json:"ok"`
	Ratio   float64 `json:"ratio"`
	Country string  `json:"country"`
	Note    string  `json:"note"`
}

// kafkaPlainInsert is the baseline: n records fetched from the start of
// topic (read_committed, like the source), decoded into reused column
// slices and sent in clickhouse-go batches of at least block rows.
func kafkaPlainInsert(ctx context.Context, brokers, topic string, n int64, conn ch.Conn, table string, block int) error {
	cl, err := kafkaClient(brokers, kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var (
		ids, seqs                          []int64
		users, events, tss, countries, nts []string
		amounts, ratios                    []float64
		oks                                []uint8
		ev                                 benchEvent
		got                                int64
	)
	send := func() error {
		if len(ids) == 0 {
			return nil
		}
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" (id, user, event, ts, amount, ok, ratio, country, note, _openetl_seq)")
		if err != nil {
			return err
		}
		for j, v := range []any{ids, users, events, tss, amounts, oks, ratios, countries, nts, seqs} {
			if err := b.Column(j).Append(v); err != nil {
				return fmt.Errorf("column %d: %w", j, err)
			}
		}
		if err := b.Send(); err != nil {
			return err
		}
		ids, users, events, tss, amounts = ids[:0], users[:0], events[:0], tss[:0], amounts[:0]
		oks, ratios, countries, nts, seqs = oks[:0], ratios[:0], countries[:0], nts[:0], seqs[:0]
		return nil
	}
	var derr error
	for got < n {
		f := cl.PollFetches(ctx)
		if err := f.Err0(); err != nil {
			return err
		}
		f.EachRecord(func(rec *kgo.Record) {
			if derr != nil {
				return
			}
			ev = benchEvent{}
			if err := json.Unmarshal(rec.Value, &ev); err != nil {
				derr = fmt.Errorf("partition %d offset %d: %w", rec.Partition, rec.Offset, err)
				return
			}
			ok := uint8(0)
			if ev.OK {
				ok = 1
			}
			ids, users, events, tss = append(ids, ev.ID), append(users, ev.User), append(events, ev.Event), append(tss, ev.TS)
			amounts, oks, ratios = append(amounts, ev.Amount), append(oks, ok), append(ratios, ev.Ratio)
			countries, nts = append(countries, ev.Country), append(nts, ev.Note)
			seqs = append(seqs, int64(rec.Partition)<<48|rec.Offset)
		})
		if derr != nil {
			return derr
		}
		got += int64(f.NumRecords())
		if len(ids) >= block {
			if err := send(); err != nil {
				return err
			}
		}
	}
	return send()
}

// kafkaCHSync is the pipeline's leg: one Sync of topic into dst, timed
// from the Sync's start.
func kafkaCHSync(ctx context.Context, brokers, topic string, dst *clickhouse.Destination, out string) (*result, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}, Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	defer src.Close(ctx)
	store, err := checkpoint.OpenDir(out)
	if err != nil {
		return nil, err
	}
	defer store.Close(ctx)
	p, err := etl.NewPipeline("bench-kafka-ch").From(src).To(dst).Checkpoints(store).Build()
	if err != nil {
		return nil, err
	}
	t := startTimer()
	res, err := p.Sync(ctx)
	if err != nil {
		return nil, err
	}
	var rows int64
	for _, c := range res.Streams {
		rows += c.Written
	}
	return t.stop(rows), nil
}

// kafkaCHCluster is the pipeline's leg into a cluster (Config.Cluster,
// Replicated tables, rows routed by shard) of the first nshards shards
// of spec, in a fresh database (earlier runs' databases are dropped on
// every replica first). The JSON names the table and, in Note, the
// shards' first replicas for the script's read-back through remote().
func kafkaCHCluster(ctx context.Context, brokers, topic, spec string, nshards int, prefix, out string) (*result, error) {
	cl := &clickhouse.Cluster{}
	for _, s := range strings.Split(spec, ";") {
		cl.Shards = append(cl.Shards, strings.Split(s, ","))
	}
	if nshards > 0 && nshards < len(cl.Shards) {
		cl.Shards = cl.Shards[:nshards]
	}
	prefix += "_cluster"
	for _, sh := range cl.Shards {
		for _, addr := range sh {
			conn, err := ch.Open(&ch.Options{Addr: []string{addr}, DialTimeout: 10 * time.Second})
			if err != nil {
				return nil, err
			}
			rows, err := conn.Query(ctx, "SELECT name FROM system.databases WHERE startsWith(name, '"+prefix+"')")
			var dbs []string
			for err == nil && rows.Next() {
				var name string
				if err = rows.Scan(&name); err == nil {
					dbs = append(dbs, name)
				}
			}
			if err == nil {
				err = rows.Err()
				rows.Close()
			}
			for _, db := range dbs {
				if err == nil {
					err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
				}
			}
			conn.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", addr, err)
			}
		}
	}
	db := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	dst, err := clickhouse.New(ctx, clickhouse.Config{Database: db, Cluster: cl})
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	r, err := kafkaCHSync(ctx, brokers, topic, dst, out)
	if err != nil {
		return nil, err
	}
	first := make([]string, len(cl.Shards))
	for i, sh := range cl.Shards {
		first[i] = sh[0]
	}
	r.Note = strings.Join(first, ",")
	r.Server = &chServer{Table: db + "." + topic}
	return r, nil
}

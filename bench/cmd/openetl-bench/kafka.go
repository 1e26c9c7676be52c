package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/openetl/etl/source/kafka"
)

const kafkaPartitions = 4

// message appends the i-th benchmark message (ids from 1), a flat JSON
// document of about 200 bytes with 9 fields of mixed types.
func message(dst []byte, i int64) []byte {
	dst = append(dst, `{"id":`...)
	dst = strconv.AppendInt(dst, i, 10)
	dst = append(dst, `,"user":"user-`...)
	dst = strconv.AppendInt(dst, i%100_000, 10)
	dst = append(dst, `","event":"`...)
	dst = append(dst, [...]string{"view", "click", "purchase", "refund"}[i%4]...)
	dst = append(dst, `","ts":"2026-11-30T12:`...)
	dst = strconv.AppendInt(dst, 10+i%50, 10)
	dst = append(dst, `:00Z","amount":`...)
	dst = strconv.AppendInt(dst, i%10_000, 10)
	dst = append(dst, `.25,"ok":`...)
	dst = strconv.AppendBool(dst, i%3 != 0)
	dst = append(dst, `,"ratio":0.`...)
	dst = strconv.AppendInt(dst, 1000+i%9000, 10)
	dst = append(dst, `,"country":"`...)
	dst = append(dst, [...]string{"DE", "FR", "US", "JP", "BR"}[i%5]...)
	dst = append(dst, `","note":"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"}`...)
	return dst
}

func kafkaClient(brokers string, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}, opts...)...)
}

func createTopic(ctx context.Context, cl *kgo.Client, topic string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, kafkaPartitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return err
	}
	return nil
}

// produceMessages writes messages 1..n (encoded by enc, message or
// an avroMessage) round-robin over the partitions,
// asynchronously (the client's MaxBufferedRecords holds it back), with the
// values cut from shared slabs: filling kfake's 10M messages, once per
// run, was most of the kfake scenario's time.
func produceMessages(ctx context.Context, cl *kgo.Client, topic string, n int64, enc func([]byte, int64) []byte) error {
	var (
		mu   sync.Mutex
		perr error
		slab []byte
	)
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if perr == nil {
				perr = err
			}
			mu.Unlock()
		}
	}
	for i := int64(1); i <= n; i++ {
		if cap(slab)-len(slab) < 512 {
			slab = make([]byte, 0, 4<<20)
		}
		start := len(slab)
		slab = enc(slab, i)
		v := slab[start:len(slab):len(slab)]
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % kafkaPartitions), Value: v}, done)
		if i%100_000 == 0 {
			mu.Lock()
			err := perr
			mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return perr
}

func producerOpts() []kgo.Opt {
	return []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.ProducerLinger(5 * time.Millisecond), kgo.MaxBufferedRecords(100_000)}
}

// kafkaProduce fills a topic of a real broker with n messages, and/or
// writes the same messages as NDJSON to a file (Benthos' input). With
// -registry, the topic's messages are Avro in the registry's wire format
// (the schema registered under TOPIC-value) with the same values.
func kafkaProduce(args []string) (*result, error) {
	fs := flag.NewFlagSet("kafka-produce", flag.ExitOnError)
	brokers := fs.String("brokers", "", "seed brokers (empty: only the NDJSON file)")
	topic := fs.String("topic", "bench", "topic (created with 4 partitions)")
	n := fs.Int64("n", 100_000, "messages")
	ndjson := fs.String("ndjson", "", "also write the messages to this file, one per line")
	registry := fs.String("registry", "", "a Confluent-compatible registry's URL: write Avro messages")
	_ = fs.Parse(args)
	ctx := context.Background()
	t := startTimer()
	if *ndjson != "" {
		f, err := os.Create(*ndjson)
		if err != nil {
			return nil, err
		}
		w := bufio.NewWriterSize(f, 1<<20)
		var buf []byte
		for i := int64(1); i <= *n; i++ {
			buf = append(message(buf[:0], i), '\n')
			_, _ = w.Write(buf)
		}
		if err := w.Flush(); err != nil {
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	}
	if *brokers != "" {
		cl, err := kafkaClient(*brokers, producerOpts()...)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		if err := createTopic(ctx, cl, *topic); err != nil {
			return nil, err
		}
		enc := message
		if *registry != "" {
			if err := checkAvroMessages(min(*n, 10_000)); err != nil {
				return nil, err
			}
			id, err := registerAvro(ctx, *registry, *topic)
			if err != nil {
				return nil, err
			}
			enc = func(dst []byte, i int64) []byte { return avroMessage(dst, id, i) }
		}
		if err := produceMessages(ctx, cl, *topic, *n, enc); err != nil {
			return nil, err
		}
	}
	return t.stop(*n), nil
}

// fakeCluster starts an in-process kfake cluster holding n messages in
// topic; the caller closes it.
func fakeCluster(ctx context.Context, topic string, n int64) (*kfake.Cluster, string, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kafkaPartitions, topic))
	if err != nil {
		return nil, "", err
	}
	brokers := strings.Join(c.ListenAddrs(), ",")
	cl, err := kafkaClient(brokers, producerOpts()...)
	if err != nil {
		c.Close()
		return nil, "", err
	}
	defer cl.Close()
	if err := produceMessages(ctx, cl, topic, n, message); err != nil {
		c.Close()
		return nil, "", err
	}
	return c, brokers, nil
}

// kafkaPipeline syncs a topic (to the high watermarks at the start) into
// Parquet; with -registry, with DecodeRegistry (Avro through the
// registry).
func kafkaPipeline(args []string) (*result, error) {
	fs := flag.NewFlagSet("kafka", flag.ExitOnError)
	brokers := fs.String("brokers", "", "seed brokers")
	fake := fs.Bool("kfake", false, "fill an in-process kfake cluster with -n messages instead")
	n := fs.Int64("n", 100_000, "messages (with -kfake)")
	topic := fs.String("topic", "bench", "topic")
	out := fs.String("out", "", "fresh output directory")
	lanes := fs.Int("lanes", 0, "writer lanes (0: the default)")
	registry := fs.String("registry", "", "a Confluent-compatible registry's URL: decode with kafka.DecodeRegistry")
	_ = fs.Parse(args)
	ctx := context.Background()
	if *fake {
		c, b, err := fakeCluster(ctx, *topic, *n)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		*brokers = b
	}
	if *brokers == "" || *out == "" {
		return nil, fmt.Errorf("-brokers (or -kfake) and -out are required")
	}
	cfg := kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...)}, Topics: []string{*topic}}
	if *registry != "" {
		rcl, err := sr.NewClient(sr.URLs(*registry))
		if err != nil {
			return nil, err
		}
		cfg.Decoder, cfg.Registry = kafka.DecodeRegistry, rcl
	}
	src, err := kafka.New(cfg)
	if err != nil {
		return nil, err
	}
	defer src.Close(ctx)
	return syncToParquet(ctx, "bench-kafka", src, *out, *lanes)
}

// kfakeServe fills an in-process kfake cluster with n messages, writes
// its seed brokers to -addr-file (written whole, then renamed: its
// appearance means ready) and serves until SIGTERM or SIGINT, so that every run of the kfake scenario reads the
// same cluster without filling one of its own.
func kfakeServe(args []string) (*result, error) {
	fs := flag.NewFlagSet("kfake-serve", flag.ExitOnError)
	n := fs.Int64("n", 100_000, "messages")
	topic := fs.String("topic", "bench", "topic")
	addrFile := fs.String("addr-file", "", "where to write the seed brokers once filled")
	_ = fs.Parse(args)
	if *addrFile == "" {
		return nil, fmt.Errorf("-addr-file is required")
	}
	ctx := context.Background()
	t := startTimer()
	c, brokers, err := fakeCluster(ctx, *topic, *n)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := t.stop(*n)
	if err := os.WriteFile(*addrFile+".tmp", []byte(brokers+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(*addrFile+".tmp", *addrFile); err != nil {
		return nil, err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	r.Note = "filled in the timed section; served until signalled"
	return r, nil
}

// kafkaCeiling reads n records with a plain franz-go consumer that
// discards them, summing their ids' byte lengths so the values are
// touched.
func kafkaCeiling(args []string) (*result, error) {
	fs := flag.NewFlagSet("kafka-ceiling", flag.ExitOnError)
	brokers := fs.String("brokers", "", "seed brokers")
	fake := fs.Bool("kfake", false, "fill an in-process kfake cluster with -n messages instead")
	n := fs.Int64("n", 100_000, "messages to read")
	topic := fs.String("topic", "bench", "topic")
	_ = fs.Parse(args)
	ctx := context.Background()
	if *fake {
		c, b, err := fakeCluster(ctx, *topic, *n)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		*brokers = b
	}
	t := startTimer()
	cl, err := kafkaClient(*brokers, kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var got, bytes int64
	for got < *n {
		f := cl.PollFetches(ctx)
		if err := f.Err0(); err != nil {
			return nil, err
		}
		f.EachRecord(func(r *kgo.Record) { bytes += int64(len(r.Value)) })
		got += int64(f.NumRecords())
	}
	r := t.stop(got)
	r.Note = fmt.Sprintf("%d value bytes", bytes)
	return r, nil
}

package kafka_test

import (
	"context"
	"log"
	"regexp"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source/kafka"
)

// A Debezium topic family read as CDC streams, exactly once into a
// destination; the host owns the client options (TLS, SASL).
func Example() {
	ctx := context.Background()
	src, err := kafka.New(kafka.Config{
		Opts:       []kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092") /* , kgo.DialTLSConfig(...), kgo.SASL(...) */},
		TopicRegex: regexp.MustCompile(`^dbserver1\.inventory\.`),
		Decoder:    kafka.DecodeDebezium,
		Columns:    kafka.ColumnPartition | kafka.ColumnOffset,
		Group:      "openetl-inventory", // offsets committed for lag tooling only
		Budget:     128 << 20,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close(ctx)
	var dst sink.Destination // sink/parquet, sink/iceberg, ...
	store, err := checkpoint.Open(ctx, "file:///var/lib/openetl/checkpoints")
	if err != nil {
		log.Fatal(err)
	}
	p, err := etl.NewPipeline("inventory").From(src).To(dst).Checkpoints(store).
		Require(delivery.ExactlyOnce).Build()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Sync(ctx); err != nil {
		log.Fatal(err)
	}
}

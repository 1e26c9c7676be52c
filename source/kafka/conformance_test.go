package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
	"github.com/openetl/etl/source/sourcetest"
)

// TestConformance runs the source conformance suite on kfake: two topics
// of three partitions, keyed JSON documents with several versions per key,
// a committed and an aborted transaction.
func TestConformance(t *testing.T) {
	conformance(t, newCluster(t, 3, "orders", "customers"), "orders", "customers")
}

// TestConformanceRealBroker runs the suite against the broker
// scripts/servers.sh starts.
func TestConformanceRealBroker(t *testing.T) {
	brokers := realBrokers(t)
	suffix := time.Now().UnixNano()
	orders, customers := fmt.Sprintf("orders-%d", suffix), fmt.Sprintf("customers-%d", suffix)
	cl := newClient(t, brokers)
	createTopic(t, cl, orders, 3)
	createTopic(t, cl, customers, 3)
	conformance(t, brokers, orders, customers)
}

// TestConformanceRegistry runs the suite with DecodeRegistry on the same
// records as Avro in a registry's wire format (srfake).
func TestConformanceRegistry(t *testing.T) {
	reg, rcl := newRegistry(t)
	conformance(t, newCluster(t, 3, "orders", "customers"), "orders", "customers", conformanceRegistry{reg, rcl})
}

type conformanceRegistry struct {
	reg *srfake.Registry
	cl  *sr.Client
}

const conformanceSchema = `{"type":"record","name":"Row","fields":[{"name":"id","type":"long"},
 {"name":"v","type":["null","long"],"default":null},{"name":"txn","type":["null","boolean"],"default":null}]}`

func conformance(t *testing.T, brokers []string, orders, customers string, registry ...conformanceRegistry) {
	cl := newClient(t, brokers)
	value := func(topic string, id, v int, txn bool) string {
		if len(registry) == 0 {
			if txn {
				return fmt.Sprintf(`{"id":%d,"txn":true}`, id)
			}
			return fmt.Sprintf(`{"id":%d,"v":%d}`, id, v)
		}
		sid := register(t, registry[0].reg, topic+"-value", conformanceSchema)
		row := map[string]any{"id": int64(id), "v": int64(v), "txn": nil}
		if txn {
			row["v"], row["txn"] = nil, true
		}
		return string(framed(t, sid, conformanceSchema, row))
	}
	for _, topic := range []string{orders, customers} {
		var recs []*kgo.Record
		for i := range 300 {
			p := int32(i % 3)
			id := (i/3)%40*3 + int(p) // keys stay in one partition
			recs = append(recs, rec(topic, p, fmt.Sprint(id), value(topic, id, i, false)))
		}
		produce(t, cl, recs...)
	}
	for _, commit := range []bool{true, false} {
		produceTxn(t, brokers, "conformance-"+orders, commit,
			rec(orders, 0, "7", value(orders, 7, 0, true)), rec(orders, 1, "8", value(orders, 8, 0, true)))
	}
	sourcetest.Run(t, func(t *testing.T) source.Source {
		cfg := kafka.Config{
			Opts:       []kgo.Opt{kgo.SeedBrokers(brokers...)},
			Topics:     []string{orders, customers},
			PrimaryKey: map[string][]string{orders: {"id"}, customers: {"id"}},
			Group:      "conformance",
		}
		if len(registry) > 0 {
			cfg.Decoder, cfg.Registry = kafka.DecodeRegistry, registry[0].cl
		}
		return newSource(t, cfg)
	}, sourcetest.Options{MaxRecords: 500})
}

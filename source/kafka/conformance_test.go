package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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

func conformance(t *testing.T, brokers []string, orders, customers string) {
	cl := newClient(t, brokers)
	for _, topic := range []string{orders, customers} {
		var recs []*kgo.Record
		for i := range 300 {
			p := int32(i % 3)
			key := fmt.Sprintf("%d", (i/3)%40*3+int(p)) // keys stay in one partition
			recs = append(recs, rec(topic, p, key, fmt.Sprintf(`{"id":%s,"v":%d}`, key, i)))
		}
		produce(t, cl, recs...)
	}
	txn := newClient(t, brokers, kgo.TransactionalID("conformance-"+orders))
	for _, commit := range []bool{true, false} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(t, txn, rec(orders, 0, "7", `{"id":7,"txn":true}`), rec(orders, 1, "8", `{"id":8,"txn":true}`))
		if err := txn.EndTransaction(t.Context(), kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	sourcetest.Run(t, func(t *testing.T) source.Source {
		return newSource(t, kafka.Config{
			Opts:       []kgo.Opt{kgo.SeedBrokers(brokers...)},
			Topics:     []string{orders, customers},
			PrimaryKey: map[string][]string{orders: {"id"}, customers: {"id"}},
			Group:      "conformance",
		})
	}, sourcetest.Options{MaxRecords: 500})
}

package kafka_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/kafka"
)

// TestRunRidesOutBrokerRestart: the Apache Kafka broker scripts/servers.sh
// started is restarted (SIGTERM, then started again from its data) under
// a running pipeline that has committed what was produced so far. Run
// goes on by itself — whatever failed while the broker was away is
// retried in a new attempt (sync.retrying) — and once the messages
// produced after the restart are committed too, pyarrow finds every
// message of both rounds exactly once.
func TestRunRidesOutBrokerRestart(t *testing.T) {
	realBrokers(t) // skips without servers
	// The restart is of a broker of the test's own: other tests use the
	// shared one meanwhile.
	testutil.PrivateServer(t, "kafka")
	brokers := realBrokers(t)
	topic := fmt.Sprintf("restart-%d", time.Now().UnixNano())
	cl := newClient(t, brokers)
	createTopic(t, cl, topic, 2)
	var want []string
	send := func(round, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := range n {
			msg := fmt.Sprintf("r%d-%d", round, i)
			want = append(want, msg)
			recs = append(recs, rec(topic, int32(i%2), strconv.Itoa(i), doc(msg, i, round)))
		}
		produce(t, cl, recs...)
	}

	dir := t.TempDir()
	tables := filepath.Join(dir, "tables")
	if err := os.MkdirAll(tables, 0o755); err != nil {
		t.Fatal(err)
	}
	bucket, err := fileblob.OpenBucket(tables, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{topic},
		Group: "restart-" + topic, Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(context.Background()) })
	var (
		mu      sync.Mutex
		retries []etl.Event
	)
	p, err := etl.NewPipeline("restart").From(src).To(dst).Checkpoints(store).Require(delivery.ExactlyOnce).
		EpochEvery(100*time.Millisecond, 0).BatchSize(512, 0).
		Retry(etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}).
		OnEvent(func(e etl.Event) {
			if e.Kind == etl.EventSyncRetrying {
				mu.Lock()
				retries = append(retries, e)
				mu.Unlock()
			}
		}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	committed := func(n int) func() bool {
		return func() bool {
			c, err := p.Inspect(context.Background())
			return err == nil && c.Totals[topic].Written >= int64(n)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	send(1, 2000)
	testutil.Until(t, "the first round committed", committed(2000))
	testutil.ServerDown(t, "kafka")
	testutil.ServerUp(t, "kafka")
	select {
	case err := <-done:
		t.Fatalf("Run returned over the restart: %v", err)
	default:
	}
	send(2, 2000)
	testutil.Until(t, "the second round committed", committed(4000))
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	for _, e := range retries {
		t.Logf("retry %d after %v: %s: %v", e.Retry, e.Wait, e.Cause, e.Err)
	}
	t.Logf("%d retries over the restart", len(retries))
	mu.Unlock()
	msgs, _ := parquetColumn(t, tables, topic, "msg")
	checkExactlyOnce(t, msgs, want)
}

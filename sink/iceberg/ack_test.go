package iceberg_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/kafka"
)

// TestAcksOnlyVisible runs a Kafka topic (kfake) into a table whose
// epochs wait for their group (an hour, or 1 TiB) over two Syncs, with
// an epoch every few messages: after each committed epoch, the consumer
// group's committed offset (what Ack tells Kafka the pipeline no longer
// needs) is never past the rows a reader of the table sees. The epochs
// of the first Sync become visible only at its Finish, so it acks
// nothing; the second acks the first's end (visible since) and nothing
// of its own.
func TestAcksOnlyVisible(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	produced := 0 // by the test's goroutine, or the events' while a run runs
	produce := func(n int) {
		for range n {
			r := &kgo.Record{Topic: "t", Value: fmt.Appendf(nil, `{"i":%d,"pad":%q}`, produced, strings.Repeat("x", 100))}
			if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
				t.Error(err)
				return
			}
			produced++
		}
	}
	offset := func() int64 {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = "g"
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = "g"
		req.Groups = append(req.Groups, rg)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Error(err)
			return -1
		}
		off := int64(-1)
		for _, g := range resp.Groups {
			for _, tt := range g.Topics {
				for _, p := range tt.Partitions {
					off = max(off, p.Offset)
				}
			}
		}
		return off
	}

	dir := t.TempDir()
	_, cat := openCatalog(t, dir)
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	var mu sync.Mutex
	checks := 0
	// run runs the pipeline once: a Run, stopped once it committed five
	// epochs (each commit produces three more messages), or a Sync.
	run := func(sync bool) int {
		t.Helper()
		src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"t"}, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close(context.Background())
		dst := newDest(t, cat, iceberg.Config{Grouping: &iceberg.Grouping{Bytes: 1 << 40, Interval: time.Hour}})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		epochs := 0
		p, err := etl.NewPipeline("acks").From(src).To(dst).Checkpoints(store).
			EpochEvery(5*time.Millisecond, 0).OnEvent(func(e etl.Event) {
			if e.Kind != etl.EventEpochCommitted {
				return
			}
			// The offset first, then the rows: both only grow, so an
			// offset past the rows read after it was acked too early.
			off := offset()
			rows, err := scan(context.Background(), cat, iceberg.DefaultNamespace, "t")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			checks++
			mu.Unlock()
			if off > int64(len(rows)) {
				t.Errorf("epoch %d committed: the group's offset is %d, but a reader sees %d rows", e.Epoch, off, len(rows))
			}
			if epochs++; sync {
				return
			}
			if epochs < 5 {
				produce(3)
			} else {
				cancel()
			}
		}, 0).Build()
		if err != nil {
			t.Fatal(err)
		}
		if sync {
			_, err = p.Sync(ctx)
		} else {
			err = p.Run(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return epochs
	}

	produce(3)
	epochs := run(false)
	if epochs < 5 {
		t.Fatalf("run: %d epochs, want at least 5", epochs)
	}
	// Its epochs waited for their group until the writer closed.
	if off := offset(); off > 0 {
		t.Fatalf("after a run of %d epochs, all waiting for their group, the group's offset is %d, want none", epochs, off)
	}
	end := produced
	produce(30)
	run(true)
	if off := offset(); off != int64(end) {
		t.Fatalf("after the sync the group's offset is %d, want %d (the run's end, visible before the sync's Finish)", off, end)
	}
	rows, err := scan(t.Context(), cat, iceberg.DefaultNamespace, "t")
	if err != nil || len(rows) != produced {
		t.Fatalf("table has %d rows (%v), want %d", len(rows), err, produced)
	}
	if checks == 0 {
		t.Fatal("no epoch.committed event was checked")
	}
}

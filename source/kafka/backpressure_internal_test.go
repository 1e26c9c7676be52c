package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
)

// gate is an Emitter that counts records and, while closed, blocks in
// Record (backpressure).
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	records int
}

func (g *gate) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	if g.open != nil {
		<-g.open
	}
	g.mu.Lock()
	g.records++
	g.mu.Unlock()
	return nil
}

func (g *gate) ResumePoint([]byte) error { return nil }

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.records
}

// TestBackpressure: while one split is blocked in Emitter.Record, its
// partition's fetching pauses and the split reports it (Paused), the
// other partition is read to the end, the queued bytes stay within the
// budget's share, and once unblocked the split reads everything and no
// longer reports a pause (while its Read goes on waiting for more). The
// blocked split reads alone first: its queue's limit is its share of
// the Open's two partitions, not of the one partition being read then
// (which let it fill the whole share, and the queues go over their
// bound once the other came).
func TestBackpressure(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "bp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Uncompressed batches of at most 1 MB: a decoded batch is what a
	// partition may hold over its share.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	const perPartition = 20000 // × ~1 KiB = ~20 MiB a partition
	pad := strings.Repeat("x", 1000)
	for p := range int32(2) {
		var recs []*kgo.Record
		for i := range perPartition {
			recs = append(recs, &kgo.Record{Topic: "bp", Partition: p, Value: fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, pad)})
		}
		if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	const budget = 4 << 20
	src, err := New(Config{Opts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Topics: []string{"bp"}, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(context.Background()) })
	splits, err := src.Open(t.Context(), []string{"bp"}, nil)
	if err != nil || len(splits) != 2 {
		t.Fatalf("Open: %d splits, %v", len(splits), err)
	}
	r := splits[0].(*split).r
	blocked := &gate{open: make(chan struct{})}
	free := &gate{}
	errs := make(chan error, 1)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	defer cancel()
	// The queues' share is 3/4 of the budget, half of it for each of the
	// two partitions; each may go over its share by one decoded batch
	// (1 MiB of values, plus the per-record overhead the accounting
	// adds).
	const batch = (1 << 20) * 13 / 10
	go func() { errs <- splits[0].Read(ctx, blocked, false) }()
	var peak, queued, held int64
	var pauses int
	testutil.Until(t, "the blocked split's partition to pause", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		peak, pauses, queued = r.peak, r.pauses, r.queued
		if q := r.parts[tp{"bp", 0}]; q != nil {
			held = q.bytes
		}
		return pauses > 0
	})
	t.Logf("blocked alone: its queue %d bytes, peak queued %d (budget %d)", held, peak, budget)
	if limit := int64(budget*3/4/2 + batch); held > limit {
		t.Errorf("the blocked partition, read alone, queued %d bytes, over its share's %d", held, limit)
	}
	if err := splits[1].Read(ctx, free, true); err != nil {
		t.Fatalf("the free split: %v", err)
	}
	if n := free.count(); n != perPartition {
		t.Fatalf("the free split read %d records, want %d", n, perPartition)
	}
	r.mu.Lock()
	peak, pauses, queued = r.peak, r.pauses, r.queued
	r.mu.Unlock()
	t.Logf("while blocked: peak queued %d bytes, %d pauses, %d queued now (budget %d)", peak, pauses, queued, budget)
	type pauser interface {
		Paused() (bool, time.Time, bool)
	}
	if p, since, _ := splits[0].(pauser).Paused(); !p || since.IsZero() || since.After(time.Now()) {
		t.Errorf("the blocked split: Paused() = %v, %v; want true since a moment before now", p, since)
	}
	if p, since, _ := splits[1].(pauser).Paused(); p || !since.IsZero() {
		t.Errorf("the free split (done): Paused() = %v, %v; want false, zero time", p, since)
	}
	if limit := int64(budget*3/4 + 2*batch); peak > limit {
		t.Errorf("peak queued %d bytes, over %d", peak, limit)
	}
	close(blocked.open)
	testutil.Until(t, "the unblocked split to read its partition", func() bool { return blocked.count() >= perPartition })
	if n := blocked.count(); n != perPartition {
		t.Fatalf("the blocked split read %d records, want %d", n, perPartition)
	}
	// Drained, its Read still running (unbounded, it waits for more): the
	// partition's fetching resumed.
	if p, since, _ := splits[0].(pauser).Paused(); p || !since.IsZero() {
		t.Errorf("the drained split: Paused() = %v, %v; want false, zero time", p, since)
	}
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("the blocked split, cancelled: %v", err)
	}
}

// TestOffsetPastMax: a message past MaxOffset (no partition holds one
// yet: this one is put in the split's queue by hand) fails Read with an
// error that names it, rather than giving it a seq of another partition.
func TestOffsetPastMax(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "big"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	src, err := New(Config{Opts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Topics: []string{"big"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(context.Background()) })
	splits, err := src.Open(t.Context(), []string{"big"}, nil)
	if err != nil || len(splits) != 1 {
		t.Fatalf("Open: %d splits, %v", len(splits), err)
	}
	r := splits[0].(*split).r
	errs := make(chan error, 1)
	go func() { errs <- splits[0].Read(testutil.Context(t), &gate{}, false) }()
	var q *queue
	testutil.Until(t, "the split's partition queue", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		q = r.parts[tp{"big", 0}]
		return q != nil
	})
	r.mu.Lock()
	q.chunks = append(q.chunks, chunk{recs: []*kgo.Record{{Topic: "big", Offset: MaxOffset + 1, Value: []byte(`{}`)}}})
	notify(q.signal)
	r.mu.Unlock()
	err = testutil.Recv(t, "Read to fail", errs)
	if err == nil || !strings.Contains(err.Error(), "past MaxOffset") {
		t.Fatalf("Read: %v, want an error naming MaxOffset", err)
	}
}

package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/openetl/etl/internal/testutil"
)

// goroutines counts the goroutines whose stack mentions fn.
func goroutines(fn string) int { return len(testutil.Goroutines(fn)) }

// TestBoundedReadsListOnceAndCloseWaits: the bounded Reads of an Open's
// splits get their bounds from one listing of all partitions, each taken
// once (a second Read lists its own, and so sees messages produced
// since), every message is read, and although a split's Read returns
// before its consumer client has finished closing, no dispatcher is left
// once Close returns and no client goroutine shortly after.
func TestBoundedReadsListOnceAndCloseWaits(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "lo"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for p := range int32(3) {
		var recs []*kgo.Record
		for i := range 10 * (int(p) + 1) {
			recs = append(recs, &kgo.Record{Topic: "lo", Partition: p, Value: fmt.Appendf(nil, `{"i":%d}`, i)})
		}
		if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	before := goroutines("franz-go/pkg/kgo.") // the producer's

	src, err := New(Config{Opts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Topics: []string{"lo"}})
	if err != nil {
		t.Fatal(err)
	}
	splits, err := src.Open(t.Context(), []string{"lo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := splits[0].(*split).r
	if len(r.all) != 3 {
		t.Fatalf("the reader knows %d partitions, want 3", len(r.all))
	}
	var wg sync.WaitGroup
	gates := make([]*gate, len(splits))
	errs := make([]error, len(splits))
	for i, sp := range splits {
		gates[i] = &gate{}
		wg.Go(func() { errs[i] = sp.Read(t.Context(), gates[i], true) })
	}
	wg.Wait()
	for i := range splits {
		if errs[i] != nil {
			t.Fatalf("split %d: %v", i, errs[i])
		}
		if got, want := gates[i].count(), 10*(i+1); got != want {
			t.Errorf("split %d read %d messages, want %d", i, got, want)
		}
	}
	r.listMu.Lock()
	left, listed := len(r.bound), r.listed
	r.listMu.Unlock()
	if !listed || left != 0 {
		t.Errorf("listed %v, %d bounds left untaken; want one listing, all taken", listed, left)
	}
	// Read again after 5 more messages: the bounds were taken, so the
	// split lists its own and reads the new ones.
	var more []*kgo.Record
	for i := range 5 {
		more = append(more, &kgo.Record{Topic: "lo", Partition: 2, Value: fmt.Appendf(nil, `{"more":%d}`, i)})
	}
	if err := cl.ProduceSync(t.Context(), more...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	g := &gate{}
	if err := splits[2].Read(t.Context(), g, true); err != nil || g.count() != 5 {
		t.Fatalf("second bounded Read: %v, %d messages; want nil, 5", err, g.count())
	}
	if err := src.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := goroutines("kafka.(*reader).dispatch"); n != 0 {
		t.Fatalf("%d dispatchers running after Close", n)
	}
	// A closed franz-go client's goroutines end shortly after its Close.
	testutil.Until(t, fmt.Sprintf("franz-go's goroutines to end after Close (%d before the source)", before), func() bool {
		return goroutines("franz-go/pkg/kgo.") <= before
	})
}

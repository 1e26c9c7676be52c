package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
)

// TestShardsKfake: three shards of one pipeline over two topics of 5 and
// 2 partitions, each a Sync of its own with its own checkpoint log and
// Parquet directory: pyarrow finds every message exactly once across the
// shards, and shard i's rows only from partitions p with p mod 3 = i.
// A second round of messages and syncs reads only what is new.
func TestShardsKfake(t *testing.T) {
	const shards = 3
	brokers := newCluster(t, 5, "a")
	cl := newClient(t, brokers)
	createTopic(t, cl, "b", 2)
	dir := t.TempDir()
	var want []string
	send := func(round int) {
		var recs []*kgo.Record
		for i := range 700 {
			topic, parts := "a", int32(5)
			if i%3 == 0 {
				topic, parts = "b", 2
			}
			msg := fmt.Sprintf("%s-r%d-%d", topic, round, i)
			want = append(want, msg)
			recs = append(recs, rec(topic, int32(i)%parts, strconv.Itoa(i), doc(msg, i, round)))
		}
		produce(t, cl, recs...)
	}
	sync := func(i int) etl.Result {
		t.Helper()
		src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"a", "b"},
			Columns: kafka.ColumnPartition})
		tables := filepath.Join(dir, "tables", strconv.Itoa(i))
		if err := os.MkdirAll(tables, 0o755); err != nil {
			t.Fatal(err)
		}
		bucket, err := fileblob.OpenBucket(tables, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
		if err != nil {
			t.Fatal(err)
		}
		defer bucket.Close()
		dst, err := parquet.New(parquet.Config{Bucket: bucket})
		if err != nil {
			t.Fatal(err)
		}
		store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close(context.Background())
		var events []etl.Event
		p, err := etl.NewPipeline("sharded").From(src).To(dst).Checkpoints(store).Shard(i, shards).
			Require(delivery.ExactlyOnce).EpochEvery(100*time.Millisecond, 0).
			OnEvent(func(e etl.Event) { events = append(events, e) }, 0).Build()
		if err != nil {
			t.Fatal(err)
		}
		if want := etl.ShardKey("sharded", i, shards); p.Name() != want || p.Shard() != (etl.Shard{Index: i, Count: shards}) {
			t.Fatalf("shard %d: Name %q, Shard %+v; want %q", i, p.Name(), p.Shard(), want)
		}
		res, err := p.Sync(t.Context())
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		if st := p.Status(); st.Shard.Index != i || st.Shard.Count != shards || st.Pipeline != p.Name() {
			t.Errorf("shard %d: Status carries %q shard %+v", i, st.Pipeline, st.Shard)
		}
		if err := p.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if len(events) == 0 {
			t.Fatalf("shard %d: no events", i)
		}
		for _, e := range events {
			if e.Shard.Index != i || e.Shard.Count != shards || e.Pipeline != p.Name() {
				t.Fatalf("shard %d: event %s carries %q shard %+v", i, e.Kind, e.Pipeline, e.Shard)
			}
		}
		return res
	}
	for round := range 2 {
		send(round)
		for i := range shards {
			sync(i)
		}
		var all []string
		for i := range shards {
			tables := filepath.Join(dir, "tables", strconv.Itoa(i))
			for _, topic := range []string{"a", "b"} {
				if _, err := os.Stat(filepath.Join(tables, topic, "_manifest")); err != nil {
					continue // shard 2 owns no partition of b
				}
				msgs, _ := parquetColumn(t, tables, topic, "msg")
				parts, _ := parquetColumn(t, tables, topic, "_kafka_partition")
				for _, ps := range slices.Compact(slices.Sorted(slices.Values(parts))) {
					if p, _ := strconv.Atoi(ps); p%shards != i {
						t.Errorf("shard %d wrote rows of %s/%s", i, topic, ps)
					}
				}
				all = append(all, msgs...)
			}
		}
		checkExactlyOnce(t, all, want)
	}
	// Every partition's offsets are in exactly one shard's log.
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	owner := map[string]int{}
	for i := range shards {
		_, head, err := store.Head(t.Context(), etl.ShardKey("sharded", i, shards))
		if err != nil || head == nil {
			t.Fatalf("shard %d: head %v, %v", i, head, err)
		}
		for id := range head.Resume {
			if j, dup := owner[id]; dup {
				t.Errorf("split %s in the logs of shards %d and %d", id, j, i)
			}
			owner[id] = i
		}
	}
	if len(owner) != 7 {
		t.Errorf("the shards' logs hold %d splits, want 7: %v", len(owner), owner)
	}
}

// TestShardErrors: Shard's bad arguments, a shard of a shard, and a shard
// that owns no partition (Open fails, Permanent) all wrap
// source.ErrUnshardable; Build of a sharded pipeline over a source that
// can't shard says so.
func TestShardErrors(t *testing.T) {
	brokers := newCluster(t, 2, "t")
	src := newSource(t, kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Topics: []string{"t"}})
	for _, c := range []struct{ i, n int }{{0, 0}, {-1, 2}, {2, 2}, {0, kafka.MaxShards + 1}} {
		if _, err := src.Shard(c.i, c.n); !errors.Is(err, source.ErrUnshardable) {
			t.Errorf("Shard(%d, %d) = %v, want ErrUnshardable", c.i, c.n, err)
		}
	}
	sh, err := src.Shard(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.(source.Closer).Close(context.Background())
	if _, err := sh.(source.Sharder).Shard(0, 2); !errors.Is(err, source.ErrUnshardable) {
		t.Errorf("a shard's Shard = %v, want ErrUnshardable", err)
	}
	splits, err := sh.Open(t.Context(), []string{"t"}, nil)
	if err != nil || len(splits) != 1 || splits[0].ID() != "t/1" {
		t.Fatalf("shard 1 of 2 opened %v, %v; want [t/1]", splits, err)
	}
	empty, err := src.Shard(3, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.(source.Closer).Close(context.Background())
	_, err = empty.Open(t.Context(), []string{"t"}, nil)
	if !errors.Is(err, source.ErrUnshardable) || !src.Permanent(err) {
		t.Errorf("Open of a shard without partitions = %v, want ErrUnshardable, permanent", err)
	}
}

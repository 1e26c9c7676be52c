package etl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
	"github.com/openetl/etl/source/kafka"
)

// configSharded is sharded by configuration, as source/postgres is: its
// Shard returns the source itself.
type configSharded struct{ *faker.Source }

func (s configSharded) Shard(int, int) (source.Source, error) { return s, nil }

// TestReshardRefusesSources: a source sharded by configuration and one
// that is no source.Sharder can't be resharded (ErrReshard, the first
// also naming the reason), nor can empty or nil shard lists; nothing is
// claimed. source/kafka's TestReshard* test the resharding itself.
func TestReshardRefusesSources(t *testing.T) {
	src, err := faker.New(faker.Config{Rows: 10})
	if err != nil {
		t.Fatal(err)
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	store := checkpoint.NewMem()
	build := func(s source.Source, name string, i, n int) *etl.Pipeline {
		t.Helper()
		dst, err := parquet.New(parquet.Config{Bucket: bucket, Prefix: name})
		if err != nil {
			t.Fatal(err)
		}
		b := etl.NewPipeline(name).From(s).To(dst).Checkpoints(store)
		if n > 1 {
			b = b.Shard(i, n)
		}
		p, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(t.Context()) })
		return p
	}
	shards := func(s source.Source, name string, n int) []*etl.Pipeline {
		ps := make([]*etl.Pipeline, n)
		for i := range ps {
			ps[i] = build(s, name, i, n)
		}
		return ps
	}
	cs := configSharded{src}
	for _, c := range []struct {
		name     string
		from, to []*etl.Pipeline
		want     string
		also     error
	}{
		{"config sharded", shards(cs, "pg", 2), shards(cs, "pg", 3), "sharded by configuration", nil},
		{"unsharded config sharded", []*etl.Pipeline{build(cs, "pg1", 0, 1)}, shards(cs, "pg1", 2), "sharded by configuration", nil},
		{"no Sharder", []*etl.Pipeline{build(src, "fk", 0, 1)}, shards(cs, "fk", 2), "can't deal its splits", source.ErrUnshardable},
		{"no old shards", nil, shards(cs, "e", 2), "at least 1", nil},
		{"nil shard", []*etl.Pipeline{nil}, shards(cs, "n", 2), "is nil", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := etl.Reshard(t.Context(), c.from, c.to)
			if !errors.Is(err, etl.ErrReshard) || !strings.Contains(err.Error(), c.want) || c.also != nil && !errors.Is(err, c.also) {
				t.Fatalf("Reshard = %v, want ErrReshard saying %q", err, c.want)
			}
			for _, p := range append(c.from, c.to...) {
				if p == nil {
					continue
				}
				if g, _, err := store.Head(t.Context(), p.Name()); err != nil || g != 0 {
					t.Errorf("%s: claimed (generation %d, %v) by a refused reshard", p.Name(), g, err)
				}
			}
		})
	}
}

// restartingStore is a real checkpoint store that claims pipeline
// restart (an old shard restarted by a supervisor) right after it
// commits a record of pipeline after.
type restartingStore struct {
	checkpoint.Store
	after, restart string
}

func (s *restartingStore) Commit(ctx context.Context, gen checkpoint.Generation, rec *checkpoint.Record) error {
	err := s.Store.Commit(ctx, gen, rec)
	if err == nil && rec.Pipeline == s.after {
		_, _, err = s.Store.Claim(ctx, s.restart)
	}
	return err
}

// TestReshardClaimedAgain: an old shard claimed again after the reshard
// wrote the new logs (a supervisor restarted it) fails the reshard with
// ErrReshard naming it, and the new logs are rewound to empty, so that
// the reshard can run again once every old shard is stopped.
func TestReshardClaimedAgain(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 40 {
		r := &kgo.Record{Topic: "t", Partition: int32(i % 4), Value: fmt.Appendf(nil, `{"n":%d}`, i)}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	store := &restartingStore{Store: checkpoint.NewMem(), after: etl.ShardKey("k", 2, 3), restart: etl.ShardKey("k", 0, 2)}
	shards := func(n int) []*etl.Pipeline {
		ps := make([]*etl.Pipeline, n)
		for i := range ps {
			src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Topics: []string{"t"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close(context.Background()) })
			dst, err := parquet.New(parquet.Config{Bucket: bucket, Prefix: fmt.Sprintf("%d-%d", i, n)})
			if err != nil {
				t.Fatal(err)
			}
			if ps[i], err = etl.NewPipeline("k").From(src).To(dst).Checkpoints(store).Shard(i, n).Build(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ps[i].Close(context.Background()) })
		}
		return ps
	}
	two, three := shards(2), shards(3)
	for _, p := range two {
		if _, err := p.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	err = etl.Reshard(t.Context(), two, three)
	if !errors.Is(err, etl.ErrReshard) || !strings.Contains(err.Error(), "claimed again") || !strings.Contains(err.Error(), two[0].Name()) {
		t.Fatalf("Reshard = %v, want ErrReshard saying %s was claimed again", err, two[0].Name())
	}
	for _, p := range three {
		if _, rec, err := store.Head(t.Context(), p.Name()); err != nil || rec != nil {
			t.Errorf("%s after the failed reshard: %+v, %v; want no checkpoint", p.Name(), rec, err)
		}
	}
	store.after = "" // the old shard is stopped again: the reshard goes through
	if err := etl.Reshard(t.Context(), two, three); err != nil {
		t.Fatalf("Reshard again: %v", err)
	}
	for j, p := range three {
		_, rec, err := store.Head(t.Context(), p.Name())
		if err != nil || rec == nil || len(rec.Resume) == 0 {
			t.Fatalf("new shard %d: %+v, %v; want a checkpoint with states", j, rec, err)
		}
	}
	// The old shards' logs are retired: an old shard run again stops
	// before it reads, for good.
	for _, p := range two {
		res, err := p.Sync(t.Context())
		if !errors.Is(err, etl.ErrRetired) || !etl.IsPermanent(err) || res.Streams["t"].Read != 0 {
			t.Fatalf("%s's Sync after the reshard: read %d, %v; want nothing read and a permanent error wrapping ErrRetired",
				p.Name(), res.Streams["t"].Read, err)
		}
	}

	// And to one unsharded pipeline, which reads only what is new.
	src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	dst, err := parquet.New(parquet.Config{Bucket: bucket, Prefix: "one"})
	if err != nil {
		t.Fatal(err)
	}
	one, err := etl.NewPipeline("k").From(src).To(dst).Checkpoints(store).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close(context.Background())
	if err := etl.Reshard(t.Context(), three, []*etl.Pipeline{one}); err != nil {
		t.Fatalf("Reshard 3 → 1: %v", err)
	}
	for i := range 8 {
		r := &kgo.Record{Topic: "t", Partition: int32(i % 4), Value: fmt.Appendf(nil, `{"n":%d}`, 100+i)}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := one.Sync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Streams["t"].Read; got != 8 {
		t.Fatalf("the unsharded pipeline read %d records after the reshard, want the 8 new ones", got)
	}
}

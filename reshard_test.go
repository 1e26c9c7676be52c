package etl_test

import (
	"errors"
	"strings"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
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

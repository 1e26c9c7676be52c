package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gocloud.dev/blob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/checkpoint/cloud"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka"
)

// reshardEnv is a topic on the broker, Parquet tables and checkpoints
// on the S3 server, and the messages sent so far.
type reshardEnv struct {
	t             *testing.T
	b             *blob.Bucket
	store         checkpoint.Store
	brokers       []string
	topic, prefix string
	parts         int
	cl            *kgo.Client
	want          []string
	n             int
	tables        []shardTable // every shard's table written so far
}

// shardTable is where shard i of count of pipeline name writes.
type shardTable struct {
	name     string
	i, count int
}

func (s shardTable) prefix(env *reshardEnv) string {
	return fmt.Sprintf("%s/tables/%s-%d-of-%d", env.prefix, s.name, s.i, s.count)
}

func newReshardEnv(t *testing.T, parts int) *reshardEnv {
	t.Helper()
	if os.Getenv("OPENETL_TEST_S3_URL") == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_S3_URL is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_S3_URL is not set: start the S3 server with scripts/servers.sh start s3")
	}
	brokers := realBrokers(t)
	e := &reshardEnv{t: t, brokers: brokers, parts: parts, topic: fmt.Sprintf("reshard-%d", time.Now().UnixNano()),
		prefix: "t/reshard-" + strings.ToLower(rand8())}
	e.cl = newClient(t, brokers)
	createTopic(t, e.cl, e.topic, int32(parts))
	b, err := blob.OpenBucket(t.Context(), os.Getenv("OPENETL_TEST_S3_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e.b = b
	if e.store, err = cloud.NewBucketStore(b, e.prefix+"/checkpoints"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close(context.Background()) })
	return e
}

// send produces count messages, spread over the partitions.
func (e *reshardEnv) send(count int) {
	e.t.Helper()
	var recs []*kgo.Record
	for range count {
		msg := fmt.Sprintf("m%d", e.n)
		e.want = append(e.want, msg)
		recs = append(recs, rec(e.topic, int32(e.n%e.parts), strconv.Itoa(e.n), doc(msg, e.n, 0)))
		e.n++
	}
	produce(e.t, e.cl, recs...)
}

// pipeline builds shard i of count of pipeline name, writing to its own
// prefix; wrap, when set, wraps the destination.
func (e *reshardEnv) pipeline(name string, i, count int, wrap func(sink.Destination) sink.Destination,
	opts ...func(*etl.Builder) *etl.Builder) *etl.Pipeline {
	e.t.Helper()
	src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(e.brokers...)}, Topics: []string{e.topic},
		Columns: kafka.ColumnPartition})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { src.Close(context.Background()) })
	st := shardTable{name, i, count}
	var dst sink.Destination
	if dst, err = parquet.New(parquet.Config{Bucket: e.b, Prefix: st.prefix(e)}); err != nil {
		e.t.Fatal(err)
	}
	if wrap != nil {
		dst = wrap(dst)
	}
	b := etl.NewPipeline(name).From(src).To(dst).Checkpoints(e.store).Shard(i, count).Require(delivery.ExactlyOnce).
		EpochEvery(100*time.Millisecond, 0)
	for _, o := range opts {
		b = o(b)
	}
	p, err := b.Build()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Close(context.Background()) })
	found := false
	for _, t := range e.tables {
		found = found || t == st
	}
	if !found {
		e.tables = append(e.tables, st)
	}
	return p
}

func (e *reshardEnv) shards(name string, count int) []*etl.Pipeline {
	ps := make([]*etl.Pipeline, count)
	for i := range ps {
		ps[i] = e.pipeline(name, i, count, nil)
	}
	return ps
}

func (e *reshardEnv) syncAll(ps []*etl.Pipeline) {
	e.t.Helper()
	for _, p := range ps {
		if _, err := p.Sync(e.t.Context()); err != nil {
			e.t.Fatalf("sync %s: %v", p.Name(), err)
		}
	}
}

// read returns, with pyarrow, the msg of every row of every shard's
// table, and checks that each shard wrote only rows of its partitions.
func (e *reshardEnv) read() []string {
	e.t.Helper()
	local := e.t.TempDir()
	var got []string
	for _, st := range e.tables {
		prefix := st.prefix(e)
		download(e.t, e.b, prefix+"/", local)
		if _, err := os.Stat(filepath.Join(local, filepath.FromSlash(prefix))); err != nil {
			continue // nothing written yet
		}
		tab := testutil.ReadParquetTablesUnder(e.t, local, prefix)[e.topic]
		if tab == nil {
			continue // nothing written
		}
		if len(tab.MissingFiles) > 0 {
			e.t.Fatalf("%s: manifest lists missing files %v", prefix, tab.MissingFiles)
		}
		for k, v := range tab.Values["msg"] {
			got = append(got, fmt.Sprint(v))
			p, err := strconv.Atoi(fmt.Sprint(tab.Values["_kafka_partition"][k]))
			if err != nil || p%st.count != st.i {
				e.t.Errorf("%s: row %v of partition %v, not of shard %d of %d", prefix, v, tab.Values["_kafka_partition"][k], st.i, st.count)
			}
		}
	}
	return got
}

// heads returns each shard's HEAD record.
func (e *reshardEnv) heads(ps []*etl.Pipeline) []*checkpoint.Record {
	e.t.Helper()
	out := make([]*checkpoint.Record, len(ps))
	for i, p := range ps {
		_, rec, err := e.store.Head(e.t.Context(), p.Name())
		if err != nil {
			e.t.Fatal(err)
		}
		out[i] = rec
	}
	return out
}

// checkHandOver checks that the new shards' first records hold exactly
// the old shards' resume states of their own partitions.
func (e *reshardEnv) checkHandOver(old, nw []*checkpoint.Record) {
	e.t.Helper()
	union := map[string][]byte{}
	for _, h := range old {
		for id, st := range h.Resume {
			union[id] = st
		}
	}
	seen := 0
	for j, h := range nw {
		if h == nil || h.Epoch != 1 || h.Prev != nil || len(h.Committables) != 0 {
			e.t.Fatalf("new shard %d: first record %+v, want epoch 1 with no committables", j, h)
		}
		if len(h.Engine) == 0 {
			e.t.Errorf("new shard %d: no engine state, though every old shard saw the same documents", j)
		}
		for id, st := range h.Resume {
			p, _ := strconv.Atoi(id[strings.LastIndexByte(id, '/')+1:])
			if p%len(nw) != j {
				e.t.Errorf("new shard %d of %d holds the state of %s", j, len(nw), id)
			}
			if string(union[id]) != string(st) {
				e.t.Errorf("new shard %d: state of %s is %x, the old shards' %x", j, id, st, union[id])
			}
			seen++
		}
	}
	if seen != len(union) || seen != e.parts {
		e.t.Errorf("the new shards hold %d states, the old %d; want %d (one per partition)", seen, len(union), e.parts)
	}
}

// TestReshard: 2 shards over 6 partitions sync part of the topic;
// Reshard hands their positions to 3 shards, which read the rest, and
// those to 2 again (under another name: the first 2's logs exist); every
// message lands exactly once (pyarrow), each shard's rows from its own
// partitions only. Then the refusals: the same count, new logs that
// have checkpoints, shards out of order, old shards never run, more
// shards than partitions.
func TestReshard(t *testing.T) {
	e := newReshardEnv(t, 6)
	two := e.shards("r", 2)
	e.send(600)
	e.syncAll(two)
	e.send(300) // left for the next shards

	three := e.shards("r", 3)
	if err := etl.Reshard(t.Context(), two, three); err != nil {
		t.Fatal(err)
	}
	e.checkHandOver(e.heads(two), e.heads(three))
	e.send(300)
	e.syncAll(three)
	checkExactlyOnce(t, e.read(), e.want)

	e.send(300)
	back := e.shards("r-back", 2)
	if err := etl.Reshard(t.Context(), three, back); err != nil {
		t.Fatal(err)
	}
	e.checkHandOver(e.heads(three), e.heads(back))
	e.syncAll(back)
	checkExactlyOnce(t, e.read(), e.want)
	t.Logf("%d messages exactly once over shards 2 → 3 → 2", len(e.want))

	for _, c := range []struct {
		name     string
		from, to func() []*etl.Pipeline
		want     string
	}{
		{"same count", func() []*etl.Pipeline { return three }, func() []*etl.Pipeline { return e.shards("other", 3) }, "unchanged"},
		{"new logs written", func() []*etl.Pipeline { return back }, func() []*etl.Pipeline { return three }, "already has a checkpoint"},
		{"out of order", func() []*etl.Pipeline { return []*etl.Pipeline{two[1], two[0]} },
			func() []*etl.Pipeline { return e.shards("ooo", 3) }, "in order"},
		{"never run", func() []*etl.Pipeline { return e.shards("never", 2) }, func() []*etl.Pipeline { return e.shards("never", 3) },
			"no checkpoint log"},
		{"mixed names", func() []*etl.Pipeline { return []*etl.Pipeline{two[0], back[1]} },
			func() []*etl.Pipeline { return e.shards("mixed", 3) }, "different names"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := etl.Reshard(t.Context(), c.from(), c.to())
			if !errors.Is(err, etl.ErrReshard) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Reshard = %v, want ErrReshard saying %q", err, c.want)
			}
		})
	}
	t.Run("more shards than partitions", func(t *testing.T) {
		seven := e.shards("r", 7)
		err := etl.Reshard(t.Context(), back, seven)
		if !errors.Is(err, source.ErrUnshardable) {
			t.Fatalf("Reshard to 7 shards of 6 partitions = %v, want ErrUnshardable", err)
		}
		for _, h := range e.heads(seven) {
			if h != nil {
				t.Fatalf("a refused reshard wrote %s's log: %+v", h.Pipeline, h)
			}
		}
	})
}

// TestReshardSettles: old shard 1's last epoch is committed to its log
// but its destination Commit crashes, so the epoch is not applied; the
// reshard's settling applies it (the epoch's messages appear in shard
// 1's table), and every message lands exactly once after the new shards
// run. Without the settling, that epoch's messages would be in no
// table: the new shards resume after it.
func TestReshardSettles(t *testing.T) {
	e := newReshardEnv(t, 6)
	e.send(600)
	two := e.shards("s", 2)
	if _, err := two[0].Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	crash := func(d sink.Destination) sink.Destination {
		return sinktest.WithFaults(d, sinktest.FaultConfig{Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == sinktest.FakeCommit {
				return &sinktest.FakeFault{Crash: true}
			}
			return nil
		}})
	}
	faulty := e.pipeline("s", 1, 2, crash)
	res, err := faulty.Sync(t.Context())
	if err == nil || res.Epoch == 0 {
		t.Fatalf("the crashing sync returned %+v, %v; want an error after committing an epoch", res, err)
	}
	before := len(e.read())
	if before >= len(e.want) {
		t.Fatalf("before the reshard the tables hold %d rows of %d: the crash applied its epoch", before, len(e.want))
	}
	faulty.Close(t.Context())

	three := e.shards("s", 3)
	if err := etl.Reshard(t.Context(), two, three); err != nil {
		t.Fatal(err)
	}
	if got := e.read(); len(got) != len(e.want) {
		t.Fatalf("after the reshard's settling the old tables hold %d rows, want %d (before: %d)", len(got), len(e.want), before)
	}
	e.send(300)
	e.syncAll(three)
	checkExactlyOnce(t, e.read(), e.want)
	t.Logf("settling applied %d rows of the crashed epoch; %d messages exactly once", len(e.want)-300-before, len(e.want))
}

// TestReshardFencesRunning: an old shard still running elsewhere (a Run
// of its own Pipeline) during the reshard is fenced (its Run returns an
// error IsFenced reports) and every message still lands exactly once.
func TestReshardFencesRunning(t *testing.T) {
	e := newReshardEnv(t, 6)
	e.send(600)
	two := e.shards("z", 2)
	e.syncAll(two)
	committed := make(chan struct{}, 64)
	zombie := e.pipeline("z", 0, 2, nil, func(b *etl.Builder) *etl.Builder {
		return b.OnEvent(func(ev etl.Event) {
			if ev.Kind == etl.EventEpochCommitted {
				select {
				case committed <- struct{}{}:
				default:
				}
			}
		}, 0)
	})
	done := make(chan error, 1)
	go func() { done <- zombie.Run(context.Background()) }()
	e.send(300)
	select {
	case <-committed: // the zombie reads and commits
	case err := <-done:
		t.Fatalf("the old shard's Run returned %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the old shard's Run committed nothing in 60s")
	}
	three := e.shards("z", 3)
	if err := etl.Reshard(t.Context(), two, three); err != nil {
		t.Fatal(err)
	}
	e.send(300) // the zombie may read these too: none of its commits land
	select {
	case err := <-done:
		if !etl.IsFenced(err) {
			t.Fatalf("the old shard's Run returned %v, want fenced", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the old shard's Run was not fenced within 60s")
	}
	e.syncAll(three)
	checkExactlyOnce(t, e.read(), e.want)
}

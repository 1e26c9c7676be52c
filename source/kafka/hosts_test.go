package kafka_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/checkpoint/cloud"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/shard"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/kafka"
)

// hostConfig is what a host process of TestShardHosts is told.
type hostConfig struct {
	Host, Topic, Prefix string
	Brokers             []string
	Shards              int
	TTL, Interval       time.Duration
}

// hostLine is one line a host prints: an event of one of its shards'
// pipelines, or a lease change.
type hostLine struct {
	Host  string
	Shard int
	Kind  string
	Gen   uint64
	Time  time.Time
}

// shardParts opens the parts of shard i of the pipeline under prefix in
// the S3 bucket: source, destination, checkpoint store.
func shardParts(ctx context.Context, b *blob.Bucket, c hostConfig, i int) (*kafka.Source, *parquet.Destination, checkpoint.Store, error) {
	src, err := kafka.New(kafka.Config{Opts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, Topics: []string{c.Topic}})
	if err != nil {
		return nil, nil, nil, err
	}
	dst, err := parquet.New(parquet.Config{Bucket: b, Prefix: shardPrefix(c, i)})
	if err != nil {
		return nil, nil, nil, err
	}
	store, err := cloud.NewBucketStore(b, c.Prefix+"/checkpoints")
	if err != nil {
		return nil, nil, nil, err
	}
	return src, dst, store, nil
}

// TestShardHostChild is a host process of TestShardHosts: it runs the
// shards its leases give it (Kafka → Parquet on S3) until SIGTERM, and
// prints a JSON hostLine per event. Skipped unless SHARD_HOST_CHILD is set.
// shardPrefix is where shard i of c.Shards writes its Parquet tables: a
// prefix of its own per shard and count (sink/parquet has one owner
// per stream under a prefix).
func shardPrefix(c hostConfig, i int) string {
	return fmt.Sprintf("%s/tables/shard-%d-of-%d", c.Prefix, i, c.Shards)
}

func TestShardHostChild(t *testing.T) {
	env := os.Getenv("SHARD_HOST_CHILD")
	if env == "" {
		t.Skip("only run as a host of TestShardHosts")
	}
	var c hostConfig
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	b, err := blob.OpenBucket(ctx, os.Getenv("OPENETL_TEST_S3_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lb, err := cloud.NewBucket(b, c.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var outMu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	say := func(l hostLine) {
		l.Host, l.Time = c.Host, time.Now()
		outMu.Lock()
		enc.Encode(l)
		outMu.Unlock()
	}
	leases, err := shard.NewLeases(shard.LeaseConfig{Bucket: lb, Prefix: fmt.Sprintf("leases-%d", c.Shards), Host: c.Host, Shards: c.Shards, TTL: c.TTL,
		Interval: c.Interval, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	err = leases.Run(ctx, func(ctx context.Context, i int) error {
		say(hostLine{Shard: i, Kind: "lease.acquired"})
		defer say(hostLine{Shard: i, Kind: "lease.ended"})
		src, dst, store, err := shardParts(ctx, b, c, i)
		if err != nil {
			return err
		}
		defer src.Close(context.Background())
		defer store.Close(context.Background())
		p, err := etl.NewPipeline("hosts").From(src).To(dst).Checkpoints(store).Shard(i, c.Shards).
			Require(delivery.ExactlyOnce).EpochEvery(200*time.Millisecond, 0).StopTimeout(5*time.Second).
			OnEvent(func(e etl.Event) {
				switch e.Kind {
				case etl.EventSyncStarted, etl.EventEpochCommitted, etl.EventPipelineFenced, etl.EventSyncFailed, etl.EventSyncStopped:
					say(hostLine{Shard: e.Shard.Index, Kind: string(e.Kind), Gen: uint64(e.Generation)})
				}
			}, 0).BuildContext(ctx)
		if err != nil {
			return err
		}
		defer p.Close(context.Background())
		return p.Run(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// host is a running host process.
type host struct {
	name   string
	cmd    *exec.Cmd
	stderr *strings.Builder
	exited chan struct{}
}

// TestShardHosts: four shards of a Kafka → Parquet pipeline on S3 (the
// real broker and S3 server of scripts/servers.sh) over host processes
// spreading them with leases in the same bucket. One host is killed
// (SIGKILL), another paused past its lease (SIGSTOP, then SIGCONT: a
// zombie), a new one added, one removed (SIGTERM: a clean leave); the
// dead, paused and leaving hosts' shards resume on others within the
// leases' bound. Then every host stops, etl.Reshard turns the four
// shards into two, two new host processes run those while more
// messages come, and after a last Sync of each new shard pyarrow finds
// every message exactly once across the old and new shards' tables.
func TestShardHosts(t *testing.T) {
	if os.Getenv("OPENETL_TEST_S3_URL") == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_S3_URL is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_S3_URL is not set: start the S3 server with scripts/servers.sh start s3")
	}
	brokers := realBrokers(t)
	const shards, parts = 4, 8
	topic := fmt.Sprintf("hosts-%d", time.Now().UnixNano())
	cl := newClient(t, brokers)
	createTopic(t, cl, topic, parts)
	cfg := hostConfig{Topic: topic, Prefix: "t/hosts-" + strings.ToLower(rand8()), Brokers: brokers, Shards: shards,
		TTL: 3 * time.Second, Interval: time.Second}
	bound := cfg.TTL + 2*cfg.Interval

	var want []string
	n := 0
	send := func(count int) {
		var recs []*kgo.Record
		for range count {
			msg := fmt.Sprintf("m%d", n)
			want = append(want, msg)
			recs = append(recs, rec(topic, int32(n%parts), fmt.Sprint(n), doc(msg, n, 0)))
			n++
		}
		produce(t, cl, recs...)
	}

	lines := make(chan hostLine, 1024)
	hosts := map[string]*host{}
	start := func(name string) *host {
		c := cfg // the count of the moment (cfg.Shards changes at the reshard)
		c.Host = name
		env, _ := json.Marshal(c)
		cmd := exec.Command(os.Args[0], "-test.run=^TestShardHostChild$", "-test.v")
		cmd.Env = append(os.Environ(), "SHARD_HOST_CHILD="+string(env))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		h := &host{name: name, cmd: cmd, stderr: &strings.Builder{}, exited: make(chan struct{})}
		cmd.Stderr = &lockedWriter{w: h.stderr}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(h.exited)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var l hostLine
				if json.Unmarshal(sc.Bytes(), &l) == nil && l.Kind != "" {
					lines <- l
				}
			}
			cmd.Wait()
		}()
		hosts[name] = h
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			<-h.exited
			if t.Failed() {
				t.Logf("host %s stderr:\n%s", name, tail(h.stderr.String(), 3000))
			}
		})
		return h
	}

	// owner[s] is the host whose pipeline of shard s started last.
	owner := map[int]string{}
	var fenced []string
	// await reads lines until cond holds, failing after limit.
	await := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.After(limit)
		for !cond() {
			select {
			case l := <-lines:
				switch l.Kind {
				case string(etl.EventSyncStarted):
					owner[l.Shard] = l.Host
				case string(etl.EventPipelineFenced):
					fenced = append(fenced, fmt.Sprintf("%s:%d", l.Host, l.Shard))
				}
			case <-deadline:
				t.Fatalf("%s: not after %v (owners %v)", what, limit, owner)
			}
		}
	}
	allOwned := func(exclude ...string) func() bool {
		return func() bool {
			for s := range cfg.Shards {
				if o, ok := owner[s]; !ok || slicesContains(exclude, o) {
					return false
				}
			}
			return true
		}
	}
	shardsOf := func(h string) []int {
		var out []int
		for s := range cfg.Shards {
			if owner[s] == h {
				out = append(out, s)
			}
		}
		return out
	}

	for _, h := range []string{"h0", "h1", "h2"} {
		start(h)
	}
	send(3000)
	await("every shard started", 60*time.Second, allOwned())
	balanced := func() bool {
		return len(shardsOf("h0")) > 0 && len(shardsOf("h1")) > 0 && len(shardsOf("h2")) > 0
	}
	await("the shards spread over the hosts", bound+30*time.Second, balanced)
	send(3000)

	// Kill the host that runs the most shards.
	victim := "h0"
	for _, h := range []string{"h1", "h2"} {
		if len(shardsOf(h)) > len(shardsOf(victim)) {
			victim = h
		}
	}
	lost := shardsOf(victim)
	killed := time.Now()
	hosts[victim].cmd.Process.Kill()
	<-hosts[victim].exited
	send(3000)
	await("the killed host's shards resumed elsewhere", bound+30*time.Second, allOwned(victim))
	took := time.Since(killed)
	t.Logf("killed %s (shards %v): they resumed elsewhere %v later (lease bound %v)", victim, lost, took.Round(time.Millisecond), bound)
	if took > bound+10*time.Second {
		t.Errorf("shards of the killed host resumed %v later, want within the lease bound %v plus 10s for a run's start", took, bound)
	}

	// Pause another past its lease; it comes back as a zombie.
	var paused string
	for s := range shards {
		if owner[s] != victim {
			paused = owner[s]
			break
		}
	}
	pausedShards := shardsOf(paused)
	hosts[paused].cmd.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	send(3000)
	await("the paused host's shards resumed elsewhere", bound+30*time.Second, allOwned(victim, paused))
	took = time.Since(stopped)
	t.Logf("paused %s (shards %v): they resumed elsewhere %v later", paused, pausedShards, took.Round(time.Millisecond))
	if took > bound+10*time.Second {
		t.Errorf("shards of the paused host resumed %v later, want within the lease bound %v plus 10s for a run's start", took, bound)
	}
	hosts[paused].cmd.Process.Signal(syscall.SIGCONT)
	send(3000)
	// A host joins; the zombie rejoins as a live host.
	start("h3")
	send(3000)
	await("h3 runs a shard", bound+60*time.Second, func() bool { return len(shardsOf("h3")) > 0 })
	send(3000)

	// A host leaves cleanly (SIGTERM): it stops its runs and frees its
	// leases, and the others take its shards at their next step.
	removed := ""
	for _, name := range []string{"h1", "h2", "h0", "h3"} {
		if name != victim && name != paused && len(shardsOf(name)) > 0 {
			removed = name
			break
		}
	}
	left := time.Now()
	hosts[removed].cmd.Process.Signal(syscall.SIGTERM)
	<-hosts[removed].exited
	await("the leaving host's shards resumed elsewhere", bound+30*time.Second, allOwned(victim, removed))
	t.Logf("%s left: its shards resumed elsewhere %v later", removed, time.Since(left).Round(time.Millisecond))
	send(3000)

	// Stop the hosts cleanly; then reshard 4 shards to 2.
	stopAll := func() {
		for _, h := range hosts {
			h.cmd.Process.Signal(syscall.SIGTERM)
		}
		for name, h := range hosts {
			select {
			case <-h.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("host %s did not stop within 60s of SIGTERM", name)
			}
		}
	}
	stopAll()
	t.Logf("owners before the reshard %v; fenced zombies: %v", owner, fenced)
	ctx := t.Context()
	b, err := blob.OpenBucket(ctx, os.Getenv("OPENETL_TEST_S3_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const newShards = 2
	build := func(c hostConfig, i int) *etl.Pipeline {
		src, dst, store, err := shardParts(ctx, b, c, i)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close(context.Background()); store.Close(context.Background()) })
		p, err := etl.NewPipeline("hosts").From(src).To(dst).Checkpoints(store).Shard(i, c.Shards).Require(delivery.ExactlyOnce).Build()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(context.Background()) })
		return p
	}
	oldCfg, newCfg := cfg, cfg
	newCfg.Shards = newShards
	var from, to []*etl.Pipeline
	for i := range shards {
		from = append(from, build(oldCfg, i))
	}
	for i := range newShards {
		to = append(to, build(newCfg, i))
	}
	if err := etl.Reshard(ctx, from, to); err != nil {
		t.Fatalf("reshard %d to %d: %v", shards, newShards, err)
	}
	send(3000)
	// Two host processes run the two new shards.
	cfg, owner, hosts = newCfg, map[int]string{}, map[string]*host{}
	for _, h := range []string{"h4", "h5"} {
		start(h)
	}
	await("every new shard started", bound+60*time.Second, allOwned())
	send(3000)
	await("the new shards spread over the hosts", bound+30*time.Second, func() bool {
		return len(shardsOf("h4")) > 0 && len(shardsOf("h5")) > 0
	})
	stopAll()

	// A last Sync of each new shard reads to the end; the old shards'
	// tables and the new ones' hold every message once.
	var got []string
	local := t.TempDir()
	read := func(c hostConfig, i int) {
		prefix := shardPrefix(c, i)
		download(t, b, prefix+"/", local)
		st := testutil.ReadParquetTablesUnder(t, local, prefix)[topic]
		if st == nil || len(st.MissingFiles) > 0 {
			t.Fatalf("shard %d of %d: table %+v", i, c.Shards, st)
		}
		for _, v := range st.Values["msg"] {
			got = append(got, fmt.Sprint(v))
		}
	}
	for i, p := range to {
		res, err := p.Sync(ctx)
		if err != nil {
			t.Fatalf("last sync of new shard %d: %v", i, err)
		}
		t.Logf("new shard %d: generation %d at the end; the last sync read %v", i, res.Generation, res.Streams)
		read(newCfg, i)
	}
	for i := range shards {
		read(oldCfg, i)
	}
	checkExactlyOnce(t, got, want)
	t.Logf("%d messages, each exactly once across %d shards, then %d", len(want), shards, newShards)
}

// download copies every object under prefix to dir (at its key), for
// pyarrow to read.
func download(t *testing.T, b *blob.Bucket, prefix, dir string) {
	t.Helper()
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(t.Context())
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := b.ReadAll(t.Context(), o.Key)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(o.Key))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func rand8() string { return fmt.Sprintf("%08x", time.Now().UnixNano()&0xffffffff) }

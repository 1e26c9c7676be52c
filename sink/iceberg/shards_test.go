package iceberg_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// Many shards, one table (#27 item 4): S shard pipelines, each with its
// own REST catalog client, Destination and checkpoint log, append the
// fake orders into one Iceberg table through the REST catalog, every
// epoch committed (Grouping{}) and epochs short, so that their commits
// race each other far more often than a deployment's (10 s epochs, 60 s
// groups) would. Every catalog commit request and its answer is counted
// through the client's transport, the sink's own retries through its
// log, and each epoch's Commit timed; pyiceberg reads the table back and
// every order must be there exactly once.
//
// The CI run is S = 2 and 4, epochs of 500ms, for about two seconds
// each. The sweep of BENCHMARKS.md ("Shards into one Iceberg table") (also with epochs of
// 100ms for 4 seconds):
//
//	OPENETL_BENCH_ICEBERG_SHARDS=1,2,4,8 OPENETL_BENCH_ICEBERG_SHARDS_EPOCH=1s \
//	OPENETL_BENCH_ICEBERG_SHARDS_SECONDS=10 go test -run TestShardsOneTable -v -timeout 30m ./sink/iceberg

// shardedFaker deals the faker's records into shards the way Kafka's
// partitions are dealt: with SplitsPerStream = count, shard i reads split
// i of each stream (records whose index is i mod count), so the shards'
// records are disjoint and together are the unsharded source's.
type shardedFaker struct {
	*faker.Source
	cfg  faker.Config
	only int // -1: every split
}

func newShardedFaker(cfg faker.Config) (*shardedFaker, error) {
	src, err := faker.New(cfg)
	if err != nil {
		return nil, err
	}
	return &shardedFaker{Source: src, cfg: cfg, only: -1}, nil
}

func (s *shardedFaker) Shard(index, count int) (source.Source, error) {
	cfg := s.cfg
	cfg.SplitsPerStream = count
	src, err := faker.New(cfg)
	if err != nil {
		return nil, err
	}
	return &shardedFaker{Source: src, cfg: cfg, only: index}, nil
}

func (s *shardedFaker) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits, err := s.Source.Open(ctx, streams, resume)
	if err != nil || s.only < 0 {
		return splits, err
	}
	suffix := "/" + strconv.Itoa(s.only)
	return slices.DeleteFunc(splits, func(sp source.Split) bool { return !strings.HasSuffix(string(sp.ID()), suffix) }), nil
}

// commitCounter counts a REST client's table commits (POST
// /v1/namespaces/{ns}/tables/{table}) and their answers.
type commitCounter struct {
	inner               http.RoundTripper
	posts, ok, conflict atomic.Int64
	other               atomic.Int64 // answers other than 200 and 409
}

func (c *commitCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	commit := req.Method == http.MethodPost && isTableCommit(req.URL.Path)
	if commit {
		c.posts.Add(1)
	}
	resp, err := c.inner.RoundTrip(req)
	if commit {
		switch {
		case err != nil:
			c.other.Add(1)
		case resp.StatusCode == http.StatusOK:
			c.ok.Add(1)
		case resp.StatusCode == http.StatusConflict:
			c.conflict.Add(1)
		default:
			c.other.Add(1)
		}
	}
	return resp, err
}

// isTableCommit: .../namespaces/{ns}/tables/{table}, not a create
// (.../tables) nor a metrics report (.../tables/{table}/metrics).
func isTableCommit(path string) bool {
	i := strings.LastIndex(path, "/tables/")
	return i >= 0 && !strings.Contains(path[i+len("/tables/"):], "/")
}

// raceCounter counts the sink's "commit lost a race" retries (logged at
// Warn): a conflict found by the catalog (409) or, before the request,
// on freshly loaded metadata (branch main moved).
type raceCounter struct {
	races atomic.Int64
	other sync.Map // message → *atomic.Int64, Warn and above
}

func (h *raceCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *raceCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "commit lost a race") {
		h.races.Add(1)
		return nil
	}
	n, _ := h.other.LoadOrStore(r.Message, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	return nil
}
func (h *raceCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *raceCounter) WithGroup(string) slog.Handler      { return h }

// epochCommit is one Commit of a shard's lane 0 that reached the
// catalog: how long it took, how many commit requests it made and how
// many of its tries lost a race.
type epochCommit struct {
	took   time.Duration
	posts  int64
	races  int64
	shard  int
	epoch  uint64
	failed bool
}

// timedDest times lane 0's Commits of one shard.
type timedDest struct {
	*iceberg.Destination
	shard  int
	http   *commitCounter
	log    *raceCounter
	mu     *sync.Mutex
	record *[]epochCommit
}

func (d *timedDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	w, err := d.Destination.Writer(ctx, cfg)
	if err != nil || cfg.Lane != 0 {
		return w, err
	}
	return &timedWriter{Writer: w, d: d}, nil
}

// timedWriter is the iceberg writer with Commit timed; Visible is
// passed on (the runner asks for it).
type timedWriter struct {
	sink.Writer
	d *timedDest
}

func (w *timedWriter) Commit(ctx context.Context, epoch uint64, cs []sink.Committable) error {
	p0, r0 := w.d.http.posts.Load(), w.d.log.races.Load()
	t0 := time.Now()
	err := w.Writer.Commit(ctx, epoch, cs)
	took := time.Since(t0)
	posts, races := w.d.http.posts.Load()-p0, w.d.log.races.Load()-r0
	if posts > 0 || races > 0 || err != nil {
		w.d.mu.Lock()
		*w.d.record = append(*w.d.record, epochCommit{took: took, posts: posts, races: races, shard: w.d.shard, epoch: epoch, failed: err != nil})
		w.d.mu.Unlock()
	}
	return err
}

func (w *timedWriter) Visible() uint64 { return w.Writer.(sink.Visibility).Visible() }

// shardRun is what one sweep point measured.
type shardRun struct {
	shards   int
	rows     int64
	wall     time.Duration
	commits  []epochCommit
	posts    int64 // catalog commit requests
	ok       int64 // answered 200
	conflict int64 // answered 409
	other    int64 // other answers
	races    int64 // the sink's retries
	epochs   int   // epochs the shards committed (their Results)
	errs     []error
	warns    map[string]int64
}

// runShards syncs rows fake orders, dealt into shards pipelines run at
// once, into table orders of namespace ns of the REST catalog at uri,
// each shard reading at rate records per second.
func runShards(t *testing.T, uri, ns string, shards int, rows int64, rate float64, every time.Duration) shardRun {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	src, err := newShardedFaker(faker.Config{Seed: 27, Rows: rows, Rate: rate, Streams: []string{faker.Orders}})
	if err != nil {
		t.Fatal(err)
	}
	run := shardRun{shards: shards, rows: rows, warns: map[string]int64{}}
	var mu sync.Mutex
	counters := make([]*commitCounter, shards)
	logs := make([]*raceCounter, shards)
	pipes := make([]*etl.Pipeline, shards)
	for i := range shards {
		counters[i] = &commitCounter{inner: http.DefaultTransport}
		logs[i] = &raceCounter{}
		cat, err := rest.NewCatalog(ctx, "openetl", uri, rest.WithCustomTransport(counters[i]))
		if err != nil {
			t.Fatalf("REST catalog at %s: %v", uri, err)
		}
		t.Cleanup(func() { _ = cat.Close() })
		d := newDest(t, cat, iceberg.Config{Namespace: []string{ns}, Logger: slog.New(logs[i])})
		dst := &timedDest{Destination: d, shard: i, http: counters[i], log: logs[i], mu: &mu, record: &run.commits}
		store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close(ctx) })
		p, err := etl.NewPipeline("orders").From(src).To(dst).Checkpoints(store).Shard(i, shards).
			Lanes(1).EpochEvery(every, 0).Require(delivery.ExactlyOnce).Build()
		if err != nil {
			t.Fatal(err)
		}
		pipes[i] = p
	}
	var wg sync.WaitGroup
	results := make([]etl.Result, shards)
	errs := make([]error, shards)
	t0 := time.Now()
	for i, p := range pipes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = p.Sync(ctx)
		}()
	}
	wg.Wait()
	run.wall = time.Since(t0)
	for i := range shards {
		run.epochs += results[i].Epochs
		if errs[i] != nil {
			run.errs = append(run.errs, fmt.Errorf("shard %d: %w", i, errs[i]))
		}
		c := counters[i]
		run.posts += c.posts.Load()
		run.ok += c.ok.Load()
		run.conflict += c.conflict.Load()
		run.other += c.other.Load()
		run.races += logs[i].races.Load()
		logs[i].other.Range(func(k, v any) bool {
			run.warns[k.(string)] += v.(*atomic.Int64).Load()
			return true
		})
	}
	return run
}

// summary is run as a line of the benchmark's table.
func (r shardRun) summary() string {
	var took []time.Duration
	var maxTries int64
	failed := 0
	for _, c := range r.commits {
		took = append(took, c.took)
		if c.failed {
			failed++
		} else {
			maxTries = max(maxTries, c.races+1)
		}
	}
	slices.Sort(took)
	pct := func(p float64) time.Duration {
		if len(took) == 0 {
			return 0
		}
		return took[min(len(took)-1, int(p*float64(len(took))))]
	}
	n := float64(max(1, len(r.commits)))
	return fmt.Sprintf("| %d | %d | %.2f | %d | %d | %.2f | %.2f | %d | %d | %v | %v | %.0f | %.1f | %d |",
		r.shards, len(r.commits), float64(len(r.commits))/r.wall.Seconds(),
		r.posts, r.conflict, float64(r.conflict)/n, float64(r.races)/n, maxTries, failed,
		pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond),
		float64(r.rows)/r.wall.Seconds(), r.wall.Seconds(), len(r.errs))
}

const shardsHeader = "| S | Commit calls | commits/s (table) | commit requests | 409s | 409s / commit | retries / commit | max tries | Commits failed | p50 | p99 | rows/s | wall s | failed shards |"

// TestShardsOneTable runs S shard pipelines into one Iceberg table through
// the REST catalog and checks, for each S, that every shard's Sync
// succeeded and pyiceberg reads every order exactly once; it logs the
// contention figures (see the header above).
func TestShardsOneTable(t *testing.T) {
	uri := restURI(t)
	sweep := []int{2, 4}
	every := 500 * time.Millisecond
	seconds := 2.0
	if s := os.Getenv("OPENETL_BENCH_ICEBERG_SHARDS"); s != "" {
		sweep = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("OPENETL_BENCH_ICEBERG_SHARDS=%q: want a list of shard counts", s)
			}
			sweep = append(sweep, n)
		}
	}
	if s := os.Getenv("OPENETL_BENCH_ICEBERG_SHARDS_EPOCH"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("OPENETL_BENCH_ICEBERG_SHARDS_EPOCH: %v", err)
		}
		every = d
	}
	if s := os.Getenv("OPENETL_BENCH_ICEBERG_SHARDS_SECONDS"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("OPENETL_BENCH_ICEBERG_SHARDS_SECONDS: %v", err)
		}
		seconds = f
	}
	// Each shard reads 2,000 records a second (its epochs hold a few
	// hundred rows), so that the catalog, not the 2 cores, is what the
	// shards share most; rows is what all of them read in seconds.
	const perShard = 2000.0
	lines := []string{shardsHeader, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"}
	for _, s := range sweep {
		rows := int64(perShard * float64(s) * seconds)
		ns := restNamespace(fmt.Sprintf("shards%d", s))
		run := runShards(t, uri, ns, s, rows, perShard, every)
		lines = append(lines, run.summary())
		t.Logf("S=%d: %d epochs, %d commit requests (%d ok, %d conflicts, %d other), %d sink retries, warnings %v",
			s, run.epochs, run.posts, run.ok, run.conflict, run.other, run.races, run.warns)
		for _, c := range run.commits {
			if c.failed {
				t.Logf("S=%d: shard %d: Commit(%d) failed after %d lost races, %d requests, %v (the runner tries it again)",
					s, c.shard, c.epoch, c.races, c.posts, c.took.Round(time.Millisecond))
			}
		}
		for _, err := range run.errs {
			t.Errorf("S=%d: %v", s, err)
		}
		if run.other > 0 {
			t.Errorf("S=%d: %d commit requests answered neither 200 nor 409", s, run.other)
		}
		checkOrdersOnce(t, readREST(t, uri, ns)["orders"].Data, 27, rows)
	}
	t.Logf("epochs every %v, %d records/s per shard, every epoch committed (Grouping{}), REST catalog %s\n%s",
		every, int(perShard), uri, strings.Join(lines, "\n"))
}

// checkOrdersOnce checks that rows (read back) are faker orders 0 to
// n-1 of seed, each exactly once.
func checkOrdersOnce(t *testing.T, rows []map[string]any, seed uint64, n int64) {
	t.Helper()
	src, err := faker.New(faker.Config{Seed: seed, Rows: n})
	if err != nil {
		t.Fatal(err)
	}
	want := make(map[string]string, n) // seq → op
	var buf []byte
	for i := range n {
		op, seq, key, _ := src.Generate(faker.Orders, i, buf)
		buf = key[:0]
		want[strconv.FormatInt(seq, 10)] = op.String()
	}
	seen := make(map[string]int, n)
	for _, r := range rows {
		s := str(r["_openetl_seq"])
		seen[s]++
		if w, ok := want[s]; !ok || w != str(r["_openetl_op"]) {
			t.Fatalf("orders: row %v: not generated (op %q)", r, w)
		}
	}
	for s := range want {
		if seen[s] != 1 {
			t.Fatalf("orders: seq %s read %d times, want once", s, seen[s])
		}
	}
	if int64(len(rows)) != n {
		t.Fatalf("orders: %d rows, want %d", len(rows), n)
	}
}

package clickhouse_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sim"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// testCluster is the cluster scripts/servers.sh's chcluster service
// started: 2 shards x 2 replicas of Debian's ClickHouse 18.16 with
// ZooKeeper.
type testCluster struct {
	name     string
	shards   [][]string // native addresses, by shard
	replicas [][]string // the replicas' names (s1r1, ...), by shard
	dir      string     // their pid and run files
}

// cluster returns the chcluster service's cluster. Without one the test
// fails, unless OPENETL_SKIP_SERVERS=1.
func cluster(t testing.TB) testCluster {
	t.Helper()
	shards := os.Getenv("OPENETL_TEST_CHCLUSTER_SHARDS")
	if shards == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_CHCLUSTER_SHARDS is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_CHCLUSTER_SHARDS is not set: start the cluster with scripts/servers.sh start chcluster, or set OPENETL_SKIP_SERVERS=1")
	}
	c := testCluster{name: os.Getenv("OPENETL_TEST_CHCLUSTER_NAME"), dir: os.Getenv("OPENETL_TEST_CHCLUSTER_DIR")}
	for _, s := range strings.Split(shards, ";") {
		c.shards = append(c.shards, strings.Split(s, ","))
	}
	for _, s := range strings.Split(os.Getenv("OPENETL_TEST_CHCLUSTER_REPLICAS"), ";") {
		c.replicas = append(c.replicas, strings.Split(s, ","))
	}
	return c
}

// freshDB returns a new database name; when the test ends the database is
// dropped on every server of the cluster (which removes its replicated
// tables from ZooKeeper too).
func (c testCluster) freshDB(t testing.TB) string {
	t.Helper()
	db := fmt.Sprintf("openetl_test_%012x", rand.Uint64()>>16)
	t.Cleanup(func() {
		if os.Getenv("OPENETL_KEEP_DB") != "" {
			t.Logf("kept database %s", db)
			return
		}
		var wg sync.WaitGroup
		for _, s := range c.shards {
			for _, a := range s {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conn, err := openConn(a)
					if err != nil {
						return
					}
					_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
					conn.Close()
				}()
			}
		}
		wg.Wait()
	})
	return db
}

func (c testCluster) dest(t testing.TB, cfg clickhouse.Config) *clickhouse.Destination {
	t.Helper()
	cfg.Cluster = clusterConfig()
	d := newDest(t, cfg)
	t.Cleanup(func() { d.Close() })
	return d
}

// conn opens a pool to one replica, closed when the test ends.
func (c testCluster) conn(t testing.TB, shard, replica int) driver.Conn {
	t.Helper()
	return open(t, c.shards[shard][replica])
}

// client runs query with clickhouse-client on one replica and returns
// its TabSeparated output.
func (c testCluster) client(t testing.TB, shard, replica int, query string) string {
	t.Helper()
	client := os.Getenv("OPENETL_TEST_CLICKHOUSE_CLIENT")
	if client == "" {
		client = "clickhouse-client"
	}
	host, port, _ := strings.Cut(c.shards[shard][replica], ":")
	out, err := exec.Command(client, "--host", host, "--port", port, "--format", "TabSeparated", "-q", query).CombinedOutput()
	if err != nil {
		t.Fatalf("clickhouse-client on %s -q %q: %v\n%s", c.replicas[shard][replica], query, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestClusterConformance runs the conformance suite against the 2x2
// cluster, with small blocks. Visible reads each shard's table on its
// first replica (the one the writer uses while it answers) and joins
// the shards' rows.
func TestClusterConformance(t *testing.T) {
	c := cluster(t)
	db := c.freshDB(t)
	conns := make([]driver.Conn, len(c.shards))
	for s := range c.shards {
		conns[s] = c.conn(t, s, 0)
	}
	sinktest.Run(t, func(t *testing.T) sink.Destination {
		return c.dest(t, clickhouse.Config{Database: db, BlockRows: 7})
	}, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			var all []sinktest.Row
			for s, conn := range conns {
				rows, err := visible(ctx, conn, db, stream)
				if err != nil {
					return nil, fmt.Errorf("shard %d: %w", s, err)
				}
				all = append(all, rows...)
			}
			return all, nil
		},
	})
}

// clusterConfig is the chcluster service's cluster as a Config.Cluster
// (for the child process of the kill tests, which has no testing.TB).
func clusterConfig() *clickhouse.Cluster {
	cl := &clickhouse.Cluster{Name: os.Getenv("OPENETL_TEST_CHCLUSTER_NAME")}
	for _, s := range strings.Split(os.Getenv("OPENETL_TEST_CHCLUSTER_SHARDS"), ";") {
		cl.Shards = append(cl.Shards, strings.Split(s, ","))
	}
	return cl
}

// pidOf returns the PID of a replica the service started.
func (c testCluster) pidOf(t testing.TB, shard, replica int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, c.replicas[shard][replica]+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// answers reports whether a replica takes connections.
func (c testCluster) answers(shard, replica int) bool {
	conn, err := net.DialTimeout("tcp", c.shards[shard][replica], time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// kill SIGKILLs a replica and waits until its port is closed.
func (c testCluster) kill(t testing.TB, shard, replica int) {
	t.Helper()
	if err := syscall.Kill(c.pidOf(t, shard, replica), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.answers(shard, replica) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still answers 30s after SIGKILL", c.replicas[shard][replica])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restart starts a killed replica again from its data, in a process
// group of its own whose PID goes where scripts/servers.sh stop finds
// it ($OPENETL_SERVERS_DIR/chcluster-REPLICA.pid), and waits until it
// answers queries.
func (c testCluster) restart(t testing.TB, shard, replica int) {
	t.Helper()
	name := c.replicas[shard][replica]
	cmd := exec.Command("bash", filepath.Join(c.dir, name+".run"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := os.WriteFile(filepath.Join(c.dir, name+".pid"), []byte(pid), 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("OPENETL_SERVERS_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "chcluster-"+name+".pid"), []byte(pid), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := openConn(c.shards[shard][replica])
		if err == nil {
			err = conn.Ping(context.Background())
			conn.Close()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within 60s of its restart: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterReplicaDown syncs customers (merge) and orders (append)
// into the cluster and SIGKILLs the replica shard 0 writes through once
// shard 0 has applied an epoch with rows, while the source holds a
// quarter in (so the sync can't have ended): the sync completes through
// the other replica, which holds no row twice. Once the killed replica
// is back and every replica caught up, read back through the
// Distributed tables with clickhouse-client, customers equal the source
// and orders hold every record once; each shard's replicas hold the
// same share, the shares adding up to the whole.
func TestClusterReplicaDown(t *testing.T) {
	c := cluster(t)
	for s := range c.shards {
		if !c.answers(s, 0) {
			c.restart(t, s, 0) // a run before this one left it down
		}
	}
	db := c.freshDB(t)
	const rows = 20_000
	dst := c.dest(t, clickhouse.Config{Database: db, BlockRows: 2000})
	src, err := faker.New(faker.Config{Seed: fakerSeed, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	release := make(chan struct{})
	p, err := etl.NewPipeline("chreplica").From(testutil.HoldUntil(src, rows/4, release)).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).Lanes(2).EpochEvery(100*time.Millisecond, 0).
		Retry(etl.Retry{Sync: true, Backoff: 100 * time.Millisecond}).Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Sync(ctx)
		done <- err
	}()
	// Shard 0 has applied an epoch with rows: the sync is under way on
	// the replica about to die.
	r0 := c.conn(t, 0, 0)
	for {
		var n uint64
		err := r0.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s._openetl_epochs WHERE rows > 0", db)).Scan(&n)
		if err == nil && n > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the sync ended before shard 0 applied an epoch: %v", err)
		case <-ctx.Done():
			t.Fatal("shard 0 applied no epoch within 2 minutes")
		case <-time.After(20 * time.Millisecond):
		}
	}
	c.kill(t, 0, 0)
	t.Cleanup(func() {
		if !c.answers(0, 0) {
			c.restart(t, 0, 0)
		}
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("sync with replica %s down: %v", c.replicas[0][0], err)
	}
	// While it is down, its shard's other replica may still lack the
	// parts it acknowledged last (replication is asynchronous), but
	// holds no row twice.
	live := c.client(t, 0, 1, "SELECT count(), uniqExact(_openetl_id) FROM "+db+".orders")
	if f := strings.Fields(live); len(f) != 2 || f[0] != f[1] {
		t.Errorf("%s with %s down: orders count, distinct ids = %q: a row twice", c.replicas[0][1], c.replicas[0][0], live)
	}
	// The killed replica comes back, and each replica catches up with
	// its shard (SYSTEM SYNC REPLICA).
	c.restart(t, 0, 0)
	for s := range c.shards {
		for r := range c.shards[s] {
			c.client(t, s, r, "SYSTEM SYNC REPLICA "+db+".orders")
			c.client(t, s, r, "SYSTEM SYNC REPLICA "+db+".customers")
		}
	}
	// Through the Distributed tables, on shard 1's second replica.
	checkTablesVia(t, func(q string) string { return c.client(t, 1, 1, q) }, db, "_all", rows)
	// Per shard, on each replica, and in total.
	var total int64
	for s := range c.shards {
		var first string
		for r := range c.shards[s] {
			got := c.client(t, s, r, "SELECT count(), uniqExact(_openetl_id) FROM "+db+".orders")
			f := strings.Fields(got)
			if len(f) != 2 || f[0] != f[1] || f[0] == "0" {
				t.Errorf("shard %d (%s): orders count, distinct ids = %q: want some, each once", s, c.replicas[s][r], got)
			}
			if r == 0 {
				first = got
				n, _ := strconv.ParseInt(f[0], 10, 64)
				total += n
				t.Logf("shard %d: %s orders", s, f[0])
			} else if got != first {
				t.Errorf("shard %d: orders count, distinct ids = %q on %s, %q on %s", s, got, c.replicas[s][r], first, c.replicas[s][0])
			}
		}
	}
	if total != rows {
		t.Errorf("the shards hold %d orders together, want %d", total, rows)
	}
}

// TestChaosClusterTwoCopies is TestChaosTwoCopies against the cluster
// with shard 1's first replica down throughout: two copies of the
// pipeline (child processes) at once, twice, each SIGKILLed at a
// random moment, then a final run. Read back through the Distributed
// tables, customers equal the source and orders hold every record once.
// OPENETL_SEED replays.
func TestChaosClusterTwoCopies(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OPENETL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (replay: OPENETL_SEED=%d go test -run '^%s$' ./sink/clickhouse)", seed, seed, t.Name())
	rng := rand.New(rand.NewPCG(seed, 2))
	c := cluster(t)
	for s := range c.shards {
		if !c.answers(s, 0) {
			c.restart(t, s, 0)
		}
	}
	db := c.freshDB(t)
	dir := t.TempDir()
	// The tables exist on every replica before one goes down.
	c.dest(t, clickhouse.Config{Database: db})
	c.kill(t, 1, 0)
	t.Cleanup(func() {
		if !c.answers(1, 0) {
			c.restart(t, 1, 0)
		}
	})
	const rows = 40_000
	start := func() *exec.Cmd {
		cmd := runChild(t, db, dir, rows)
		cmd.Env = append(cmd.Env, "OPENETL_CH_CLUSTER=1")
		return cmd
	}
	killed, fenced := twoCopies(t, rng, 2, rows/10, start)
	t.Logf("%d copies killed, %d fenced", killed, fenced)
	if killed == 0 {
		t.Fatal("no copy was killed mid-run")
	}
	if ch := testutil.StartChild(t, start(), testutil.Hold{}); ch.Wait() != nil {
		t.Fatalf("final run: %v\n%s", ch.Err(), ch.Output())
	}
	for _, r := range [][2]int{{0, 0}, {0, 1}, {1, 1}} {
		c.client(t, r[0], r[1], "SYSTEM SYNC REPLICA "+db+".orders")
		c.client(t, r[0], r[1], "SYSTEM SYNC REPLICA "+db+".customers")
	}
	checkTablesVia(t, func(q string) string { return c.client(t, 0, 0, q) }, db, "_all", rows)
	ep := strings.Fields(c.client(t, 1, 1, fmt.Sprintf("SELECT count(), uniqExact(epoch) FROM %s._openetl_epochs WHERE pipeline = 'chkill'", db)))
	if len(ep) != 2 || ep[0] != ep[1] {
		t.Errorf("shard 1's _openetl_epochs: %v rows and distinct epochs: an epoch recorded twice", ep)
	}
}

// TestClusterAndConn: a destination writes to one server or one
// cluster, never both.
func TestClusterAndConn(t *testing.T) {
	conn := open(t, addr(t))
	_, err := clickhouse.New(context.Background(), clickhouse.Config{Conn: conn, Cluster: clusterConfig()})
	if err == nil || !strings.Contains(err.Error(), "both set") {
		t.Fatalf("New with Conn and Cluster: %v, want an error", err)
	}
}

// TestClusterSim drives the whole runner into the 2x2 cluster through
// crashes at every protocol step, lost Commit responses and zombies
// (OPENETL_SIM_SEEDS seeds, default 2), appended and merged streams, each
// seed in a database of its own; Read joins the shards' rows, read on
// each shard's first replica.
func TestClusterSim(t *testing.T) {
	c := cluster(t)
	sim.RunSeeds(t, sim.Seeds{Name: "the ClickHouse writer on a cluster", Key: "sink/clickhouse/cluster", Default: 2,
		Run: func(t *testing.T, seed uint64) (*sim.Report, error) {
			db := c.freshDB(t)
			conns := []driver.Conn{c.conn(t, 0, 0), c.conn(t, 1, 0)}
			return sim.Run(seed, sim.Options{MaxRows: 40, Target: &sim.Target{Name: "clickhouse cluster",
				Open: func(context.Context, sim.Setup) (sink.Destination, error) {
					return c.dest(t, clickhouse.Config{Database: db, BlockRows: 7}), nil
				},
				Read: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
					var all []sinktest.Row
					for s, conn := range conns {
						rows, err := visible(ctx, conn, db, stream)
						if err != nil {
							return nil, fmt.Errorf("shard %d: %w", s, err)
						}
						all = append(all, rows...)
					}
					return all, nil
				}}})
		},
		Replay: func(seed uint64) string {
			return fmt.Sprintf("OPENETL_SIM_SEED=%d go test ./sink/clickhouse -run TestClusterSim", seed)
		},
	})
}

// TestClusterReplicaBackGetsTables: a replica that was down when the
// destination created its database and tables gets them, with the
// shard's rows, at the next attempt: Recover creates the database and
// state tables on every replica, and the attempt's first Write the
// stream's tables.
func TestClusterReplicaBackGetsTables(t *testing.T) {
	c := cluster(t)
	for s := range c.shards {
		for r := range c.shards[s] {
			if !c.answers(s, r) {
				c.restart(t, s, r)
			}
		}
	}
	db := c.freshDB(t)
	ctx := context.Background()
	c.kill(t, 0, 1)
	t.Cleanup(func() {
		if !c.answers(0, 1) {
			c.restart(t, 0, 1)
		}
	})
	dst := c.dest(t, clickhouse.Config{Database: db})
	epoch := func(gen checkpoint.Generation, epoch uint64, head *checkpoint.Record, from int) *checkpoint.Record {
		t.Helper()
		w, err := dst.Writer(ctx, sink.WriterConfig{Pipeline: "back"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close(ctx)
		if _, err := w.Recover(ctx, gen, head); err != nil {
			t.Fatal(err)
		}
		rec := rotationRecord(from, 100)
		defer rec.Release()
		if err := w.Write(ctx, "t", rec); err != nil {
			t.Fatal(err)
		}
		cm, err := w.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, epoch, []sink.Committable{cm}); err != nil {
			t.Fatal(err)
		}
		return &checkpoint.Record{Pipeline: "back", Epoch: epoch, Generation: gen, Committables: [][]byte{cm}}
	}
	head := epoch(1, 1, nil, 0)
	c.restart(t, 0, 1)
	if got := c.client(t, 0, 1, "SELECT count() FROM system.databases WHERE name = '"+db+"'"); got != "0" {
		t.Fatalf("%s has the database before the next attempt (%s): the test proves nothing", c.replicas[0][1], got)
	}
	epoch(2, 2, head, 100)
	c.client(t, 0, 1, "SYSTEM SYNC REPLICA "+db+".t")
	c.client(t, 0, 1, "SYSTEM SYNC REPLICA "+db+"._openetl_epochs")
	got := c.client(t, 0, 1, "SELECT count(), uniqExact(_openetl_id) FROM "+db+".t")
	want := c.client(t, 0, 0, "SELECT count(), uniqExact(_openetl_id) FROM "+db+".t")
	if got != want || strings.HasPrefix(got, "0") {
		t.Errorf("%s after the next attempt: rows of t, distinct ids = %q; %s has %q", c.replicas[0][1], got, c.replicas[0][0], want)
	}
	if ep := c.client(t, 0, 1, "SELECT groupArray(epoch) FROM (SELECT epoch FROM "+db+"._openetl_epochs ORDER BY epoch)"); ep != "[1,2]" {
		t.Errorf("%s's _openetl_epochs: %s, want [1,2]", c.replicas[0][1], ep)
	}
}

// shardRecord is a batch of n rows of table t with an Int32 column k:
// row i has k = keys(i), _openetl_id "id-{from+i}", _openetl_seq from+i+1.
func shardRecord(from, n int, keys func(i int) int32) arrow.RecordBatch {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.PrimitiveTypes.Int32},
		{Name: "_openetl_id", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_op", Type: arrow.BinaryTypes.String},
		{Name: "_openetl_seq", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int32Builder).Append(keys(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("id-%d", from+i))
		b.Field(2).(*array.StringBuilder).Append("insert")
		b.Field(3).(*array.Int64Builder).Append(int64(from + i + 1))
	}
	return b.NewRecordBatch()
}

// TestClusterShardBy writes an append table and a merge table, both
// sharded by their Int32 column k (Cluster.ShardBy), into the 2x2
// cluster, keys negative and positive, each merge key in four
// versions over two epochs. Read with clickhouse-client, every row of
// each shard's local table, on both its replicas, has
// toUInt32(k) % 2 = the shard, and the Distributed tables hold every
// row once (the merge table every key once, at its last version).
// Rows inserted through the Distributed table by someone else (its
// sharding key is k) land on the shard the writer's rule gives.
func TestClusterShardBy(t *testing.T) {
	c := cluster(t)
	for s := range c.shards {
		for r := range c.shards[s] {
			if !c.answers(s, r) {
				c.restart(t, s, r)
			}
		}
	}
	db := c.freshDB(t)
	ctx := context.Background()
	cl := clusterConfig()
	cl.ShardBy = map[string]string{"a": "k", "m": "k"}
	d := newDest(t, clickhouse.Config{Database: db, Cluster: cl, BlockRows: 50})
	t.Cleanup(func() { d.Close() })
	streams := []sink.StreamSpec{{Table: "a"}, {Table: "m", Mode: sink.Merge, Key: []string{"k"}}}
	for _, s := range streams {
		if err := d.CheckStream(s); err != nil {
			t.Fatal(err)
		}
	}
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "shardby", Streams: streams})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	const rows = 300
	key := func(i int) int32 { return int32(i%100) - 50 } // -50..49
	for epoch := uint64(1); epoch <= 2; epoch++ {
		from := int(epoch-1) * rows
		n := rows
		if epoch == 2 {
			n = 100 // the merge keys' third version
		}
		for _, table := range []string{"a", "m"} {
			rec := shardRecord(from, n, key)
			err := w.Write(ctx, table, rec)
			rec.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		cm, err := w.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, epoch, []sink.Committable{cm}); err != nil {
			t.Fatal(err)
		}
	}
	for s := range c.shards {
		for r := range c.shards[s] {
			c.client(t, s, r, "SYSTEM SYNC REPLICA "+db+".a")
			c.client(t, s, r, "SYSTEM SYNC REPLICA "+db+".m")
		}
	}
	// The writer's rule: a signed value as the unsigned integer of its
	// width, mod the shards.
	shardOf := func(k int32) int { return int(uint32(k) % uint32(len(c.shards))) }
	wantA, wantM := make([]int, len(c.shards)), make([]int, len(c.shards))
	for i := range rows + 100 {
		wantA[shardOf(key(i))]++
	}
	for k := int32(-50); k < 50; k++ {
		wantM[shardOf(k)]++
	}
	for s := range c.shards {
		for r := range c.shards[s] {
			wrong := fmt.Sprintf("toUInt32(k) %% %d != %d", len(c.shards), s)
			got := c.client(t, s, r, fmt.Sprintf("SELECT count(), uniqExact(_openetl_id), countIf(%s) FROM %s.a", wrong, db))
			if want := fmt.Sprintf("%d\t%d\t0", wantA[s], wantA[s]); got != want {
				t.Errorf("shard %d (%s): a's rows, distinct ids, rows of another shard = %q, want %q", s, c.replicas[s][r], got, want)
			}
			got = c.client(t, s, r, fmt.Sprintf("SELECT count(), uniqExact(k), countIf(%s), min(_openetl_seq) > %d FROM %s.m FINAL", wrong, rows, db))
			if want := fmt.Sprintf("%d\t%d\t0\t1", wantM[s], wantM[s]); got != want {
				t.Errorf("shard %d (%s): m FINAL's rows, distinct keys, rows of another shard, all at their last version = %q, want %q", s, c.replicas[s][r], got, want)
			}
		}
	}
	if got, want := c.client(t, 1, 1, "SELECT count(), uniqExact(_openetl_id) FROM "+db+".a_all"), fmt.Sprintf("%d\t%d", rows+100, rows+100); got != want {
		t.Errorf("a_all: rows, distinct ids = %q, want %q", got, want)
	}
	if got, want := c.client(t, 0, 1, "SELECT count(), uniqExact(k) FROM "+db+".m_all FINAL"), "100\t100"; got != want {
		t.Errorf("m_all FINAL: rows, distinct keys = %q, want %q", got, want)
	}
	// Someone else inserts through the Distributed table: its sharding
	// key routes as the writer does.
	client := os.Getenv("OPENETL_TEST_CLICKHOUSE_CLIENT")
	if client == "" {
		client = "clickhouse-client"
	}
	host, port, _ := strings.Cut(c.shards[0][0], ":")
	ins := exec.Command(client, "--host", host, "--port", port, "--insert_distributed_sync=1", "-q",
		"INSERT INTO "+db+".a_all (k, _openetl_id, _openetl_batch) VALUES (-7, 'other--7', 0), (-2147483648, 'other-min', 0), (1000001, 'other-1000001', 0), (8, 'other-8', 0)")
	if out, err := ins.CombinedOutput(); err != nil {
		t.Fatalf("insert through a_all: %v\n%s", err, out)
	}
	for _, k := range []int32{-7, -2147483648, 1000001, 8} {
		s := shardOf(k)
		got := c.client(t, s, 0, fmt.Sprintf("SELECT count() FROM %s.a WHERE _openetl_batch = 0 AND k = %d", db, k))
		other := c.client(t, 1-s, 0, fmt.Sprintf("SELECT count() FROM %s.a WHERE _openetl_batch = 0 AND k = %d", db, k))
		if got != "1" || other != "0" {
			t.Errorf("k = %d inserted through a_all: %s rows on shard %d (the writer's), %s on shard %d", k, got, s, other, 1-s)
		}
	}
}

// TestClusterZooKeeperPath makes each of the four servers a shard of
// its own (4 shards x 1 replica), with a ZooKeeper path by the
// {replica} macro, unique to each server (Cluster.ZooKeeperPath): each
// server's tables are at that path (system.replicas), each holds a
// share of the rows that no other holds (a path by {shard} would make
// two servers replicas of one table, each with the other's rows), and
// the four shares are every row once.
func TestClusterZooKeeperPath(t *testing.T) {
	c := cluster(t)
	var all []string
	for s := range c.shards {
		for r := range c.shards[s] {
			if !c.answers(s, r) {
				c.restart(t, s, r)
			}
			all = append(all, c.shards[s][r])
		}
	}
	db := c.freshDB(t)
	ctx := context.Background()
	cl := &clickhouse.Cluster{ZooKeeperPath: "/clickhouse/tables/{replica}/openetl_zkpath/"}
	for _, a := range all {
		cl.Shards = append(cl.Shards, []string{a})
	}
	d := newDest(t, clickhouse.Config{Database: db, Cluster: cl})
	t.Cleanup(func() { d.Close() })
	w, err := d.Writer(ctx, sink.WriterConfig{Pipeline: "zkpath"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	const rows = 1000
	for epoch := uint64(1); epoch <= 2; epoch++ {
		rec := rotationRecord(int(epoch-1)*rows/2, rows/2)
		err := w.Write(ctx, "t", rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		cm, err := w.PreCommit(ctx, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, epoch, []sink.Committable{cm}); err != nil {
			t.Fatal(err)
		}
	}
	var total int
	i := 0
	for s := range c.shards {
		for r := range c.shards[s] {
			name := c.replicas[s][r]
			c.client(t, s, r, "SYSTEM SYNC REPLICA "+db+".t")
			if got, want := c.client(t, s, r, "SELECT zookeeper_path FROM system.replicas WHERE database = '"+db+"' AND table = 't'"),
				"/clickhouse/tables/"+name+"/openetl_zkpath/"+db+"/t"; got != want {
				t.Errorf("%s: t's zookeeper_path %q, want %q", name, got, want)
			}
			n, _ := strconv.Atoi(c.client(t, s, r, "SELECT count() FROM "+db+".t"))
			if n == 0 {
				t.Errorf("%s (shard %d of 4) holds no row of t", name, i)
			}
			total += n
			i++
		}
	}
	if total != rows {
		t.Errorf("the four servers hold %d rows of t together, want %d (each once)", total, rows)
	}
	if got, want := c.client(t, 0, 0, fmt.Sprintf("SELECT count(), uniqExact(_openetl_id) FROM remote('%s', %s, t)", strings.Join(all, ","), db)), fmt.Sprintf("%d\t%d", rows, rows); got != want {
		t.Errorf("all four shards through remote(): rows, distinct ids = %q, want %q", got, want)
	}
}

// TestClusterDDLRace: the destination's DDL is per replica (CREATE ...
// IF NOT EXISTS on every replica of every shard, ALTER ... ADD COLUMN
// through one replica of each shard), never ON CLUSTER (package doc,
// Clusters). Two destinations, as two processes, race it on one new
// database: both New at once (database and state tables), then both
// writers at once create a new table and its Distributed table (their
// first Write), add a column (the next) and commit. Both succeed, and
// on every replica the table and its Distributed table have the new
// column and hold both writers' rows once. (Taking "already exists" as
// a failure makes it fail: the second ADD COLUMN meets the first's.)
func TestClusterDDLRace(t *testing.T) {
	c := cluster(t)
	for s := range c.shards {
		for r := range c.shards[s] {
			if !c.answers(s, r) {
				c.restart(t, s, r)
			}
		}
	}
	db := c.freshDB(t)
	ctx := context.Background()
	both := func(f func(i int) error) {
		t.Helper()
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = f(i)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("writer %d: %v", i, err)
			}
		}
	}
	dsts := make([]*clickhouse.Destination, 2)
	both(func(i int) error {
		var err error
		dsts[i], err = clickhouse.New(ctx, clickhouse.Config{Database: db, Cluster: clusterConfig()})
		return err
	})
	ws := make([]sink.Writer, 2)
	for i, d := range dsts {
		t.Cleanup(func() { d.Close() })
		var err error
		if ws[i], err = d.Writer(ctx, sink.WriterConfig{Pipeline: fmt.Sprintf("race%d", i)}); err != nil {
			t.Fatal(err)
		}
		defer ws[i].Close(ctx)
		if _, err := ws[i].Recover(ctx, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	const rows = 100
	tables := []string{"r1"}
	for n, table := range tables {
		epoch := uint64(n + 1)
		both(func(i int) error {
			from := (i*len(tables) + n) * 2 * rows
			rec := rotationRecord(from, rows)
			err := ws[i].Write(ctx, table, rec)
			rec.Release()
			if err != nil {
				return err
			}
			wider := widerRecord(from+rows, rows)
			err = ws[i].Write(ctx, table, wider)
			wider.Release()
			if err != nil {
				return err
			}
			cm, err := ws[i].PreCommit(ctx, epoch)
			if err != nil {
				return err
			}
			return ws[i].Commit(ctx, epoch, []sink.Committable{cm})
		})
	}
	for _, table := range tables {
		var total int
		for s := range c.shards {
			for r := range c.shards[s] {
				name := c.replicas[s][r]
				c.client(t, s, r, "SYSTEM SYNC REPLICA "+db+"."+table)
				for _, tt := range []string{table, table + "_all"} {
					if got := c.client(t, s, r, "SELECT count() FROM system.columns WHERE database = '"+db+"' AND table = '"+tt+"' AND name = 'extra'"); got != "1" {
						t.Errorf("%s: %s has no column extra", name, tt)
					}
				}
				f := strings.Fields(c.client(t, s, r, "SELECT count(), uniqExact(_openetl_id), countIf(extra != '') FROM "+db+"."+table))
				if len(f) != 3 || f[0] != f[1] {
					t.Errorf("%s: %s rows, distinct ids, rows with extra = %v: a row twice", name, table, f)
				}
				if r == 0 {
					n, _ := strconv.Atoi(f[0])
					total += n
				}
			}
		}
		if total != 4*rows {
			t.Errorf("%s: the shards hold %d rows together, want %d (two writers' %d each)", table, total, 4*rows, 2*rows)
		}
		if got, want := c.client(t, 1, 1, "SELECT count(), uniqExact(_openetl_id), countIf(extra != '') FROM "+db+"."+table+"_all"), fmt.Sprintf("%d\t%d\t%d", 4*rows, 4*rows, 2*rows); got != want {
			t.Errorf("%s_all: rows, distinct ids, rows with extra = %q, want %q", table, got, want)
		}
	}
}

// widerRecord is rotationRecord with one more column, extra.
func widerRecord(from, n int) arrow.RecordBatch {
	base := rotationRecord(from, n)
	defer base.Release()
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	for i := range n {
		b.Append(fmt.Sprintf("extra-%d", from+i))
	}
	extra := b.NewStringArray()
	defer extra.Release()
	fields := append(base.Schema().Fields(), arrow.Field{Name: "extra", Type: arrow.BinaryTypes.String})
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), append(base.Columns(), extra), int64(n))
}

package postgres_test

import (
	"context"
	"math/rand/v2"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
	"github.com/openetl/etl/source/faker"
)

// TestConnectionsEndedUnderSync: a pipeline syncs the fake customers
// (merge, soft deletes) and orders (append) into the test server on two
// lanes, 20 ms epochs, while the test ends the destination's pool
// connections (pg_terminate_backend, by the pool's application_name) 20
// times, each a seeded random few milliseconds after another checkpoint
// (the seed is logged), so that over runs the faults land in every step
// of the commit protocol. A failed Sync is called again at once, as a
// scheduler would; no more Syncs fail than there were faults. At the end
// psql reads every order version once and every customer at its latest
// version once.
func TestConnectionsEndedUnderSync(t *testing.T) {
	const rows, rounds = 20_000, 20
	e := newEnv(t)
	app := "openetl_faults_" + e.schema
	u, err := url.Parse(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	dst, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	src, err := faker.New(faker.Config{Seed: 42, Rows: rows, Rate: 5000})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(ctx) })
	p, err := etl.NewPipeline("faults").From(src).To(dst).Checkpoints(store).
		Mode(delivery.Merge, faker.Customers).Lanes(2).EpochEvery(20*time.Millisecond, 0).
		Require(delivery.ExactlyOnce).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(ctx) })

	admin, err := pgx.Connect(ctx, dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	seed := uint64(time.Now().UnixNano())
	t.Logf("fault seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	synced := make(chan struct{})
	var (
		wg              sync.WaitGroup
		faults, endedBy int
		ferr            error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		last := records(dir)
		for faults < rounds {
			for records(dir) <= last {
				select {
				case <-synced:
					return
				case <-tick.C:
				}
			}
			last = records(dir)
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // where in the protocol the fault lands
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity WHERE application_name = $1",
				app).Scan(&n); err != nil {
				ferr = err
				return
			}
			faults++
			endedBy += n
		}
	}()
	failed, syncs := map[string]int{}, 0
	for try := 0; ; try++ {
		syncs++
		_, err := p.Sync(ctx)
		if err == nil {
			break
		}
		if !etl.IsRetryable(err) || try == 100 {
			close(synced)
			wg.Wait()
			t.Fatalf("sync %d: %v", try+1, err)
		}
		failed[err.Error()]++
	}
	close(synced)
	wg.Wait()
	if ferr != nil {
		t.Fatalf("ending connections: %v", ferr)
	}
	if faults < rounds/2 {
		t.Errorf("%d faults before the sync ended, want at least %d", faults, rounds/2)
	}
	// A fault fails the Sync it lands in; the next starts by dropping
	// the dead connections (before, 11 to 26 Syncs failed for 20 faults).
	if syncs-1 > faults {
		t.Errorf("%d Syncs failed for %d faults, want at most one each", syncs-1, faults)
	}
	verifyFaker(t, e.schema, rows)
	t.Logf("%d faults ended %d connections; %d syncs, %d failed", faults, endedBy, syncs, syncs-1)
	for e, n := range failed {
		t.Logf("%d syncs failed with: %s", n, e)
	}
}

// TestDeadPoolConnectionsSwept: every connection of the destination's
// pool is ended while idle between two Syncs (pg_terminate_backend), and
// the pool is one that hands connections out without a ping, as pgxpool
// does with one idle for under a second. The next Sync writes more rows
// at its first try: its attempt drops the dead connections before it
// uses the pool. Before, it failed on the first one it took.
func TestDeadPoolConnectionsSwept(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pool, app := unpingedPool(t, e)
	dst, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	dir := t.TempDir()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(ctx) })
	sync := func(rows int64) error {
		src, err := faker.New(faker.Config{Seed: 42, Rows: rows})
		if err != nil {
			t.Fatal(err)
		}
		p, err := etl.NewPipeline("swept").From(src).To(dst).Checkpoints(store).
			Mode(delivery.Merge, faker.Customers).Lanes(2).Require(delivery.ExactlyOnce).Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close(ctx)
		_, err = p.Sync(ctx)
		return err
	}
	if err := sync(2000); err != nil {
		t.Fatal(err)
	}
	ended := endIdle(t, e, pool, app)
	if err := sync(4000); err != nil {
		t.Fatalf("the Sync after the pool's connections were ended: %v", err)
	}
	verifyFaker(t, e.schema, 4000)
	t.Logf("%d idle connections ended between the Syncs", ended)
}

// unpingedPool is a pool on the test server whose connections carry an
// application_name of their own and are handed out without a ping, as
// pgxpool does with a connection idle for under a second.
func unpingedPool(t *testing.T, e *env) (*pgxpool.Pool, string) {
	t.Helper()
	app := "openetl_unpinged_" + e.schema
	cfg, err := pgxpool.ParseConfig(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, app
}

// endIdle ends every connection of pool (all idle) on the server, and
// returns how many.
func endIdle(t *testing.T, e *env, pool *pgxpool.Pool, app string) int {
	t.Helper()
	idle := pool.Stat().IdleConns()
	var ended int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity WHERE application_name = $1",
		app).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if ended == 0 || int32(ended) != idle {
		t.Fatalf("%d connections ended, %d idle in the pool: want all of them, at least one", ended, idle)
	}
	return ended
}

// TestStagingTableOnLostConnection: a writer's connections are ended
// while idle between its Recover and its first Write (pg_terminate_backend;
// the pool hands them out without a ping). The Write creates the
// batch's staging table on a connection it finds lost, and again on
// another: the epoch commits, and psql reads its rows. Before, the
// Write failed, and with it the attempt.
func TestStagingTableOnLostConnection(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	pool, app := unpingedPool(t, e)
	dst, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	cfg := sink.WriterConfig{Pipeline: "lost", Streams: []sink.StreamSpec{{Stream: "z", Table: "z"}}}
	w, err := dst.Writer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	if _, err := w.Recover(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	endIdle(t, e, pool, app)
	if err := w.Write(ctx, "z", batch(t, row{id: 1, value: "one", seq: 1}, row{id: 2, value: "two", seq: 1})); err != nil {
		t.Fatalf("Write after the pool's connections were ended: %v", err)
	}
	c, err := w.PreCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx, 1, []sink.Committable{c}); err != nil {
		t.Fatal(err)
	}
	if got := psql(t, `SELECT string_agg(id || ':' || value, ',' ORDER BY id) FROM `+e.schema+`.z`); got != "1:one,2:two" {
		t.Errorf("z = %q, want 1:one,2:two", got)
	}
}

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
// scheduler would. At the end psql reads every order version once and
// every customer at its latest version once.
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
	verifyFaker(t, e.schema, rows)
	t.Logf("%d faults ended %d connections; %d syncs, %d failed", faults, endedBy, syncs, syncs-1)
	for e, n := range failed {
		t.Logf("%d syncs failed with: %s", n, e)
	}
}

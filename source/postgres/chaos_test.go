package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// TestConnectionsEndedUnderWriter: a pipeline reads a table of 50,000
// rows under a writer while the test ends the source's connections
// (pg_terminate_backend) over and over, at seeded random moments (the
// seed is logged): every connection of its role, only the walsender, or
// only the others (the query, snapshot and re-snapshot connections). The
// first fault comes part way through the first snapshot, so later
// attempts hand its rest to the change stream; each later one comes
// after another checkpoint was committed, a random few milliseconds on.
// Once the faults and the writer stop, the output applied in seq order
// equals the table and no row's n falls in seq order.
func TestConnectionsEndedUnderWriter(t *testing.T) {
	d := dsn(t)
	const rows, rounds = 50000, 20
	tbl, pub, slot, role := name("chaos"), name("pub"), name("slot"), name("chaosrole")
	resnapTable(t, d, tbl, pub, rows)
	emit := "FUNCTION pg_logical_emit_message(boolean, text, text)"
	execSQL(t, d, "CREATE ROLE "+role+" LOGIN REPLICATION", "GRANT SELECT ON "+tbl+" TO "+role, "GRANT EXECUTE ON "+emit+" TO "+role)
	dropSlotAtCleanup(t, d, slot)
	t.Cleanup(func() {
		execSQL(t, d, "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity WHERE usename = '"+role+"'",
			"REVOKE EXECUTE ON "+emit+" FROM "+role, "DROP PUBLICATION IF EXISTS "+pub, "DROP TABLE IF EXISTS "+tbl,
			"DROP ROLE IF EXISTS "+role)
	})
	h := newHarness(t, roleDSN(t, d, role, "trusted"), postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 2000,
		StatusInterval: 100 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond})
	// The snapshot split holds after a quarter of the table until the
	// first fault has come.
	release := make(chan struct{})
	h.wrap = func(s source.Source) source.Source { return testutil.HoldUntil(s, rows/4, release) }
	var pl atomic.Pointer[etl.Pipeline]
	h.built = func(p *etl.Pipeline) { pl.Store(p) }
	retried := recordRetries(h)
	h.retry = &etl.Retry{Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	seed := uint64(time.Now().UnixNano())
	t.Logf("fault seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))

	stopWriter := startWriter(t, d, tbl, rows)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	running := func() {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
	}
	kinds := []struct{ name, where string }{
		{"all", ""},
		{"walsender", " AND backend_type = 'walsender'"},
		{"others", " AND backend_type = 'client backend'"},
	}
	ended := map[string]int{}
	end := func(k int) {
		t.Helper()
		n := queryOne(t, d, "SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity WHERE usename = '"+role+"'"+kinds[k].where)
		var c int
		fmt.Sscan(n, &c)
		ended[kinds[k].name] += c
	}
	testutil.Until(t, "the first snapshot held part way", func() bool {
		running()
		p := pl.Load()
		if p == nil {
			return false
		}
		s := p.Status().Streams[tbl]
		return s.Snapshotting && s.SnapshotDone >= rows/4
	})
	end(0)
	close(release)
	last := uint64(0)
	for range rounds {
		testutil.Until(t, "another checkpoint", func() bool {
			running()
			r := headRecord(t, h.ckpts)
			return r != nil && r.Epoch > last
		})
		last = headRecord(t, h.ckpts).Epoch
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond) // where in the epoch the fault lands
		end(rng.IntN(len(kinds)))
	}
	txns := stopWriter()
	// The Run streams on past every fault: the slot confirms all the
	// writer committed.
	waitConfirmed(t, d, slot, done)
	stopAndApply(t, h, cancel, done, tbl)
	c, err := pgconn.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	checkOutputIsTable(t, c, h.tables, tbl)
	t.Logf("writer committed %d transactions; %d faults ended connections %v; %d attempts retried", txns, rounds+1, ended, retried.count())
	for e, n := range retried.causes() {
		t.Logf("%d attempts retried after: %s", n, e)
	}
}

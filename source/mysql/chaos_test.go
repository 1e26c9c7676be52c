package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/mysql"
)

// TestConnectionsKilledUnderWriter: a pipeline reads a table of 40,000
// rows under a writer (inserts, updates raising v, key changes, deletes)
// while the test kills the source's connections over and over, at
// seeded random moments (the seed is logged): every connection of its
// user, only the binlog dump threads, or only the others (the query and
// snapshot connections). The first kill comes while the snapshot split
// is held a quarter through; each later one after another committed
// checkpoint, a random few milliseconds on. Once the kills and the
// writer stop, the Parquet output holds no version twice, applied in seq
// order it equals the table, and each row's records follow its history.
func TestConnectionsKilledUnderWriter(t *testing.T) {
	d := dsn(t)
	const rows, rounds = 40000, 20
	db, user := credentialsUser(t, d, 1)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.kt (id bigint PRIMARY KEY, v bigint, note varchar(40))", db),
		fmt.Sprintf("INSERT INTO %[1]s.kt SELECT seq, seq, concat('row ', seq) FROM %[1]s.seq_1_to_%[2]d", db, rows))
	src := newSource(t, userDSN(d, user, "pw-1"), db, mysql.Config{Tables: []string{"kt"}, SnapshotChunkRows: 1000})
	release := make(chan struct{})
	var (
		retries atomic.Int64
		mu      gosync.Mutex
		why     = map[string]int{} // the retried attempts' errors
	)
	dir := t.TempDir()
	p := credPipeline(t, testutil.HoldUntil(src, rows/4, release), dir, func(e etl.Event) {
		if e.Kind == etl.EventSyncRetrying {
			retries.Add(1)
			mu.Lock()
			why[e.Err.Error()]++
			mu.Unlock()
		}
	})
	seed := uint64(time.Now().UnixNano())
	t.Logf("fault seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))

	stopWriter := startKTWriter(t, d, db, rows+1, rand.New(rand.NewPCG(seed, 8)))
	defer stopWriter()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
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
		{"binlog", " AND COMMAND LIKE 'Binlog Dump%'"},
		{"others", " AND COMMAND NOT LIKE 'Binlog Dump%'"},
	}
	killed := map[string]int{}
	end := func(k int) {
		t.Helper()
		for _, r := range queryRows(t, d, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '"+user+"'"+kinds[k].where) {
			c := conn(t, d)
			_, err := c.Execute("KILL " + r[0])
			c.Close()
			var me *gomysql.MyError
			if err != nil && (!errors.As(err, &me) || me.Code != gomysql.ER_NO_SUCH_THREAD) {
				t.Fatalf("KILL %s: %v", r[0], err)
			}
			killed[kinds[k].name]++
		}
	}
	testutil.Until(t, "the snapshot held part way", func() bool {
		running()
		s := p.Status().Streams["kt"]
		return s.Snapshotting && s.SnapshotDone >= rows/4
	})
	end(0)
	close(release)
	last := uint64(0)
	for range rounds {
		var epoch uint64
		testutil.Until(t, "another checkpoint", func() bool {
			running()
			c, err := p.Inspect(context.Background())
			epoch = c.Epoch
			return err == nil && epoch > last
		})
		last = epoch
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond) // where in the epoch the kill lands
		end(rng.IntN(len(kinds)))
	}
	txns, err := stopWriter()
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// A last sync reads to the end of the binlog.
	if _, err := p.Sync(context.Background()); err != nil {
		t.Fatalf("final sync: %v", err)
	}

	n := checkKT(t, d, db, dir)
	t.Logf("writer committed %d transactions; %d kills ended connections %v; %d attempts retried; %d rows in the table",
		txns, rounds+1, killed, retries.Load(), n)
	mu.Lock()
	defer mu.Unlock()
	for e, n := range why {
		t.Logf("%d attempts retried after: %s", n, e)
	}
}

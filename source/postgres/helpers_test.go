package postgres_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/postgres"
)

// dsn returns the test server's DSN (scripts/servers.sh start postgres).
// Without one the test fails, unless OPENETL_SKIP_SERVERS=1. When
// OPENETL_TEST_POSTGRES_MAJOR is set (scripts/test-pgmatrix.sh sets it
// with the DSN of a pg16, pg17 or pg18 server), the server must be of
// that major version: a matrix run pointed at the wrong server fails
// rather than passing for a version it never saw.
func dsn(t *testing.T) string {
	t.Helper()
	d := os.Getenv("OPENETL_TEST_POSTGRES_DSN")
	if d == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_POSTGRES_DSN is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_POSTGRES_DSN is not set: start Postgres with scripts/servers.sh start postgres, or set OPENETL_SKIP_SERVERS=1")
	}
	if want := os.Getenv("OPENETL_TEST_POSTGRES_MAJOR"); want != "" {
		// Per DSN: a test with a server of its own (testutil.PrivateServer)
		// changes OPENETL_TEST_POSTGRES_DSN.
		serversMu.Lock()
		v, seen := servers[d]
		if !seen {
			v = version(d)
			servers[d] = v
		}
		serversMu.Unlock()
		if major, _, _ := strings.Cut(v, "."); major != want {
			t.Fatalf("OPENETL_TEST_POSTGRES_MAJOR=%s, but the server of OPENETL_TEST_POSTGRES_DSN is %s", want, v)
		}
		if !seen {
			t.Logf("server: PostgreSQL %s", v)
		}
	}
	return d
}

var (
	serversMu sync.Mutex
	servers   = map[string]string{} // DSN: server_version
)

// version returns the server_version of the server at d ("16.10"), or
// why it can't.
func version(d string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, d)
	if err != nil {
		return "unreachable (" + err.Error() + ")"
	}
	defer c.Close(context.Background())
	return c.ParameterStatus("server_version")
}

var unique atomic.Int64

// names returns a fresh lowercase name with prefix, unique in this run.
func name(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, unique.Add(1))
}

// execSQL runs SQL statements on a connection of its own.
func execSQL(t *testing.T, d string, sqls ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, sql := range sqls {
		if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", strings.SplitN(sql, "\n", 2)[0], err)
		}
	}
}

// dropSlotAtCleanup drops the slot when t ends.
func dropSlotAtCleanup(t *testing.T, d, slot string) {
	t.Cleanup(func() {
		execSQL(t, d, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '"+slot+"' AND NOT active")
	})
}

// newSource returns a source closed at cleanup.
func newSource(t *testing.T, d string, cfg postgres.Config) *postgres.Source {
	t.Helper()
	cfg.DSN = d
	src, err := postgres.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		src.Close(context.Background())
	})
	return src
}

// headRecord returns the record the checkpoints under dir commit (their
// HEAD), or nil. A newer record file may exist, written but not yet
// committed: an attempt killed then resumes from HEAD.
func headRecord(t *testing.T, dir string) *checkpoint.Record {
	t.Helper()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	_, r, err := store.Head(context.Background(), "pg")
	if err != nil {
		return nil // being replaced
	}
	return r
}

// retries records the attempts a harness's Run retried, with their
// errors (see recordRetries).
type retries struct {
	mu   sync.Mutex
	errs []error
}

// recordRetries sets h's event hook to record each retried attempt,
// and a quick Retry (50 ms backoff).
func recordRetries(h *harness) *retries {
	r := &retries{}
	h.onEvent = func(e etl.Event) {
		if e.Kind == etl.EventSyncRetrying {
			r.mu.Lock()
			r.errs = append(r.errs, e.Err)
			r.mu.Unlock()
		}
	}
	h.retry = &etl.Retry{Backoff: 50 * time.Millisecond}
	return r
}

// count is the number of attempts retried so far.
func (r *retries) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

// last is the error of the last attempt retried, nil when none was.
func (r *retries) last() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return r.errs[len(r.errs)-1]
}

// causes counts the retried attempts by error text.
func (r *retries) causes() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]int{}
	for _, err := range r.errs {
		m[err.Error()]++
	}
	return m
}

// waitCommitted returns a function that waits until HEAD's totals hold
// n rows of tbl written, failing if the Run reporting on done ends
// first.
func waitCommitted(t *testing.T, h *harness, tbl string, done chan error) func(n int64) {
	return func(n int64) {
		t.Helper()
		testutil.Until(t, fmt.Sprintf("%d rows committed", n), func() bool {
			select {
			case err := <-done:
				t.Fatalf("Run ended: %v", err)
			default:
			}
			r := headRecord(t, h.ckpts)
			return r != nil && r.Totals[tbl].Written >= n
		})
	}
}

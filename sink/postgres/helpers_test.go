package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/postgres"
	"github.com/openetl/etl/sink/sinktest"
)

// dsn returns the test server's DSN (scripts/servers.sh start postgres).
// Without one the test fails, unless OPENETL_SKIP_SERVERS=1.
func dsn(t testing.TB) string {
	t.Helper()
	d := os.Getenv("OPENETL_TEST_POSTGRES_DSN")
	if d == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_POSTGRES_DSN is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_POSTGRES_DSN is not set: start Postgres with scripts/servers.sh start postgres, or set OPENETL_SKIP_SERVERS=1")
	}
	return d
}

var unique atomic.Int64

// env is a fresh schema of the test server, a pool on it and a reader.
type env struct {
	pool   *pgxpool.Pool
	schema string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &env{pool: pool, schema: fmt.Sprintf("t_%d_%d", time.Now().UnixNano()%1e9, unique.Add(1))}
}

// open returns a Destination on the env's schema.
func (e *env) open(t testing.TB) *postgres.Destination {
	t.Helper()
	d, err := postgres.New(context.Background(), postgres.Config{Pool: e.pool, Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// visible reads a table as a reader does: every row, with the metadata
// columns and the others by name.
func (e *env) visible(ctx context.Context, table string) ([]sinktest.Row, error) {
	var exists bool
	if err := e.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, `"`+e.schema+`"."`+table+`"`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rs, err := e.pool.Query(ctx, `SELECT * FROM "`+e.schema+`"."`+table+`"`, pgx.QueryExecModeDescribeExec) // the columns change
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []sinktest.Row
	for rs.Next() {
		vals, err := rs.Values()
		if err != nil {
			return nil, err
		}
		r := sinktest.Row{Values: map[string]any{}}
		for i, f := range rs.FieldDescriptions() {
			switch f.Name {
			case sink.ColumnID:
				r.ID, _ = vals[i].(string)
			case sink.ColumnSeq:
				r.Seq, _ = vals[i].(int64)
			case sink.ColumnOp:
				r.Op, _ = vals[i].(string)
			case sink.ColumnSyncedAt:
			default:
				r.Values[f.Name] = vals[i]
			}
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/openetl/etl/sink/postgres"
)

// The server's errors that no retry fixes are permanent
// (sink.Classifier): here a database that does not exist (3D000), as a
// real server answers it; a refused connection, a serialization failure
// and a staging table another transaction dropped (42P01) are not.
func TestPermanentErrors(t *testing.T) {
	e := newEnv(t)
	d := e.open(t)
	u, err := url.Parse(dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/openetl_no_such_database"
	pool, err := pgxpool.New(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = postgres.New(context.Background(), postgres.Config{Pool: pool, Schema: e.schema})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "3D000" {
		t.Fatalf("New on a missing database: %v, want SQLSTATE 3D000", err)
	}
	if !d.Permanent(fmt.Errorf("destination: lane 0: %w", err)) {
		t.Errorf("Permanent(%v) = false, want true", err)
	}
	for _, transient := range []error{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"),
		&pgconn.PgError{Code: "40001"}, &pgconn.PgError{Code: "42P01"}} {
		if d.Permanent(transient) {
			t.Errorf("Permanent(%v) = true, want false", transient)
		}
	}
}

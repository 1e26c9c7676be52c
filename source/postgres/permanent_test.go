package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/source/postgres"
)

// A user who may read the table but lacks the REPLICATION attribute
// passes Build (the catalog is read with plain queries) and fails each
// attempt creating its slot, with SQLSTATE 42501. That is a
// configuration error: Run returns it at the first attempt
// (Source.Permanent) instead of retrying it for the default 15-minute
// budget. A refused connection is an outage, not permanent.
func TestRunStopsWithoutReplicationPrivilege(t *testing.T) {
	d := dsn(t)
	tbl, role := name("perm"), name("norepl")
	execSQL(t, d, `CREATE TABLE `+tbl+` (id int PRIMARY KEY, v text)`, `INSERT INTO `+tbl+` VALUES (1, 'a')`,
		`CREATE ROLE `+role+` LOGIN NOREPLICATION`, `GRANT SELECT ON `+tbl+` TO `+role,
		`CREATE PUBLICATION `+tbl+` FOR TABLE `+tbl)
	t.Cleanup(func() {
		execSQL(t, d, `DROP PUBLICATION IF EXISTS `+tbl, `DROP TABLE IF EXISTS `+tbl, `DROP ROLE IF EXISTS `+role)
	})
	u, err := url.Parse(d)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	h := newHarness(t, u.String(), postgres.Config{Tables: []string{tbl}, Slot: tbl, Publication: tbl})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = h.run(ctx, time.Second)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" || !etl.IsPermanent(err) {
		t.Fatalf("Run without REPLICATION: %v (permanent %v), want SQLSTATE 42501, permanent", err, etl.IsPermanent(err))
	}
	src, err := postgres.New(postgres.Config{DSN: d, Tables: []string{tbl}, Slot: tbl, Publication: tbl})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(context.Background())
	if !src.Permanent(fmt.Errorf("split: %w", &pgconn.PgError{Code: "28P01"})) ||
		src.Permanent(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")) ||
		src.Permanent(&pgconn.PgError{Code: "57P01"}) {
		t.Error("Permanent: want true for a refused password (28P01), false for a refused connection and an admin shutdown (57P01)")
	}
}

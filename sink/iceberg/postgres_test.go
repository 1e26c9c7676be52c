package iceberg_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	ice "github.com/apache/iceberg-go"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/sinktest"
)

// postgresDSN returns $OPENETL_TEST_POSTGRES_DSN (scripts/servers.sh
// start postgres). Without it the test fails, unless
// OPENETL_SKIP_SERVERS=1.
func postgresDSN(t *testing.T) string {
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

// TestConformancePostgresCatalog runs the suite with the SQL catalog on
// Postgres, the shared-catalog case: every Destination the suite asks for
// (each standing for another process) opens its own connection pool and
// catalog on the same database and warehouse, so fences and epoch markers
// are checked across handles by the database's compare-and-swap.
func TestConformancePostgresCatalog(t *testing.T) {
	if raceEnabled {
		t.Skip("-race: the suite of TestConformance again, on another catalog; the plain run covers it")
	}
	dsn := postgresDSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "openetl_" + hex.EncodeToString(b[:]) // keeps runs apart in one database
	warehouse := "file://" + filepath.Join(t.TempDir(), "warehouse")
	open := func(t *testing.T) *sqlcat.Catalog {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		cat, err := sqlcat.NewCatalog(name, db, sqlcat.Postgres, ice.Properties{"warehouse": warehouse})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cat.Close(); _ = db.Close() })
		return cat
	}
	reader := open(t)
	sinktest.Run(t, func(t *testing.T) sink.Destination {
		return newDest(t, open(t), iceberg.Config{})
	}, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			return scan(ctx, reader, iceberg.DefaultNamespace, stream)
		},
		Skip: knownLimits,
	})
}

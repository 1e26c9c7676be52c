package iceberg_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/sink/sinktest"
)

// warehouse is a SQL catalog on SQLite with a file warehouse, in a
// temporary directory.
type warehouse struct {
	dir    string
	dbPath string
	db     *sql.DB
	cat    *sqlcat.Catalog
}

// sqliteDSN is the DSN every test (and the kill test's child) opens the
// catalog with: WAL and a busy timeout so several processes can commit.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

func openCatalog(t testing.TB, dir string) (*sql.DB, *sqlcat.Catalog) {
	t.Helper()
	db, err := sql.Open(sqliteshim.ShimName, sqliteDSN(filepath.Join(dir, "catalog.db")))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := sqlcat.NewCatalog("openetl", db, sqlcat.SQLite, ice.Properties{"warehouse": "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cat.Close(); _ = db.Close() })
	return db, cat
}

func newWarehouse(t testing.TB) *warehouse {
	t.Helper()
	dir := t.TempDir()
	db, cat := openCatalog(t, dir)
	return &warehouse{dir: dir, dbPath: filepath.Join(dir, "catalog.db"), db: db, cat: cat}
}

// newDest makes a Destination on cat. Unless cfg sets Grouping, it
// commits every epoch: most tests call Commit and look at the table
// right after (group_test.go tests grouping, with the defaults too).
func newDest(t testing.TB, cat catalog.Catalog, cfg iceberg.Config) *iceberg.Destination {
	t.Helper()
	cfg.Catalog = cat
	if cfg.Grouping == nil {
		cfg.Grouping = &iceberg.Grouping{}
	}
	d, err := iceberg.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// scan reads what a reader of the table's current snapshot sees, with
// iceberg-go's own scan (equality deletes applied).
// knownLimits are the conformance checks the destination does not pass,
// each a limit its package doc states.
var knownLimits = map[string]string{
	sinktest.CheckMergeReplay: "a replayed older version of a key, in a later epoch, replaces the newer one: merge compares " +
		"_openetl_seq only within an epoch (doc.go, Merge)",
	sinktest.CheckOverwriteEmpty: "a refresh that writes no rows leaves an Overwrite table as it was (doc.go, Limits)",
}

func scan(ctx context.Context, cat catalog.Catalog, ns, name string) ([]sinktest.Row, error) {
	tbl, err := cat.LoadTable(ctx, table.Identifier{ns, name})
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	at, err := tbl.Scan().ToArrowTable(ctx)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", name, err)
	}
	defer at.Release()
	var rows []sinktest.Row
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rs, err := sinktest.RowsFromRecord(tr.RecordBatch())
		if err != nil {
			return nil, err
		}
		rows = append(rows, rs...)
	}
	return rows, tr.Err()
}

// writerConfig is what the runner would hand lane's writer of pipeline:
// specs are the streams' (table = stream name).
func writerConfig(pipeline string, lane int, specs ...sink.StreamSpec) sink.WriterConfig {
	return sink.WriterConfig{Pipeline: pipeline, Lane: lane, Streams: specs}
}

// merged is the spec of table merged by key; appended, of one appended.
func merged(table string, key ...string) sink.StreamSpec {
	return sink.StreamSpec{Stream: table, Table: table, Mode: sink.Merge, Key: key}
}

func appended(table string) sink.StreamSpec {
	return sink.StreamSpec{Stream: table, Table: table, Mode: sink.Append}
}

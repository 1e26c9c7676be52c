package clickhouse_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/openetl/etl/sink/clickhouse"
)

// addr returns the native address of the ClickHouse that
// scripts/servers.sh started (Debian's 18.16). Without one the test fails,
// unless OPENETL_SKIP_SERVERS=1.
func addr(t testing.TB) string {
	t.Helper()
	a := os.Getenv("OPENETL_TEST_CLICKHOUSE_ADDR")
	if a == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_CLICKHOUSE_ADDR is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_CLICKHOUSE_ADDR is not set: start ClickHouse with scripts/servers.sh start clickhouse, or set OPENETL_SKIP_SERVERS=1")
	}
	return a
}

// open returns a connection pool to address a, closed when the test ends.
func open(t testing.TB, a string) driver.Conn {
	t.Helper()
	conn, err := openConn(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// freshDB creates a database with a random name on conn, dropped when the
// test ends.
func freshDB(t testing.TB, conn driver.Conn) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := "openetl_test_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("OPENETL_KEEP_DB") == "" {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
		} else {
			t.Logf("kept database %s", db)
		}
	})
	return db
}

func newDest(t testing.TB, cfg clickhouse.Config) *clickhouse.Destination {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := clickhouse.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// columnsOf returns a table's column names, empty when it does not exist.
func columnsOf(ctx context.Context, conn driver.Conn, db, table string) ([]string, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT name FROM system.columns WHERE database = '%s' AND table = '%s'", db, table))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// clientQuery runs query with clickhouse-client (the independent reader)
// and returns its TabSeparated output.
func clientQuery(t testing.TB, query string) string {
	t.Helper()
	client := os.Getenv("OPENETL_TEST_CLICKHOUSE_CLIENT")
	if client == "" {
		client = "clickhouse-client"
	}
	host, port, ok := strings.Cut(addr(t), ":")
	if !ok {
		t.Fatalf("OPENETL_TEST_CLICKHOUSE_ADDR %q is not host:port", addr(t))
	}
	out, err := exec.Command(client, "--host", host, "--port", port, "--format", "TabSeparated", "-q", query).CombinedOutput()
	if err != nil {
		t.Fatalf("clickhouse-client -q %q: %v\n%s", query, err, out)
	}
	return string(out)
}

// openConn opens a connection pool to the native address a.
func openConn(a string) (driver.Conn, error) {
	return ch.Open(&ch.Options{Addr: []string{a}, DialTimeout: 10 * time.Second})
}

package clickhouse_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/clickhouse"
	"github.com/openetl/etl/sink/sinktest"
)

// The conformance suite every destination passes, against the server
// scripts/servers.sh started, with small blocks so that epochs have
// several. Every Destination of one run shares one database (a new
// clickhouse.New on it stands for a new process); Visible reads the table
// as a reader does.
func TestConformance(t *testing.T) {
	conn := open(t, addr(t))
	for _, blockRows := range []int{7, clickhouse.DefaultBlockRows} {
		t.Run(fmt.Sprintf("block=%d", blockRows), func(t *testing.T) {
			db := freshDB(t, conn)
			sinktest.Run(t, func(t *testing.T) sink.Destination {
				return newDest(t, clickhouse.Config{Conn: conn, Database: db, BlockRows: blockRows})
			}, sinktest.Options{
				Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
					return visible(ctx, conn, db, stream)
				},
			})
		})
	}
}

// visible reads every row of table with its values as text; a merge
// table (ReplacingMergeTree) as its readers do, the latest version of
// each key, keeping deleted keys' rows (marked _openetl_deleted = 1, op
// delete): with FINAL on servers without is_deleted, where it keeps
// them, else newest by _openetl_seq per sorting key (FINAL would drop
// them there).
func visible(ctx context.Context, conn driver.Conn, db, table string) ([]sinktest.Row, error) {
	cols, err := columnsOf(ctx, conn, db, table)
	if err != nil || len(cols) == 0 {
		return nil, err
	}
	var engine, full string
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT engine, engine_full FROM system.tables WHERE database = '%s' AND name = '%s'", db, table)).
		Scan(&engine, &full); err != nil {
		return nil, err
	}
	from := fmt.Sprintf("%s.`%s`", db, table)
	if strings.HasSuffix(engine, "ReplacingMergeTree") {
		from += " FINAL"
		args := strings.Count(strings.SplitN(full, ")", 2)[0], ",")
		if strings.HasPrefix(engine, "Replicated") {
			args -= 2 // ReplicatedReplacingMergeTree(path, replica, ver...)
		}
		if args > 0 { // ReplacingMergeTree(ver, is_deleted)
			var key string
			if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT sorting_key FROM system.tables WHERE database = '%s' AND name = '%s'", db, table)).
				Scan(&key); err != nil {
				return nil, err
			}
			from = fmt.Sprintf("%s.`%s` ORDER BY %s, _openetl_seq DESC LIMIT 1 BY %s", db, table, key, key)
		}
	}
	var values []string
	for _, c := range cols {
		if c != "_openetl_id" && c != "_openetl_seq" && c != "_openetl_op" && c != "_openetl_batch" && c != "_openetl_deleted" {
			values = append(values, c)
		}
	}
	slices.Sort(values)
	sel := []string{"_openetl_id", "_openetl_seq", "_openetl_op"}
	for _, c := range values {
		sel = append(sel, "toString(`"+c+"`)")
	}
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s FROM %s", strings.Join(sel, ", "), from))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sinktest.Row
	for rows.Next() {
		var r sinktest.Row
		vals := make([]*string, len(values))
		dest := []any{&r.ID, &r.Seq, &r.Op}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		r.Values = make(map[string]any, len(values))
		for i, c := range values {
			if vals[i] == nil {
				r.Values[c] = nil
			} else {
				r.Values[c] = *vals[i]
			}
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// TestConformanceCurrent runs the suite against a current ClickHouse
// named by OPENETL_TEST_CLICKHOUSE (host:port or a clickhouse:// DSN),
// where tables get DateTime64 metadata columns and dedup-token settings.
// Skipped when it is unset: scripts/servers.sh can only start 18.16.
func TestConformanceCurrent(t *testing.T) {
	target := os.Getenv("OPENETL_TEST_CLICKHOUSE")
	if target == "" {
		t.Skip("OPENETL_TEST_CLICKHOUSE is not set: this check needs a current ClickHouse, which scripts/servers.sh can't start")
	}
	opts := &ch.Options{Addr: []string{target}, DialTimeout: 10 * time.Second}
	if strings.Contains(target, "://") {
		var err error
		if opts, err = ch.ParseDSN(target); err != nil {
			t.Fatalf("OPENETL_TEST_CLICKHOUSE: %v", err)
		}
	}
	conn, err := ch.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	db := freshDB(t, conn)
	sinktest.Run(t, func(t *testing.T) sink.Destination {
		return newDest(t, clickhouse.Config{Conn: conn, Database: db, BlockRows: 7})
	}, sinktest.Options{
		Visible: func(ctx context.Context, stream string) ([]sinktest.Row, error) {
			return visible(ctx, conn, db, stream)
		},
	})
}

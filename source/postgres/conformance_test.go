package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
	"github.com/openetl/etl/source/sourcetest"
)

// TestConformance runs the source conformance suite on two tables of a
// publication: a snapshot of 200 rows each, then committed inserts,
// updates and deletes that the slot streams (several versions of some
// rows, several transactions).
//
// Every source the suite makes shares one slot, as restarts of one
// pipeline do. A Read without a resume state recreates the slot (that is
// the contract: nothing was committed from it), so the data must be fixed
// before the suite runs: the changes are made once, and a fresh Read reads
// them as part of its snapshot. The streamed path is covered by
// TestPipeline; here it runs for every Resume from the snapshot's state.
func TestConformance(t *testing.T) {
	d := dsn(t)
	a, b := name("conf_a"), name("conf_b")
	pub, slot := name("pub"), name("slot")
	var sqls []string
	for _, tbl := range []string{a, b} {
		sqls = append(sqls, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text, n numeric(10,2))", tbl),
			fmt.Sprintf("INSERT INTO %s SELECT g, 'v' || g, g / 4.0 FROM generate_series(1, 200) g", tbl))
	}
	sqls = append(sqls, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, strings.Join([]string{a, b}, ", ")))
	execSQL(t, d, sqls...)
	dropSlotAtCleanup(t, d, slot)
	sourcetest.Run(t, func(t *testing.T) source.Source {
		return newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	}, sourcetest.Options{MaxRecords: 500})
}

// TestConformanceLive runs the suite while a writer commits a
// transaction (an insert, an update of an earlier row, a delete) every
// few milliseconds, so every Read streams changes after its snapshot and
// the Resume check reopens from resume points inside the stream.
func TestConformanceLive(t *testing.T) {
	d := dsn(t)
	a, pub, slot := name("live"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text)", a),
		fmt.Sprintf("INSERT INTO %s SELECT g, 'v' || g FROM generate_series(1, 2000) g", a),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, a))
	dropSlotAtCleanup(t, d, slot)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		c, err := pgconn.Connect(ctx, d)
		if err != nil {
			done <- err
			return
		}
		defer c.Close(context.Background())
		for i := 2001; ctx.Err() == nil; i++ {
			sql := fmt.Sprintf("BEGIN; INSERT INTO %[1]s VALUES (%[2]d, 'v'); UPDATE %[1]s SET v = v || '+' WHERE id = %[3]d; "+
				"DELETE FROM %[1]s WHERE id = %[4]d; COMMIT", a, i, i/2, i-50)
			if _, err := c.Exec(ctx, sql).ReadAll(); err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		done <- nil
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("writer: %v", err)
		}
	})
	sourcetest.Run(t, func(t *testing.T) source.Source {
		return newSource(t, d, postgres.Config{Publication: pub, Slot: slot})
	}, sourcetest.Options{MaxRecords: 5000, Live: true})
}

package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
	"github.com/openetl/etl/source/sourcetest"
)

// TestConformance runs the source conformance suite on two tables: a
// snapshot of 200 rows each, then committed inserts, updates and deletes
// streamed from the binlog (several versions of some rows, several
// transactions). The changes are made before the suite runs, after a
// first read took its snapshot, so every Resume from that snapshot's
// state streams them.
func TestConformance(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	var sqls []string
	for _, tbl := range []string{"conf_a", "conf_b"} {
		sqls = append(sqls, fmt.Sprintf("CREATE TABLE %s.%s (id bigint PRIMARY KEY, v varchar(20), n decimal(10,2))", db, tbl),
			fmt.Sprintf("INSERT INTO %[1]s.%[2]s SELECT seq, concat('v', seq), seq / 4 FROM %[1]s.seq_1_to_200", db, tbl))
	}
	execSQL(t, d, sqls...)
	src := newSource(t, d, db, mysql.Config{})
	first, _ := readOnce(t, src, nil, nil)
	if len(first.recs) != 400 {
		t.Fatalf("snapshot read %d records, want 400", len(first.recs))
	}
	for i := range 5 {
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s.conf_a VALUES (%d, 'new', 1.5)", db, 1000+i), "BEGIN",
			fmt.Sprintf("UPDATE %s.conf_a SET v = concat(v, '+') WHERE id < %d", db, 5+i),
			fmt.Sprintf("DELETE FROM %s.conf_b WHERE id = %d", db, 100+i),
			fmt.Sprintf("UPDATE %s.conf_b SET id = id + 1000 WHERE id = %d", db, 150+i), "COMMIT")
	}
	sourcetest.Run(t, func(t *testing.T) source.Source {
		return newSource(t, d, db, mysql.Config{})
	}, sourcetest.Options{MaxRecords: 500})
}

// TestConformanceLive runs the suite while a writer commits a
// transaction (an insert, an update of an earlier row, a delete) every
// few milliseconds, so every Read streams changes after its snapshot and
// the Resume check reopens from resume points inside the stream.
func TestConformanceLive(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.live (id bigint PRIMARY KEY, v text)", db),
		fmt.Sprintf("INSERT INTO %[1]s.live SELECT seq, concat('v', seq) FROM %[1]s.seq_1_to_2000", db))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		c := conn(t, d)
		defer c.Close()
		for i := 2001; ctx.Err() == nil; i++ {
			for _, sql := range []string{"BEGIN", fmt.Sprintf("INSERT INTO %s.live VALUES (%d, 'v')", db, i),
				fmt.Sprintf("UPDATE %s.live SET v = concat(v, '+') WHERE id = %d", db, i/2),
				fmt.Sprintf("DELETE FROM %s.live WHERE id = %d", db, i-50), "COMMIT"} {
				if _, err := c.Execute(sql); err != nil {
					done <- err
					return
				}
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
		return newSource(t, d, db, mysql.Config{})
	}, sourcetest.Options{MaxRecords: 5000, Live: true})
}

package mysql_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// TestBinlogPurged: a resume state whose binlog file was purged fails
// Open (and a Read opened before the purge) with a *PurgedError wrapping
// ErrBinlogPurged; with Config.Resnapshot the sync reads a new snapshot
// instead, and reports it (a source.reset notice).
func TestBinlogPurged(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY)", db), fmt.Sprintf("INSERT INTO %s.t VALUES (1), (2)", db))
	src := newSource(t, d, db, mysql.Config{})
	first, id := readOnce(t, src, nil, nil)
	resume := map[source.SplitID][]byte{id: first.last()}
	opened, err := src.Open(t.Context(), []string{"t"}, resume)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s.t VALUES (3)", db), "FLUSH BINARY LOGS")
	cur := queryRows(t, d, "SHOW MASTER STATUS")[0][0]
	// The server keeps a file while a dump thread reads it or its
	// transactions are not yet durable in InnoDB (the binlog checkpoint):
	// purge until it is gone.
	for i := 0; ; i++ {
		execSQL(t, d, fmt.Sprintf("PURGE BINARY LOGS TO '%s'", cur))
		if queryRows(t, d, "SHOW BINARY LOGS")[0][0] == cur {
			break
		}
		if i == 100 {
			t.Fatalf("binlogs before %s not purged: %v", cur, queryRows(t, d, "SHOW BINARY LOGS"))
		}
		time.Sleep(100 * time.Millisecond)
	}

	check := func(what string, err error) {
		t.Helper()
		var pe *mysql.PurgedError
		if !errors.As(err, &pe) || !errors.Is(err, mysql.ErrBinlogPurged) || pe.Oldest != cur {
			t.Fatalf("%s after the purge: %v, want a *PurgedError (oldest %s)", what, err, cur)
		}
		t.Log(err)
	}
	check("Read", opened[0].Read(t.Context(), &recorder{}, true))
	_, err = src.Open(t.Context(), []string{"t"}, resume)
	check("Open", err)

	// A state whose file is still there but whose GTIDs are purged: the
	// server refuses it (error 1236) when the stream starts.
	gone := map[source.SplitID][]byte{id: []byte(fmt.Sprintf(`{"v":1,"flavor":"mariadb","file":"%s","pos":4,"gtid":"0-1-1"}`, cur))}
	splits, err := src.Open(t.Context(), []string{"t"}, gone)
	if err != nil {
		t.Fatal(err)
	}
	err = splits[0].Read(t.Context(), &recorder{}, true)
	var pe *mysql.PurgedError
	if !errors.As(err, &pe) || pe.Err == nil {
		t.Fatalf("Read from purged GTIDs: %v, want a *PurgedError with the server's error", err)
	}
	t.Log(err)
	re := newSource(t, d, db, mysql.Config{Resnapshot: true})
	if splits, err = re.Open(t.Context(), []string{"t"}, gone); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	if err := splits[0].Read(t.Context(), r, true); err != nil || len(r.recs) != 3 {
		t.Fatalf("re-snapshot after purged GTIDs: %v, %d records, want 3", err, len(r.recs))
	}
	checkReset := func(what string, r *recorder) {
		t.Helper()
		var pe *mysql.PurgedError
		if len(r.notices) != 1 || r.notices[0].Kind != source.NoticeReset || !errors.As(r.notices[0].Err, &pe) ||
			!strings.Contains(r.notices[0].Detail, "new snapshot") {
			t.Errorf("%s reported %+v, want one source.reset notice with the *PurgedError", what, r.notices)
		}
	}
	checkReset("re-snapshot after purged GTIDs", r)

	// Re-snapshot when allowed.
	splits, err = re.Open(t.Context(), []string{"t"}, resume)
	if err != nil {
		t.Fatal(err)
	}
	r = &recorder{}
	if err := readAll(t.Context(), splits, r); err != nil {
		t.Fatal(err)
	}
	if len(r.recs) != 3 {
		t.Fatalf("re-snapshot read %d records, want 3", len(r.recs))
	}
	checkReset("re-snapshot after a purged binlog", r)
}

package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// TestBinlogPurged: a resume state whose binlog file was purged fails
// Open (and a Read opened before the purge) with a *PurgedError wrapping
// ErrBinlogPurged; with Config.OnPositionLost = PositionLostResnapshot the sync reads a new snapshot
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
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s.t VALUES (3)", db))
	cur := purgeBinlogs(t, d)

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
	re := newSource(t, d, db, mysql.Config{OnPositionLost: source.PositionLostResnapshot})
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

// purgeBinlogs starts a new binlog file and purges every one before it,
// which it returns.
func purgeBinlogs(t *testing.T, d string) string {
	t.Helper()
	execSQL(t, d, "FLUSH BINARY LOGS")
	cur := queryRows(t, d, "SHOW MASTER STATUS")[0][0]
	// The server keeps a file while a dump thread reads it or its
	// transactions are not yet durable in InnoDB (the binlog checkpoint):
	// purge until the server's list starts with it.
	testutil.Until(t, "the binlogs before "+cur+" to be purged", func() bool {
		execSQL(t, d, fmt.Sprintf("PURGE BINARY LOGS TO '%s'", cur))
		return queryRows(t, d, "SHOW BINARY LOGS")[0][0] == cur
	})
	return cur
}

// failReads wraps a source so that every split fails at its first
// record: an attempt that dies while it copies, before any checkpoint.
type failReads struct{ source.Source }

var errInjected = errors.New("injected: the copy failed")

func (s failReads) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	splits, err := s.Source.Open(ctx, streams, resume)
	for i, sp := range splits {
		splits[i] = failingSplit{sp}
	}
	return splits, err
}

type failingSplit struct{ source.Split }

func (sp failingSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	return sp.Split.Read(ctx, failingEmitter{e}, bounded)
}

type failingEmitter struct{ source.Emitter }

func (failingEmitter) Record(string, source.Op, int64, []byte, []byte) error { return errInjected }

// TestResnapshotFailsBeforeCheckpoint: with PositionLostResnapshot, a
// re-snapshot (of a keyed table, in snapshot splits, and of a keyless
// one, in the binlog split) that fails before its first checkpoint is
// started over by the next sync, which reads every row and reports the
// reset, as in source/postgres.
func TestResnapshotFailsBeforeCheckpoint(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.k (id int PRIMARY KEY)", db), fmt.Sprintf("INSERT INTO %s.k VALUES (1), (2)", db),
		fmt.Sprintf("CREATE TABLE %s.u (n int)", db), fmt.Sprintf("INSERT INTO %s.u VALUES (1)", db))
	src := newSource(t, d, db, mysql.Config{OnPositionLost: source.PositionLostResnapshot})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if res := sync(t, src, dir); res.Streams["k"].Read != 2 || res.Streams["u"].Read != 1 {
		t.Fatalf("first sync: %+v", res.Streams)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s.k VALUES (3)", db))
	purgeBinlogs(t, d)
	if _, err := syncOnce(ctx, failReads{src}, dir); !errors.Is(err, errInjected) {
		t.Fatalf("the failing re-snapshot: %v, want the injected failure", err)
	}
	var reset []etl.Event
	var mu gosync.Mutex
	res, err := syncEvents(ctx, src, dir, func(e etl.Event) {
		if e.Kind == etl.EventSourceReset {
			mu.Lock()
			reset = append(reset, e)
			mu.Unlock()
		}
	})
	if err != nil || res.Streams["k"].Read != 3 || res.Streams["u"].Read != 1 {
		t.Fatalf("the sync after a failed re-snapshot: %+v, %v; want every row read again", res.Streams, err)
	}
	mu.Lock()
	defer mu.Unlock()
	var pe *mysql.PurgedError
	if len(reset) != 1 || !errors.As(reset[0].Err, &pe) || !strings.Contains(reset[0].Detail, "new snapshot") {
		t.Fatalf("reset events %+v, want one with the *PurgedError", reset)
	}
}

package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/postgres"
)

// TestRunRidesOutServerRestart: the Postgres server scripts/servers.sh
// started is restarted (pg_ctl stop -m fast, then started again from
// its data) under a running pipeline, while a writer inserts rows, one
// transaction each. Run goes on by itself: the stream ends, the next
// attempts fail while the server is away (sync.retrying events naming
// the source), and once it is back an attempt resumes from the last
// checkpoint through the same slot. The rows written before, around and
// after the restart are in the Parquet output once each, as pyarrow
// reads it.
func TestRunRidesOutServerRestart(t *testing.T) {
	dsn(t) // skips without servers
	// The restart is of a server of the test's own: other packages' tests
	// use the shared one meanwhile.
	testutil.PrivateServer(t, "postgres")
	d := dsn(t)
	tbl, pub, slot := name("restart"), name("pub"), name("slot")
	const initial = 500
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, 'initial' FROM generate_series(1, %d) g", tbl, initial),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, StatusInterval: 200 * time.Millisecond})
	var (
		mu      sync.Mutex
		retries []etl.Event
		gens    = map[uint64]bool{}
	)
	h.onEvent = func(e etl.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case etl.EventSyncRetrying:
			retries = append(retries, e)
		case etl.EventEpochCommitted:
			gens[uint64(e.Generation)] = true
		}
	}
	h.retry = &etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 100*time.Millisecond) }()

	// The writer inserts ids from initial+1 on, each in its own
	// transaction, until stop. When an insert fails (the server went
	// away) it waits for up and inserts the same id again: ON CONFLICT
	// DO NOTHING makes that a no-op if the lost insert had committed.
	var wrote atomic.Int64
	stop, up, writerDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		writerDone <- func() error {
			var c *pgconn.PgConn
			defer func() {
				if c != nil {
					c.Close(context.Background())
				}
			}()
			waitedUp := false
			for id := int64(initial + 1); ; {
				select {
				case <-stop:
					return nil
				default:
				}
				if c == nil {
					cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
					var err error
					c, err = pgconn.Connect(cctx, d)
					ccancel()
					if err != nil {
						if waitedUp {
							return fmt.Errorf("connect after the restart: %w", err)
						}
						<-up
						waitedUp = true
						continue
					}
				}
				_, err := c.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s VALUES (%d, 'streamed') ON CONFLICT DO NOTHING", tbl, id)).ReadAll()
				if err != nil {
					c.Close(context.Background())
					c = nil
					if waitedUp {
						return fmt.Errorf("insert after the restart: %w", err)
					}
					<-up
					waitedUp = true
					continue
				}
				wrote.Store(id - initial)
				id++
			}
		}()
	}()
	defer close(stop)

	waitStreaming(t, d, slot, done)
	testutil.Until(t, "streamed rows committed", func() bool {
		r := headRecord(t, h.ckpts)
		return wrote.Load() >= 100 && r != nil && r.Totals[tbl].Written >= initial+50
	})
	testutil.ServerDown(t, "postgres")
	atDown := wrote.Load()
	testutil.Until(t, "a retry naming the source", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range retries {
			if e.Cause == "source" {
				return true
			}
		}
		return false
	})
	testutil.ServerUp(t, "postgres")
	close(up)
	testutil.Until(t, "200 rows written after the restart", func() bool {
		select {
		case err := <-writerDone:
			t.Fatalf("writer: %v", err)
		default:
		}
		return wrote.Load() >= atDown+200
	})
	stop <- struct{}{} // the deferred close won't block on it
	if err := <-writerDone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	total, err := strconv.ParseInt(queryOne(t, d, "SELECT count(*) FROM "+tbl), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, fmt.Sprintf("all %d rows committed", total), func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		r := headRecord(t, h.ckpts)
		return r != nil && r.Totals[tbl].Written >= total
	})
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	for _, e := range retries {
		t.Logf("retry %d after %v: %s: %v", e.Retry, e.Wait, e.Cause, e.Err)
	}
	if len(gens) < 2 {
		t.Errorf("epochs committed by generations %v: want the first and one after the restart", gens)
	}
	mu.Unlock()

	rows := h.rows(tbl)
	ids := map[string]int{}
	for _, r := range rows {
		ids[r]++
	}
	if int64(len(rows)) != total || int64(len(ids)) != total {
		t.Errorf("read %d rows (%d distinct), the table holds %d", len(rows), len(ids), total)
	}
	for id := int64(1); id <= total; id++ {
		if ids["insert "+strconv.FormatInt(id, 10)] != 1 {
			t.Errorf("id %d: %d rows, want 1", id, ids["insert "+strconv.FormatInt(id, 10)])
			break
		}
	}
	t.Logf("%d rows (%d before the stop, %d streamed in all), each once", total, initial+atDown, total-initial)
}

// TestStreamTakenUpAgain: the walsender of a running pipeline is
// terminated (pg_terminate_backend) between transactions. The split
// takes the stream up again within its Read, from its last resume point
// — no new attempt, no retry — and every row written before and after is
// in the output once.
func TestStreamTakenUpAgain(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot := name("cut"), name("pub"), name("slot")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, 'initial' FROM generate_series(1, 100) g", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, d, slot)
	var logs strings.Builder
	h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, StatusInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	var started, retries atomic.Int64
	h.onEvent = func(e etl.Event) {
		switch e.Kind {
		case etl.EventSyncStarted:
			started.Add(1)
		case etl.EventSyncRetrying:
			retries.Add(1)
		}
	}
	h.retry = &etl.Retry{Backoff: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	committed := waitCommitted(t, h, tbl, done)
	insert := func(from, to int) {
		t.Helper()
		for id := from; id <= to; id++ {
			execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (%d, 'streamed')", tbl, id))
		}
	}
	waitStreaming(t, d, slot, done)
	insert(101, 150)
	committed(150)
	pid := queryOne(t, d, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '"+slot+"'")
	execSQL(t, d, "SELECT pg_terminate_backend("+pid+")")
	testutil.Until(t, "the stream taken up again by another walsender", func() bool {
		p := queryOne(t, d, "SELECT COALESCE((SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = '"+slot+"' AND active), '')")
		return p != "" && p != pid
	})
	insert(151, 200)
	committed(200)
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(logs.String(), "taken up again") {
		t.Errorf("no reconnect logged:\n%s", logs.String())
	}
	if started.Load() != 1 || retries.Load() != 0 {
		t.Errorf("%d attempts, %d retries; want the one attempt, none", started.Load(), retries.Load())
	}
	rows := h.rows(tbl)
	seen := map[string]int{}
	for _, r := range rows {
		seen[r]++
	}
	if len(rows) != 200 || len(seen) != 200 {
		t.Errorf("%d rows (%d distinct), want 200", len(rows), len(seen))
	}
	t.Logf("log: %s", logs.String())
}

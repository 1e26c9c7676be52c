package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// pair returns the DSNs of the PostgreSQL 17 primary and its streaming
// standby (scripts/servers.sh start pg17ha). Without them the test
// fails, unless OPENETL_SKIP_SERVERS=1.
func pair(t *testing.T) (primary, standby string) {
	t.Helper()
	primary, standby = os.Getenv("OPENETL_TEST_PG17HA_PRIMARY_DSN"), os.Getenv("OPENETL_TEST_PG17HA_STANDBY_DSN")
	if primary == "" || standby == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_PG17HA_PRIMARY_DSN is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_PG17HA_PRIMARY_DSN is not set: start the pair with scripts/servers.sh start pg17ha, " +
			"or set OPENETL_SKIP_SERVERS=1")
	}
	return primary, standby
}

// waitReplayed waits until the standby has replayed the primary's WAL
// as of now.
func waitReplayed(t *testing.T, primary, standby string) {
	t.Helper()
	lsn := queryOne(t, primary, "SELECT pg_current_wal_insert_lsn()")
	testutil.Until(t, "the standby to replay "+lsn, func() bool {
		return queryOne(t, standby, "SELECT pg_last_wal_replay_lsn() >= '"+lsn+"'::pg_lsn") == "t"
	})
}

// standbySnapshots calls pg_log_standby_snapshot() on the primary until
// stop is closed. Creating a logical slot on a standby waits for a
// running-transactions record from the primary, which Postgres writes on
// its own only every 15 s or so (and only when the primary is busy).
func standbySnapshots(t *testing.T, primary string) (stop func()) {
	t.Helper()
	c, err := pgconn.Connect(context.Background(), primary)
	if err != nil {
		t.Fatal(err)
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		defer c.Close(context.Background())
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, err := c.Exec(context.Background(), "SELECT pg_log_standby_snapshot()").ReadAll(); err != nil {
					t.Errorf("pg_log_standby_snapshot: %v", err)
					return
				}
			}
		}
	}()
	return func() { close(done); <-exited }
}

// appliedByID applies a stream's output in seq order, by id, and returns
// "id v" per live row, sorted.
func appliedByID(t *testing.T, h *harness, stream string) []string {
	t.Helper()
	live := map[string]string{}
	for _, r := range readRows(t, h.tables, stream) {
		id := fmt.Sprint(r["id"])
		if r["_openetl_op"] == "delete" {
			delete(live, id)
		} else {
			live[id] = fmt.Sprint(r["v"])
		}
	}
	var out []string
	for id, v := range live {
		out = append(out, id+" "+v)
	}
	sort.Strings(out)
	return out
}

// idRows returns "id v" per row of tbl at d, sorted as appliedByID does.
func idRows(t *testing.T, d, tbl string) []string {
	t.Helper()
	c, err := pgconn.Connect(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	res, err := c.Exec(context.Background(), "SELECT id, v FROM "+tbl).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res[0].Rows {
		out = append(out, string(r[0])+" "+string(r[1]))
	}
	sort.Strings(out)
	return out
}

// TestFailoverOption: with Config.Failover, a server before Postgres 17
// refuses the pipeline at once with an error wrapping ErrUnsupported
// that Permanent reports; on 17 (the pg17ha primary, and the default
// server when the version matrix runs this on 17 or 18) the slot is
// created as a failover slot, and a slot created before the option was
// set is made one when the next sync resumes from it.
func TestFailoverOption(t *testing.T) {
	primary, _ := pair(t)
	for _, d := range []string{dsn(t), primary} {
		major := serverMajor(t, d)
		t.Run(fmt.Sprintf("pg%d", major), func(t *testing.T) {
			tbl, pub, slot := name("fo"), name("pub"), name("slot")
			execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text)", tbl),
				fmt.Sprintf("INSERT INTO %s SELECT g, 'a' FROM generate_series(1, 10) g", tbl),
				fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
			dropSlotAtCleanup(t, d, slot)
			failover := func() string {
				return queryOne(t, d, "SELECT COALESCE((SELECT (to_jsonb(s) ->> 'failover') FROM pg_replication_slots s WHERE slot_name = '"+
					slot+"'), 'no slot')")
			}
			if major < 17 {
				h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot, Failover: true})
				var src *postgres.Source
				h.setup = func(s *postgres.Source) { src = s }
				_, err := h.sync()
				if !errors.Is(err, postgres.ErrUnsupported) || !strings.Contains(err.Error(), "Config.Failover needs Postgres 17") {
					t.Fatalf("Sync with Failover on Postgres %d: %v, want ErrUnsupported naming Config.Failover", major, err)
				}
				if !src.Permanent(err) {
					t.Errorf("Permanent(%v) = false", err)
				}
				if f := failover(); f != "no slot" {
					t.Errorf("slot: %s, want none created", f)
				}
				t.Logf("Postgres %d: %v", major, err)
				return
			}
			// Without the option first, then with it: the slot is altered.
			h := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot})
			if _, err := h.sync(); err != nil {
				t.Fatal(err)
			}
			if f := failover(); f != "false" {
				t.Fatalf("slot failover = %s after a sync without Config.Failover, want false", f)
			}
			execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (11, 'b')", tbl))
			h.cfg.Failover = true
			if _, err := h.sync(); err != nil {
				t.Fatal(err)
			}
			if f := failover(); f != "true" {
				t.Errorf("slot failover = %s after a sync with Config.Failover, want true", f)
			}
			if got := h.rows(tbl); len(got) != 11 || got[10] != "insert 11" {
				t.Errorf("rows %v, want ids 1-11 once each", got)
			}
			// A fresh slot is created as a failover slot.
			slot2 := name("slot")
			dropSlotAtCleanup(t, d, slot2)
			h2 := newHarness(t, d, postgres.Config{Publication: pub, Slot: slot2, Failover: true})
			if _, err := h2.sync(); err != nil {
				t.Fatal(err)
			}
			if f := queryOne(t, d, "SELECT failover FROM pg_replication_slots WHERE slot_name = '"+slot2+"'"); f != "t" {
				t.Errorf("new slot failover = %s, want t", f)
			}
			if n := len(h2.rows(tbl)); n != 11 {
				t.Errorf("%d rows from the new slot's snapshot, want 11", n)
			}
		})
	}
}

// TestDecodeFromStandby: a pipeline reads from a PostgreSQL 17 standby
// (Postgres 16+ decodes logically on a standby): its slot is made on the
// standby, the snapshot is read there under the slot's exported
// snapshot, and a bounded Sync ends at the standby's replay position
// (pg_current_wal_insert_lsn fails on a standby). The table is written
// on the primary; the output, applied in seq order, equals the table.
// Config.HeartbeatInterval, which would write, is refused there first.
func TestDecodeFromStandby(t *testing.T) {
	primary, standby := pair(t)
	tbl, pub, slot := name("sb"), name("pub"), name("slot")
	execSQL(t, primary, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, 'initial' FROM generate_series(1, 1000) g", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, standby, slot)
	waitReplayed(t, primary, standby)

	// Heartbeats write WAL, which a standby can't: refused at once (by
	// Build, whose Discover reads the catalog).
	hb := newHarness(t, standby, postgres.Config{Publication: pub, Slot: slot, HeartbeatInterval: time.Second})
	var hbSrc *postgres.Source
	hb.setup = func(s *postgres.Source) { hbSrc = s }
	if _, closeAll, err := hb.build(0); err == nil {
		closeAll()
		t.Fatal("Build from a standby with HeartbeatInterval: no error")
	} else if !errors.Is(err, postgres.ErrUnsupported) || !strings.Contains(err.Error(), "HeartbeatInterval") || !hbSrc.Permanent(err) {
		t.Fatalf("Build from a standby with HeartbeatInterval: %v, want a permanent ErrUnsupported naming it", err)
	}

	h := newHarness(t, standby, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 300})

	stop := standbySnapshots(t, primary)
	t0 := time.Now()
	_, err := h.sync()
	stop()
	if err != nil {
		t.Fatalf("first sync from the standby: %v", err)
	}
	t.Logf("first sync (slot made on the standby, snapshot) in %v", time.Since(t0).Round(time.Millisecond))
	if n := h.lastCounts(tbl); n != 1000 {
		t.Errorf("first sync read %d rows, want 1000", n)
	}
	if n := queryOne(t, standby, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+slot+"' AND slot_type = 'logical'"); n != "1" {
		t.Errorf("%s logical slots %s on the standby, want 1", n, slot)
	}
	if n := queryOne(t, primary, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+slot+"'"); n != "0" {
		t.Errorf("%s slots %s on the primary, want none", n, slot)
	}

	for round := range 2 {
		base := 1000 + 500*round
		execSQL(t, primary, fmt.Sprintf("INSERT INTO %s SELECT g, 'streamed' FROM generate_series(%d, %d) g", tbl, base+1, base+500),
			fmt.Sprintf("UPDATE %s SET v = 'updated %d' WHERE id BETWEEN %d AND %d", tbl, round, 100*round+1, 100*round+100),
			fmt.Sprintf("DELETE FROM %s WHERE id BETWEEN %d AND %d", tbl, base+401, base+450))
		waitReplayed(t, primary, standby)
		t0 := time.Now()
		if _, err := h.sync(); err != nil {
			t.Fatalf("sync %d from the standby: %v", round+2, err)
		}
		t.Logf("sync %d (bounded, streamed on the standby) in %v", round+2, time.Since(t0).Round(time.Millisecond))
		if n := h.lastCounts(tbl); n != 650 {
			t.Errorf("sync %d read %d changes, want 650 (500 inserts, 100 updates, 50 deletes)", round+2, n)
		}
	}
	want, got := idRows(t, primary, tbl), appliedByID(t, h, tbl)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output applied in seq order: %d rows, the table %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	t.Logf("%d rows, equal to the primary's table", len(got))
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// promotion is a pipeline running from a PostgreSQL 17 pair of the
// test's own whose primary crashed and whose standby was promoted.
type promotion struct {
	h                *harness
	primary, standby string // DSNs; the standby is the new primary
	tbl              string
	initial          int64
	cut, atCrash     int64 // rows the writer committed when the standby stopped receiving, and in all
	done             chan error
	cancel           context.CancelFunc
	retries          func() []etl.Event
}

// promote runs the first part of the promotion tests: a pipeline
// streams, with Config.Failover, from the primary of a pair of the
// test's own, while a writer commits a row per transaction there. Once
// the standby's copy of the slot has caught up with rows, the standby
// stops receiving WAL, the writer commits 300 more rows on the primary
// alone, and the primary crashes (SIGQUIT: an immediate shutdown) with
// the pipeline mid-stream: those rows are lost with it. The pipeline's
// attempts fail (sync.retrying events) until the standby is promoted;
// promote returns once it is. With held, the primary holds the failover
// slot's changes back until the standby has their WAL
// (synchronized_standby_slots, set by the pg17ha service); without, the
// setting is turned off and promote waits until the pipeline has
// committed the rows the standby never got.
func promote(t *testing.T, held bool) *promotion {
	pair(t) // fails or skips without the servers
	testutil.PrivateServer(t, "pg17ha")
	primary, standby := pair(t)
	// A fast shutdown of what is left at the end: servers.sh stop's
	// SIGTERM to every process of the pair takes seconds.
	standbyDir := queryOne(t, standby, "SELECT setting FROM pg_settings WHERE name = 'data_directory'")
	t.Cleanup(func() { stopServer(t, standbyDir, syscall.SIGINT) })
	tbl, pub, slot := name("fail"), name("pub"), name("slot")
	const initial int64 = 300
	execSQL(t, primary, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, 'initial' FROM generate_series(1, %d) g", tbl, initial),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	both := bothHosts(t, primary, standby)
	h := newHarness(t, both, postgres.Config{Publication: pub, Slot: slot, Failover: true, StatusInterval: 100 * time.Millisecond})
	var (
		mu      sync.Mutex
		retries []etl.Event
	)
	h.onEvent = func(e etl.Event) {
		if e.Kind == etl.EventSyncRetrying {
			mu.Lock()
			retries = append(retries, e)
			mu.Unlock()
		}
	}
	h.retry = &etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond}
	if !held {
		execSQL(t, primary, "ALTER SYSTEM SET synchronized_standby_slots = ''", "SELECT pg_reload_conf()")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 100*time.Millisecond) }()

	// The writer commits ids from initial+1 on, one per transaction, on
	// the primary until it fails (the crash).
	var wrote atomic.Int64
	writerDone := make(chan error, 1)
	go func() {
		c, err := pgconn.Connect(context.Background(), primary)
		if err != nil {
			writerDone <- err
			return
		}
		defer c.Close(context.Background())
		for id := int64(initial + 1); ; id++ {
			if _, err := c.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s VALUES (%d, 'before')", tbl, id)).ReadAll(); err != nil {
				writerDone <- err
				return
			}
			wrote.Store(id - initial)
		}
	}()

	waitStreaming(t, primary, slot, done)
	testutil.Until(t, "rows committed", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		r := headRecord(t, h.ckpts)
		return r != nil && r.Totals[tbl].Written >= initial+100
	})
	// The standby's copy of the slot is persistent (a newly synced slot
	// stays temporary until the primary's has moved past the standby's
	// own start) and has caught up with the rows committed. Two waits
	// are cut short: the primary's slot moves its restart_lsn only at a
	// running-transactions record, which Postgres writes every 15 s
	// (pg_log_standby_snapshot writes one now), and the slot sync worker
	// naps longer and longer (up to 30 s) while it finds nothing to do,
	// as before the pipeline's slot existed (a configuration reload on
	// the standby wakes it).
	confirmed := queryOne(t, primary, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '"+slot+"'")
	var poked time.Time
	testutil.Until(t, "the standby's copy of the slot to reach "+confirmed, func() bool {
		if time.Since(poked) > 100*time.Millisecond {
			queryOne(t, primary, "SELECT pg_log_standby_snapshot()")
			queryOne(t, standby, "SELECT pg_reload_conf()")
			poked = time.Now()
		}
		return queryOne(t, standby, "SELECT COALESCE((SELECT synced AND NOT temporary AND failover AND confirmed_flush_lsn >= '"+confirmed+
			"'::pg_lsn FROM pg_replication_slots WHERE slot_name = '"+slot+"'), false)") == "t"
	})
	// The standby stops receiving (no primary_conninfo: its walreceiver
	// ends and doesn't come back), and the writer commits more rows on
	// the primary, which the standby will never have.
	execSQL(t, standby, "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()")
	testutil.Until(t, "the standby's walreceiver to stop", func() bool {
		return queryOne(t, standby, "SELECT count(*) FROM pg_stat_wal_receiver") == "0"
	})
	cut := wrote.Load()
	testutil.Until(t, "300 rows committed on the primary alone", func() bool {
		select {
		case err := <-writerDone:
			t.Fatalf("writer: %v", err)
		default:
		}
		if wrote.Load() < cut+300 {
			return false
		}
		if held {
			return true
		}
		r := headRecord(t, h.ckpts)
		return r != nil && r.Totals[tbl].Written >= initial+cut+300
	})
	crash(t, primary)
	werr := testutil.Recv(t, "the writer to fail", writerDone)
	atCrash := wrote.Load()
	t.Logf("primary crashed after %d rows written, %d of them after the standby stopped receiving (the writer: %v)", atCrash, atCrash-cut, werr)
	testutil.Until(t, "an attempt retried while no server takes writes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(retries) > 0
	})
	if got := queryOne(t, standby, "SELECT pg_promote()"); got != "t" {
		t.Fatalf("pg_promote() = %s", got)
	}
	return &promotion{h: h, primary: primary, standby: standby, tbl: tbl, initial: initial, cut: cut, atCrash: atCrash,
		done: done, cancel: cancel, retries: func() []etl.Event {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(retries)
		}}
}

// TestFailoverSlotFollowsPromotion: a pipeline streams, with
// Config.Failover, from the primary of a PostgreSQL 17 pair of its own
// whose standby syncs the slot (sync_replication_slots) and whose
// primary holds back a failover slot's changes until the standby has
// their WAL (synchronized_standby_slots); the primary crashes
// mid-stream with 300 rows or more that the standby never received
// (see promote). Once the standby is promoted, Run, whose DSN lists both servers with
// target_session_attrs=read-write, goes on from the new primary through
// the synced slot by itself. A writer then commits more rows there. The
// output holds each row of the new primary's table once, and nothing
// else: none of the lost rows. A sync given the new primary's DSN alone
// then carries on from the same checkpoints.
func TestFailoverSlotFollowsPromotion(t *testing.T) {
	p := promote(t, true)
	h, standby, tbl, initial, done := p.h, p.standby, p.tbl, p.initial, p.done
	const after = 200
	execSQL(t, standby, func() []string {
		var sqls []string
		for i := range after {
			sqls = append(sqls, fmt.Sprintf("INSERT INTO %s VALUES (%d, 'after')", tbl, 1_000_000+i))
		}
		return sqls
	}()...)
	total, err := strconv.ParseInt(queryOne(t, standby, "SELECT count(*) FROM "+tbl), 10, 64)
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
	p.cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, e := range p.retries() {
		t.Logf("retry %d after %v: %s: %v", e.Retry, e.Wait, e.Cause, e.Err)
	}

	want, got := idRows(t, standby, tbl), h.rows(tbl)
	ids := map[string]int{}
	for _, r := range got {
		ids[r]++
	}
	for _, w := range want {
		id, _, _ := strings.Cut(w, " ")
		if n := ids["insert "+id]; n != 1 {
			t.Errorf("id %s: %d rows in the output, want 1", id, n)
		}
		delete(ids, "insert "+id)
	}
	for r, n := range ids {
		t.Errorf("%q: %d rows in the output, not in the new primary's table", r, n)
	}
	if int64(len(want)) != total || len(got) != len(want) {
		t.Errorf("output %d rows, the new primary's table %d (count %d)", len(got), len(want), total)
	}
	lost := initial + p.atCrash - (total - after)
	if lost < 300-1 { // the last insert may have committed unseen
		t.Errorf("%d rows lost with the primary, want the 300 or more written after the standby stopped receiving", lost)
	}
	t.Logf("%d rows in the new primary's table: %d from before the crash, %d after the promotion; %d rows the writer saw committed on the primary were lost with it",
		total, total-after, after, lost)

	// A pipeline given the new primary's DSN alone carries on from the
	// same checkpoints.
	execSQL(t, standby, fmt.Sprintf("INSERT INTO %s SELECT g, 'direct' FROM generate_series(2000001, 2000100) g", tbl))
	h.d = standby
	if _, err := h.sync(); err != nil {
		t.Fatalf("sync with the new primary's DSN: %v", err)
	}
	if n := h.lastCounts(tbl); n != 100 {
		t.Errorf("sync with the new primary's DSN read %d rows, want the 100 inserted since", n)
	}
	if got, want := len(h.rows(tbl)), len(idRows(t, standby, tbl)); got != want {
		t.Errorf("output %d rows after the sync with the new primary's DSN, the table %d", got, want)
	}
}

// bothHosts returns one DSN naming both servers' hosts, for whichever
// takes writes (target_session_attrs=read-write).
func bothHosts(t *testing.T, primary, standby string) string {
	t.Helper()
	hostport := func(d string) string {
		c, err := pgconn.ParseConfig(d)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s:%d", c.Host, c.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s,%s/postgres?sslmode=disable&target_session_attrs=read-write",
		hostport(primary), hostport(standby))
}

// crash stops the server at d at once (SIGQUIT to its postmaster: an
// immediate shutdown, no shutdown checkpoint, walsenders gone without
// sending what they hold) and returns once it has exited.
func crash(t *testing.T, d string) {
	t.Helper()
	stopServer(t, queryOne(t, d, "SELECT setting FROM pg_settings WHERE name = 'data_directory'"), syscall.SIGQUIT)
}

// stopServer sends sig to the postmaster of the server whose data
// directory is dir, unless none runs there, and waits until it has
// exited (it removes its postmaster.pid).
func stopServer(t *testing.T, dir string, sig syscall.Signal) {
	t.Helper()
	pidFile := filepath.Join(dir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	// A plain poll, not testutil.Until: this runs in cleanups too, after
	// the test's context is done.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(pidFile); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server in %s did not exit within a minute of signal %v", dir, sig)
		}
	}
}

// TestPromotionPastForkFails: the promotion of TestFailoverSlotFollowsPromotion
// without synchronized_standby_slots on the primary: the pipeline
// commits rows the standby never received, so its checkpoint lies past
// the point where the new primary's timeline forked from the old one.
// Reading on from there would skip the new primary's first changes and
// keep rows it doesn't have; Run stops instead, with a *SlotError
// wrapping ErrForked (permanent: it matches source.ErrPositionLost),
// naming the fork. A sync under PositionLostResnapshot then starts over
// from a new snapshot.
func TestPromotionPastForkFails(t *testing.T) {
	p := promote(t, false)
	execSQL(t, p.standby, fmt.Sprintf("INSERT INTO %s VALUES (3000000, 'after')", p.tbl))
	err := testutil.Recv(t, "Run to stop", p.done)
	var se *postgres.SlotError
	if !errors.Is(err, postgres.ErrForked) || !errors.As(err, &se) || !etl.IsPermanent(err) {
		t.Fatalf("Run after the promotion: %v, want a permanent *SlotError wrapping ErrForked", err)
	}
	if !strings.Contains(err.Error(), "timeline 1") || !strings.Contains(err.Error(), "synchronized_standby_slots") {
		t.Errorf("error %q: want it to name the timeline and synchronized_standby_slots", err)
	}
	t.Logf("%d rows committed on the primary after the standby stopped receiving; Run: %v", p.atCrash-p.cut, err)

	// Under PositionLostResnapshot a sync starts over instead: a new slot
	// and a snapshot of the new primary's table, with a source.reset
	// event.
	var resets atomic.Int64
	p.h.onEvent = func(e etl.Event) {
		if e.Kind == etl.EventSourceReset {
			resets.Add(1)
		}
	}
	p.h.d = p.standby
	p.h.cfg.OnPositionLost = source.PositionLostResnapshot
	if _, err := p.h.sync(); err != nil {
		t.Fatalf("sync under PositionLostResnapshot: %v", err)
	}
	total, err := strconv.ParseInt(queryOne(t, p.standby, "SELECT count(*) FROM "+p.tbl), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if n := p.h.lastCounts(p.tbl); n != total {
		t.Errorf("sync under PositionLostResnapshot read %d rows, want the table's %d (a new snapshot)", n, total)
	}
	if n := resets.Load(); n != 1 {
		t.Errorf("%d source.reset events, want 1", n)
	}
}

// TestResumedSnapshotOnStandby: a first snapshot read from a standby and
// killed part way resumes in its own split, as before: a standby can't
// write the watermarks the change stream would read the rest under, so
// the rest is not handed over (and nothing waits on a job that can't
// run).
func TestResumedSnapshotOnStandby(t *testing.T) {
	primary, standby := pair(t)
	tbl, pub, slot := name("sbresume"), name("pub"), name("slot")
	execSQL(t, primary, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, 'v' || g FROM generate_series(1, 95) g", tbl),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl))
	dropSlotAtCleanup(t, standby, slot)
	waitReplayed(t, primary, standby)
	ctx := context.Background()
	src := newSource(t, standby, postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 10})
	stop := standbySnapshots(t, primary)
	splits, err := src.Open(ctx, []string{tbl}, nil)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	var streamState recordKeys
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, &streamState, true); err != nil {
		t.Fatal(err)
	}
	first := &recordKeys{limit: 35}
	if err := splitByID(t, splits, "snapshot:"+tbl).Read(ctx, first, true); !errors.Is(err, errKilled) {
		t.Fatalf("first read: %v, want it killed", err)
	}
	resume := map[source.SplitID][]byte{source.SplitID("slot:" + slot): streamState.state, source.SplitID("snapshot:" + tbl): first.state}
	if splits, err = src.Open(ctx, []string{tbl}, resume); err != nil {
		t.Fatal(err)
	}
	rest, streamed := &recordKeys{}, &recordKeys{}
	if err := splitByID(t, splits, "snapshot:"+tbl).Read(ctx, rest, true); err != nil {
		t.Fatal(err)
	}
	if err := splitByID(t, splits, "slot:"+slot).Read(ctx, streamed, true); err != nil {
		t.Fatalf("the stream after the resume: %v", err)
	}
	if got := 30 + len(rest.keys); got != 95 || len(streamed.keys) != 0 {
		t.Fatalf("the split read %d rows in all, want 95; the stream %d, want none", got, len(streamed.keys))
	}
	var done struct{ Done bool }
	if err := json.Unmarshal(rest.state, &done); err != nil || !done.Done {
		t.Errorf("final state %s, want done", rest.state)
	}
}

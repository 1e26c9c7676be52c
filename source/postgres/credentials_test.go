package postgres_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// passwordAuth makes the server ask role for its password (the test
// servers trust every login): scram-sha-256 lines for role, for plain
// and replication connections from 127.0.0.1, go before the others in
// pg_hba.conf, written by the server itself (lo_export), and the server
// reloads it. A cleanup takes them out again. It returns once the server
// refuses role a wrong password. Only role's logins change.
func passwordAuth(t *testing.T, d, role string) {
	t.Helper()
	marker := "# openetl test " + role
	file := queryOne(t, d, "SHOW hba_file")
	old := queryOne(t, d, "SELECT pg_read_file(current_setting('hba_file'))")
	writeHBA(t, d, file, fmt.Sprintf("host all %[1]s 127.0.0.1/32 scram-sha-256 %[2]s\nhost replication %[1]s 127.0.0.1/32 scram-sha-256 %[2]s\n",
		role, marker)+old)
	t.Cleanup(func() {
		var keep []string
		for _, l := range strings.SplitAfter(queryOne(t, d, "SELECT pg_read_file(current_setting('hba_file'))"), "\n") {
			if !strings.Contains(l, marker) {
				keep = append(keep, l)
			}
		}
		writeHBA(t, d, file, strings.Join(keep, ""))
	})
	wrong := roleDSN(t, d, role, "not-the-password")
	testutil.Until(t, "the server to ask "+role+" for its password", func() bool {
		err := login(wrong)
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "28P01"
	})
}

// writeHBA writes content to the server's pg_hba.conf and reloads it.
func writeHBA(t *testing.T, d, file, content string) {
	t.Helper()
	execSQL(t, d, fmt.Sprintf(`DO $$DECLARE o oid := lo_from_bytea(0, decode('%s', 'base64'));
BEGIN PERFORM lo_export(o, '%s'); PERFORM lo_unlink(o); END$$`,
		base64.StdEncoding.EncodeToString([]byte(content)), strings.ReplaceAll(file, "'", "''")),
		"SELECT pg_reload_conf()")
}

// roleDSN is d with user and password replaced.
func roleDSN(t *testing.T, d, user, password string) string {
	t.Helper()
	u, err := url.Parse(d)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// login connects to dsn and closes the connection again.
func login(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return c.Close(context.Background())
}

// rotate changes role's password on the server to password, makes
// setHook return it from now on, and ends every connection of role
// (the source's query, snapshot and replication connections, the
// walsender included), waiting until they are gone. Every connection
// role has after rotate returns logged in with password. It returns the
// server's time when the password changed.
func rotate(t *testing.T, d, role, password string, setHook func(string)) string {
	t.Helper()
	execSQL(t, d, "ALTER ROLE "+role+" PASSWORD '"+password+"'")
	at := queryOne(t, d, "SELECT now()")
	setHook(password)
	n := queryOne(t, d, "SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity WHERE usename = '"+role+"'")
	t.Logf("password of %s changed at %s; %s connections ended", role, at, n)
	return at
}

// credentialsSetup creates a table of initial rows, a publication of it
// and a role that may read it through the slot (LOGIN REPLICATION,
// SELECT), with password pw-1 and password auth (passwordAuth), all
// dropped at cleanup.
func credentialsSetup(t *testing.T, d string, initial int) (tbl, pub, slot, role string) {
	t.Helper()
	tbl, pub, slot, role = name("cred"), name("pub"), name("slot"), name("credrole")
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s (id int8 PRIMARY KEY, v text)", tbl),
		fmt.Sprintf("INSERT INTO %s SELECT g, 'initial' FROM generate_series(1, %d) g", tbl, initial),
		fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, tbl),
		"CREATE ROLE "+role+" LOGIN REPLICATION PASSWORD 'pw-1'",
		"GRANT SELECT ON "+tbl+" TO "+role)
	t.Cleanup(func() {
		execSQL(t, d, "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity WHERE usename = '"+role+"'",
			"DROP PUBLICATION IF EXISTS "+pub, "DROP TABLE IF EXISTS "+tbl, "DROP ROLE IF EXISTS "+role)
	})
	dropSlotAtCleanup(t, d, slot)
	passwordAuth(t, d, role)
	return tbl, pub, slot, role
}

// TestCredentialsRotated: a pipeline reads a table as a role whose
// password the test changes twice on the server while it runs, once
// during the snapshot and once while it streams, each time ending every
// connection of the role (pg_terminate_backend: the snapshot's, the
// query connection, the walsender). The DSN names a role that does not
// exist, with a wrong password: every connection logs in with what
// Config.Credentials returns, user and password, the current one. Run
// rides out both rotations; every connection the role has afterwards
// started after the change, the old password is refused, and the Parquet
// output holds each of the 1000 snapshot rows and 200 streamed inserts
// once.
func TestCredentialsRotated(t *testing.T) {
	d := dsn(t)
	const initial, streamed = 1000, 200
	tbl, pub, slot, role := credentialsSetup(t, d, initial)
	var (
		password atomic.Pointer[string]
		calls    atomic.Int64
	)
	setHook := func(p string) { password.Store(&p) }
	setHook("pw-1")
	cfg := postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 100, StatusInterval: 100 * time.Millisecond,
		Credentials: func(ctx context.Context) (postgres.Credentials, error) {
			calls.Add(1)
			return postgres.Credentials{User: role, Password: *password.Load()}, nil
		}}
	h := newHarness(t, roleDSN(t, d, "no_such_"+role, "stale"), cfg)
	// The snapshot split stops after its third chunk until the first
	// rotation is done, so that it has a connection to lose.
	release := make(chan struct{})
	h.wrap = func(s source.Source) source.Source { return testutil.HoldUntil(s, 300, release) }
	var (
		started, retries atomic.Int64
		lastRetry        atomic.Pointer[error]
	)
	h.onEvent = func(e etl.Event) {
		switch e.Kind {
		case etl.EventSyncStarted:
			started.Add(1)
		case etl.EventSyncRetrying:
			retries.Add(1)
			lastRetry.Store(&e.Err)
		}
	}
	h.retry = &etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	committed := func(n int64) {
		t.Helper()
		testutil.Until(t, fmt.Sprintf("%d rows committed", n), func() bool {
			select {
			case err := <-done:
				t.Fatalf("Run ended: %v", err)
			default:
			}
			// Each rotation costs an attempt or two; more is a source
			// that logs in with what the hook no longer returns.
			if n := retries.Load(); n > 10 {
				t.Fatalf("%d attempts retried, the last after: %v", n, *lastRetry.Load())
			}
			r := headRecord(t, h.ckpts)
			return r != nil && r.Totals[tbl].Written >= n
		})
	}
	// Every connection of role started after at (the older ones were
	// ended), and the password before is refused.
	loggedInAfter := func(at, old string) {
		t.Helper()
		if n := queryOne(t, d, "SELECT count(*) FROM pg_stat_activity WHERE usename = '"+role+"' AND backend_start < '"+at+"'"); n != "0" {
			t.Errorf("%s connections of %s from before the password changed", n, role)
		}
		var pe *pgconn.PgError
		if err := login(roleDSN(t, d, role, old)); !errors.As(err, &pe) || pe.Code != "28P01" {
			t.Errorf("login with the old password: %v, want SQLSTATE 28P01", err)
		}
	}

	committed(300)
	before := calls.Load()
	at := rotate(t, d, role, "pw-2", setHook)
	close(release)
	committed(initial)
	waitStreaming(t, d, slot, done)
	loggedInAfter(at, "pw-1")
	afterFirst := calls.Load()
	if afterFirst == before {
		t.Errorf("Config.Credentials not called after the rotation during the snapshot")
	}

	insert := func(from, to int) {
		t.Helper()
		for id := from; id <= to; id++ {
			execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (%d, 'streamed')", tbl, id))
		}
	}
	insert(initial+1, initial+streamed/2)
	committed(initial + streamed/2)
	walsender := queryOne(t, d, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '"+slot+"'")
	retried := retries.Load()
	at = rotate(t, d, role, "pw-3", setHook)
	testutil.Until(t, "a new walsender streaming from the slot", func() bool {
		p := queryOne(t, d, "SELECT COALESCE((SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = '"+slot+"' AND active), '')")
		return p != "" && p != walsender
	})
	insert(initial+streamed/2+1, initial+streamed)
	committed(initial + streamed)
	loggedInAfter(at, "pw-2")
	if calls.Load() == afterFirst {
		t.Errorf("Config.Credentials not called after the rotation while streaming")
	}
	// The stream broke between transactions: Read takes it up again
	// itself, logging in with the hook's password (a login with another
	// fails, and the runner's next attempt would do it).
	if n := retries.Load() - retried; n != 0 {
		t.Errorf("the rotation while streaming cost %d attempts, want the stream taken up again within its Read; the last after: %v", n, *lastRetry.Load())
	}
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rows := h.rows(tbl)
	seen := map[string]int{}
	for _, r := range rows {
		seen[r]++
	}
	for id := 1; id <= initial+streamed; id++ {
		if n := seen[fmt.Sprintf("insert %d", id)]; n != 1 {
			t.Errorf("id %d: %d rows, want 1", id, n)
		}
	}
	if len(rows) != initial+streamed {
		t.Errorf("%d rows, want %d", len(rows), initial+streamed)
	}
	t.Logf("%d rows out for %d in; Config.Credentials called %d times (%d before the first rotation, %d before the second); %d attempts, %d retries",
		len(rows), initial+streamed, calls.Load(), before, afterFirst, started.Load(), retries.Load())
}

// TestQueryConnectionLost: while a pipeline streams, the server ends
// the source's query connection, as a rotation does that ends a role's
// connections one by one, or an idle-session timeout. The source finds
// out at its next query during Read and runs it again on a new
// connection: the stream goes on within its attempt, and rows inserted
// afterwards are delivered once.
//   - heartbeat: the connection ends while the stream runs; the next
//     heartbeat's query finds it gone.
//   - stream taken up again: the walsender ends, and the query
//     connection ends after the slot's checks and before the new
//     START_REPLICATION; the check of the slot once streaming finds it
//     gone (CI once failed TestCredentialsRotated so).
//
// Before, either failed the attempt.
func TestQueryConnectionLost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
		end       func(t *testing.T, d, role, slot string)
	}{
		{"heartbeat", 100 * time.Millisecond, func(t *testing.T, d, role, _ string) { endClients(t, d, role) }},
		{"stream taken up again", 0, func(t *testing.T, d, role, slot string) {
			var once atomic.Bool
			postgres.SetBeforeStart(func() {
				if once.CompareAndSwap(false, true) {
					endClients(t, d, role)
				}
			})
			t.Cleanup(func() { postgres.SetBeforeStart(nil) })
			walsender := queryOne(t, d, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '"+slot+"'")
			execSQL(t, d, "SELECT pg_terminate_backend("+walsender+", 30000)")
			testutil.Until(t, "the stream taken up again", func() bool {
				p := queryOne(t, d, "SELECT COALESCE((SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = '"+slot+"' AND active), '')")
				return once.Load() && p != "" && p != walsender
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := dsn(t)
			const initial, streamed = 10, 20
			tbl, pub, slot, role := credentialsSetup(t, d, initial)
			h := newHarness(t, roleDSN(t, d, role, "pw-1"), postgres.Config{Publication: pub, Slot: slot,
				StatusInterval: 100 * time.Millisecond, HeartbeatInterval: tc.heartbeat})
			retried := recordRetries(h)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- h.run(ctx, 50*time.Millisecond) }()
			committed := waitCommitted(t, h, tbl, done)
			committed(initial)
			waitStreaming(t, d, slot, done)
			at := queryOne(t, d, "SELECT now()")
			tc.end(t, d, role, slot)
			// The source queried again on a new connection.
			testutil.Until(t, "a new query connection", func() bool {
				return queryOne(t, d, "SELECT count(*) FROM pg_stat_activity WHERE usename = '"+role+
					"' AND backend_type = 'client backend' AND backend_start > '"+at+"'") != "0"
			})
			for id := initial + 1; id <= initial+streamed; id++ {
				execSQL(t, d, fmt.Sprintf("INSERT INTO %s VALUES (%d, 'streamed')", tbl, id))
			}
			committed(initial + streamed)
			if n := retried.count(); n != 0 {
				t.Errorf("the lost query connection cost %d attempts, the last after: %v", n, retried.last())
			}
			cancel()
			if err := testutil.Recv(t, "Run to stop", done); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if rows := h.rows(tbl); len(rows) != initial+streamed {
				t.Errorf("%d rows, want %d", len(rows), initial+streamed)
			}
		})
	}
}

// TestResnapshotConnectionLost: a re-snapshot's chunks are read on a
// connection of their own, idle while the stream waits for a chunk's
// watermark and emits its rows. The stream is held after a few chunks
// and the source's connections other than the walsender are ended (the
// query connection and the chunk's); released, the next chunk's query
// finds its connection gone and runs again on a new one: the job ends
// within the attempt, and every row is read again once. Before, it cost
// an attempt.
func TestResnapshotConnectionLost(t *testing.T) {
	d := dsn(t)
	const rows = 1000
	tbl, pub, slot, role := credentialsSetup(t, d, rows)
	emit := "FUNCTION pg_logical_emit_message(boolean, text, text)"
	execSQL(t, d, "GRANT EXECUTE ON "+emit+" TO "+role)
	t.Cleanup(func() { execSQL(t, d, "REVOKE EXECUTE ON "+emit+" FROM "+role) })
	h := newHarness(t, roleDSN(t, d, role, "pw-1"), postgres.Config{Publication: pub, Slot: slot, SnapshotChunkRows: 100,
		StatusInterval: 100 * time.Millisecond})
	if _, err := h.sync(); err != nil { // the first snapshot
		t.Fatal(err)
	}
	// Only the stream's split reads in the Run: it holds after the
	// re-snapshot's fifth chunk, at the resume point that follows it.
	release := make(chan struct{})
	h.wrap = func(s source.Source) source.Source { return testutil.HoldUntil(s, 450, release) }
	var pl atomic.Pointer[etl.Pipeline]
	h.built = func(p *etl.Pipeline) { pl.Store(p) }
	retried := recordRetries(h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	waitStreaming(t, d, slot, done)
	p := pl.Load()
	if err := p.Resnapshot(ctx, tbl); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, "the re-snapshot held part way", func() bool {
		s := p.Status().Streams[tbl]
		return s.Snapshotting && s.SnapshotDone >= 450
	})
	if n := queryOne(t, d, "SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity WHERE usename = '"+role+
		"' AND backend_type = 'client backend'"); n != "2" {
		t.Fatalf("%s connections of %s ended, want 2: the query connection and the re-snapshot's", n, role)
	}
	close(release)
	testutil.Until(t, "a checkpoint with the re-snapshot done", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		x, ok := slotJobs(t, h.ckpts, slot)
		return ok && len(x.Jobs) == 0 && x.Raise[tbl] > 0
	})
	if n := retried.count(); n != 0 {
		t.Errorf("the lost connections cost %d attempts, the last after: %v", n, retried.last())
	}
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	seen := map[string]int{}
	for _, r := range h.rows(tbl) {
		seen[r]++
	}
	for id := 1; id <= rows; id++ {
		if n := seen[fmt.Sprintf("insert %d", id)]; n != 2 {
			t.Errorf("id %d: %d rows, want 2 (the snapshot's and the re-snapshot's)", id, n)
		}
	}
}

// endClients ends role's connections other than walsenders (the
// source's query connection, once the snapshot is done), waiting until
// they are gone; there must be one.
func endClients(t *testing.T, d, role string) {
	t.Helper()
	if n := queryOne(t, d, "SELECT count(pg_terminate_backend(pid, 30000)) FROM pg_stat_activity WHERE usename = '"+role+
		"' AND backend_type = 'client backend'"); n == "0" {
		t.Errorf("no query connection of %s to end", role)
	}
}

// TestStalePasswordAfterRotation: a pipeline logging in with a fixed
// password (no Config.Credentials) streams; the password changes on the
// server and its connections end. Run stops at the next login with an
// error that says the credentials were refused (ErrCredentials, SQLSTATE
// 28P01, naming the role and Config.Credentials), permanent: no retry
// fixes a password that is no longer the role's.
func TestStalePasswordAfterRotation(t *testing.T) {
	d := dsn(t)
	tbl, pub, slot, role := credentialsSetup(t, d, 10)
	h := newHarness(t, roleDSN(t, d, role, "pw-1"), postgres.Config{Publication: pub, Slot: slot, StatusInterval: 100 * time.Millisecond})
	h.retry = &etl.Retry{Backoff: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.run(ctx, 50*time.Millisecond) }()
	testutil.Until(t, "the snapshot committed", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		r := headRecord(t, h.ckpts)
		return r != nil && r.Totals[tbl].Written >= 10
	})
	waitStreaming(t, d, slot, done)
	rotate(t, d, role, "pw-2", func(string) {})
	err := testutil.Recv(t, "Run to stop", done)
	var pe *pgconn.PgError
	if !errors.Is(err, postgres.ErrCredentials) || !errors.As(err, &pe) || pe.Code != "28P01" || !etl.IsPermanent(err) {
		t.Fatalf("Run after the rotation: %v (permanent %v), want ErrCredentials, SQLSTATE 28P01, permanent", err, etl.IsPermanent(err))
	}
	for _, want := range []string{`"` + role + `"`, "Config.Credentials", "refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	t.Logf("Run: %v", err)
}

// permanentErr is an error its hook calls permanent.
type permanentErr struct{ error }

func (permanentErr) Permanent() bool { return true }
func (e permanentErr) Unwrap() error { return e.error }

// TestCredentialsErrors: a Sync whose Config.Credentials fails (after
// the Build, which logged in) returns an error wrapping ErrCredentials
// and the hook's error, retryable, or permanent when the hook's error
// says so; credentials from the hook that the server refuses are
// retryable too (the next attempt asks again), where the same refused
// from the DSN are permanent.
func TestCredentialsErrors(t *testing.T) {
	d := dsn(t)
	_, pub, slot, role := credentialsSetup(t, d, 10)
	errStore := errors.New("secret store unavailable")
	for _, tc := range []struct {
		name      string
		then      func() (postgres.Credentials, error) // what the hook returns after its first call
		permanent bool
		wrapped   error  // in the error's chain, when set
		code      string // the server's SQLSTATE, when it refused
	}{
		{"hook fails", func() (postgres.Credentials, error) { return postgres.Credentials{}, errStore }, false, errStore, ""},
		{"hook fails for good", func() (postgres.Credentials, error) { return postgres.Credentials{}, permanentErr{errStore} },
			true, errStore, ""},
		{"hook's password refused", func() (postgres.Credentials, error) { return postgres.Credentials{Password: "pw-0"}, nil },
			false, nil, "28P01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			hook := func(context.Context) (postgres.Credentials, error) {
				if calls.Add(1) == 1 {
					return postgres.Credentials{Password: "pw-1"}, nil // Build's catalog query
				}
				return tc.then()
			}
			h := newHarness(t, roleDSN(t, d, role, "stale"), postgres.Config{Publication: pub, Slot: slot, Credentials: hook})
			_, err := h.sync()
			var pe *pgconn.PgError
			switch {
			case !errors.Is(err, postgres.ErrCredentials):
				t.Fatalf("Sync: %v, want ErrCredentials", err)
			case tc.wrapped != nil && !errors.Is(err, tc.wrapped):
				t.Errorf("Sync: %v, want it to wrap %v", err, tc.wrapped)
			case tc.code != "" && (!errors.As(err, &pe) || pe.Code != tc.code):
				t.Errorf("Sync: %v, want SQLSTATE %s", err, tc.code)
			case etl.IsPermanent(err) != tc.permanent || etl.IsRetryable(err) == tc.permanent:
				t.Errorf("Sync: %v: permanent %v, retryable %v; want permanent %v", err, etl.IsPermanent(err), etl.IsRetryable(err), tc.permanent)
			}
			t.Logf("Sync: %v", err)
		})
	}
	t.Run("DSN's password refused", func(t *testing.T) {
		src := newSource(t, roleDSN(t, d, role, "pw-0"), postgres.Config{Publication: pub, Slot: slot})
		_, err := src.Discover(context.Background())
		var pe *pgconn.PgError
		if !errors.Is(err, postgres.ErrCredentials) || !errors.As(err, &pe) || pe.Code != "28P01" || !src.Permanent(err) {
			t.Fatalf("Discover: %v (permanent %v), want ErrCredentials, SQLSTATE 28P01, permanent", err, src.Permanent(err))
		}
		t.Logf("Discover: %v", err)
	})
}

package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// userDSN is d with user and password replaced.
func userDSN(d, user, password string) string {
	_, rest, _ := strings.Cut(d, "@")
	return user + ":" + password + "@" + rest
}

// login connects to the server of dsn as its user and closes the
// connection again.
func login(dsn string) error {
	user, rest, _ := strings.Cut(dsn, "@")
	u, p, _ := strings.Cut(user, ":")
	addr, _, _ := strings.Cut(rest, "/")
	c, err := client.Connect(addr, u, p, "")
	if err != nil {
		return err
	}
	return c.Close()
}

// credentialsUser creates a database with a table of initial rows and a
// user user@127.0.0.1 with password pw-1 and the rights the source
// needs (SELECT on the database, REPLICATION SLAVE, BINLOG MONITOR),
// dropped at cleanup.
func credentialsUser(t *testing.T, d string, initial int) (db, user string) {
	t.Helper()
	db, user = database(t, d), name("cred")
	execSQL(t, d, "CREATE TABLE "+db+".items (id BIGINT PRIMARY KEY, v TEXT)",
		fmt.Sprintf("INSERT INTO %[1]s.items SELECT seq, 'initial' FROM %[1]s.seq_1_to_%[2]d", db, initial),
		"CREATE USER '"+user+"'@'127.0.0.1' IDENTIFIED BY 'pw-1'",
		"GRANT SELECT ON "+db+".* TO '"+user+"'@'127.0.0.1'",
		"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '"+user+"'@'127.0.0.1'")
	t.Cleanup(func() {
		for _, id := range userThreads(t, d, user) {
			kill(t, d, id)
		}
		execSQL(t, d, "DROP USER IF EXISTS '"+user+"'@'127.0.0.1'")
	})
	return db, user
}

// userThreads returns the IDs of user's connections.
func userThreads(t *testing.T, d, user string) []string {
	t.Helper()
	var ids []string
	for _, r := range queryRows(t, d, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '"+user+"'") {
		ids = append(ids, r[0])
	}
	return ids
}

// kill ends a connection (gone already is fine).
func kill(t *testing.T, d, id string) {
	t.Helper()
	c := conn(t, d)
	defer c.Close()
	if _, err := c.Execute("KILL " + id); err != nil {
		var me *gomysql.MyError
		if !errors.As(err, &me) || me.Code != gomysql.ER_NO_SUCH_THREAD {
			t.Fatalf("KILL %s: %v", id, err)
		}
	}
}

// rotateUser changes user's password on the server to password, makes
// setHook return it from now on, and kills every connection of user
// (the source's query and snapshot connections, the binlog dump
// threads), waiting until they are gone: every connection user has
// afterwards logged in with password.
func rotateUser(t *testing.T, d, user, password string, setHook func(string)) {
	t.Helper()
	execSQL(t, d, "ALTER USER '"+user+"'@'127.0.0.1' IDENTIFIED BY '"+password+"'")
	setHook(password)
	// Connection IDs only grow: the user's connections up to this one's
	// are from before the change.
	since := queryRows(t, d, "SELECT CONNECTION_ID()")[0][0]
	old := "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '" + user + "' AND ID < " + since
	var n int
	for _, r := range queryRows(t, d, old) {
		kill(t, d, r[0])
		n++
	}
	testutil.Until(t, "the connections of "+user+" from before the change to end", func() bool {
		return len(queryRows(t, d, old)) == 0
	})
	t.Logf("password of %s changed; %d connections killed", user, n)
}

// credPipeline is a pipeline reading src into Parquet files under
// dir/tables, with checkpoints under dir/checkpoints.
func credPipeline(t *testing.T, src source.Source, dir string, onEvent func(etl.Event)) *etl.Pipeline {
	t.Helper()
	bucket, err := fileblob.OpenBucket(filepath.Join(dir, "tables"), &fileblob.Options{CreateDir: true, Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	b := etl.NewPipeline("my").From(src).To(dst).Checkpoints(store).EpochEvery(50*time.Millisecond, 0).
		Retry(etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	if onEvent != nil {
		b = b.OnEvent(onEvent, 0)
	}
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// TestCredentialsRotated: a pipeline reads a table as a user whose
// password the test changes twice on the server while it runs, once
// during the snapshot and once while it streams, each time killing
// every connection of the user (the snapshot's, the query connection,
// the binlog dump threads). The DSN names another user, with a wrong
// password: every connection logs in with what Config.Credentials
// returns, user and password, the current one. Run rides out both
// rotations; the old password is refused, and the Parquet output holds
// each of the 1000 snapshot rows and 200 streamed inserts once.
func TestCredentialsRotated(t *testing.T) {
	d := dsn(t)
	const initial, streamed = 1000, 200
	db, user := credentialsUser(t, d, initial)
	var (
		password atomic.Pointer[string]
		calls    atomic.Int64
	)
	setHook := func(p string) { password.Store(&p) }
	setHook("pw-1")
	src := newSource(t, userDSN(d, "no_such_user", "stale"), db, mysql.Config{SnapshotChunkRows: 100,
		Credentials: func(ctx context.Context) (mysql.Credentials, error) {
			calls.Add(1)
			return mysql.Credentials{User: user, Password: *password.Load()}, nil
		}})
	// The snapshot split stops after its third chunk until the first
	// rotation is done, so that it has a connection to lose.
	release := make(chan struct{})
	dir := t.TempDir()
	var (
		started, retries atomic.Int64
		lastRetry        atomic.Pointer[error]
	)
	p := credPipeline(t, testutil.HoldUntil(src, 300, release), dir, func(e etl.Event) {
		switch e.Kind {
		case etl.EventSyncStarted:
			started.Add(1)
		case etl.EventSyncRetrying:
			retries.Add(1)
			lastRetry.Store(&e.Err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
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
			c, err := p.Inspect(context.Background())
			return err == nil && c.Totals["items"].Written >= n
		})
	}
	refused := func(old string) {
		t.Helper()
		var me *gomysql.MyError
		if err := login(userDSN(d, user, old)); !errors.As(err, &me) || me.Code != gomysql.ER_ACCESS_DENIED_ERROR {
			t.Errorf("login with the old password: %v, want error 1045", err)
		}
	}
	streaming := func() []string {
		var ids []string
		for _, r := range queryRows(t, d, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '"+user+"' AND COMMAND LIKE 'Binlog Dump%'") {
			ids = append(ids, r[0])
		}
		return ids
	}

	committed(300)
	before := calls.Load()
	rotateUser(t, d, user, "pw-2", setHook)
	close(release)
	committed(initial)
	refused("pw-1")
	afterFirst := calls.Load()
	if afterFirst == before {
		t.Errorf("Config.Credentials not called after the rotation during the snapshot")
	}

	insert := func(from, to int) {
		t.Helper()
		for id := from; id <= to; id++ {
			execSQL(t, d, fmt.Sprintf("INSERT INTO %s.items VALUES (%d, 'streamed')", db, id))
		}
	}
	insert(initial+1, initial+streamed/2)
	committed(initial + streamed/2)
	testutil.Until(t, "the binlog stream", func() bool { return len(streaming()) == 1 })
	dump := streaming()[0]
	retried := retries.Load()
	rotateUser(t, d, user, "pw-3", setHook)
	testutil.Until(t, "the binlog stream on a new connection", func() bool {
		ids := streaming()
		return len(ids) == 1 && ids[0] != dump
	})
	insert(initial+streamed/2+1, initial+streamed)
	committed(initial + streamed)
	refused("pw-2")
	if calls.Load() == afterFirst {
		t.Errorf("Config.Credentials not called after the rotation while streaming")
	}
	// The stream broke between transactions: Read takes it up again
	// itself, logging in with the hook's password (a login with another
	// fails, and the runner's next attempt would do it).
	if n := retries.Load() - retried; n != 0 {
		t.Errorf("the rotation while streaming cost %d attempts, want the stream taken up again within its Read", n)
	}
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rows := readRows(t, dir, "items")
	seen := map[string]int{}
	for _, r := range rows {
		seen[fmt.Sprint(r["id"])]++
	}
	for id := 1; id <= initial+streamed; id++ {
		if n := seen[fmt.Sprint(id)]; n != 1 {
			t.Errorf("id %d: %d rows, want 1", id, n)
		}
	}
	if len(rows) != initial+streamed {
		t.Errorf("%d rows, want %d", len(rows), initial+streamed)
	}
	t.Logf("%d rows out for %d in; Config.Credentials called %d times (%d before the first rotation, %d before the second); %d attempts, %d retries",
		len(rows), initial+streamed, calls.Load(), before, afterFirst, started.Load(), retries.Load())
}

// TestStalePasswordAfterRotation: a pipeline logging in with a fixed
// password (no Config.Credentials) streams; the password changes on the
// server and its connections are killed. Run stops at the next login
// with an error that says the credentials were refused (ErrCredentials,
// error 1045, naming the user and Config.Credentials), permanent: no
// retry fixes a password that is no longer the user's.
func TestStalePasswordAfterRotation(t *testing.T) {
	d := dsn(t)
	db, user := credentialsUser(t, d, 10)
	src := newSource(t, userDSN(d, user, "pw-1"), db, mysql.Config{})
	p := credPipeline(t, src, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testutil.Until(t, "the snapshot committed and the binlog streaming", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		c, err := p.Inspect(context.Background())
		return err == nil && c.Totals["items"].Written >= 10 &&
			len(queryRows(t, d, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '"+user+"' AND COMMAND LIKE 'Binlog Dump%'")) == 1
	})
	rotateUser(t, d, user, "pw-2", func(string) {})
	err := testutil.Recv(t, "Run to stop", done)
	var me *gomysql.MyError
	if !errors.Is(err, mysql.ErrCredentials) || !errors.As(err, &me) || me.Code != gomysql.ER_ACCESS_DENIED_ERROR || !etl.IsPermanent(err) {
		t.Fatalf("Run after the rotation: %v (permanent %v), want ErrCredentials, error 1045, permanent", err, etl.IsPermanent(err))
	}
	for _, want := range []string{`"` + user + `"`, "Config.Credentials", "refused"} {
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
	db, user := credentialsUser(t, d, 10)
	errStore := errors.New("secret store unavailable")
	for _, tc := range []struct {
		name      string
		then      func() (mysql.Credentials, error) // what the hook returns after its first call
		permanent bool
		wrapped   error  // in the error's chain, when set
		code      uint16 // the server's error, when it refused
	}{
		{"hook fails", func() (mysql.Credentials, error) { return mysql.Credentials{}, errStore }, false, errStore, 0},
		{"hook fails for good", func() (mysql.Credentials, error) { return mysql.Credentials{}, permanentErr{errStore} },
			true, errStore, 0},
		{"hook's password refused", func() (mysql.Credentials, error) { return mysql.Credentials{Password: "pw-0"}, nil },
			false, nil, gomysql.ER_ACCESS_DENIED_ERROR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			src := newSource(t, userDSN(d, user, "stale"), db, mysql.Config{
				Credentials: func(context.Context) (mysql.Credentials, error) {
					if calls.Add(1) == 1 {
						return mysql.Credentials{Password: "pw-1"}, nil // Build's catalog query
					}
					return tc.then()
				}})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := syncOnce(ctx, src, t.TempDir())
			var me *gomysql.MyError
			switch {
			case !errors.Is(err, mysql.ErrCredentials):
				t.Fatalf("Sync: %v, want ErrCredentials", err)
			case tc.wrapped != nil && !errors.Is(err, tc.wrapped):
				t.Errorf("Sync: %v, want it to wrap %v", err, tc.wrapped)
			case tc.code != 0 && (!errors.As(err, &me) || me.Code != tc.code):
				t.Errorf("Sync: %v, want error %d", err, tc.code)
			case etl.IsPermanent(err) != tc.permanent || etl.IsRetryable(err) == tc.permanent:
				t.Errorf("Sync: %v: permanent %v, retryable %v; want permanent %v", err, etl.IsPermanent(err), etl.IsRetryable(err), tc.permanent)
			}
			t.Logf("Sync: %v", err)
		})
	}
	t.Run("DSN's password refused", func(t *testing.T) {
		src := newSource(t, userDSN(d, user, "pw-0"), db, mysql.Config{})
		_, err := src.Discover(context.Background())
		var me *gomysql.MyError
		if !errors.Is(err, mysql.ErrCredentials) || !errors.As(err, &me) || me.Code != gomysql.ER_ACCESS_DENIED_ERROR || !src.Permanent(err) {
			t.Fatalf("Discover: %v (permanent %v), want ErrCredentials, error 1045, permanent", err, src.Permanent(err))
		}
		t.Logf("Discover: %v", err)
	})
}

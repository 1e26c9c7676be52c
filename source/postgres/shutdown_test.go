//go:build linux

package postgres_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl"
	"github.com/openetl/etl/source/postgres"
)

// pgBin holds the Debian server binaries scripts/servers.sh installs.
const pgBin = "/usr/lib/postgresql/15/bin"

// ownServer is a Postgres server of one test, in a temporary directory:
// the test stops and starts it.
type ownServer struct {
	t    *testing.T
	data string
	port int
	dsn  string
	as   []string // runs a command as the server's owner
}

// newOwnServer initdbs a cluster and starts it on a free loopback port.
// It is stopped (immediate) and removed at cleanup.
func newOwnServer(t *testing.T) *ownServer {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBin, "initdb")); err != nil {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skipf("no %s/initdb (skipping: OPENETL_SKIP_SERVERS=1)", pgBin)
		}
		t.Fatalf("no %s/initdb: install postgresql-15 (scripts/servers.sh start postgres does)", pgBin)
	}
	// Postgres refuses to run as root: the cluster belongs to postgres.
	var as []string
	if os.Geteuid() == 0 {
		as = []string{"runuser", "-u", "postgres", "--"}
	}
	root, err := os.MkdirTemp("", "openetl-pgstop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(root, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if as != nil {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("no postgres user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(data, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &ownServer{t: t, data: data, port: port, as: as,
		dsn: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	s.run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8")
	s.start()
	t.Cleanup(func() { s.command("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop").Run() })
	return s
}

// command runs one of the server's binaries as the server's owner.
func (s *ownServer) command(name string, args ...string) *exec.Cmd {
	c := append(slices.Clone(s.as), append([]string{filepath.Join(pgBin, name)}, args...)...)
	return exec.Command(c[0], c[1:]...)
}

func (s *ownServer) run(name string, args ...string) {
	s.t.Helper()
	if out, err := s.command(name, args...).CombinedOutput(); err != nil {
		s.t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func (s *ownServer) start() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.data, "-w", "-t", "120", "-l", filepath.Join(s.data, "server.log"), "-o",
		fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c wal_level=logical "+
			"-c max_replication_slots=10 -c max_wal_senders=10 -c fsync=off", s.port, s.data), "start")
}

// stop runs pg_ctl stop -m fast, giving up after 60 s, and returns how
// long it took and its error.
func (s *ownServer) stop() (time.Duration, error) {
	c := s.command("pg_ctl", "-D", s.data, "-m", "fast", "-w", "-t", "60", "stop")
	t0 := time.Now()
	out, err := c.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%v: %s", err, out)
	}
	return time.Since(t0), err
}

// TestFastShutdownUnderRun: pg_ctl stop -m fast completes within 5 s
// while a pipeline streams from the server (the walsender waits for its
// client to confirm the end of WAL or to go away); Run, with retries
// off (a host's own restart loop), ends with a retryable error, and a
// sync after a restart of the server reads every row once. The server's own stop time without a client is measured
// first and logged for reference.
func TestFastShutdownUnderRun(t *testing.T) {
	const bound = 5 * time.Second
	s := newOwnServer(t)
	d := s.dsn
	execSQL(t, d, "CREATE TABLE items (id int8 PRIMARY KEY, note text)",
		"INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 1000) g")
	alone, err := s.stop()
	if err != nil {
		t.Fatalf("stop without a client: %v", err)
	}
	s.start()

	h := newHarness(t, d, postgres.Config{Publication: "pub", CreatePublication: true, Tables: []string{"items"},
		Slot: "slot", StatusInterval: time.Second})
	h.retry = &etl.Retry{Budget: -1}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- h.run(ctx, 100*time.Millisecond) }()

	// A writer inserts until the server goes away.
	var next atomic.Int64
	next.Store(1000)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for ctx.Err() == nil {
			id := next.Add(1)
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			c, err := pgconn.Connect(cctx, d)
			ccancel()
			if err != nil {
				return
			}
			_, err = c.Exec(ctx, fmt.Sprintf("INSERT INTO items VALUES (%d, 'new'), (%d, 'new')", id*2, id*2+1)).ReadAll()
			c.Close(context.Background())
			if err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// Stop once the pipeline has committed streamed changes.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if r := headRecord(t, h.ckpts); r != nil && r.Epoch >= 3 && next.Load() > 1050 {
			break
		}
		select {
		case err := <-runErr:
			t.Fatalf("Run ended before the stop: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the pipeline committed no streamed epoch in 3 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	took, stopErr := s.stop()
	t.Logf("pg_ctl stop -m fast: %v without a client, %v under a running pipeline (bound %v)", alone.Round(time.Millisecond), took.Round(time.Millisecond), bound)
	if stopErr != nil {
		t.Errorf("stop under a running pipeline: %v", stopErr)
	}
	if took > bound {
		t.Errorf("pg_ctl stop -m fast took %v under a running pipeline, want <= %v (%v without a client)", took, bound, alone)
	}
	select {
	case err = <-runErr:
	case <-time.After(30 * time.Second):
		t.Fatal("Run still running 30 s after the server stopped")
	}
	if !etl.IsRetryable(err) {
		t.Errorf("Run after the server stopped: %v; want a retryable error", err)
	}
	t.Logf("Run: %v", err)
	cancel()
	<-wrote

	// Restarted, the server has every row; one sync brings the rest.
	s.start()
	if _, err := h.sync(); err != nil {
		t.Fatalf("sync after the restart: %v", err)
	}
	want := queryOne(t, d, "SELECT count(*) FROM items")
	rows := h.rows("items")
	ids := map[string]int{}
	for _, r := range rows {
		ids[r]++
	}
	if strconv.Itoa(len(rows)) != want || len(ids) != len(rows) {
		t.Errorf("read %d rows (%d distinct), the table holds %s", len(rows), len(ids), want)
	}
	t.Logf("rows: %d, all distinct, as in the table", len(rows))
}

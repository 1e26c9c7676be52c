//go:build linux

package mysql_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/mysql"
)

// shutdown stops the MariaDB server of $OPENETL_SERVERS_DIR the way a
// person would, `mariadb-admin shutdown` (which waits for the server to
// remove its pid file), and returns how long it took until the server's
// process was gone. servers.sh up starts it again from its data.
func shutdown(t *testing.T) time.Duration {
	t.Helper()
	dir := os.Getenv("OPENETL_SERVERS_DIR")
	b, err := os.ReadFile(filepath.Join(dir, "mariadb.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	c := exec.Command("mariadb-admin", "--no-defaults", "-S", filepath.Join(dir, "mariadb", "s.sock"), "-u", "root",
		"--shutdown-timeout=60", "shutdown")
	t0 := time.Now()
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-admin shutdown: %v\n%s", err, out)
	}
	// The launched process (runuser, parent of mariadbd) ends with the
	// server; a reaped or zombie process counts as gone.
	testutil.Until(t, "the server's process to end", func() bool {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			return true
		}
		_, rest, _ := strings.Cut(string(st), ") ")
		return strings.HasPrefix(rest, "Z")
	})
	took := time.Since(t0)
	// As servers.sh down does: a zombie left unreaped would still look
	// alive to servers.sh up.
	if err := os.Remove(filepath.Join(dir, "mariadb.pid")); err != nil {
		t.Fatal(err)
	}
	return took
}

// TestShutdownUnderRun: `mariadb-admin shutdown` completes within the
// server's own stop time without a client plus 5 s while a pipeline
// streams from the server's binary log and snapshots a table in chunks
// (a binlog dump thread and a snapshot transaction open); Run rides out
// the outage by itself (a retry naming the source) and, once the server
// is back, every row of both tables is in the output exactly once.
func TestShutdownUnderRun(t *testing.T) {
	const margin = 5 * time.Second
	const big = 20000
	dsn(t) // skips without servers
	testutil.PrivateServer(t, "mariadb")
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, "CREATE TABLE "+db+".items (id BIGINT PRIMARY KEY, v TEXT)",
		"INSERT INTO "+db+".items VALUES (1, 'initial')", "USE "+db,
		"CREATE TABLE "+db+".big (id BIGINT PRIMARY KEY, v TEXT)",
		fmt.Sprintf("INSERT INTO %s.big SELECT seq, concat('row ', seq) FROM seq_1_to_%d", db, big))
	alone := shutdown(t)
	testutil.ServerUp(t, "mariadb")

	// Small chunks keep the snapshot of big going while items streams.
	src := newSource(t, d, db, mysql.Config{SnapshotChunkRows: 50, SnapshotParallelism: 2})
	dir := t.TempDir()
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
	var (
		mu      gosync.Mutex
		retries []etl.Event
	)
	p, err := etl.NewPipeline("my").From(src).To(dst).Checkpoints(store).EpochEvery(100*time.Millisecond, 0).
		Retry(etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}).
		OnEvent(func(e etl.Event) {
			if e.Kind == etl.EventSyncRetrying {
				mu.Lock()
				retries = append(retries, e)
				mu.Unlock()
			}
		}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	committed := func(stream string) int64 {
		c, err := p.Inspect(context.Background())
		if err != nil {
			return -1
		}
		return c.Totals[stream].Written
	}

	// The writer inserts into items, one row a transaction, until stop;
	// when an insert fails (the server went away) it waits for up and
	// inserts the same id again with INSERT IGNORE.
	var wrote atomic.Int64
	stop, up, writerDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		writerDone <- func() error {
			user, rest, _ := strings.Cut(d, "@")
			u, pw, _ := strings.Cut(user, ":")
			addr, _, _ := strings.Cut(rest, "/")
			waitedUp := false
			var c *client.Conn
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for id := int64(2); ; {
				select {
				case <-stop:
					return nil
				default:
				}
				var err error
				if c == nil {
					c, err = client.Connect(addr, u, pw, "")
				}
				if err == nil {
					_, err = c.Execute(fmt.Sprintf("INSERT IGNORE INTO %s.items VALUES (%d, 'streamed')", db, id))
				}
				if err != nil {
					if c != nil {
						c.Close()
						c = nil
					}
					if waitedUp {
						return fmt.Errorf("insert after the restart: %w", err)
					}
					<-up
					waitedUp = true
					continue
				}
				wrote.Store(id - 1)
				id++
			}
		}()
	}()
	defer close(stop)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	// Stop while items streams and big's snapshot is under way.
	testutil.Until(t, "streamed rows committed and big's snapshot under way", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended before the shutdown: %v", err)
		default:
		}
		return committed("items") >= 50 && committed("big") > 0
	})
	bigAtStop := committed("big")
	t.Logf("shutting down: items %d, big %d committed", committed("items"), bigAtStop)
	took := shutdown(t)
	t.Logf("mariadb-admin shutdown: %v without a client, %v under a running pipeline (big: %d of %d rows committed; bound: alone + %v)",
		alone.Round(time.Millisecond), took.Round(time.Millisecond), bigAtStop, big, margin)
	if bigAtStop >= big {
		t.Errorf("big's snapshot had ended (%d rows) before the shutdown: the test stopped no snapshot", bigAtStop)
	}
	if took > alone+margin {
		t.Errorf("mariadb-admin shutdown took %v under a running pipeline, want <= %v (%v without a client + %v)", took, alone+margin, alone, margin)
	}
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
	testutil.ServerUp(t, "mariadb")
	close(up)
	testutil.Until(t, "100 rows written after the restart", func() bool {
		select {
		case err := <-writerDone:
			t.Fatalf("writer: %v", err)
		default:
		}
		return wrote.Load() >= atDown+100
	})
	stop <- struct{}{} // the deferred close won't block on it
	if err := <-writerDone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	total, err := strconv.ParseInt(queryRows(t, d, "SELECT count(*) FROM "+db+".items")[0][0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, fmt.Sprintf("all %d items and %d big rows committed", total, big), func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		return committed("items") >= total && committed("big") >= big
	})
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	for _, e := range retries {
		t.Logf("retry %d after %v: %s: %v", e.Retry, e.Wait, e.Cause, e.Err)
	}
	mu.Unlock()

	for stream, want := range map[string]int64{"items": total, "big": big} {
		rows := readRows(t, dir, stream)
		ids := map[string]int{}
		for _, r := range rows {
			ids[fmt.Sprint(r["id"])]++
		}
		if int64(len(rows)) != want || int64(len(ids)) != want {
			t.Errorf("%s: %d rows (%d distinct ids), the table holds %d", stream, len(rows), len(ids), want)
		}
		for id := int64(1); id <= want; id++ {
			if n := ids[strconv.FormatInt(id, 10)]; n != 1 {
				t.Errorf("%s: id %d: %d rows, want 1", stream, id, n)
				break
			}
		}
	}
	if !t.Failed() {
		t.Logf("items: %d rows, big: %d rows, each once", total, big)
	}
}

package mysql_test

import (
	"context"
	"fmt"
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

// TestRunRidesOutServerRestart: the MariaDB server scripts/servers.sh
// started is restarted (SIGTERM, then started again from its data)
// under a running pipeline while a writer inserts rows, one transaction
// each, from before the snapshot's first chunk is read to after the
// restart. Run goes on by itself — attempts fail while the server is
// away and are retried (sync.retrying naming the source) — and every
// row is in the append-only Parquet output exactly once: the rows
// inserted between the snapshot's origin and its chunk's read come from
// the binlog only, and the attempt after the restart resumes both splits
// from the last checkpoint.
func TestRunRidesOutServerRestart(t *testing.T) {
	dsn(t) // skips without servers
	// The restart is of a server of the test's own: other packages' tests
	// use the shared one meanwhile.
	testutil.PrivateServer(t, "mariadb")
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, "CREATE TABLE "+db+".items (id BIGINT PRIMARY KEY, v TEXT)",
		"INSERT INTO "+db+".items VALUES (1, 'initial')")
	src := newSource(t, d, db, mysql.Config{})
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
		gens    = map[uint64]bool{}
	)
	p, err := etl.NewPipeline("my").From(src).To(dst).Checkpoints(store).EpochEvery(100*time.Millisecond, 0).
		Retry(etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}).
		OnEvent(func(e etl.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case etl.EventSyncRetrying, etl.EventEpochRecovered:
				retries = append(retries, e)
			case etl.EventEpochCommitted:
				gens[uint64(e.Generation)] = true
			}
		}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	committed := func() int64 {
		c, err := p.Inspect(context.Background())
		if err != nil {
			return -1
		}
		return c.Totals["items"].Written
	}

	// The writer inserts ids from 2 on until stop; when an insert fails
	// (the server went away) it waits for up, then inserts the same id
	// again with INSERT IGNORE (a no-op if the lost one committed). It
	// starts before Run, so rows arrive while the snapshot is taken.
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
	testutil.Until(t, "the writer under way", func() bool { return wrote.Load() >= 10 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	testutil.Until(t, "streamed rows committed", func() bool { return committed() >= 100 })
	testutil.ServerDown(t, "mariadb")
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
	total, err := strconv.ParseInt(queryRows(t, d, "SELECT count(*) FROM "+db+".items")[0][0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, fmt.Sprintf("all %d rows committed", total), func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		default:
		}
		return committed() >= total
	})
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Close delivers the events still queued: an epoch's record is in
	// the store before its epoch.committed event reaches the callback.
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mu.Lock()
	for _, e := range retries {
		if e.Kind == etl.EventEpochRecovered {
			t.Logf("generation %d: epoch %d recovered %v", e.Generation, e.Epoch, e.Outcome)
			continue
		}
		t.Logf("retry %d after %v: %s: %v", e.Retry, e.Wait, e.Cause, e.Err)
	}
	if len(gens) < 2 {
		t.Errorf("epochs committed by generations %v: want the first and one after the restart", gens)
	}
	mu.Unlock()

	rows := readRows(t, dir, "items")
	ids := map[string]int{}
	seqs := map[string][]any{}
	for _, r := range rows {
		ids[fmt.Sprint(r["id"])]++
		seqs[fmt.Sprint(r["id"])] = append(seqs[fmt.Sprint(r["id"])], r["_openetl_seq"])
	}
	if int64(len(rows)) != total || int64(len(ids)) != total {
		t.Errorf("%d rows (%d distinct ids), the table holds %d", len(rows), len(ids), total)
	}
	for id := int64(1); id <= total; id++ {
		if n := ids[strconv.FormatInt(id, 10)]; n != 1 {
			t.Errorf("id %d: %d rows, want 1 (seqs %v)", id, n, seqs[strconv.FormatInt(id, 10)])
		}
	}
	if !t.Failed() {
		t.Logf("%d rows (%d written before the stop), each once", total, atDown+1)
	}
}

package mysql_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/mysql"
)

// lockedWriter is a strings.Builder safe for the logger's goroutines.
type lockedWriter struct {
	mu gosync.Mutex
	b  strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// dumpThreads returns the IDs of the server's binlog dump connections.
func dumpThreads(t *testing.T, d string) []string {
	var ids []string
	for _, r := range queryRows(t, d, "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'") {
		ids = append(ids, r[0])
	}
	return ids
}

// TestBinlogStreamTakenUpAgain: the server kills a running pipeline's
// binlog dump connection between transactions. The split takes the
// stream up again within its Read, from its last resume point — no new
// attempt, no retry — and every row written before and after is in the
// Parquet output once, as pyarrow reads it.
func TestBinlogStreamTakenUpAgain(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, "CREATE TABLE "+db+".items (id BIGINT PRIMARY KEY, v TEXT)")
	for id := 1; id <= 100; id++ {
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s.items VALUES (%d, 'initial')", db, id))
	}
	var logs lockedWriter
	src := newSource(t, d, db, mysql.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
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
	var started, retries atomic.Int64
	p, err := etl.NewPipeline("my").From(src).To(dst).Checkpoints(store).EpochEvery(50*time.Millisecond, 0).
		Retry(etl.Retry{Backoff: 50 * time.Millisecond}).
		OnEvent(func(e etl.Event) {
			switch e.Kind {
			case etl.EventSyncStarted:
				started.Add(1)
			case etl.EventSyncRetrying:
				retries.Add(1)
			}
		}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
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
			c, err := p.Inspect(context.Background())
			return err == nil && c.Totals["items"].Written >= n
		})
	}
	committed(100)
	testutil.Until(t, "the binlog stream", func() bool { return len(dumpThreads(t, d)) == 1 })
	old := dumpThreads(t, d)[0]
	execSQL(t, d, "KILL "+old)
	testutil.Until(t, "the stream taken up again on another connection", func() bool {
		ids := dumpThreads(t, d)
		return len(ids) == 1 && ids[0] != old
	})
	for id := 101; id <= 200; id++ {
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s.items VALUES (%d, 'streamed')", db, id))
	}
	committed(200)
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(logs.String(), "taking it up again") {
		t.Errorf("no reconnect logged:\n%s", logs.String())
	}
	if started.Load() != 1 || retries.Load() != 0 {
		t.Errorf("%d attempts, %d retries; want the one attempt, none\n%s", started.Load(), retries.Load(), logs.String())
	}
	rows := readRows(t, dir, "items")
	ids := map[string]int{}
	for _, r := range rows {
		ids[fmt.Sprint(r["id"])]++
	}
	if len(rows) != 200 || len(ids) != 200 {
		t.Errorf("%d rows (%d distinct ids), want 200", len(rows), len(ids))
	}
	t.Logf("log: %s", logs.String())
}

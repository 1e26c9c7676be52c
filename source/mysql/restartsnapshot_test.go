package mysql_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/mysql"
)

// TestRestartDuringSnapshot: the server restarts while a table's
// snapshot split is still reading its first chunk (held by a LOCK
// TABLES ... WRITE of another session, which inserts rows meanwhile)
// and after the binlog split committed those inserts. The snapshot
// split has no state of its own then; the next attempt must read the
// table as of the origin the binlog split streamed from, not as of the
// binlog split's later position, or the append-only output holds the
// rows inserted in between twice (once from the binlog, once from the
// snapshot).
func TestRestartDuringSnapshot(t *testing.T) {
	dsn(t) // skips without servers
	testutil.PrivateServer(t, "mariadb")
	d := dsn(t)
	db := database(t, d)
	const before, after = 10, 50
	execSQL(t, d, "CREATE TABLE "+db+".items (id BIGINT PRIMARY KEY, v TEXT)")
	for id := 1; id <= before; id++ {
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s.items VALUES (%d, 'before')", db, id))
	}
	// The lock holds the snapshot's chunk query (it waits for the
	// table's metadata lock); the session holding it can still write.
	lock := conn(t, d)
	t.Cleanup(func() { lock.Close() })
	if _, err := lock.Execute("LOCK TABLES " + db + ".items WRITE"); err != nil {
		t.Fatal(err)
	}

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
	p, err := etl.NewPipeline("my").From(newSource(t, d, db, mysql.Config{})).To(dst).Checkpoints(store).
		EpochEvery(100*time.Millisecond, 0).
		Retry(etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	// Open has fixed the origin once the snapshot split is reading.
	testutil.Until(t, "the snapshot of items under way", func() bool {
		return p.Status().Streams["items"].Snapshotting
	})
	for id := before + 1; id <= before+after; id++ {
		if _, err := lock.Execute(fmt.Sprintf("INSERT INTO %s.items VALUES (%d, 'after')", db, id)); err != nil {
			t.Fatal(err)
		}
	}
	// Only the binlog split can emit: the snapshot split is held.
	testutil.Until(t, "the inserts after the origin committed", func() bool {
		c, err := p.Inspect(context.Background())
		return err == nil && c.Totals["items"].Written >= after
	})
	if st := p.Status().Streams["items"]; !st.Snapshotting || st.SnapshotDone != 0 {
		t.Fatalf("snapshot of items: under way %v, %d rows read: want it held before its first row", st.Snapshotting, st.SnapshotDone)
	}
	testutil.ServerDown(t, "mariadb")
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil && err != context.Canceled {
		t.Logf("Run: %v", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	testutil.ServerUp(t, "mariadb")

	// The next attempt, a Sync to the end from the checkpoints.
	sync(t, newSource(t, d, db, mysql.Config{}), dir)
	rows := readRows(t, dir, "items")
	ids := map[string][]any{}
	for _, r := range rows {
		id := fmt.Sprint(r["id"])
		ids[id] = append(ids[id], r["_openetl_seq"])
	}
	if len(rows) != before+after || len(ids) != before+after {
		t.Errorf("%d rows (%d distinct ids), want %d", len(rows), len(ids), before+after)
	}
	for id := 1; id <= before+after; id++ {
		if s := ids[strconv.Itoa(id)]; len(s) != 1 {
			t.Errorf("id %d: %d rows, want 1 (seqs %v)", id, len(s), s)
		}
	}
}

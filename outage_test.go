package etl_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint/cloud"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// TestRunRidesOutS3Outage: a Run writing Parquet files and its
// checkpoints to S3 (versitygw, from scripts/servers.sh) keeps going
// through an outage of the server: stopped once the run has committed,
// it comes back once the run has retried twice, and the run goes on
// without the host's help (a new attempt per retry, each a
// sync.retrying event naming the part that failed). pyarrow, reading the
// server's files directly, finds every record once.
func TestRunRidesOutS3Outage(t *testing.T) {
	url := os.Getenv("OPENETL_TEST_S3_URL")
	dir := os.Getenv("OPENETL_SERVERS_DIR")
	if url == "" || dir == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_S3_URL is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_S3_URL or OPENETL_SERVERS_DIR is not set: start the S3 server with scripts/servers.sh start s3, or set OPENETL_SKIP_SERVERS=1")
	}
	// The outage is of a server of the test's own: other packages' tests
	// use the shared one meanwhile.
	testutil.PrivateServer(t, "s3")
	url, dir = os.Getenv("OPENETL_TEST_S3_URL"), os.Getenv("OPENETL_SERVERS_DIR")
	bucket, err := blob.OpenBucket(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	prefix := "outage-" + strings.ToLower(rand.Text()[:10])
	store, err := cloud.NewBucketStore(bucket, prefix+"/checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := parquet.New(parquet.Config{Bucket: bucket, Prefix: prefix + "/tables/"})
	if err != nil {
		t.Fatal(err)
	}
	// Rate-limited, so that the run is still reading when the server
	// goes away and when it comes back.
	const rows = 8000
	src, err := faker.New(faker.Config{Seed: 11, Rows: rows, Rate: 2000})
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvents()
	p, err := etl.NewPipeline("outage").From(src).To(dst).Checkpoints(store).
		EpochEvery(100*time.Millisecond, 0).OnEvent(ev.on, 0).
		Retry(etl.Retry{Backoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond}).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	ev.wait(t, etl.EventEpochCommitted, 2)
	testutil.ServerDown(t, "s3")
	t0 := time.Now()
	retries := ev.wait(t, etl.EventSyncRetrying, 2)
	testutil.ServerUp(t, "s3")
	outage := time.Since(t0)
	select {
	case err := <-done:
		t.Fatalf("Run returned during the outage: %v", err)
	default:
	}
	for _, e := range retries {
		if e.Cause != "destination" && e.Cause != "checkpoints" {
			t.Errorf("retry %d: cause %q (%v), want the destination or the checkpoints", e.Retry, e.Cause, e.Err)
		}
		t.Logf("retry %d after %v: %s: %v", e.Retry, e.Wait, e.Cause, e.Err)
	}
	testutil.Until(t, "every row committed after the outage", func() bool {
		c, err := p.Inspect(context.Background())
		return err == nil && c.Totals[faker.Customers].Written == rows && c.Totals[faker.Orders].Written == rows
	})
	cancel()
	if err := testutil.Recv(t, "Run to stop", done); err != nil {
		t.Fatalf("Run: %v", err)
	}
	gens := map[uint64]bool{}
	for _, e := range ev.of(etl.EventEpochCommitted) {
		gens[uint64(e.Generation)] = true
	}
	if len(gens) < 2 {
		t.Errorf("epochs committed by generations %v: want the first and a later one", gens)
	}
	t.Logf("outage %v, %d retries, %d attempts", outage.Round(time.Millisecond), len(ev.of(etl.EventSyncRetrying)),
		len(ev.of(etl.EventSyncStarted)))

	// versitygw's posix backend keeps each object as a file under the
	// bucket's directory: pyarrow reads them without our code.
	got := testutil.ReadParquetTablesUnder(t, filepath.Join(dir, "s3", os.Getenv("OPENETL_TEST_S3_BUCKET")), prefix+"/tables")
	for _, stream := range []string{faker.Customers, faker.Orders} {
		st := got[stream]
		if st == nil || st.Rows != rows || st.DistinctIDs != rows || st.DistinctSeqs != rows || len(st.MissingFiles) > 0 {
			t.Fatalf("stream %s: %+v, want %d rows, ids and seqs, no file missing", stream, st, rows)
		}
		if st.Seqs[0] != 1 || st.Seqs[rows-1] != rows {
			t.Errorf("stream %s: seqs from %d to %d, want 1 to %d", stream, st.Seqs[0], st.Seqs[rows-1], rows)
		}
		if len(st.ExtraFiles) > 0 {
			// Files of attempts that failed before their checkpoint:
			// garbage collection (issue 28, item 3) removes them.
			t.Logf("stream %s: %d files no manifest lists", stream, len(st.ExtraFiles))
		}
	}
}

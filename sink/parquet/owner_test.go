package parquet_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// s3Bucket opens the S3 server scripts/servers.sh starts (versitygw,
// OPENETL_TEST_S3_URL) and returns a prefix no other run uses. Without
// the server the test fails, or skips when OPENETL_SKIP_SERVERS=1.
func s3Bucket(t *testing.T) (*blob.Bucket, string) {
	t.Helper()
	url := os.Getenv("OPENETL_TEST_S3_URL")
	if url == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_S3_URL is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_S3_URL is not set: start the S3 server with scripts/servers.sh start s3, or set OPENETL_SKIP_SERVERS=1")
	}
	b, err := blob.OpenBucket(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, "t/" + strings.ReplaceAll(t.Name(), "/", "_") + "-" + strings.ToLower(rand.Text()[:10])
}

// On S3, where the owner marker's create-if-absent write is atomic.
func TestOtherPipelineSameStreamS3(t *testing.T) {
	b, prefix := s3Bucket(t)
	testOtherPipeline(t, b, prefix)
}

// Two pipelines syncing into one destination: the second one's sync of
// the first one's streams fails at its start (Recover claims the
// streams), with an error naming both that etl.IsPermanent reports, and
// its checkpoint log holds no epoch (before, its first epoch was HEAD
// when its Commit failed); the first pipeline syncs on. On a local
// directory and on S3.
func TestTwoPipelinesOnOnePrefix(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		b, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		testTwoPipelines(t, b, "")
	})
	t.Run("s3", func(t *testing.T) {
		b, prefix := s3Bucket(t)
		testTwoPipelines(t, b, prefix)
	})
}

func testTwoPipelines(t *testing.T, b *blob.Bucket, prefix string) {
	ctx := context.Background()
	store, err := checkpoint.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(ctx) })
	build := func(name string) (*etl.Pipeline, error) {
		t.Helper()
		src, err := faker.New(faker.Config{Rows: 50})
		if err != nil {
			t.Fatal(err)
		}
		dst, err := parquet.New(parquet.Config{Bucket: b, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return etl.NewPipeline(name).From(src).To(dst).Checkpoints(store).Build()
	}
	pipeline := func(name string) *etl.Pipeline {
		t.Helper()
		p, err := build(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close(ctx) })
		return p
	}
	// Built before the first pipeline claims the streams, the second
	// passes Build; its writers refuse it when they recover.
	second := pipeline("second")
	first := pipeline("first")
	if _, err := first.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Built after, a third is refused by Build itself
	// (sink.PipelineChecker), before it claims anything.
	var be *etl.BuildError
	var oe *parquet.OwnerError
	if _, err := build("third"); !errors.As(err, &be) || !errors.As(err, &oe) || oe.Owner != "first" || oe.Pipeline != "third" ||
		!etl.IsPermanent(err) {
		t.Fatalf("Build of a third pipeline on the first one's streams: %v, want a *BuildError with an *OwnerError", err)
	}
	_, err = second.Sync(ctx)
	if !errors.As(err, &oe) || !errors.Is(err, parquet.ErrOwned) || oe.Owner != "first" || oe.Pipeline != "second" ||
		!etl.IsPermanent(err) || !strings.Contains(err.Error(), `"first"`) || !strings.Contains(err.Error(), `"second"`) {
		t.Fatalf("second pipeline's sync into the first one's streams: %v, want a permanent *OwnerError naming both", err)
	}
	t.Log(err)
	if c, err := second.Inspect(ctx); err != nil || c.Epoch != 0 {
		t.Errorf("the refused pipeline's checkpoint: %+v, %v; want no epoch", c, err)
	}
	if _, err := second.Sync(ctx); !errors.Is(err, parquet.ErrOwned) {
		t.Errorf("second pipeline's next sync: %v, want ErrOwned again", err)
	}
	if _, err := first.Sync(ctx); err != nil {
		t.Errorf("the first pipeline after the second was refused: %v", err)
	}
}

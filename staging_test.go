package etl_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
)

// TestStagedSideFilesRemoved: an epoch's quarantined records are staged
// under _staging/ until the epoch commits, then published under
// _quarantine/; once published, the staged copy is removed (nothing is
// left under _staging/), and never before: a copy left by a crash
// between the two is published again and then removed by the next
// attempt, and a HEAD whose copy is gone recovers (it was published).
func TestStagedSideFilesRemoved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(ctx)
	src := &fuzzSource{stream: source.Stream{Name: "orders", Format: source.FormatJSON}}
	p, err := etl.NewPipeline("st").From(src).To(sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{})).Checkpoints(store).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	staged := func() []string {
		var files []string
		filepath.WalkDir(filepath.Join(dir, "st", "_staging"), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, path)
			}
			return nil
		})
		return files
	}
	published := func(epoch uint64) []byte {
		t.Helper()
		b, err := store.ReadFile(ctx, "st", etl.QuarantineName("orders", epoch))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sync := func(docs ...string) etl.Result {
		t.Helper()
		for _, d := range docs {
			src.recs = append(src.recs, fuzzRecord{op: source.OpInsert, payload: []byte(d)})
		}
		res, err := p.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := sync(`{"id":1}`, `not JSON`, `[2]`)
	if c := res.Streams["orders"]; c.Quarantined != 2 || res.Epoch != 1 {
		t.Fatalf("first sync: %+v, epoch %d", c, res.Epoch)
	}
	first := published(1)
	if n := bytes.Count(first, []byte("\n")); n != 2 {
		t.Fatalf("published %d lines, want 2:\n%s", n, first)
	}
	if left := staged(); len(left) != 0 {
		t.Fatalf("staged copies left after the epoch was published: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "st", "_staging")); err == nil {
		t.Errorf("_staging/ is left, empty")
	}

	// HEAD's staged copy is gone: the next attempt's recovery takes it as
	// published.
	sync()
	if got := published(1); !bytes.Equal(got, first) {
		t.Fatalf("published file changed:\n%s", got)
	}

	// A crash between publishing and removing leaves the staged copy of
	// HEAD's epoch: recovery publishes it again and removes it.
	res = sync(`{"x`)
	_, head, err := store.Head(ctx, "st")
	if err != nil || head == nil || head.Epoch != res.Epoch || len(head.Files) != 1 {
		t.Fatalf("HEAD %+v, %v", head, err)
	}
	second := published(head.Epoch)
	if err := store.WriteFile(ctx, "st", head.Files[0].Path, second); err != nil {
		t.Fatal(err)
	}
	sync()
	if left := staged(); len(left) != 0 {
		t.Fatalf("staged copies left after recovery: %v", left)
	}
	if got := published(head.Epoch); !bytes.Equal(got, second) {
		t.Fatalf("published file of epoch %d changed:\n%s", head.Epoch, got)
	}
}

//go:build linux

package parquet_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl/sink/parquet"
)

// mountTmpfs mounts a fresh tmpfs on a temporary directory and returns
// it; it is unmounted at the end of the test.
func mountTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("cannot mount a tmpfs on %s (needs root with CAP_SYS_ADMIN): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func device(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Dev)
}

// filesNamed lists the regular files under dir whose names match pattern.
func filesNamed(t *testing.T, dir, pattern string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ok, _ := filepath.Match(pattern, d.Name()); ok && !d.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A bucket from OpenDir on a file system other than os.TempDir's (a
// tmpfs, like a /data volume): every epoch commits, and no temporary file
// is left beside the tables or in os.TempDir, also after a writer closed
// with an open file. fileblob's defaults fail there at the first write.
func TestOpenDirOnAnotherMount(t *testing.T) {
	ctx := context.Background()
	mnt := mountTmpfs(t)
	tmp := t.TempDir()
	if device(t, mnt) == device(t, tmp) {
		t.Fatalf("%s and %s are on one file system: the tmpfs mount did not take", mnt, tmp)
	}
	t.Setenv("TMPDIR", tmp) // os.TempDir, where fileblob stages by default

	raw, err := fileblob.OpenBucket(filepath.Join(mnt, "raw"), &fileblob.Options{CreateDir: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.WriteAll(ctx, "x", []byte("x"), nil); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("fileblob with its default options on another mount: err = %v, want invalid cross-device link (the hazard OpenDir avoids)", err)
	}

	dir := filepath.Join(mnt, "tables")
	b, err := parquet.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d := newDest(t, b, parquet.Config{RowGroupRows: 100})
	w := newWriter(t, d, "p", 0)
	recoverGen(t, w, 1, nil)
	var n int64
	for epoch := uint64(1); epoch <= 3; epoch++ {
		write(t, w, "orders", n, 250, false)
		n += 250
		commit(t, w, epoch, preCommit(t, w, epoch))
	}
	ids, _ := readStream(t, b, "", "orders")
	wantIDs(t, ids, n)
	if m := manifest(t, b, "", "orders"); m.Epoch != 3 || len(m.Files) != 3 {
		t.Errorf("manifest: epoch %d, %d files; want 3, 3", m.Epoch, len(m.Files))
	}
	for _, f := range manifest(t, b, "", "orders").Files {
		if _, err := os.Stat(filepath.Join(dir, f.Key)); err != nil {
			t.Errorf("manifest file not on the tmpfs: %v", err)
		}
	}

	// A writer closed with a file open aborts its upload.
	w2 := newWriter(t, d, "p", 1)
	write(t, w2, "orders", n, 10, false)
	if err := w2.Close(ctx); err != nil {
		t.Fatal(err)
	}

	if got := filesNamed(t, mnt, "*.tmp"); len(got) != 0 {
		t.Errorf("temporary files left on the mount: %v", got)
	}
	if got := filesNamed(t, mnt, "*.attrs"); len(got) != 0 {
		t.Errorf("side files written: %v", got)
	}
	if got := filesNamed(t, tmp, "*"); len(got) != 0 {
		t.Errorf("files left in os.TempDir: %v", got)
	}
	if got := keys(t, b, "_staging/"); len(got) != 0 {
		t.Errorf("staged files left: %v", strings.Join(got, ", "))
	}
}

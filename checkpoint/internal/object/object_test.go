package object_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/openetl/etl/checkpoint/internal/object"
)

// buckets returns a fresh bucket of every backend. A cloud backend joins
// this list and must pass the same suite.
func buckets(t *testing.T) map[string]object.Bucket {
	t.Helper()
	dir, err := object.NewDir(filepath.Join(t.TempDir(), "root"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]object.Bucket{"file": dir, "mem": object.NewMem()}
}

func TestBucket(t *testing.T) {
	ctx := context.Background()
	for name, b := range buckets(t) {
		t.Run(name, func(t *testing.T) {
			read := func(key string) ([]byte, object.Token) {
				t.Helper()
				data, tok, err := b.Read(ctx, key)
				if err != nil {
					t.Fatalf("Read(%q): %v", key, err)
				}
				return data, tok
			}
			if _, _, err := b.Read(ctx, "p/a"); !errors.Is(err, object.ErrNotExist) {
				t.Fatalf("Read of a missing key = %v, want ErrNotExist", err)
			}
			in := []byte("one")
			if err := b.Create(ctx, "p/a", in); err != nil {
				t.Fatal(err)
			}
			in[0] = 'X' // the bucket must not keep the caller's slice
			if err := b.Create(ctx, "p/a", []byte("two")); !errors.Is(err, object.ErrExists) {
				t.Fatalf("second Create = %v, want ErrExists", err)
			}
			data, tok1 := read("p/a")
			if string(data) != "one" {
				t.Fatalf("Read = %q, want \"one\"", data)
			}
			data[0] = 'Y' // nor share what it returns
			if data, _ := read("p/a"); string(data) != "one" {
				t.Fatalf("Read after changing a returned slice = %q", data)
			}

			if err := b.Replace(ctx, "p/a", []byte("two"), tok1); err != nil {
				t.Fatal(err)
			}
			data, tok2 := read("p/a")
			if string(data) != "two" || tok2 == tok1 {
				t.Fatalf("after Replace: %q, token changed %v", data, tok2 != tok1)
			}
			if err := b.Replace(ctx, "p/a", []byte("three"), tok1); !errors.Is(err, object.ErrPrecondition) {
				t.Fatalf("Replace with a stale token = %v, want ErrPrecondition", err)
			}
			for _, key := range []string{"p/missing", "q/missing"} {
				if err := b.Replace(ctx, key, []byte("x"), tok2); !errors.Is(err, object.ErrPrecondition) {
					t.Fatalf("Replace(%q) of a missing object = %v, want ErrPrecondition", key, err)
				}
			}

			for _, v := range []string{"v1", "v2"} {
				if err := b.Put(ctx, "p/dir/sub/f", []byte(v)); err != nil {
					t.Fatal(err)
				}
				if data, _ := read("p/dir/sub/f"); string(data) != v {
					t.Fatalf("after Put: %q, want %q", data, v)
				}
			}
			if err := b.Put(ctx, "pq", nil); err != nil {
				t.Fatal(err)
			}

			for prefix, want := range map[string][]string{
				"":        {"p/a", "p/dir/sub/f", "pq"},
				"p":       {"p/a", "p/dir/sub/f", "pq"},
				"p/":      {"p/a", "p/dir/sub/f"},
				"p/d":     {"p/dir/sub/f"},
				"p/dir/s": {"p/dir/sub/f"},
				"nope/":   nil,
			} {
				got, err := b.List(ctx, prefix)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("List(%q) = %q, %v; want %q", prefix, got, err, want)
				}
			}

			for _, key := range []string{"", "/a", "a/", "a//b", "../a", "a/./b", ".a", "a/HEAD.lock", `a\b`, "a\x00"} {
				if err := b.Put(ctx, key, nil); !errors.Is(err, object.ErrBadKey) {
					t.Fatalf("Put(%q) = %v, want ErrBadKey", key, err)
				}
			}

			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if err := b.Put(cancelled, "p/c", nil); !errors.Is(err, context.Canceled) {
				t.Fatalf("Put with a cancelled context = %v", err)
			}
		})
	}
}

// TestDirLeavesNoTempFiles checks that the file backend cleans up after
// every kind of write, including lost races.
func TestDirLeavesNoTempFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b, err := object.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	b.Create(ctx, "p/HEAD", []byte("1"))
	b.Create(ctx, "p/HEAD", []byte("2"))
	_, tok, _ := b.Read(ctx, "p/HEAD")
	b.Replace(ctx, "p/HEAD", []byte("3"), tok)
	b.Replace(ctx, "p/HEAD", []byte("4"), tok)
	b.Put(ctx, "p/x", []byte("5"))
	entries, err := os.ReadDir(filepath.Join(root, "p"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Fatalf("temp file left behind: %v", names)
		}
	}
	if want := []string{"HEAD", "HEAD.lock", "x"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("directory holds %q, want %q", names, want)
	}
	if data, _, _ := b.Read(ctx, "p/HEAD"); string(data) != "3" {
		t.Fatalf("HEAD = %q, want \"3\"", data)
	}
}

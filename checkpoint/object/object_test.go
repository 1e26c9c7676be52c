package object_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl/checkpoint/internal/blobobj"
	"github.com/openetl/etl/checkpoint/internal/cloudtest"
	"github.com/openetl/etl/checkpoint/object"
)

// backend opens a fresh, empty bucket of one kind.
type backend struct {
	name string
	open func(t *testing.T) object.Bucket
}

// backends lists every backend; each must pass the same suite. The cloud
// ones need the servers of scripts/servers.sh (see package cloudtest).
func backends() []backend {
	bs := []backend{
		{"file", func(t *testing.T) object.Bucket {
			dir, err := object.NewDir(filepath.Join(t.TempDir(), "root"))
			if err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"mem", func(*testing.T) object.Bucket { return object.NewMem() }},
	}
	for _, server := range cloudtest.Servers {
		bs = append(bs, backend{server, func(t *testing.T) object.Bucket {
			t.Helper()
			bkt, prefix := cloudtest.Bucket(t, server, nil)
			b, err := blobobj.NewBlob(bkt, prefix, false)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}})
	}
	return bs
}

func TestBucket(t *testing.T) {
	ctx := context.Background()
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			t.Cleanup(func() { b.Close(ctx) })
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

// TestBucketRace has racers write one key at once: exactly one Create
// and, from one token, exactly one Replace may win, and the object then
// holds the winner's bytes.
func TestBucketRace(t *testing.T) {
	const racers = 16
	ctx := context.Background()
	for _, bk := range backends() {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.open(t)
			t.Cleanup(func() { b.Close(ctx) })
			race := func(op func(i int) error) int {
				t.Helper()
				errs := make([]error, racers)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range racers {
					wg.Go(func() {
						<-start
						errs[i] = op(i)
					})
				}
				close(start)
				wg.Wait()
				winner := -1
				for i, err := range errs {
					switch {
					case err == nil && winner >= 0:
						t.Fatalf("racers %d and %d both won", winner, i)
					case err == nil:
						winner = i
					case !errors.Is(err, object.ErrExists) && !errors.Is(err, object.ErrPrecondition):
						t.Fatalf("racer %d: %v", i, err)
					}
				}
				if winner < 0 {
					t.Fatalf("no racer won: %v", errs)
				}
				return winner
			}
			payload := func(i int) []byte { return fmt.Appendf(nil, "racer %d", i) }
			check := func(want []byte) object.Token {
				t.Helper()
				data, tok, err := b.Read(ctx, "r/HEAD")
				if err != nil || !bytes.Equal(data, want) {
					t.Fatalf("Read = %q, %v; want the winner's %q", data, err, want)
				}
				return tok
			}
			w := race(func(i int) error { return b.Create(ctx, "r/HEAD", payload(i)) })
			tok := check(payload(w))
			for round := range 3 {
				w = race(func(i int) error { return b.Replace(ctx, "r/HEAD", payload(100*(round+1)+i), tok) })
				tok = check(payload(100*(round+1) + w))
			}
		})
	}
}

// TestBlobRejects checks what NewBlob and a Blob refuse: drivers without
// conditional writes, bad prefixes, and tokens that cannot be current.
func TestBlobRejects(t *testing.T) {
	ctx := context.Background()
	mb := memblob.OpenBucket(nil)
	defer mb.Close()
	if _, err := blobobj.NewBlob(mb, "", false); err == nil || !strings.Contains(err.Error(), "memory store") {
		t.Fatalf("NewBlob(memblob) = %v, want an unsupported-driver error", err)
	}
	if _, err := blobobj.NewBlob(nil, "", false); err == nil {
		t.Fatal("NewBlob(nil) succeeded")
	}
	for _, server := range cloudtest.Servers {
		t.Run(server, func(t *testing.T) {
			bkt, prefix := cloudtest.Bucket(t, server, nil)
			for _, p := range []string{"/abs", "a//b", "../up", "a/.x"} {
				if _, err := blobobj.NewBlob(bkt, p, false); !errors.Is(err, object.ErrBadKey) {
					t.Fatalf("NewBlob(prefix %q) = %v, want ErrBadKey", p, err)
				}
			}
			b, err := blobobj.NewBlob(bkt, prefix+"/", false)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b.Driver()); got != server {
				t.Fatalf("Driver() = %q, want %q", got, server)
			}
			if err := b.Create(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			_, tok, err := b.Read(ctx, "k")
			if err != nil || tok == "" {
				t.Fatalf("Read = token %q, %v", tok, err)
			}
			for _, bad := range []object.Token{"", "0", "-1", "x", `"not-an-etag"`} {
				if err := b.Replace(ctx, "k", []byte("w"), bad); !errors.Is(err, object.ErrPrecondition) {
					t.Fatalf("Replace with token %q = %v, want ErrPrecondition", bad, err)
				}
			}
			if data, _, _ := b.Read(ctx, "k"); string(data) != "v" {
				t.Fatalf("object = %q after rejected replaces, want \"v\"", data)
			}
			// The prefix is the Blob's root: keys list without it, and
			// the objects sit under it in the bucket.
			if keys, err := b.List(ctx, ""); err != nil || !reflect.DeepEqual(keys, []string{"k"}) {
				t.Fatalf("List = %q, %v", keys, err)
			}
			if ok, err := bkt.Exists(ctx, prefix+"/k"); !ok || err != nil {
				t.Fatalf("object not at %s/k: %v, %v", prefix, ok, err)
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

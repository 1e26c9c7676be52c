package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/checkpoint/cloud"
	"github.com/openetl/etl/checkpoint/internal/cloudtest"
)

// backend opens a fresh, empty store.
type backend struct {
	name string
	open func(tb testing.TB) checkpoint.Store
}

// backends lists every store; each runs the same tests. The cloud stores
// are opened by URL (checkpoint.Open) on the servers of
// scripts/servers.sh, each test under a prefix of its own.
func backends() []backend {
	bs := []backend{
		{"file", func(tb testing.TB) checkpoint.Store {
			tb.Helper()
			return openDir(tb, tb.TempDir())
		}},
		{"mem", func(tb testing.TB) checkpoint.Store {
			tb.Helper()
			s := checkpoint.NewMem()
			tb.Cleanup(func() { s.Close(context.Background()) })
			return s
		}},
	}
	for _, server := range cloudtest.Servers {
		bs = append(bs, backend{server, func(tb testing.TB) checkpoint.Store {
			tb.Helper()
			return openURL(tb, cloudtest.URL(tb, server))
		}})
	}
	return bs
}

func openURL(tb testing.TB, url string) checkpoint.Store {
	tb.Helper()
	s, err := cloud.Open(context.Background(), url)
	if err != nil {
		tb.Fatalf("Open(%q): %v", url, err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func openDir(tb testing.TB, dir string) checkpoint.Store {
	tb.Helper()
	s, err := checkpoint.OpenDir(dir)
	if err != nil {
		tb.Fatalf("OpenDir(%q): %v", dir, err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// forEach runs f once per backend as a subtest.
func forEach(t *testing.T, f func(t *testing.T, s checkpoint.Store)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { f(t, b.open(t)) })
	}
}

func claim(t *testing.T, s checkpoint.Store, pipeline string) (checkpoint.Generation, *checkpoint.Record) {
	t.Helper()
	gen, head, err := s.Claim(context.Background(), pipeline)
	if err != nil {
		t.Fatalf("Claim(%q): %v", pipeline, err)
	}
	return gen, head
}

// next returns the record after prev (nil: the first) for generation gen.
func next(pipeline string, gen checkpoint.Generation, prev *checkpoint.Record) *checkpoint.Record {
	rec := &checkpoint.Record{
		Pipeline:     pipeline,
		Epoch:        1,
		Generation:   gen,
		Time:         time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		Resume:       map[string][]byte{"split-0": {0, 1, 2}},
		Committables: [][]byte{[]byte("lane0")},
	}
	if prev != nil {
		ref := prev.Ref()
		rec.Prev, rec.Epoch = &ref, prev.Epoch+1
	}
	return rec
}

func commit(t *testing.T, s checkpoint.Store, gen checkpoint.Generation, prev *checkpoint.Record) *checkpoint.Record {
	t.Helper()
	rec := next("p", gen, prev)
	if err := s.Commit(context.Background(), gen, rec); err != nil {
		t.Fatalf("Commit(gen %d, epoch %d): %v", gen, rec.Epoch, err)
	}
	return rec
}

// headOf claims the pipeline again and returns the record HEAD points at.
// It raises the generation, so call it only where that doesn't matter.
func headOf(t *testing.T, s checkpoint.Store, pipeline string) *checkpoint.Record {
	t.Helper()
	_, head := claim(t, s, pipeline)
	return head
}

func equalRef(t *testing.T, what string, got *checkpoint.Record, want *checkpoint.Record) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Fatalf("%s = %v, want %v", what, got, want)
	case got.Ref() != want.Ref():
		t.Fatalf("%s = %v, want %v", what, got.Ref(), want.Ref())
	}
}

func TestClaimNewPipeline(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		gen, head := claim(t, s, "orders")
		if gen != 1 || head != nil {
			t.Fatalf("first Claim = %d, %v; want 1, nil", gen, head)
		}
		gen, head = claim(t, s, "orders")
		if gen != 2 || head != nil {
			t.Fatalf("second Claim = %d, %v; want 2, nil", gen, head)
		}
		if gen, _ := claim(t, s, "customers"); gen != 1 {
			t.Fatalf("Claim of another pipeline = %d, want 1", gen)
		}
	})
}

func TestCommitChain(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		gen, _ := claim(t, s, "p")
		var recs []*checkpoint.Record
		var prev *checkpoint.Record
		for range 5 {
			prev = commit(t, s, gen, prev)
			recs = append(recs, prev)
		}
		gen2, head := claim(t, s, "p")
		if gen2 != gen+1 {
			t.Fatalf("Claim after commits = generation %d, want %d", gen2, gen+1)
		}
		equalRef(t, "HEAD", head, recs[4])
		// Walk the chain back from HEAD.
		for i := 4; i >= 0; i-- {
			got, err := s.Get(ctx, "p", recs[i].Ref())
			if err != nil {
				t.Fatalf("Get(%v): %v", recs[i].Ref(), err)
			}
			if !reflect.DeepEqual(got.Prev, recs[i].Prev) {
				t.Fatalf("record %d: Prev = %v, want %v", i, got.Prev, recs[i].Prev)
			}
		}
		// The new generation continues the chain.
		rec := commit(t, s, gen2, head)
		if rec.Epoch != 6 || headOf(t, s, "p").Ref() != rec.Ref() {
			t.Fatalf("commit after re-claim did not move HEAD to %v", rec.Ref())
		}
	})
}

func TestCommitFenced(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		old, _ := claim(t, s, "p")
		first := commit(t, s, old, nil)
		newer, head := claim(t, s, "p")
		equalRef(t, "HEAD after second Claim", head, first)

		zombie := next("p", old, first)
		if err := s.Commit(ctx, old, zombie); !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("zombie Commit = %v, want ErrFenced", err)
		}
		if err := s.Rewind(ctx, "p", old, checkpoint.Ref{}); !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("zombie Rewind = %v, want ErrFenced", err)
		}
		// HEAD did not move: the newer generation commits on first.
		commit(t, s, newer, first)
		// A generation never claimed is fenced too.
		if err := s.Commit(ctx, newer+5, next("p", newer+5, nil)); !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("Commit by unclaimed generation = %v, want ErrFenced", err)
		}
		if err := s.Commit(ctx, 1, next("never", 1, nil)); !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("Commit to unclaimed pipeline = %v, want ErrFenced", err)
		}
	})
}

func TestCommitConflict(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		gen, _ := claim(t, s, "p")
		r1 := commit(t, s, gen, nil)
		r2 := commit(t, s, gen, r1)

		tests := []struct {
			name string
			rec  *checkpoint.Record
		}{
			{"prev behind HEAD", next("p", gen, r1)},
			{"prev nil but HEAD set", next("p", gen, nil)},
			{"prev ahead of HEAD", next("p", gen, next("p", gen, r2))},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				tc.rec.Epoch += 10 // a name no committed record has
				if err := s.Commit(ctx, gen, tc.rec); !errors.Is(err, checkpoint.ErrConflict) {
					t.Fatalf("Commit = %v, want ErrConflict", err)
				}
			})
		}
		// Same epoch and generation as a written record, other content.
		dup := next("p", gen, r2)
		dup.Engine = []byte("a")
		if err := s.Commit(ctx, gen, dup); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, gen, dup); err != nil {
			t.Fatalf("retried Commit of the HEAD record = %v, want nil", err)
		}
		other := *dup
		other.Engine = []byte("b")
		if err := s.Commit(ctx, gen, &other); !errors.Is(err, checkpoint.ErrConflict) {
			t.Fatalf("Commit of a different record with HEAD's name = %v, want ErrConflict", err)
		}
		// After a rewind past dup, its name is still taken: a different
		// record of the same epoch and generation conflicts, while dup
		// itself (a retry, same bytes) commits again.
		if err := s.Rewind(ctx, "p", gen, r2.Ref()); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, gen, &other); !errors.Is(err, checkpoint.ErrConflict) ||
			!strings.Contains(err.Error(), "different content") {
			t.Fatalf("Commit over an existing record = %v, want ErrConflict (different content)", err)
		}
		if err := s.Commit(ctx, gen, dup); err != nil {
			t.Fatalf("re-Commit of an existing identical record = %v", err)
		}
		if got := headOf(t, s, "p"); !bytes.Equal(got.Engine, []byte("a")) {
			t.Fatalf("HEAD record Engine = %q, want \"a\"", got.Engine)
		}
	})
}

func TestCommitInvalid(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		gen, _ := claim(t, s, "p")
		r1 := commit(t, s, gen, nil)
		tests := []struct {
			name string
			gen  checkpoint.Generation
			edit func(r *checkpoint.Record)
			bad  error // nil: any error
		}{
			{"generation differs", gen, func(r *checkpoint.Record) { r.Generation++ }, nil},
			{"generation 0", 0, func(r *checkpoint.Record) { r.Generation = 0 }, nil},
			{"bad pipeline", gen, func(r *checkpoint.Record) { r.Pipeline = "a/b" }, checkpoint.ErrBadName},
			{"prev epoch not lower", gen, func(r *checkpoint.Record) { r.Epoch = r1.Epoch }, nil},
			{"prev generation newer", gen, func(r *checkpoint.Record) { r.Prev.Generation = gen + 1 }, nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				rec := next("p", gen, r1)
				tc.edit(rec)
				err := s.Commit(ctx, tc.gen, rec)
				if err == nil || tc.bad != nil && !errors.Is(err, tc.bad) {
					t.Fatalf("Commit = %v, want an error (%v)", err, tc.bad)
				}
			})
		}
		if err := s.Commit(ctx, gen, nil); err == nil {
			t.Fatal("Commit(nil) succeeded")
		}
		equalRef(t, "HEAD", headOf(t, s, "p"), r1)
	})
}

func TestGetRoundTrip(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		gen, _ := claim(t, s, "p")
		first := commit(t, s, gen, nil)
		prev := first.Ref()
		want := &checkpoint.Record{
			Pipeline:   "p",
			Epoch:      2,
			Generation: gen,
			Prev:       &prev,
			Time:       time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600)),
			Resume: map[string][]byte{
				"orders/0": {0x00, 0xff, 0x80, '"', '\\'},
				"orders/1": {},
				"kafka/7":  []byte("\u2028 not utf-8: \xc3\x28"),
			},
			Engine:       bytes.Repeat([]byte{0, 1, 2, 253, 254, 255}, 1000),
			Committables: [][]byte{[]byte("lane0"), {}, {0xde, 0xad, 0xbe, 0xef}},
			Files:        []checkpoint.File{{Kind: "quarantine", Stream: "orders", Path: "_quarantine/orders/2.jsonl", Rows: 3}},
			Counts:       map[string]checkpoint.Counts{"orders": {Read: 10, Written: 7, Quarantined: 3}},
			Totals:       map[string]checkpoint.Counts{"orders": {Read: 20, Written: 17, Quarantined: 3}},
		}
		if err := s.Commit(ctx, gen, want); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, "p", want.Ref())
		if err != nil {
			t.Fatal(err)
		}
		if !got.Time.Equal(want.Time) {
			t.Fatalf("Time = %v, want %v", got.Time, want.Time)
		}
		got.Time = want.Time
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Get = %+v\nwant %+v", got, want)
		}
		// DeepEqual already compares bytes; say so for the opaque ones.
		for k, v := range want.Resume {
			if !bytes.Equal(got.Resume[k], v) {
				t.Fatalf("Resume[%q] = %x, want %x", k, got.Resume[k], v)
			}
		}
		if _, err := s.Get(ctx, "p", checkpoint.Ref{Epoch: 3, Generation: gen}); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("Get of a missing record = %v, want ErrNotFound", err)
		}
		if _, err := s.Get(ctx, "../x", first.Ref()); !errors.Is(err, checkpoint.ErrBadName) {
			t.Fatalf("Get with a bad name = %v, want ErrBadName", err)
		}
	})
}

func TestRewind(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		g1, _ := claim(t, s, "p")
		r1 := commit(t, s, g1, nil)
		r2 := commit(t, s, g1, r1)
		r3 := commit(t, s, g1, r2)
		g2, head := claim(t, s, "p")
		equalRef(t, "HEAD", head, r3)

		// Epoch 3 was lost: rewind to 2, then redo epoch 3 under g2.
		if err := s.Rewind(ctx, "p", g2, r2.Ref()); err != nil {
			t.Fatal(err)
		}
		r3b := commit(t, s, g2, r2)
		if r3b.Epoch != r3.Epoch || r3b.Ref() == r3.Ref() {
			t.Fatalf("redone epoch = %v, want epoch %d with a new name", r3b.Ref(), r3.Epoch)
		}
		if _, err := s.Get(ctx, "p", r3.Ref()); err != nil {
			t.Fatalf("the lost epoch's record is gone: %v", err)
		}

		tests := []struct {
			name string
			to   checkpoint.Ref
			want error // nil: any error
		}{
			{"missing record", checkpoint.Ref{Epoch: 9, Generation: g2}, checkpoint.ErrNotFound},
			{"not an ancestor", r3.Ref(), nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				err := s.Rewind(ctx, "p", g2, tc.to)
				if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
					t.Fatalf("Rewind(%v) = %v, want an error (%v)", tc.to, err, tc.want)
				}
			})
		}
		if err := s.Rewind(ctx, "p", g2, r3b.Ref()); err != nil {
			t.Fatalf("Rewind to HEAD itself = %v", err)
		}
		if err := s.Rewind(ctx, "p", g2, r1.Ref()); err != nil {
			t.Fatal(err)
		}
		equalRef(t, "HEAD after rewind", headOf(t, s, "p"), r1)
		g4, _ := claim(t, s, "p")
		if err := s.Rewind(ctx, "p", g4, checkpoint.Ref{}); err != nil {
			t.Fatal(err)
		}
		if _, head := claim(t, s, "p"); head != nil {
			t.Fatalf("HEAD after rewind to the start = %v, want nil", head.Ref())
		}
	})
}

func TestBadNames(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		for _, name := range []string{
			"", ".", "..", ".hidden", "a/b", `a\b`, "../etc", "a b", "ä", "x.lock", "a\x00", strings.Repeat("a", 201),
		} {
			t.Run("pipeline "+name, func(t *testing.T) {
				if _, _, err := s.Claim(ctx, name); !errors.Is(err, checkpoint.ErrBadName) {
					t.Fatalf("Claim(%q) = %v, want ErrBadName", name, err)
				}
				if err := s.WriteFile(ctx, name, "f", nil); !errors.Is(err, checkpoint.ErrBadName) {
					t.Fatalf("WriteFile(%q) = %v, want ErrBadName", name, err)
				}
				if err := s.Rewind(ctx, name, 1, checkpoint.Ref{}); !errors.Is(err, checkpoint.ErrBadName) {
					t.Fatalf("Rewind(%q) = %v, want ErrBadName", name, err)
				}
			})
		}
		for _, name := range []string{"a", "A-z_0.9", strings.Repeat("a", 200)} {
			if _, _, err := s.Claim(ctx, name); err != nil {
				t.Fatalf("Claim(%q) = %v", name, err)
			}
		}
		for _, name := range []string{
			"", "/abs", "../up", "a/../b", "a/./b", "a//b", "a/", "_checkpoints/HEAD", "_checkpoints",
			"a/.tmp-x", "a/HEAD.lock", `a\b`, "a\nb",
		} {
			t.Run("side file "+name, func(t *testing.T) {
				if err := s.WriteFile(ctx, "p", name, []byte("x")); !errors.Is(err, checkpoint.ErrBadName) {
					t.Fatalf("WriteFile(%q) = %v, want ErrBadName", name, err)
				}
			})
		}
	})
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	ctx := context.Background()
	name := "_quarantine/orders/000001.jsonl"
	for _, data := range []string{"first\n", "second\n"} {
		if err := s.WriteFile(ctx, "p", name, []byte(data)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "p", filepath.FromSlash(name)))
		if err != nil || string(got) != data {
			t.Fatalf("side file = %q, %v; want %q", got, err, data)
		}
	}
	if err := checkpoint.NewMem().WriteFile(ctx, "p", name, []byte("x")); err != nil {
		t.Fatalf("mem WriteFile: %v", err)
	}
}

func TestFileLayout(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	gen, _ := claim(t, s, "p")
	commit(t, s, gen, nil)
	rec := filepath.Join(dir, "p", "_checkpoints", "00000000000000000001-00000000000000000001.json")
	if _, err := os.Stat(rec); err != nil {
		t.Fatalf("record file: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "p", "_checkpoints", "HEAD"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"pipeline":"p"`, `"generation":1`, `"ref":{"epoch":1,"generation":1}`, `"seq":2`, `"nonce":"`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Fatalf("HEAD = %s, missing %s", data, want)
		}
	}
	// A second store on the same directory sees the same log.
	if gen, head := claim(t, openDir(t, dir), "p"); gen != 2 || head == nil || head.Epoch != 1 {
		t.Fatalf("Claim through a second store = %d, %v", gen, head)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := checkpoint.Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	claim(t, s, "p")
	if _, err := os.Stat(filepath.Join(dir, "p", "_checkpoints", "HEAD")); err != nil {
		t.Fatalf("file:// store did not write in %s: %v", dir, err)
	}
	m1, err := checkpoint.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := checkpoint.Open(ctx, "mem://")
	claim(t, m1, "p")
	if gen, _ := claim(t, m2, "p"); gen != 1 {
		t.Fatalf("second mem:// store shares state: generation %d", gen)
	}

	for _, tc := range []struct{ url, mention string }{
		{"s3:///prefix", "no bucket"},
		{"s3://bucket/prefix?prefix=a/", "path"},
		{"gs://bucket?key=HEAD", "path"},
		{"s3://bucket/prefix?bogus=1", "bogus"},
		{"s3://bucket/a//b?region=us-east-1", "prefix"},
		{"azblob://container/../up?localemu=x", "localemu"},
		{"ftp://host/x", `"ftp"`},
		{"file://relative/dir", "OpenDir"},
		{"/plain/path", "OpenDir"},
		{"file:///x?create=1", "options"},
		{"file://", "no directory"},
		{"://bad", "URL"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := cloud.Open(ctx, tc.url)
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("cloud.Open(%q) = %v, want an error mentioning %s", tc.url, err, tc.mention)
			}
		})
	}
	// The core package links no cloud SDK: it names the package that does.
	if _, err := checkpoint.Open(ctx, "s3://bucket/prefix"); err == nil || !strings.Contains(err.Error(), "checkpoint/cloud") {
		t.Fatalf("checkpoint.Open(s3://...) = %v, want a pointer to checkpoint/cloud", err)
	}
}

func TestReadFile(t *testing.T) {
	for _, st := range []struct {
		name  string
		store checkpoint.Store
	}{{"mem", checkpoint.NewMem()}, {"file", mustOpenDir(t)}} {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			if err := st.store.WriteFile(ctx, "p", "_quarantine/s/1.jsonl", []byte("a\n")); err != nil {
				t.Fatal(err)
			}
			got, err := st.store.ReadFile(ctx, "p", "_quarantine/s/1.jsonl")
			if err != nil || string(got) != "a\n" {
				t.Fatalf("ReadFile = %q, %v", got, err)
			}
			if _, err := st.store.ReadFile(ctx, "p", "_quarantine/s/2.jsonl"); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("missing file: %v", err)
			}
			if _, err := st.store.ReadFile(ctx, "p", "../x"); !errors.Is(err, checkpoint.ErrBadName) {
				t.Fatalf("bad name: %v", err)
			}
		})
	}
}

func mustOpenDir(t *testing.T) checkpoint.Store {
	t.Helper()
	s, err := checkpoint.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestNewBucketStore opens each cloud store from a bucket whose client the
// test configured, and checks that it shares the log with a store opened
// by URL on the same prefix, and that closing it leaves the bucket open.
func TestNewBucketStore(t *testing.T) {
	ctx := context.Background()
	mb := memblob.OpenBucket(nil)
	defer mb.Close()
	if _, err := cloud.NewBucketStore(mb, ""); err == nil || !strings.Contains(err.Error(), "memory store") {
		t.Fatalf("NewBucketStore(memblob) = %v, want an unsupported-driver error", err)
	}
	for _, server := range cloudtest.Servers {
		t.Run(server, func(t *testing.T) {
			bkt, prefix := cloudtest.Bucket(t, server, nil)
			s, err := cloud.NewBucketStore(bkt, prefix)
			if err != nil {
				t.Fatal(err)
			}
			gen, _ := claim(t, s, "p")
			rec := commit(t, s, gen, nil)
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if ok, err := bkt.Exists(ctx, prefix+"/p/_checkpoints/HEAD"); !ok || err != nil {
				t.Fatalf("HEAD not under the prefix, or the bucket was closed with the store: %v, %v", ok, err)
			}
			u, err := url.Parse(cloudtest.URL(t, server))
			if err != nil {
				t.Fatal(err)
			}
			u.Path = "/" + prefix
			gen2, head := claim(t, openURL(t, u.String()), "p")
			if gen2 != gen+1 {
				t.Fatalf("Claim by URL = generation %d, want %d", gen2, gen+1)
			}
			equalRef(t, "HEAD by URL", head, rec)
		})
	}
}

// TestDeleteFile: every store removes a side file it wrote, and a file
// already gone is no error; names WriteFile refuses are refused.
func TestDeleteFile(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		d, ok := s.(checkpoint.FileDeleter)
		if !ok {
			t.Fatalf("%T is no FileDeleter", s)
		}
		for _, name := range []string{"_staging/1-1/quarantine/s.jsonl", "_staging/1-1/held/s.jsonl"} {
			if err := s.WriteFile(ctx, "p", name, []byte("a\n")); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := d.DeleteFile(ctx, "p", "_staging/1-1/quarantine/s.jsonl"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.ReadFile(ctx, "p", "_staging/1-1/quarantine/s.jsonl"); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Fatalf("deleted file: %v", err)
		}
		if got, err := s.ReadFile(ctx, "p", "_staging/1-1/held/s.jsonl"); err != nil || string(got) != "a\n" {
			t.Fatalf("the other file: %q, %v", got, err)
		}
		for _, bad := range []string{"../x", "_checkpoints/HEAD", ""} {
			if err := d.DeleteFile(ctx, "p", bad); !errors.Is(err, checkpoint.ErrBadName) {
				t.Errorf("DeleteFile(%q) = %v, want ErrBadName", bad, err)
			}
		}
	})
}

// TestListFiles: a store lists the side files under a prefix, sorted,
// by the names WriteFile took, never the log's own objects and never
// another pipeline's.
func TestListFiles(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		l, ok := s.(checkpoint.FileLister)
		if !ok {
			t.Fatalf("%T is no FileLister", s)
		}
		if got, err := l.ListFiles(ctx, "p", "_staging/"); err != nil || len(got) != 0 {
			t.Fatalf("ListFiles of a new pipeline = %v, %v; want none", got, err)
		}
		gen, _ := claim(t, s, "p")
		commit(t, s, gen, nil)
		names := []string{"_staging/2-1/quarantine/s.jsonl", "_staging/1-1/held/s.jsonl", "_quarantine/s/1.jsonl"}
		for _, name := range names {
			if err := s.WriteFile(ctx, "p", name, []byte("a\n")); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.WriteFile(ctx, "q", "_staging/9-9/held/s.jsonl", []byte("b\n")); err != nil {
			t.Fatal(err)
		}
		got, err := l.ListFiles(ctx, "p", "_staging/")
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"_staging/1-1/held/s.jsonl", "_staging/2-1/quarantine/s.jsonl"}; !slices.Equal(got, want) {
			t.Fatalf("ListFiles(_staging/) = %v, want %v", got, want)
		}
		all, err := l.ListFiles(ctx, "p", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 3 || slices.ContainsFunc(all, func(n string) bool { return strings.HasPrefix(n, "_checkpoints") }) {
			t.Fatalf("ListFiles(\"\") = %v, want the 3 side files and nothing of _checkpoints/", all)
		}
		if _, err := l.ListFiles(ctx, "../p", ""); !errors.Is(err, checkpoint.ErrBadName) {
			t.Errorf("ListFiles of a bad pipeline name: %v, want ErrBadName", err)
		}
	})
}

// TestDeleteFileDirs: a directory store also removes the directories a
// deleted file leaves empty, and writes into such a directory again.
func TestDeleteFileDirs(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir)
	ctx := context.Background()
	gen, _ := claim(t, s, "p")
	commit(t, s, gen, nil)
	name := "_staging/00000000000000000001-00000000000000000001/quarantine/s.jsonl"
	for range 2 {
		if err := s.WriteFile(ctx, "p", name, []byte("a\n")); err != nil {
			t.Fatal(err)
		}
		if err := s.(checkpoint.FileDeleter).DeleteFile(ctx, "p", name); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "p", "_staging")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("_staging/ after its only file was deleted: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "p", "_checkpoints", "HEAD")); err != nil {
		t.Fatalf("HEAD: %v", err)
	}
}

package checkpoint

// Tests that need the object layer under the store: they wrap a backend's
// Bucket to inject faults or count calls. They run against every backend,
// the cloud ones on the servers of scripts/servers.sh.

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint/internal/blobobj"
	"github.com/openetl/etl/checkpoint/internal/cloudtest"
	"github.com/openetl/etl/checkpoint/object"
)

// objectBackend opens a fresh, empty Bucket; rt, if not nil, carries the
// HTTP requests of cloud backends.
type objectBackend struct {
	name string
	open func(tb testing.TB, rt http.RoundTripper) object.Bucket
}

func objectBackends() []objectBackend {
	bs := []objectBackend{
		{"file", func(tb testing.TB, _ http.RoundTripper) object.Bucket {
			d, err := object.NewDir(filepath.Join(tb.TempDir(), "root"))
			if err != nil {
				tb.Fatal(err)
			}
			return d
		}},
		{"mem", func(testing.TB, http.RoundTripper) object.Bucket { return object.NewMem() }},
	}
	for _, server := range cloudtest.Servers {
		bs = append(bs, objectBackend{server, func(tb testing.TB, rt http.RoundTripper) object.Bucket {
			tb.Helper()
			bkt, prefix := cloudtest.Bucket(tb, server, rt)
			b, err := blobobj.NewBlob(bkt, prefix, false)
			if err != nil {
				tb.Fatal(err)
			}
			return b
		}})
	}
	return bs
}

// lyingBucket reports HEAD writes that landed as lost races, the way an
// SDK retry does when the response to a successful conditional write is
// lost and the retry fails its precondition. Before lying it runs
// meanwhile, if set: another writer getting in after the write landed.
type lyingBucket struct {
	object.Bucket
	lies      atomic.Int32 // how many more landed HEAD writes to report as lost
	meanwhile func()
}

func (l *lyingBucket) lie(key string, err error, lost error) error {
	if err != nil || filepath.Base(key) != "HEAD" || l.lies.Add(-1) < 0 {
		return err
	}
	if f := l.meanwhile; f != nil {
		l.meanwhile = nil
		f()
	}
	return lost
}

func (l *lyingBucket) Create(ctx context.Context, key string, data []byte) error {
	return l.lie(key, l.Bucket.Create(ctx, key, data), object.ErrExists)
}

func (l *lyingBucket) Replace(ctx context.Context, key string, data []byte, tok object.Token) error {
	return l.lie(key, l.Bucket.Replace(ctx, key, data, tok), object.ErrPrecondition)
}

func testRecord(gen Generation, prev *Record) *Record {
	rec := &Record{Pipeline: "p", Epoch: 1, Generation: gen, Time: time.Unix(1, 0).UTC(),
		Resume: map[string][]byte{"s": {1}}, Committables: [][]byte{[]byte("lane0")}}
	if prev != nil {
		ref := prev.Ref()
		rec.Prev, rec.Epoch = &ref, prev.Epoch+1
	}
	return rec
}

// TestFalsePreconditionFailure: a HEAD write that landed but reported a
// lost race must count as won (the store finds its own nonce in HEAD), for
// Claim's create and replace, Commit and Rewind; and when another writer
// moved HEAD after the write landed, the store must not claim a win.
func TestFalsePreconditionFailure(t *testing.T) {
	ctx := context.Background()
	for _, bk := range objectBackends() {
		t.Run(bk.name, func(t *testing.T) {
			lb := &lyingBucket{Bucket: bk.open(t, nil)}
			s := newStore(lb)
			t.Cleanup(func() { s.Close(ctx) })
			headGen := func() Generation {
				t.Helper()
				h, _, err := s.readHead(ctx, "p")
				if err != nil {
					t.Fatal(err)
				}
				return h.Generation
			}

			lb.lies.Store(1) // Claim's Create of HEAD
			gen, rec, err := s.Claim(ctx, "p")
			if err != nil || gen != 1 || rec != nil || headGen() != 1 {
				t.Fatalf("Claim with a false failure = %d, %v, %v (HEAD at %d); want 1, nil, nil", gen, rec, err, headGen())
			}
			lb.lies.Store(1) // Claim's Replace of HEAD
			if gen, _, err = s.Claim(ctx, "p"); err != nil || gen != 2 || headGen() != 2 {
				t.Fatalf("second Claim = %d, %v (HEAD at %d); want 2 (a retry on top would make 3)", gen, err, headGen())
			}
			r1 := testRecord(gen, nil)
			lb.lies.Store(1)
			if err := s.Commit(ctx, gen, r1); err != nil {
				t.Fatalf("Commit with a false failure = %v", err)
			}
			r2 := testRecord(gen, r1)
			lb.lies.Store(1)
			if err := s.Commit(ctx, gen, r2); err != nil {
				t.Fatalf("second Commit with a false failure = %v", err)
			}
			lb.lies.Store(1)
			if err := s.Rewind(ctx, "p", gen, r1.Ref()); err != nil {
				t.Fatalf("Rewind with a false failure = %v", err)
			}
			if h, _, _ := s.readHead(ctx, "p"); h.Generation != gen || !sameRef(h.Ref, &Ref{1, gen}) {
				t.Fatalf("HEAD = generation %d at %s, want %d at epoch 1", h.Generation, refString(h.Ref), gen)
			}

			// Our Commit lands, then a newer attempt claims before we
			// learn of it: HEAD is no longer ours, so the store must not
			// report success. ErrFenced is the safe answer (the newer
			// attempt resumes from our record).
			r2b := testRecord(gen, r1)
			r2b.Epoch, r2b.Engine = 5, []byte("again") // epoch 2 of gen is taken by r2
			var newer Generation
			lb.lies.Store(1)
			lb.meanwhile = func() {
				var err error
				if newer, _, err = newStore(lb.Bucket).Claim(ctx, "p"); err != nil {
					t.Error(err)
				}
			}
			if err := s.Commit(ctx, gen, r2b); !errors.Is(err, ErrFenced) {
				t.Fatalf("Commit overtaken after landing = %v, want ErrFenced", err)
			}
			gen4, head, err := s.Claim(ctx, "p")
			if err != nil || newer != gen+1 || gen4 != gen+2 || head == nil || string(head.Engine) != "again" {
				t.Fatalf("after the overtaken Commit: newer %d, Claim = %d, %v, %v; want %d, %d, the Commit's record",
					newer, gen4, head, err, gen+1, gen+2)
			}
		})
	}
}

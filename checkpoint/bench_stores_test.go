package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openetl/etl/checkpoint/object"
)

// countingBucket counts object-layer calls.
type countingBucket struct {
	object.Bucket
	ops atomic.Int64
}

func (c *countingBucket) Create(ctx context.Context, key string, data []byte) error {
	c.ops.Add(1)
	return c.Bucket.Create(ctx, key, data)
}

func (c *countingBucket) Read(ctx context.Context, key string) ([]byte, object.Token, error) {
	c.ops.Add(1)
	return c.Bucket.Read(ctx, key)
}

func (c *countingBucket) Replace(ctx context.Context, key string, data []byte, tok object.Token) error {
	c.ops.Add(1)
	return c.Bucket.Replace(ctx, key, data, tok)
}

func (c *countingBucket) Put(ctx context.Context, key string, data []byte) error {
	c.ops.Add(1)
	return c.Bucket.Put(ctx, key, data)
}

// countingTransport counts HTTP requests: the round trips to the server.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// BenchmarkCommitStores measures the checkpoint overhead of an epoch on
// every store: one Claim, then a chain of Commits of a typical record
// (about 7 KiB of JSON, as in BenchmarkCommit). It reports per Commit the
// latency (ms/commit), the object-layer calls (ops/commit: read HEAD,
// create the record, replace HEAD) and, for the cloud stores, the HTTP
// requests (http/commit); and the same for the Claim. The cloud stores run
// on the loopback servers of scripts/servers.sh, so the figures are the
// protocol's and the emulators' cost, not a cloud's network latency.
func BenchmarkCommitStores(b *testing.B) {
	for _, bk := range objectBackends() {
		b.Run(bk.name, func(b *testing.B) {
			ctx := context.Background()
			rt := &countingTransport{}
			cb := &countingBucket{Bucket: bk.open(b, rt)}
			s := newStore(cb)
			defer s.Close(ctx)

			t0 := time.Now()
			gen, _, err := s.Claim(ctx, "p")
			if err != nil {
				b.Fatal(err)
			}
			claimTime := time.Since(t0)
			claimOps, claimHTTP := cb.ops.Load(), rt.n.Load()

			var prev *Record
			ops0, http0 := cb.ops.Load(), rt.n.Load()
			for b.Loop() {
				rec := testRecord(gen, prev)
				for i := range 8 {
					rec.Resume[fmt.Sprintf("orders/%d", i)] = bytes.Repeat([]byte{byte(i)}, 64)
				}
				rec.Engine = bytes.Repeat([]byte("e"), 4096)
				rec.Committables = [][]byte{make([]byte, 256), make([]byte, 256), make([]byte, 256), make([]byte, 256)}
				if err := s.Commit(ctx, gen, rec); err != nil {
					b.Fatal(err)
				}
				prev = rec
			}
			n := float64(b.N)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/n, "ms/commit")
			b.ReportMetric(float64(cb.ops.Load()-ops0)/n, "ops/commit")
			b.ReportMetric(float64(claimTime.Microseconds())/1000, "ms/claim")
			b.ReportMetric(float64(claimOps), "ops/claim")
			if rt.n.Load() > 0 {
				b.ReportMetric(float64(rt.n.Load()-http0)/n, "http/commit")
				b.ReportMetric(float64(claimHTTP), "http/claim")
			}
			b.ReportMetric(0, "ns/op") // ms/commit says it
		})
	}
}

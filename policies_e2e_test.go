package etl_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/faker"
)

// TestPoliciesToParquet: faker customers → Parquet with an email hashed,
// a name masked, two columns excluded and a row filter; read back with
// pyarrow, independently of the Go code. No raw email or name reaches
// the files, each hash is the HMAC of its source value, and the counts
// add up: read = written + filtered + quarantined.
func TestPoliciesToParquet(t *testing.T) {
	dir := t.TempDir()
	bucket, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	const rows = 2000
	cfg := faker.Config{Rows: rows, Seed: 7, Streams: []string{faker.Customers}}
	src, err := faker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("e2e-secret-key")
	p, err := etl.NewPipeline("policies").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
		Columns(faker.Customers, etl.HashHMAC("email", key), etl.Mask("name", 2), etl.Exclude("tags", "signup")).
		Filter(faker.Customers, etl.Or(etl.Eq("vip", true), etl.Ge("score", 50.0))).
		Build()
	if err != nil {
		t.Fatal(err)
	}
	if g := p.Guarantees()[0].Reason; !strings.Contains(g, "row filter") || !strings.Contains(g, "hash") {
		t.Errorf("Guarantees does not tell of the policies: %s", g)
	}
	res, err := p.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := res.Streams[faker.Customers]
	if c.Read != rows || c.Read != c.Written+c.Filtered+c.Quarantined || c.Filtered == 0 || c.Written == 0 {
		t.Fatalf("counts %+v: want read %d = written + filtered (both > 0) + quarantined", c, rows)
	}

	// What the source sent, and which records the filter keeps.
	raw := map[string]bool{} // every email and name
	wantHash := map[string]bool{}
	kept := 0
	g, _ := faker.New(cfg)
	for i := range int64(rows) {
		op, _, _, payload := g.Generate(faker.Customers, i, nil)
		var m map[string]any
		if json.Unmarshal(payload, &m) != nil {
			continue
		}
		for _, f := range []string{"email", "name"} {
			if s, ok := m[f].(string); ok && len(s) > 2 {
				raw[s] = true
			}
		}
		vip, _ := m["vip"].(bool)
		score, _ := m["score"].(float64)
		if op == source.OpDelete || vip || score >= 50 {
			kept++
			if e, ok := m["email"].(string); ok {
				h := hmac.New(sha256.New, key)
				h.Write([]byte(e))
				wantHash[hex.EncodeToString(h.Sum(nil))] = true
			}
		}
	}
	if int64(kept) != c.Written {
		t.Errorf("written %d, the filter keeps %d of the source's records", c.Written, kept)
	}

	got := testutil.ReadParquetTables(t, dir)[faker.Customers]
	if got == nil || got.Rows != c.Written {
		t.Fatalf("read back %+v, want %d rows", got, c.Written)
	}
	for _, col := range []string{"tags", "signup"} {
		if slices.Contains(got.Columns, col) {
			t.Errorf("excluded column %q is in the files: %v", col, got.Columns)
		}
	}
	hashes := 0
	for col, vals := range got.Values {
		for _, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue
			}
			if raw[s] {
				t.Fatalf("column %q holds a raw source value %q", col, s)
			}
			for r := range raw {
				if len(r) > 6 && strings.Contains(s, r) {
					t.Fatalf("column %q value %q contains the raw %q", col, s, r)
				}
			}
		}
	}
	for _, v := range got.Values["email"] {
		if v == nil {
			continue
		}
		if !wantHash[v.(string)] {
			t.Fatalf("email %v is no HMAC of a kept source email", v)
		}
		hashes++
	}
	if hashes == 0 {
		t.Fatal("no hashed email read back")
	}
	for _, v := range got.Values["name"] {
		if s, ok := v.(string); ok && !strings.HasPrefix(s, "*") {
			t.Fatalf("name %q is not masked", s)
		}
	}
}

package engine_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
)

// TestRawBatchGrow: a batch grown for n records of known sizes takes them
// without allocating, and hands back exactly what was appended.
func TestRawBatchGrow(t *testing.T) {
	const n = 1000
	keys := make([][]byte, n)
	pays := make([][]byte, n)
	kb, pb := 0, 0
	for i := range n {
		keys[i] = fmt.Appendf(nil, "k%d", i)
		pays[i] = bytes.Repeat([]byte{byte('a' + i%26)}, 10+i%50)
		kb, pb = kb+len(keys[i]), pb+len(pays[i])
	}
	var b engine.RawBatch
	fill := func() {
		b.Reset()
		for i := range n {
			b.Append(uint8(source.OpUpdate), int64(i), keys[i], pays[i])
		}
	}
	b.Grow(n, kb, pb)
	if allocs := testing.AllocsPerRun(1, fill); allocs != 0 {
		t.Fatalf("appending %d records to a grown batch allocated %v times", n, allocs)
	}
	if b.Len() != n || b.Bytes() != kb+pb || b.KeyBytes() != kb {
		t.Fatalf("len %d bytes %d keys %d, want %d %d %d", b.Len(), b.Bytes(), b.KeyBytes(), n, kb+pb, kb)
	}
	for i := range n {
		op, seq, k, p := b.Row(i)
		if op != uint8(source.OpUpdate) || seq != int64(i) || !bytes.Equal(k, keys[i]) || !bytes.Equal(p, pays[i]) {
			t.Fatalf("row %d: %v %d %q %q", i, op, seq, k, p)
		}
	}
	// An empty batch grows on demand: without Grow the same fill allocates.
	var fresh engine.RawBatch
	if allocs := testing.AllocsPerRun(1, func() {
		fresh = engine.RawBatch{}
		for i := range n {
			fresh.Append(uint8(source.OpUpdate), int64(i), keys[i], pays[i])
		}
	}); allocs == 0 {
		t.Fatal("an ungrown batch filled without allocating: the test measures nothing")
	}
	// Growing a batch that already has room keeps its contents.
	b.Grow(10, 10, 10)
	if _, _, k, p := b.Row(n - 1); !bytes.Equal(k, keys[n-1]) || !bytes.Equal(p, pays[n-1]) {
		t.Fatal("Grow changed the batch's contents")
	}
}

package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/openetl/etl/checkpoint"
)

// BenchmarkCommit measures one writer committing a chain of records of a
// typical size (8 splits, 4 KiB of engine state, 4 lanes' committables:
// about 7 KiB of JSON) on the local stores. On the file store each Commit
// fsyncs the record, its directory, HEAD's temp file and the directory
// again. BenchmarkCommitStores covers every store, the cloud ones too,
// and counts round trips.
func BenchmarkCommit(b *testing.B) {
	for _, bk := range backends()[:2] { // file, mem
		b.Run(bk.name, func(b *testing.B) {
			s := bk.open(b)
			ctx := context.Background()
			gen, _, err := s.Claim(ctx, "p")
			if err != nil {
				b.Fatal(err)
			}
			var prev *checkpoint.Record
			for b.Loop() {
				rec := next("p", gen, prev)
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
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}

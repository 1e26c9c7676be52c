package sinktest

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkBatch builds and releases one of the suite's batches, in the
// suite's poisoning memory and in Go's: the difference is what poisoning
// costs per batch.
func BenchmarkBatch(b *testing.B) {
	for _, rows := range []int{10, 1000} {
		for _, c := range []struct {
			name string
			mem  func() memory.Allocator
		}{
			{"go", func() memory.Allocator { return memory.NewGoAllocator() }},
			{"poison", func() memory.Allocator { return new(poisonAllocator) }},
		} {
			b.Run(fmt.Sprintf("rows=%d/%s", rows, c.name), func(b *testing.B) {
				s := &suite{next: map[string]int{}, mem: new(poisonAllocator)}
				mem := c.mem()
				for b.Loop() {
					rec, _ := s.rowsIn(mem, "bench", rows, false)
					rec.Release()
				}
			})
		}
	}
}

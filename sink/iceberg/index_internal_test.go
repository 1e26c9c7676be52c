package iceberg

import (
	"encoding/binary"
	"runtime"
	"testing"
)

// BenchmarkKeyIndexMemory measures the heap a key index of 1M keys holds:
// one integer column (the map by value), and a two-column key (the map
// by encoding), reported as bytes per key.
func BenchmarkKeyIndexMemory(b *testing.B) {
	const n = 1_000_000
	for _, tc := range []struct {
		name string
		ints bool
	}{{"int64", true}, {"composite", false}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				x := newKeyIndex([]int{1}, tc.ints, 1, 2, 0)
				var buf []byte
				for i := range n {
					k := key{n: int64(i)}
					if !tc.ints {
						buf = binary.LittleEndian.AppendUint64(append(buf[:0], 1), uint64(i))
						buf = binary.LittleEndian.AppendUint64(append(buf, 1), uint64(i%7))
						k = key{b: buf}
					}
					x.put(k, loc{file: uint32(i / 100_000), pos: uint32(i % 100_000)})
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/n, "B/key")
				runtime.KeepAlive(x)
			}
		})
	}
}

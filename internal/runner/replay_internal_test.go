package runner

import (
	"math/rand/v2"
	"testing"
)

// TestReplayRanges: add and has agree with a set of lines, whatever the
// order lines are added in, and add keeps the ranges sorted, apart and
// merged.
func TestReplayRanges(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 1 + rng.IntN(40)
		in := make([]bool, n)
		var rs [][2]int
		for range rng.IntN(2 * n) {
			i := rng.IntN(n)
			in[i] = true
			rs = add(rs, i)
			for k, r := range rs {
				if r[0] >= r[1] || k > 0 && rs[k-1][1] >= r[0] {
					t.Fatalf("seed %d: ranges %v after adding %d: not sorted, apart and merged", seed, rs, i)
				}
			}
			for j := range n {
				if has(rs, j) != in[j] {
					t.Fatalf("seed %d: ranges %v: has(%d) = %v", seed, rs, j, !in[j])
				}
			}
		}
	}
}

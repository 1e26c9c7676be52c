package iceberg

import (
	"context"
	"math/rand/v2"
	"time"
)

// Pauses before the next try of a commit that lost a race (another
// writer committed to the table first: a shard of the same pipeline
// writing the same table, maintenance, another attempt). After the k-th
// lost race in a row the pause is drawn from [d/2, d], d =
// conflictPause·2^(k-1) up to conflictMaxPause: writers that lost to
// the same winner don't all come back at once and lose to each other
// again (measured with shards of one table: BENCHMARKS.md, "Shards into one Iceberg table").
const (
	conflictPause    = 20 * time.Millisecond
	conflictMaxPause = time.Second
)

// conflictWait pauses after the k-th lost race in a row (k ≥ 1); it
// returns ctx's error if ctx ends first.
func conflictWait(ctx context.Context, k int) error {
	d := conflictMaxPause
	if k < 16 {
		d = min(conflictMaxPause, conflictPause<<(k-1))
	}
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

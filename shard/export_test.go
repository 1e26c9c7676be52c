package shard

import (
	"context"
	"time"
)

// Step runs one Interval's work of l at the time now.
func Step(ctx context.Context, l *Leases, now time.Time, run func(context.Context, int) error) {
	l.now = func() time.Time { return now }
	l.step(ctx, run)
}

// Stop is what Run does when its ctx ends, at the time now.
func Stop(ctx context.Context, l *Leases, now time.Time) {
	l.now = func() time.Time { return now }
	l.stop(ctx)
}

// Settle waits until every run l cancelled (a lease lost or given up)
// has returned.
func Settle(l *Leases) {
	l.mu.Lock()
	var done []chan struct{}
	for _, ls := range l.held {
		if ls.release || ls.lost {
			done = append(done, ls.done)
		}
	}
	l.mu.Unlock()
	for _, d := range done {
		<-d
	}
}

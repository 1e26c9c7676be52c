package etl_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source/faker"
)

// A pipeline that rides out a destination that is briefly away: its
// first PreCommit fails, and the Sync (retried here with Retry.Sync; Run
// retries by default) starts a new attempt that commits everything.
func ExampleBuilder_Retry() {
	ctx := context.Background()
	src, err := faker.New(faker.Config{Rows: 1000, Streams: []string{faker.Orders}})
	if err != nil {
		panic(err)
	}
	unavailable := errors.New("service unavailable")
	var failed atomic.Bool
	dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply,
		Control: func(_ context.Context, c sinktest.FakeDestCall) error {
			if c.Op == sinktest.FakePreCommit && failed.CompareAndSwap(false, true) {
				return unavailable
			}
			return nil
		}})
	var retries []etl.Event
	p, err := etl.NewPipeline("orders").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
		Retry(etl.Retry{Backoff: 10 * time.Millisecond, Sync: true}).
		OnEvent(func(e etl.Event) {
			if e.Kind == etl.EventSyncRetrying {
				retries = append(retries, e)
			}
		}, 0).
		Build()
	if err != nil {
		panic(err)
	}
	res, err := p.Sync(ctx)
	if err != nil {
		panic(err)
	}
	if err := p.Close(ctx); err != nil { // delivers the last events
		panic(err)
	}
	for _, e := range retries {
		fmt.Printf("retry %d: cause %s, unavailable: %v\n", e.Retry, e.Cause, errors.Is(e.Err, unavailable))
	}
	fmt.Printf("generation %d, orders written %d\n", res.Generation, res.Totals[faker.Orders].Written)
	// Output:
	// retry 1: cause destination, unavailable: true
	// generation 2, orders written 1000
}

package etl_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"

	"gocloud.dev/blob/memblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

// Embedding a pipeline: fake data into Parquet files, in memory here; use
// parquet.OpenDir or an s3blob bucket and checkpoint.OpenDir or
// checkpoint.Open for real runs.
func Example() {
	ctx := context.Background()
	src, err := faker.New(faker.Config{Rows: 1000, MalformedShare: 0.01})
	if err != nil {
		panic(err)
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		panic(err)
	}

	p, err := etl.NewPipeline("orders").
		From(src).
		To(dst).
		Checkpoints(checkpoint.NewMem()).
		Build()
	if err != nil {
		panic(err)
	}
	res, err := p.Sync(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range []string{"customers", "orders"} {
		c := res.Streams[s]
		fmt.Printf("%s: read %d, written %d, quarantined %d\n", s, c.Read, c.Written, c.Quarantined)
	}
	m, err := parquet.ReadManifest(ctx, bucket, "", "orders")
	if err != nil {
		panic(err)
	}
	var rows int64
	for _, f := range m.Files {
		rows += f.Rows
	}
	fmt.Println("orders rows in the manifest:", rows)
	// Output:
	// customers: read 1000, written 994, quarantined 6
	// orders: read 1000, written 993, quarantined 7
	// orders rows in the manifest: 993
}

// Watching a pipeline: events through a callback, the status, and the
// probes a Kubernetes deployment points at.
func ExampleBuilder_OnEvent() {
	src, err := faker.New(faker.Config{Rows: 1000, MalformedShare: 0.01})
	if err != nil {
		panic(err)
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		panic(err)
	}
	events := make(chan etl.Event, 100)
	p, err := etl.NewPipeline("orders").
		From(src).
		To(dst).
		Checkpoints(checkpoint.NewMem()).
		OnEvent(func(e etl.Event) {
			// Called on a goroutine of its own, in order; the runner
			// never waits for it.
			if e.Kind == etl.EventQuarantineAdded || e.Kind == etl.EventSyncSucceeded {
				events <- e
			}
		}, 0).
		Build()
	if err != nil {
		panic(err)
	}
	// In a service: http.Handle("/healthz", etl.HealthHandler(p)) and
	// http.Handle("/readyz", etl.HealthHandler(p)).
	probe := httptest.NewRecorder()
	etl.HealthHandler(p).ServeHTTP(probe, httptest.NewRequest("GET", "/readyz", nil))
	fmt.Println("ready before the first sync:", probe.Code)

	if _, err := p.Sync(context.Background()); err != nil {
		panic(err)
	}
	quarantined := map[string]int64{}
	for e := range events {
		if e.Kind == etl.EventSyncSucceeded {
			break
		}
		quarantined[e.Stream] += e.Rows
	}
	fmt.Println("quarantined:", quarantined)
	st := p.Status()
	fmt.Println("phase:", st.Phase, "generation:", st.Generation, "orders written:", st.Streams["orders"].Committed.Written)
	probe = httptest.NewRecorder()
	etl.HealthHandler(p).ServeHTTP(probe, httptest.NewRequest("GET", "/readyz", nil))
	fmt.Println("ready after it:", probe.Code)
	// Output:
	// ready before the first sync: 503
	// quarantined: map[customers:6 orders:7]
	// phase: succeeded generation: 1 orders written: 993
	// ready after it: 200
}

// Running a step after each Sync commits: here a func of the host's;
// etl.Command runs a program such as `dbt build` (examples/dbt). A
// failing step fails the Sync with a *StepError, and what the Sync
// copied stays committed: the next Sync copies nothing new and runs the
// step again.
func ExampleBuilder_AfterSync() {
	src, err := faker.New(faker.Config{Rows: 1000, MalformedShare: 0.01})
	if err != nil {
		panic(err)
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		panic(err)
	}
	fail := true
	p, err := etl.NewPipeline("orders").
		From(src).
		To(dst).
		Checkpoints(checkpoint.NewMem()).
		AfterSync("report", func(ctx context.Context, res etl.Result) error {
			if fail {
				return errors.New("the report's database is down")
			}
			fmt.Printf("report: %d epochs new, %d orders in all\n", res.Epochs, res.Totals["orders"].Written)
			return nil
		}).
		Build()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := p.Sync(ctx)
	var step *etl.StepError
	if errors.As(err, &step) {
		fmt.Printf("step %q failed: %v; retryable: %v\n", step.Step, step.Err, etl.IsRetryable(err))
		fmt.Println("orders committed all the same:", res.Streams["orders"].Written)
	}
	fail = false
	if _, err := p.Sync(ctx); err != nil {
		panic(err)
	}
	// Output:
	// step "report" failed: the report's database is down; retryable: true
	// orders committed all the same: 993
	// report: 0 epochs new, 993 orders in all
}

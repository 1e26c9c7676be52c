// Command metrics shows a pipeline's OpenTelemetry metrics on a
// Prometheus scrape endpoint: it syncs fake customers and orders (package
// faker, -rate records a second per stream) into Parquet files in a
// temporary directory, and serves the metrics while it runs and after,
// until Ctrl-C:
//
//	go run ./examples/metrics
//	curl -s localhost:9464/metrics | grep '^openetl_'
//
// Point a Prometheus server at the address, or keep curling to see the
// counters move. METRICS.md lists the metrics; Prometheus's names replace
// the dots with underscores, add the unit and end counters in _total:
// openetl.rows.written is openetl_rows_written_total, with labels
// openetl_pipeline, openetl_stream and openetl_destination.
//
// The wiring is three lines: a Prometheus exporter is an OpenTelemetry
// metric reader, a meter provider reads through it, and the pipeline is
// built with Telemetry(meterProvider, nil).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source/faker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "localhost:9464", "address of the scrape endpoint")
	rows := flag.Int64("rows", 100_000, "records per stream")
	rate := flag.Float64("rate", 5_000, "records per second per stream; 0: as fast as it goes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	mp, handler, err := newTelemetry()
	if err != nil {
		return err
	}
	defer mp.Shutdown(context.Background())
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	defer srv.Close()
	fmt.Printf("metrics at http://%s/metrics\n", ln.Addr())

	dir, err := os.MkdirTemp("", "openetl-metrics-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	res, err := syncFake(ctx, mp, dir, faker.Config{Rows: *rows, Rate: *rate, MalformedShare: 0.001})
	if errors.Is(err, context.Canceled) {
		return nil
	} else if err != nil {
		return err
	}
	fmt.Printf("synced %d epochs in %v:\n", res.Epochs, time.Since(start).Round(time.Millisecond))
	for _, s := range slices.Sorted(maps.Keys(res.Streams)) {
		fmt.Printf("  %-10s %7d rows written, %d quarantined\n", s, res.Streams[s].Written, res.Streams[s].Quarantined)
	}
	fmt.Println("serving the metrics until Ctrl-C")
	<-ctx.Done()
	return nil
}

// newTelemetry returns a meter provider and an HTTP handler that serves
// what it measures in Prometheus's text format. Shut the provider down
// when done.
func newTelemetry() (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, err
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// syncFake syncs a fake source into Parquet files under dir once,
// reporting its metrics to mp.
func syncFake(ctx context.Context, mp metric.MeterProvider, dir string, cfg faker.Config) (etl.Result, error) {
	src, err := faker.New(cfg)
	if err != nil {
		return etl.Result{}, err
	}
	bucket, err := parquet.OpenDir(filepath.Join(dir, "tables"))
	if err != nil {
		return etl.Result{}, err
	}
	defer bucket.Close()
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		return etl.Result{}, err
	}
	store, err := checkpoint.OpenDir(filepath.Join(dir, "checkpoints"))
	if err != nil {
		return etl.Result{}, err
	}
	defer store.Close(context.Background())
	p, err := etl.NewPipeline("metrics").From(src).To(dst).Checkpoints(store).
		EpochEvery(time.Second, 0).
		Telemetry(mp, nil).
		Build()
	if err != nil {
		return etl.Result{}, err
	}
	return p.Sync(ctx)
}

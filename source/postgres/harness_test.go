package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/sink/parquet"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/postgres"
)

// harness runs a pipeline named "pg" from a Postgres source into Parquet
// files under tables, with checkpoints under ckpts; each sync or run
// builds it anew from cfg, as a restarted process would.
type harness struct {
	t             *testing.T
	d             string
	cfg           postgres.Config
	tables, ckpts string
	last          etl.Result
	setup         func(*postgres.Source)            // called on each new source
	wrap          func(source.Source) source.Source // wraps each new source, when set
	logger        *slog.Logger                      // the pipeline's, when set
	onEvent       func(etl.Event)                   // the pipeline's, when set
	retry         *etl.Retry                        // the pipeline's, when set
	options       func(*etl.Builder) *etl.Builder   // more of the pipeline's options, when set
	built         func(*etl.Pipeline)               // called with each pipeline built, when set
}

func newHarness(t *testing.T, d string, cfg postgres.Config) *harness {
	tables, ckpts := tablesDir(t)
	return &harness{t: t, d: d, cfg: cfg, tables: tables, ckpts: ckpts}
}

// build returns the pipeline and a function closing what it opened.
func (h *harness) build(epochEvery time.Duration) (*etl.Pipeline, func(), error) {
	cfg := h.cfg
	cfg.DSN = h.d
	src, err := postgres.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	if h.setup != nil {
		h.setup(src)
	}
	bucket, err := fileblob.OpenBucket(h.tables, &fileblob.Options{CreateDir: true, Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
	if err != nil {
		return nil, nil, err
	}
	store, err := checkpoint.OpenDir(h.ckpts)
	if err != nil {
		return nil, nil, err
	}
	closeAll := func() {
		src.Close(context.Background())
		bucket.Close()
		store.Close(context.Background())
	}
	dst, err := parquet.New(parquet.Config{Bucket: bucket})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	var from source.Source = src
	if h.wrap != nil {
		from = h.wrap(src)
	}
	b := etl.NewPipeline("pg").From(testutil.HoldSource(from)).To(dst).Checkpoints(store)
	if epochEvery > 0 {
		b = b.EpochEvery(epochEvery, 0)
	}
	if h.logger != nil {
		b = b.Logger(h.logger)
	}
	if h.onEvent != nil {
		b = b.OnEvent(h.onEvent, 0)
	}
	if h.retry != nil {
		b = b.Retry(*h.retry)
	}
	if h.options != nil {
		b = h.options(b)
	}
	p, err := b.Build()
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	if h.built != nil {
		h.built(p)
	}
	return p, closeAll, nil
}

func (h *harness) sync() (etl.Result, error) {
	h.t.Helper()
	p, closeAll, err := h.build(0)
	if err != nil {
		h.t.Fatal(err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := p.Sync(ctx)
	h.last = res
	if cerr := p.Close(ctx); err == nil && cerr != nil {
		err = cerr
	}
	return res, err
}

func (h *harness) run(ctx context.Context, epochEvery time.Duration) error {
	p, closeAll, err := h.build(epochEvery)
	if err != nil {
		return err
	}
	defer closeAll()
	err = p.Run(ctx)
	// Close delivers the events still queued (the record of an epoch is
	// on disk before its epoch.committed event reaches the callback).
	if cerr := p.Close(context.Background()); err == nil {
		err = cerr
	}
	return err
}

func (h *harness) lastCounts(stream string) int64 { return h.last.Streams[stream].Read }

// rows returns "op id" for every row of stream, in seq order.
func (h *harness) rows(stream string) []string {
	var out []string
	for _, r := range readRows(h.t, h.tables, stream) {
		out = append(out, fmt.Sprintf("%v %v", r["_openetl_op"], r["id"]))
	}
	return out
}

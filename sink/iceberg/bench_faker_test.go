package iceberg_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// captureDest keeps, per lane, every batch the runner hands its writers:
// the engine's real Arrow output, to replay into the writers measured.
type captureDest struct {
	caps sink.Capabilities
	mu   sync.Mutex
	recs map[int][]arrow.RecordBatch
}

func (c *captureDest) Class() sink.Class               { return sink.StageAndApply }
func (c *captureDest) Capabilities() sink.Capabilities { return c.caps }
func (c *captureDest) Writer(_ context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	lane := cfg.Lane
	return &captureWriter{d: c, lane: lane}, nil
}

type captureWriter struct {
	d    *captureDest
	lane int
}

func (w *captureWriter) Write(_ context.Context, _ string, rec arrow.RecordBatch) error {
	rec.Retain()
	w.d.mu.Lock()
	w.d.recs[w.lane] = append(w.d.recs[w.lane], rec)
	w.d.mu.Unlock()
	return nil
}
func (w *captureWriter) PreCommit(context.Context, uint64) (sink.Committable, error) { return nil, nil }
func (w *captureWriter) Commit(context.Context, uint64, []sink.Committable) error    { return nil }
func (w *captureWriter) Recover(context.Context, checkpoint.Generation, *checkpoint.Record) (sink.Outcome, error) {
	return sink.Applied, nil
}
func (w *captureWriter) Close(context.Context) error          { return nil }
func (w *captureWriter) Finish(context.Context, uint64) error { return nil }

// fakerBatches syncs benchRows() fake orders (inserts and status updates)
// through the real runner and engine with lanes writer lanes and returns
// the Arrow batches each lane got.
func fakerBatches(b *testing.B, lanes int) [][]arrow.RecordBatch {
	b.Helper()
	dst := &captureDest{recs: map[int][]arrow.RecordBatch{}}
	ice, err := iceberg.New(iceberg.Config{Catalog: newWarehouse(b).cat})
	if err != nil {
		b.Fatal(err)
	}
	dst.caps = ice.Capabilities()
	src, err := faker.New(faker.Config{Seed: 11, Rows: int64(benchRows()), Streams: []string{faker.Orders}, SplitsPerStream: 2})
	if err != nil {
		b.Fatal(err)
	}
	p, err := etl.NewPipeline("capture").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Lanes(lanes).Build()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	out := make([][]arrow.RecordBatch, lanes)
	for lane := range lanes {
		out[lane] = dst.recs[lane]
	}
	return out
}

// BenchmarkFaker measures benchRows() fake orders (OPENETL_BENCH_ROWS,
// default 1M; the engine's Arrow batches, captured first) written by
// two lanes at once into a local warehouse (SQL catalog on SQLite), in
// append and merge mode (key id: status updates replace their order):
// Write, PreCommit and one Commit, every epoch committed. The ceiling
// writes the same batches with pqarrow, one goroutine and file per lane
// (the same parallelism), with iceberg-go's default Parquet settings
// (zstd, data page v2, 1 MiB pages, 1M-row groups, 2 MiB dictionaries).
// It reports rows/s and CPU-seconds per million rows (user+sys of the
// process, during the timed loop).
func BenchmarkFaker(b *testing.B) {
	const lanes = 2
	recs := fakerBatches(b, lanes)
	rows := 0
	for _, l := range recs {
		for _, r := range l {
			rows += int(r.NumRows())
		}
	}
	defer func() {
		for _, l := range recs {
			for _, r := range l {
				r.Release()
			}
		}
	}()
	schemas := 0
	for _, l := range recs {
		for i, r := range l {
			if i == 0 || !r.Schema().Equal(l[i-1].Schema()) {
				schemas++
			}
		}
	}
	b.Logf("%d rows captured in %d+%d batches, %d schema runs; schema %s", rows, len(recs[0]), len(recs[1]), schemas, recs[0][len(recs[0])-1].Schema())
	ctx := context.Background()
	report := func(b *testing.B, cpu float64) {
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		b.ReportMetric(cpu/(float64(rows)*float64(b.N)/1e6), "cpu-s/Mrows")
	}
	for _, mode := range []sink.Mode{sink.Append, sink.Merge} {
		b.Run(mode.String(), func(b *testing.B) {
			wh := newWarehouse(b)
			cpu0 := cpuSeconds()
			for i := 0; b.Loop(); i++ {
				name := fmt.Sprintf("orders%d", i)
				d := newDest(b, wh.cat, iceberg.Config{})
				spec := sink.StreamSpec{Stream: name, Table: name, Mode: mode, Key: []string{"id"}}
				ws := make([]sink.Writer, lanes)
				for lane := range ws {
					w, err := d.Writer(ctx, writerConfig("bench", lane, spec))
					if err != nil {
						b.Fatal(err)
					}
					ws[lane] = w
				}
				if _, err := ws[0].Recover(ctx, 1, nil); err != nil {
					b.Fatal(err)
				}
				cs := make([]sink.Committable, lanes)
				errs := make([]error, lanes)
				var wg sync.WaitGroup
				for lane, w := range ws {
					wg.Go(func() {
						for _, r := range recs[lane] {
							if err := w.Write(ctx, name, r); err != nil {
								errs[lane] = err
								return
							}
						}
						cs[lane], errs[lane] = w.PreCommit(ctx, 1)
					})
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				if err := ws[0].Commit(ctx, 1, cs); err != nil {
					b.Fatal(err)
				}
				for _, w := range ws {
					w.Close(ctx)
				}
			}
			report(b, cpuSeconds()-cpu0)
		})
	}
	b.Run("pqarrow-ceiling", func(b *testing.B) {
		dir := b.TempDir()
		props := pq.NewWriterProperties(pq.WithCompression(compress.Codecs.Zstd), pq.WithMaxRowGroupLength(1<<20),
			pq.WithDataPageSize(1<<20), pq.WithDataPageVersion(pq.DataPageV2), pq.WithBatchSize(20000),
			pq.WithDictionaryPageSizeLimit(2<<20))
		cpu0 := cpuSeconds()
		for i := 0; b.Loop(); i++ {
			errs := make([]error, lanes)
			var wg sync.WaitGroup
			for lane := range lanes {
				wg.Go(func() {
					errs[lane] = writeParquet(filepath.Join(dir, fmt.Sprintf("%d-%d.parquet", i, lane)), recs[lane], props)
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		report(b, cpuSeconds()-cpu0)
	})
}

// writeParquet writes recs (whose schemas may differ only by added
// columns: a new file starts at each schema) to path.
func writeParquet(path string, recs []arrow.RecordBatch, props *pq.WriterProperties) error {
	var fw *pqarrow.FileWriter
	var sc *arrow.Schema
	n := 0
	closeFile := func() error {
		if fw == nil {
			return nil
		}
		return fw.Close()
	}
	for _, r := range recs {
		if fw == nil || !sc.Equal(r.Schema()) {
			if err := closeFile(); err != nil {
				return err
			}
			sc = r.Schema()
			f, err := os.Create(fmt.Sprintf("%s.%d", path, n))
			if err != nil {
				return err
			}
			n++
			if fw, err = pqarrow.NewFileWriter(r.Schema(), f, props, pqarrow.DefaultWriterProps()); err != nil {
				return err
			}
		}
		if err := fw.WriteBuffered(r); err != nil {
			return err
		}
	}
	return closeFile()
}

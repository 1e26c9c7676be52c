package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"go.opentelemetry.io/otel/attribute"
	"gocloud.dev/blob"

	"github.com/openetl/etl/internal/obs"
	"github.com/openetl/etl/sink"
)

// writer is one lane's sink.Writer.
//
// Write, PreCommit and Close run on the lane's goroutine and own open,
// staged, seq, lastEpoch and err. Commit and Recover run on the commit
// goroutine and share only gen (atomic) and the immutable fields with it.
type writer struct {
	d        *Destination
	pipeline string
	lane     int
	nonce    string
	tables   []string // of the spec's streams, sorted: Recover claims them

	gen atomic.Uint64 // set by Recover, read by Commit

	hintMu sync.Mutex
	hints  map[string]uint64 // stream → a manifest version known to exist

	open      map[string]*openFile // stream → its file being written
	staged    []stagedFile         // files closed since the last PreCommit
	names     map[string]bool      // streams already checked and claimed (claimStream)
	seq       int                  // numbers this writer's files
	lastEpoch uint64
	preCommit bool  // PreCommit was called at least once
	err       error // sticky: a failed Write or PreCommit loses rows
	closed    bool
	patch     patchState // patch batches until PreCommit (patch.go)
}

var _ sink.Writer = (*writer)(nil)

// openFile is a Parquet file being written to a staging key.
type openFile struct {
	stream string
	key    string
	n      int
	schema *arrow.Schema
	enc    fileEncoder
	bw     *blob.Writer
	cw     *countingWriter
	cancel context.CancelFunc // aborts bw
	rows   int64
}

// stagedFile is one file of a committable.
type stagedFile struct {
	Stream string `json:"stream"`
	Staged string `json:"staged"`
	Final  string `json:"final"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	Patch  bool   `json:"patch,omitempty"` // patches (patch.go), applied, never copied
	n      int
}

// committable is the JSON form of a sink.Committable.
type committable struct {
	Format   int          `json:"format"`
	Pipeline string       `json:"pipeline"`
	Lane     int          `json:"lane"`
	Epoch    uint64       `json:"epoch"`
	Nonce    string       `json:"nonce"`
	Files    []stagedFile `json:"files"`
}

const committableFormat = 1

func decodeCommittable(c sink.Committable) (*committable, error) {
	var out committable
	if len(c) == 0 {
		return &out, nil
	}
	if err := json.Unmarshal(c, &out); err != nil {
		return nil, fmt.Errorf("parquet: decode committable: %w", err)
	}
	if out.Format != committableFormat && out.Format != patchFormat {
		return nil, fmt.Errorf("parquet: committable format %d, want %d or %d: written by another version?", out.Format, committableFormat, patchFormat)
	}
	return &out, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

// Write counts what reaches the blob writer. countingWriter deliberately
// has no Close: pqarrow's FileWriter.Close would otherwise close the blob
// writer, and the writer must decide between Close (commit) and abort.
func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Write appends rec to the lane's open file of stream, starting a new file
// when rec's schema differs from the open file's or the file has passed
// Config.TargetFileBytes. Cancelling ctx aborts the upload of the file
// being written, and the writer then fails every later Write and
// PreCommit: rows of the epoch would be missing.
func (w *writer) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	if w.closed {
		return errors.New("parquet: Write after Close")
	}
	if w.err != nil {
		return w.err
	}
	if !w.names[stream] {
		if err := checkName("stream", stream); err != nil {
			return err
		}
		if err := w.claimStream(ctx, stream); err != nil {
			return err
		}
		w.names[stream] = true
	}
	if rec.NumRows() == 0 {
		return nil
	}
	if isPatch(rec.Schema()) {
		return w.writePatch(stream, rec)
	}
	f := w.open[stream]
	if f != nil && !f.schema.Equal(rec.Schema()) {
		// The engine widened the schema: a Parquet file has one schema,
		// so the old file ends here and both are listed in the epoch.
		if err := w.finish(ctx, f); err != nil {
			return w.fail(err)
		}
		f = nil
	}
	if f == nil {
		var err error
		if f, err = w.start(ctx, stream, rec); err != nil {
			return w.fail(err)
		}
	}
	stop := context.AfterFunc(ctx, f.cancel)
	err := f.enc.write(rec)
	stop()
	if err != nil {
		return w.fail(fmt.Errorf("parquet: write %s: %w", f.key, err))
	}
	f.rows += rec.NumRows()
	if f.cw.n >= w.d.targetBytes {
		if err := w.finish(ctx, f); err != nil {
			return w.fail(err)
		}
	}
	return nil
}

// fail makes err sticky and discards the open files: once a batch is lost
// the epoch can't be committed, and the runner must end the attempt.
func (w *writer) fail(err error) error {
	w.err = err
	w.abortOpen()
	w.dropPatches()
	return err
}

func (w *writer) start(ctx context.Context, stream string, first arrow.RecordBatch) (*openFile, error) {
	schema := first.Schema()
	n := w.seq
	w.seq++
	key := w.d.stagingKey(w.pipeline, stream, w.nonce, w.lane, n)
	// The blob writer outlives this call: it gets a context of its own,
	// cancelled only to abort the upload (by Close, a failure, or the
	// ctx of the Write or PreCommit running at the time).
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	bw, err := w.d.bucket.NewWriter(bctx, key, &blob.WriterOptions{ContentType: "application/vnd.apache.parquet"})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("parquet: create %s: %w", key, err)
	}
	cw := &countingWriter{w: bw}
	enc, err := w.d.newEncoder(schema, first, cw)
	if err != nil {
		cancel()
		_ = bw.Close()
		return nil, fmt.Errorf("parquet: stream %q: schema not writable as Parquet: %w", stream, err)
	}
	f := &openFile{stream: stream, key: key, n: n, schema: schema, enc: enc, bw: bw, cw: cw, cancel: cancel}
	w.open[stream] = f
	w.d.log.Debug("parquet: file started", "pipeline", w.pipeline, "lane", w.lane, "stream", stream, "key", key)
	return f, nil
}

// finish writes f's footer and closes its blob writer: once that returns
// nil the file is durable under its staging key.
func (w *writer) finish(ctx context.Context, f *openFile) (err error) {
	ctx, span := obs.Start(ctx, "openetl.parquet.flush", attribute.String("openetl.stream", f.stream))
	defer func() { obs.End(span, err) }()
	delete(w.open, f.stream)
	stop := context.AfterFunc(ctx, f.cancel)
	defer stop()
	defer f.cancel()
	if err := f.enc.finish(); err != nil {
		f.cancel()
		_ = f.bw.Close()
		return fmt.Errorf("parquet: finish %s: %w", f.key, err)
	}
	if err := f.bw.Close(); err != nil {
		return fmt.Errorf("parquet: upload %s: %w", f.key, err)
	}
	w.staged = append(w.staged, stagedFile{Stream: f.stream, Staged: f.key, Rows: f.rows, Bytes: f.cw.n, n: f.n})
	w.d.log.Debug("parquet: file staged", "pipeline", w.pipeline, "lane", w.lane, "stream", f.stream, "key", f.key, "rows", f.rows, "bytes", f.cw.n)
	return nil
}

// abortOpen cancels the uploads of every open file; nothing of them
// reaches the bucket.
func (w *writer) abortOpen() {
	for _, f := range w.open {
		f.enc.abort()
		f.cancel()
		_ = f.bw.Close() // returns the cancellation; the upload is discarded
	}
	clear(w.open)
}

// PreCommit closes every open file, which makes it durable under its
// staging key, and returns the committable listing the files closed since
// the previous PreCommit with the final keys they get in Commit. An epoch
// without rows returns a committable without files. Cancelling ctx aborts
// the uploads still running; the writer then fails from then on.
func (w *writer) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	if w.closed {
		return nil, errors.New("parquet: PreCommit after Close")
	}
	if w.err != nil {
		return nil, w.err
	}
	if w.preCommit && epoch <= w.lastEpoch {
		return nil, fmt.Errorf("parquet: PreCommit(%d) after PreCommit(%d): epochs must increase", epoch, w.lastEpoch)
	}
	streams := make([]string, 0, len(w.open))
	for s := range w.open {
		streams = append(streams, s)
	}
	slices.Sort(streams)
	for _, s := range streams {
		if err := w.finish(ctx, w.open[s]); err != nil {
			return nil, w.fail(err)
		}
	}
	patches, err := w.stagePatches(ctx)
	if err != nil {
		return nil, w.fail(err)
	}
	c := committable{
		Format:   committableFormat,
		Pipeline: w.pipeline,
		Lane:     w.lane,
		Epoch:    epoch,
		Nonce:    w.nonce,
		Files:    make([]stagedFile, 0, len(w.staged)),
	}
	if patches {
		c.Format = patchFormat
	}
	for _, f := range w.staged {
		f.Final = w.d.finalKey(f.Stream, epoch, w.lane, f.n, w.nonce)
		c.Files = append(c.Files, f)
	}
	out, err := json.Marshal(c)
	if err != nil {
		return nil, w.fail(fmt.Errorf("parquet: encode committable: %w", err))
	}
	w.staged = w.staged[:0]
	w.lastEpoch, w.preCommit = epoch, true
	return out, nil
}

// Finish does nothing: Commit publishes every epoch's files, so nothing
// waits for the end of a refresh.
func (w *writer) Finish(context.Context, uint64) error { return nil }

// Close aborts the open files and deletes the files staged since the last
// PreCommit, which no committable names; files of committables, staged or
// applied, are kept. Cancelling ctx stops the deletes (the files are
// orphans then, never read).
func (w *writer) Close(ctx context.Context) error {
	if w.closed {
		return nil
	}
	w.closed = true
	w.abortOpen()
	w.dropPatches()
	var errs []error
	for _, f := range w.staged {
		if err := w.d.bucket.Delete(ctx, f.Staged); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("parquet: delete unflushed %s: %w", f.Staged, err))
		}
	}
	w.staged = nil
	return errors.Join(errs...)
}

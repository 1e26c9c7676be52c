package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
)

// writer is one lane's sink.Writer.
//
// Write, PreCommit and Close run on the lane's goroutine and own pending,
// lastEpoch and err. Commit and Recover run on the commit goroutine and
// share only gen (atomic) and the immutable fields with them.
type writer struct {
	d        *Destination
	pipeline string
	lane     int
	nonce    string

	gen atomic.Uint64 // set by Recover, read by Commit

	pending   map[string]*pendingTable // table → rows since the last PreCommit
	lastEpoch uint64
	preCommit bool
	err       error // sticky: a failed PreCommit loses rows
	closed    bool
}

var _ sink.Writer = (*writer)(nil)

// pendingTable is one table's batches of the epoch being written, in
// order. They are retained until PreCommit hands them to iceberg-go,
// which releases them.
type pendingTable struct {
	recs []arrow.RecordBatch
	rows int64
}

func (p *pendingTable) release() {
	for _, r := range p.recs {
		r.Release()
	}
	p.recs = nil
}

// Write adds rec to the epoch: it keeps the batch (retained) until
// PreCommit writes the epoch's data files. Memory grows with the epoch.
func (w *writer) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	if w.closed {
		return errors.New("iceberg: Write after Close")
	}
	if w.err != nil {
		return w.err
	}
	if err := checkName("table", stream); err != nil {
		return err
	}
	if rec.NumRows() == 0 {
		return nil
	}
	p := w.pending[stream]
	if p == nil {
		p = &pendingTable{}
		w.pending[stream] = p
	}
	rec.Retain()
	p.recs = append(p.recs, rec)
	p.rows += rec.NumRows()
	return nil
}

// PreCommit creates or evolves each table written in the epoch, writes
// the epoch's rows as Parquet data files (and, for Merge tables,
// equality-delete files) under the table's data location, where no
// snapshot refers to them yet, and returns the committable listing them.
// On error the writer fails from then on and the files it wrote for the
// epoch are deleted (best effort).
func (w *writer) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	if w.closed {
		return nil, errors.New("iceberg: PreCommit after Close")
	}
	if w.err != nil {
		return nil, w.err
	}
	if w.preCommit && epoch <= w.lastEpoch {
		return nil, fmt.Errorf("iceberg: PreCommit(%d) after PreCommit(%d): epochs must increase", epoch, w.lastEpoch)
	}
	c := committable{Format: committableFormat, Pipeline: w.pipeline, Lane: w.lane, Epoch: epoch, Nonce: w.nonce}
	names := slices.Sorted(maps.Keys(w.pending))
	for i, name := range names {
		p := w.pending[name]
		tf, err := w.writeTable(ctx, name, p)
		if err != nil {
			for _, rest := range names[i+1:] {
				w.pending[rest].release()
			}
			clear(w.pending)
			w.removeFiles(ctx, c.Tables)
			w.err = err
			return nil, err
		}
		c.Tables = append(c.Tables, tf)
	}
	clear(w.pending)
	out, err := json.Marshal(c)
	if err != nil {
		w.err = fmt.Errorf("iceberg: encode committable: %w", err)
		return nil, w.err
	}
	w.lastEpoch, w.preCommit = epoch, true
	return out, nil
}

// writeTable writes one table's pending rows; it consumes p's batches.
func (w *writer) writeTable(ctx context.Context, name string, p *pendingTable) (tableFiles, error) {
	tf := tableFiles{Table: name, Rows: p.rows}
	recs := p.recs
	p.recs = nil
	defer func() {
		for _, r := range recs {
			if r != nil {
				r.Release()
			}
		}
	}()
	if tc := w.d.tables[name]; tc.Mode == Merge {
		r := recs
		recs = nil // mergeRows releases them
		return w.writeMerge(ctx, name, tc, tf, r)
	}
	// Evolve the table for every schema of the epoch, in order, so that
	// the last table covers them all.
	var tbl *table.Table
	var last *arrow.Schema
	for _, r := range recs {
		if last != nil && last.Equal(r.Schema()) {
			continue
		}
		last = r.Schema()
		var err error
		if tbl, err = w.d.ensureTable(ctx, w.pipeline, name, last); err != nil {
			return tf, err
		}
	}
	// One WriteRecords per run of batches with the same schema.
	for start := 0; start < len(recs); {
		end := start + 1
		for end < len(recs) && recs[end].Schema().Equal(recs[start].Schema()) {
			end++
		}
		files, err := w.write(ctx, tbl, recs[start:end])
		tf.Data = append(tf.Data, files...)
		if err != nil {
			w.removeFiles(ctx, []tableFiles{tf})
			return tf, err
		}
		start = end
	}
	return tf, nil
}

// write writes recs (one schema) as data files of tbl. It takes over the
// batches: each is released, and its slot set to nil, once iceberg-go has
// it.
func (w *writer) write(ctx context.Context, tbl *table.Table, recs []arrow.RecordBatch) ([]fileDesc, error) {
	sc := recs[0].Schema()
	seq := func(yield func(arrow.RecordBatch, error) bool) {
		for i, r := range recs {
			recs[i] = nil // iceberg-go releases what it was given
			if !yield(r, nil) {
				return
			}
		}
	}
	var out []fileDesc
	for df, err := range table.WriteRecords(ctx, tbl, sc, seq, table.WithTargetFileSize(w.d.targetBytes)) {
		if err != nil {
			return out, fmt.Errorf("iceberg: write data files of %v: %w", tbl.Identifier(), err)
		}
		fd, err := describe(df)
		if err != nil {
			return out, err
		}
		out = append(out, fd)
	}
	return out, nil
}

// removeFiles deletes files no committable names (best effort).
func (w *writer) removeFiles(ctx context.Context, tfs []tableFiles) {
	for _, tf := range tfs {
		tbl, err := w.d.cat.LoadTable(ctx, w.d.ident(tf.Table))
		if err != nil {
			continue
		}
		fs, err := tbl.FS(ctx)
		if err != nil {
			continue
		}
		for _, f := range append(slices.Clone(tf.Data), tf.Deletes...) {
			if err := fs.Remove(f.Path); err != nil {
				w.d.log.Warn("iceberg: could not delete an unused data file", "path", f.Path, "err", err)
			}
		}
	}
}

// Close discards the rows written since the last PreCommit (they were
// only in memory). Files of committables, applied or not, are kept.
func (w *writer) Close(ctx context.Context) error {
	if w.closed {
		return nil
	}
	w.closed = true
	for _, p := range w.pending {
		p.release()
	}
	clear(w.pending)
	return nil
}

// snapshotProps are recorded in the summary of the epoch's snapshot, for
// people reading the history; the durable markers are table properties.
func (w *writer) snapshotProps(epoch uint64, gen uint64) ice.Properties {
	return ice.Properties{
		"openetl.pipeline":   w.pipeline,
		"openetl.epoch":      fmt.Sprint(epoch),
		"openetl.generation": fmt.Sprint(gen),
	}
}

package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
)

// writer is one lane's sink.Writer.
//
// Write, PreCommit and Close run on the lane's goroutine and own pending,
// carry, lastEpoch and err. Commit and Recover run on the commit
// goroutine, own waitSince and last, and share with the lane only gen
// (atomic), inherit (locked) and the immutable fields. Close runs after
// the last Commit (the runner closes writers when the attempt's
// goroutines are done), so it may read last.
type writer struct {
	d        *Destination
	pipeline string
	lane     int
	nonce    string
	specs    map[string]sink.StreamSpec // by table, from the WriterConfig

	gen atomic.Uint64 // set by Recover, read by Commit

	pending   map[string]*pendingTable // table → rows since the last PreCommit
	carry     map[string]*carried      // table → files maybe not in it yet
	lastEpoch uint64
	preCommit bool
	err       error // sticky: a failed PreCommit loses rows
	closed    bool

	// inherit holds files Recover found waiting in the HEAD's
	// committables, for lane 0's next PreCommit to carry on.
	inheritMu sync.Mutex
	inherit   map[string]pending

	waitSince map[string]time.Time // table → when Commit first left files waiting
	indexes   map[string]*keyIndex // table → its keys' rows, for position deletes
	last      *lastCommit          // the last Commit's files, for Close

	visible atomic.Uint64 // what Visible reports
	// fenceAt are tables of the pipeline whose fence an epoch without
	// files is checked against (commit goroutine).
	fenceAt []table.Identifier
	// maintained is when lane 0 last ran Config.Maintenance (at first,
	// when the writer was made).
	maintained time.Time
	// patches are the patch batches of the epoch by table (patch.go).
	patches map[string][]arrow.RecordBatch
}

// lastCommit is what the last Commit call was given: an epoch whose
// checkpoint record is HEAD, so its files may be applied.
type lastCommit struct {
	epoch   uint64
	byTable map[string]*epochFiles
}

var (
	_ sink.Writer     = (*writer)(nil)
	_ sink.Visibility = (*writer)(nil)
)

// mode is how table is written: its stream's mode, or Append for a table
// no stream of the attempt writes (one whose files a recovered
// committable of an earlier attempt lists).
func (w *writer) mode(table string) sink.Mode { return w.specs[table].Mode }

// pendingTable is one table's rows of the epoch being written. An Append
// table's batches stream into data files as they come (cur, then files);
// a Merge table's are retained, in order, until PreCommit reduces them.
type pendingTable struct {
	recs  []arrow.RecordBatch // Merge: retained batches
	cur   *fileStream         // Append: the data files being written
	files []fileDesc          // Append: files of finished streams
	rows  int64
}

// release drops the pending rows: retained batches are released, a
// running stream is aborted, and files it wrote are deleted (best
// effort, through w).
func (p *pendingTable) release(ctx context.Context, w *writer, name string) {
	for _, r := range p.recs {
		r.Release()
	}
	p.recs = nil
	if p.cur != nil {
		p.cur.cancel()
		files, _ := p.cur.finish()
		p.files = append(p.files, files...)
		p.cur = nil
	}
	if len(p.files) > 0 {
		w.removeFiles(ctx, []tableFiles{{Table: name, Data: p.files}})
		p.files = nil
	}
}

// fileStream is iceberg-go's writer of one run of same-schema batches of
// an Append table, running in its own goroutine: Write hands it batches
// through ch (bounded, so a slow writer holds Write back), and finish
// closes ch and waits for the data files.
type fileStream struct {
	schema *arrow.Schema
	ch     chan arrow.RecordBatch
	done   chan struct{}
	cancel context.CancelFunc
	files  []fileDesc // set before done is closed
	err    error      // set before done is closed
}

func (w *writer) startStream(ctx context.Context, tbl *table.Table, sc *arrow.Schema) *fileStream {
	// The stream outlives the Write that starts it: its context is
	// cancelled only to abort it (Close, a failure).
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &fileStream{schema: sc, ch: make(chan arrow.RecordBatch, 8), done: make(chan struct{}), cancel: cancel}
	if opts, ok := w.d.engineOptions(tbl); ok {
		go func() {
			defer close(s.done)
			s.files, s.err = w.writeEngine(bctx, tbl, sc, opts, func(yield func(arrow.RecordBatch) bool) {
				for r := range s.ch {
					if !yield(r) { // writeEngine released r
						break
					}
				}
			})
			for r := range s.ch { // what it did not take after a failure
				r.Release()
			}
		}()
		return s
	}
	go func() {
		defer close(s.done)
		seq := func(yield func(arrow.RecordBatch, error) bool) {
			for r := range s.ch {
				if !yield(r, nil) { // iceberg-go released r
					return
				}
			}
		}
		for df, err := range table.WriteRecords(bctx, tbl, sc, seq, table.WithTargetFileSize(w.d.targetBytes),
			table.WithWriteUUID(writeUUID(w.pipeline))) {
			if err != nil {
				s.err = fmt.Errorf("iceberg: write data files of %v: %w", tbl.Identifier(), err)
				break
			}
			fd, err := describe(df)
			if err != nil {
				s.err = err
				break
			}
			s.files = append(s.files, fd)
		}
		for r := range s.ch { // what it did not take after a failure
			r.Release()
		}
	}()
	return s
}

// finish ends the stream's input and returns its files.
func (s *fileStream) finish() ([]fileDesc, error) {
	close(s.ch)
	<-s.done
	s.cancel()
	return s.files, s.err
}

// Write adds rec to the epoch. For an Append table it creates or evolves
// the table for rec's schema on the first batch of that schema and hands
// the batch to iceberg-go's writer, which encodes data files in the
// background (a few batches are queued; a slow writer holds Write back).
// For a Merge table it keeps the batch (retained) until PreCommit reduces
// the epoch: memory grows with the epoch. Cancelling ctx while Write
// waits fails the writer from then on.
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
	if isPatch(rec.Schema()) {
		return w.writePatch(stream, rec)
	}
	p := w.pending[stream]
	if p == nil {
		p = &pendingTable{}
		w.pending[stream] = p
	}
	if w.mode(stream) == sink.Merge {
		rec.Retain()
		p.recs = append(p.recs, rec)
		p.rows += rec.NumRows()
		return nil
	}
	if p.cur != nil && !p.cur.schema.Equal(rec.Schema()) {
		// The engine widened the schema: the run of batches of the old
		// one ends here.
		files, err := p.cur.finish()
		p.cur = nil
		p.files = append(p.files, files...)
		if err != nil {
			return w.fail(ctx, err)
		}
	}
	if p.cur == nil {
		tbl, err := w.d.ensureTable(ctx, w.pipeline, stream, rec.Schema())
		if err != nil {
			return w.fail(ctx, err)
		}
		p.cur = w.startStream(ctx, tbl, rec.Schema())
	}
	rec.Retain()
	select {
	case p.cur.ch <- rec:
	case <-ctx.Done():
		rec.Release()
		return w.fail(ctx, ctx.Err())
	}
	p.rows += rec.NumRows()
	return nil
}

// fail makes err sticky and drops the epoch's pending rows: once a batch
// is lost the epoch can't be committed, and the runner must end the
// attempt.
func (w *writer) fail(ctx context.Context, err error) error {
	w.err = err
	w.dropPatches()
	for name, p := range w.pending {
		p.release(context.WithoutCancel(ctx), w, name)
	}
	clear(w.pending)
	return err
}

// PreCommit creates or evolves each table written in the epoch, writes
// the epoch's rows as Parquet data files (and, for Merge tables,
// equality-delete files) under the table's data location, where no
// snapshot refers to them yet, and returns the committable listing them
// together with the lane's files of earlier epochs that no Commit has
// seen in their tables yet (see Grouping).
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
	w.takeInherited()
	w.prune()
	var written []tableFiles // this epoch's new files, removed on failure
	rows := map[string]int64{}
	for _, name := range slices.Sorted(maps.Keys(w.pending)) {
		p := w.pending[name]
		tf, err := w.writeTable(ctx, name, p)
		if err != nil {
			w.removeFiles(ctx, written)
			return nil, w.fail(ctx, err)
		}
		written = append(written, tf)
		delete(w.pending, name)
		rows[name] = tf.Rows
	}
	clear(w.pending)
	pt, err := w.stagePatches(ctx)
	if err != nil {
		w.removeFiles(ctx, written)
		return nil, w.fail(ctx, err)
	}
	written = append(written, pt...)
	for _, tf := range written {
		cr := w.carry[tf.Table]
		if cr == nil {
			cr = &carried{}
			w.carry[tf.Table] = cr
		}
		for _, fd := range tf.Data {
			fd.Epoch = epoch
			cr.data = append(cr.data, fd)
		}
		for _, fd := range tf.Deletes {
			fd.Epoch = epoch
			cr.deletes = append(cr.deletes, fd)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.carry)) {
		cr := w.carry[name]
		c.Tables = append(c.Tables, tableFiles{Table: name, Rows: rows[name], Data: cr.data, Deletes: cr.deletes})
	}
	if hasPatches(c.Tables) { // the epoch's, or carried
		c.Format = patchFormat
	}
	out, err := json.Marshal(c)
	if err != nil {
		w.err = fmt.Errorf("iceberg: encode committable: %w", err)
		return nil, w.err
	}
	w.lastEpoch, w.preCommit = epoch, true
	return out, nil
}

// writeTable finishes one table's pending rows: an Append table's stream
// ends, a Merge table's batches are reduced and written. It consumes p.
func (w *writer) writeTable(ctx context.Context, name string, p *pendingTable) (tableFiles, error) {
	tf := tableFiles{Table: name, Rows: p.rows}
	if p.cur != nil {
		files, err := p.cur.finish()
		p.cur = nil
		p.files = append(p.files, files...)
		if err != nil {
			return tf, err // fail removes p.files
		}
	}
	if len(p.recs) == 0 {
		tf.Data, p.files = p.files, nil
		return tf, nil
	}
	// A Merge table: mergeRows takes over the batches.
	recs := p.recs
	p.recs = nil
	return w.writeMerge(ctx, name, w.specs[name], tf, recs)
}

// write writes recs (one schema) as data files of tbl. It takes over the
// batches: each is released, and its slot set to nil, once iceberg-go has
// it.
func (w *writer) write(ctx context.Context, tbl *table.Table, recs []arrow.RecordBatch) ([]fileDesc, error) {
	sc := recs[0].Schema()
	if opts, ok := w.d.engineOptions(tbl); ok {
		defer func() { // what writeEngine did not take after a failure
			for i, r := range recs {
				if r != nil {
					r.Release()
					recs[i] = nil
				}
			}
		}()
		return w.writeEngine(ctx, tbl, sc, opts, func(yield func(arrow.RecordBatch) bool) {
			for i, r := range recs {
				recs[i] = nil // writeEngine releases what it was given
				if !yield(r) {
					return
				}
			}
		})
	}
	seq := func(yield func(arrow.RecordBatch, error) bool) {
		for i, r := range recs {
			recs[i] = nil // iceberg-go releases what it was given
			if !yield(r, nil) {
				return
			}
		}
	}
	var out []fileDesc
	for df, err := range table.WriteRecords(ctx, tbl, sc, seq, table.WithTargetFileSize(w.d.targetBytes),
		table.WithWriteUUID(writeUUID(w.pipeline))) {
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

// Close discards the rows written since the last PreCommit: it aborts
// the data files being written and deletes those already written (best
// effort; cancelling ctx leaves them as orphans for Maintain). Files of
// committables, applied or not, are kept.
//
// On lane 0, after at least one Commit and no Finish, Close then
// commits the files Grouping left waiting (not an Overwrite table's: its
// refresh did not end, and goes on in the next attempt). That epoch's
// checkpoint record is HEAD (or older than HEAD), so applying its files
// is what the next attempt's recovery would do; the fence keeps a
// zombie's Close from applying anything. An error (e.g. ctx ends, or
// fenced) leaves them to the next attempt.
func (w *writer) Close(ctx context.Context) error {
	if w.closed {
		return nil
	}
	w.closed = true
	w.dropPatches()
	for name, p := range w.pending {
		p.release(ctx, w, name)
	}
	clear(w.pending)
	if w.last == nil {
		return nil
	}
	last := w.last
	w.last = nil
	return w.applyAll(ctx, last.epoch, last.byTable, applyGroups)
}

// Finish commits, on lane 0, every file up to epoch not yet in its table:
// the files Grouping left waiting, and the new contents of Overwrite
// tables, each replacing its table's rows in one snapshot. The runner
// calls it after Commit of a Final epoch (a Sync that read everything);
// its error fails the Sync, and the next attempt's Recover, given that
// Final record, commits them instead. Calling it again changes nothing.
func (w *writer) Finish(ctx context.Context, epoch uint64) error {
	last := w.last
	if last == nil {
		return nil // no Commit in this attempt: Recover finished the head
	}
	if last.epoch != epoch {
		return fmt.Errorf("iceberg: Finish of epoch %d after Commit of epoch %d", epoch, last.epoch)
	}
	if err := w.applyAll(ctx, epoch, last.byTable, applyFinal); err != nil {
		return err
	}
	w.last = nil
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

package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
)

// writer is one lane's sink.Writer.
//
// Write, PreCommit and Close run on the lane's goroutine and own open,
// staged, lastEpoch, scratch and err. Commit and Recover run on the commit
// goroutine and share only gen (atomic), the Destination (locked) and the
// connection pool with it.
type writer struct {
	d        *Destination
	pipeline string
	pipeHash string // names this pipeline's apply queries in system.processes
	lane     int
	nonce    string
	keys     map[string][]string // merge tables' keys, by table, from the WriterConfig

	gen atomic.Uint64 // set by Recover, read by Commit

	open      map[string]*openBlock // blockKey(table, patch) → its block being gathered
	staged    []stagedBlock         // blocks sent since the last PreCommit
	lastEpoch uint64
	preCommit bool
	scratch   scratch // column slices reused across batches
	err       error   // sticky: a failed Write or PreCommit loses rows
	closed    bool
}

var _ sink.Writer = (*writer)(nil)

// isMerge reports whether table is a merge table: its stream is merged.
// A table no stream of the attempt writes (one a recovered committable
// of an earlier attempt lists) counts as an append table.
func (w *writer) isMerge(table string) bool { return len(w.keys[table]) > 0 }

// openBlock is a block of one table being gathered into a batch of the
// staging table.
type openBlock struct {
	table string
	lay   *layout
	batch driver.Batch
	token uint64
	gen   uint64 // the attempt's generation, as lane 0's Recover set it
	rows  int64
	patch []string // a patch block's columns (sink.PatchMetadataKey); nil for rows
}

// stagedBlock is one block of a committable: rows sent to the staging
// table's partition token, to be copied into the table by Commit.
type stagedBlock struct {
	Table string `json:"table"`
	Token uint64 `json:"token"`
	Rows  int64  `json:"rows"`
	// Patch lists the columns a patch block sets (sink.PatchMetadataKey):
	// Commit applies it to the table's rows instead of copying it.
	Patch []string `json:"patch,omitempty"`
}

// committable is the JSON form of a sink.Committable.
type committable struct {
	Format   int           `json:"format"`
	Pipeline string        `json:"pipeline"`
	Lane     int           `json:"lane"`
	Epoch    uint64        `json:"epoch"`
	Nonce    string        `json:"nonce"`
	Blocks   []stagedBlock `json:"blocks"`
}

// committableFormat is the format of a committable without patch
// blocks; one with them is patchFormat, so that a version that knows no
// patches refuses it instead of copying the patches in as rows.
const (
	committableFormat = 1
	patchFormat       = 2
)

func decodeCommittable(c sink.Committable) (*committable, error) {
	var out committable
	if len(c) == 0 {
		return &out, nil
	}
	if err := json.Unmarshal(c, &out); err != nil {
		return nil, fmt.Errorf("clickhouse: decode committable: %w", err)
	}
	if out.Format != committableFormat && out.Format != patchFormat {
		return nil, fmt.Errorf("clickhouse: committable format %d, want %d or %d: written by another version?", out.Format, committableFormat, patchFormat)
	}
	return &out, nil
}

// Write adds rec's rows to the lane's block of table stream, sending the
// block to the staging table when it reaches Config.BlockRows (or when the
// stream's schema changed: new columns are added to the table and its
// staging table first). Rows with a value ClickHouse can't hold are not
// written: they go, with the reason, to the _openetl_quarantine table in
// the same epoch. A failure makes the writer fail from then on: rows of
// the epoch would be missing.
func (w *writer) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	if w.closed {
		return errors.New("clickhouse: Write after Close")
	}
	if w.err != nil {
		return w.err
	}
	if rec.NumRows() == 0 {
		return nil
	}
	if err := checkTable(stream); err != nil && stream != quarantineTable {
		return fmt.Errorf("clickhouse: %w", err)
	}
	if err := w.write(ctx, stream, rec); err != nil {
		return w.fail(err)
	}
	return nil
}

func (w *writer) write(ctx context.Context, table string, rec arrow.RecordBatch) error {
	patch := isPatch(rec.Schema())
	blk := w.open[blockKey(table, patch)]
	if blk != nil && !blk.lay.schema.Equal(rec.Schema()) {
		// The engine widened the schema: the block ends here.
		if err := w.seal(ctx, blk); err != nil {
			return err
		}
		blk = nil
	}
	if blk == nil {
		var err error
		if blk, err = w.start(ctx, table, rec.Schema(), patch); err != nil {
			return err
		}
	}
	lay := blk.lay
	var bad []badRow
	for j, c := range lay.cols {
		bad = checkColumn(bad, c.name, c.typ, lay.key[j], c.name == colSyncedAt, rec.Column(j))
	}
	if len(bad) > 0 {
		bad = keepDeletes(rec, bad)
	}
	var sel []int
	if len(bad) > 0 {
		if table == quarantineTable {
			return fmt.Errorf("clickhouse: a quarantined row can't be written either (%s: %s)", bad[0].column, bad[0].reason)
		}
		if err := w.quarantine(ctx, table, rec, bad); err != nil {
			return err
		}
		drop := make(map[int]bool, len(bad))
		for _, b := range bad {
			drop[b.row] = true
		}
		sel = make([]int, 0, int(rec.NumRows())-len(drop))
		for i := range int(rec.NumRows()) {
			if !drop[i] {
				sel = append(sel, i)
			}
		}
		if len(sel) == 0 {
			return nil
		}
	}
	n := int(rec.NumRows())
	if sel != nil {
		n = len(sel)
	}
	for j, c := range lay.cols {
		v, err := encode(c.typ, rec.Column(j), sel, c.name == colSyncedAt, &w.scratch)
		if err != nil {
			return fmt.Errorf("clickhouse: table %q column %q: %w", table, c.name, err)
		}
		if err := blk.batch.Column(j).Append(v); err != nil {
			return fmt.Errorf("clickhouse: table %q column %q: %w", table, c.name, err)
		}
	}
	next := len(lay.cols)
	if lay.merge {
		if err := blk.batch.Column(next).Append(deletedFlags(rec, sel, n)); err != nil {
			return fmt.Errorf("clickhouse: table %q column %s: %w", table, colDeleted, err)
		}
		next++
	}
	// The driver copies each column as it is appended: one scratch slice
	// serves the block's token and then the generation.
	if err := blk.batch.Column(next).Append(w.scratch.constant(blk.token, n)); err != nil {
		return fmt.Errorf("clickhouse: table %q column %s: %w", table, colBatch, err)
	}
	if err := blk.batch.Column(next + 1).Append(w.scratch.pipeline(w.pipeline, n)); err != nil {
		return fmt.Errorf("clickhouse: table %q column %s: %w", table, colStagePipeline, err)
	}
	if err := blk.batch.Column(next + 2).Append(w.scratch.constant(blk.gen, n)); err != nil {
		return fmt.Errorf("clickhouse: table %q column %s: %w", table, colStageGen, err)
	}
	blk.rows += int64(n)
	if blk.rows >= int64(w.d.blockRows) {
		return w.seal(ctx, blk)
	}
	return nil
}

// keepDeletes drops from bad the null lists of delete rows: a delete
// carries its key, and the other columns are null whatever their type
// (the row is written with empty arrays there).
func keepDeletes(rec arrow.RecordBatch, bad []badRow) []badRow {
	idx := rec.Schema().FieldIndices(colOp)
	if len(idx) == 0 {
		return bad
	}
	ops, ok := rec.Column(idx[0]).(*array.String)
	if !ok {
		return bad
	}
	out := bad[:0]
	for _, b := range bad {
		if b.reason == ReasonNullArray && ops.IsValid(b.row) && ops.Value(b.row) == "delete" {
			continue
		}
		out = append(out, b)
	}
	return out
}

// deletedFlags is _openetl_deleted: 1 where _openetl_op is "delete".
func deletedFlags(rec arrow.RecordBatch, sel []int, n int) []uint8 {
	out := make([]uint8, n)
	idx := rec.Schema().FieldIndices(colOp)
	if len(idx) == 0 {
		return out
	}
	ops, ok := rec.Column(idx[0]).(*array.String)
	if !ok {
		return out
	}
	for k := range out {
		i := k
		if sel != nil {
			i = sel[k]
		}
		if ops.IsValid(i) && ops.Value(i) == "delete" {
			out[k] = 1
		}
	}
	return out
}

// start opens a new block of table with schema's layout; with patch, a
// patch block (patch.go).
func (w *writer) start(ctx context.Context, table string, schema *arrow.Schema, patch bool) (*openBlock, error) {
	var lay *layout
	var cols []string
	var err error
	if patch {
		lay, cols, err = w.d.patchLayout(ctx, table, schema)
	} else {
		lay, err = w.d.layoutFor(ctx, table, w.keys[table], schema)
	}
	if err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, fmt.Errorf("clickhouse: block token: %w", err)
	}
	// The batch gives its connection back to the pool until Send. Its
	// query ID names the send in system.processes, so that a retry can
	// wait for a failed send the server may still be running.
	qctx := clickhouse.Context(ctx, clickhouse.WithQueryID(w.stageQueryID(token)))
	var b driver.Batch
	err = w.retry(ctx, "prepare a block", func() (err error) {
		b, err = w.d.conn.PrepareBatch(qctx, lay.insert, driver.WithReleaseConnection())
		return err
	}, func() (bool, error) { return false, nil }) // a prepare inserts nothing
	if err != nil {
		return nil, fmt.Errorf("clickhouse: prepare a block of %q: %w", table, err)
	}
	blk := &openBlock{table: table, lay: lay, batch: b, token: token, gen: w.d.genOf(w.pipeline), patch: cols}
	w.open[blockKey(table, patch)] = blk
	return blk, nil
}

// seal sends blk to the staging table, one insert: once it returns nil the
// block is durable in the staging table's partition blk.token.
func (w *writer) seal(ctx context.Context, blk *openBlock) error {
	delete(w.open, blockKey(blk.table, blk.patch != nil))
	if blk.rows == 0 {
		_ = blk.batch.Abort()
		return nil
	}
	// Registered before the send: if it fails half-way, Close drops the
	// partition.
	w.staged = append(w.staged, stagedBlock{Table: blk.table, Token: blk.token, Rows: blk.rows, Patch: blk.patch})
	// A failed send is retried with the same sealed block (clickhouse-go
	// sends a sent batch again on a newly acquired connection), unless the
	// failed one landed after all: then the partition holds the block
	// whole, since one insert block is one part.
	send := func() error {
		err := blk.batch.Send()
		if queryRunning(err) {
			// The server still lists the prepare (or a failed try) under
			// the block's query ID: it refused this send before taking
			// any row. Wait for that query to end and send again.
			if err := w.waitQuery(ctx, w.stageQueryID(blk.token)); err != nil {
				return err
			}
			err = blk.batch.Send()
		}
		return err
	}
	err := w.retry(ctx, "stage a block", send, func() (bool, error) {
		if err := w.waitQuery(ctx, w.stageQueryID(blk.token)); err != nil {
			return false, err
		}
		n, err := w.stagedRows(ctx, blk.table, blk.token)
		switch {
		case err != nil:
			return false, err
		case n == blk.rows:
			return true, nil
		case n == 0:
			return false, nil
		}
		return false, permanent(fmt.Errorf("clickhouse: %d rows of block %d of %q are staged, want 0 or %d: was the staging table changed by hand?", n, blk.token, blk.table, blk.rows))
	})
	if err != nil {
		return fmt.Errorf("clickhouse: stage a block of %d rows of %q: %w", blk.rows, blk.table, err)
	}
	w.d.staged(blk.token)
	w.d.log.Debug("clickhouse: block staged", "pipeline", w.pipeline, "lane", w.lane, "table", blk.table, "token", blk.token, "rows", blk.rows)
	return nil
}

// queryRunning reports whether err is the server's refusal of a query
// whose ID is still running (QUERY_WITH_SAME_ID_IS_ALREADY_RUNNING).
func queryRunning(err error) bool {
	var exc *proto.Exception
	return errors.As(err, &exc) && exc.Code == 216
}

// quarantine writes rec's bad rows to the _openetl_quarantine table: the
// table they belong to, the column and reason, and the row as JSON.
func (w *writer) quarantine(ctx context.Context, table string, rec arrow.RecordBatch, bad []badRow) error {
	schema := quarantineSchema()
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	sc := rec.Schema()
	seen := make(map[int]bool, len(bad))
	col := func(name string) arrow.Array {
		if idx := sc.FieldIndices(name); len(idx) > 0 {
			return rec.Column(idx[0])
		}
		return nil
	}
	ids, seqs := col(colID), col(colSeq)
	for _, r := range bad {
		if seen[r.row] {
			continue
		}
		seen[r.row] = true
		row := make(map[string]any, len(sc.Fields()))
		for j, f := range sc.Fields() {
			row[f.Name] = rec.Column(j).GetOneForMarshal(r.row)
		}
		js, err := json.Marshal(row)
		if err != nil {
			return fmt.Errorf("clickhouse: quarantine a row of %q: %w", table, err)
		}
		b.Field(0).(*array.StringBuilder).Append(table)
		b.Field(1).(*array.StringBuilder).Append(r.column)
		b.Field(2).(*array.StringBuilder).Append(r.reason)
		b.Field(3).(*array.StringBuilder).Append(string(js))
		id := ""
		if a, ok := ids.(*array.String); ok && a.IsValid(r.row) {
			id = a.Value(r.row)
		}
		b.Field(4).(*array.StringBuilder).Append(id)
		var seq int64
		if a, ok := seqs.(*array.Int64); ok && a.IsValid(r.row) {
			seq = a.Value(r.row)
		}
		b.Field(5).(*array.Int64Builder).Append(seq)
	}
	qrec := b.NewRecordBatch()
	defer qrec.Release()
	w.d.log.Debug("clickhouse: rows quarantined", "pipeline", w.pipeline, "table", table, "rows", len(seen), "reason", bad[0].reason)
	return w.write(ctx, quarantineTable, qrec)
}

// quarantineSchema is the schema of the _openetl_quarantine table.
func quarantineSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "table", Type: arrow.BinaryTypes.String},
		{Name: "column", Type: arrow.BinaryTypes.String},
		{Name: "reason", Type: arrow.BinaryTypes.String},
		{Name: "row", Type: arrow.BinaryTypes.String},
		{Name: colID, Type: arrow.BinaryTypes.String},
		{Name: colSeq, Type: arrow.PrimitiveTypes.Int64},
	}, nil)
}

// fail makes err sticky and abandons the open blocks.
func (w *writer) fail(err error) error {
	w.err = err
	for _, blk := range w.open {
		_ = blk.batch.Abort()
	}
	clear(w.open)
	return err
}

// PreCommit sends every open block to its staging table and returns the
// committable listing the blocks sent since the previous PreCommit. The
// rows stay invisible: only Commit copies them into the tables.
func (w *writer) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	if w.closed {
		return nil, errors.New("clickhouse: PreCommit after Close")
	}
	if w.err != nil {
		return nil, w.err
	}
	if w.preCommit && epoch <= w.lastEpoch {
		return nil, fmt.Errorf("clickhouse: PreCommit(%d) after PreCommit(%d): epochs must increase", epoch, w.lastEpoch)
	}
	for _, t := range slices.Sorted(maps.Keys(w.open)) {
		if err := w.seal(ctx, w.open[t]); err != nil {
			return nil, w.fail(err)
		}
	}
	c := committable{
		Format:   committableFormat,
		Pipeline: w.pipeline,
		Lane:     w.lane,
		Epoch:    epoch,
		Nonce:    w.nonce,
		Blocks:   slices.Clone(w.staged),
	}
	if c.Blocks == nil {
		c.Blocks = []stagedBlock{}
	}
	for _, b := range c.Blocks {
		if b.Patch != nil {
			c.Format = patchFormat
		}
	}
	out, err := json.Marshal(c)
	if err != nil {
		return nil, w.fail(fmt.Errorf("clickhouse: encode committable: %w", err))
	}
	w.staged = w.staged[:0]
	w.lastEpoch, w.preCommit = epoch, true
	return out, nil
}

// Finish does nothing: Commit copies every block of the epoch, so nothing
// waits for the end of a refresh.
func (w *writer) Finish(context.Context, uint64) error { return nil }

// Close abandons the open blocks and drops the staging partitions of the
// blocks sent since the last PreCommit, which no committable names.
func (w *writer) Close(ctx context.Context) error {
	if w.closed {
		return nil
	}
	w.closed = true
	for _, blk := range w.open {
		_ = blk.batch.Abort()
	}
	clear(w.open)
	var errs []error
	for _, b := range w.staged {
		if err := w.d.conn.Exec(ctx, dropStagePartition(w.d.db, b.Table, b.Token)); err != nil {
			errs = append(errs, fmt.Errorf("clickhouse: drop unflushed block %d of %q: %w", b.Token, b.Table, err))
		}
		w.d.forget(b.Token)
	}
	w.staged = nil
	return errors.Join(errs...)
}

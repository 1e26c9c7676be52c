package etl

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/internal/runner"
)

// TransformFunc is a stream's Go transform (Builder.Transform): user code
// on the Arrow batches between the engine and the destination. It is
// called on a writer lane, once per batch, with the rows of one engine
// batch routed to that lane, all of one epoch, and writes what it emits
// (TransformBatch.Emit, EmitAdded): fewer rows, more, new or dropped
// columns.
// Calls for one stream and lane come one at a time, in order; different
// lanes call it concurrently, so it must be safe for that.
//
// It must be deterministic: what it emits for a row depends on that row
// (and on configuration fixed for the pipeline's life) only — not on
// which other rows share its batch, the batch's size, the epoch, the
// lane, the time, a random number or state kept between calls. Batches
// and epochs are cut differently by every attempt, and rows are read
// again after a crash or by a superset source: exactly once (skipping
// rows by _openetl_id, merging by key guarded by _openetl_seq) holds for
// what the transform returns only if a row read again comes out the
// same. docs/transforms.md says more.
//
// Its output must keep every _openetl_ metadata column of its input, of
// the same type and without nulls, and the stream's key columns; a row it
// makes from another keeps that row's _openetl_seq and _openetl_op, and
// gets its own _openetl_id from DerivedID when there are several. A
// column it adds must be nullable and named as the destination takes
// names (see sink.Capabilities); the batches of a table may gain columns
// and widen types from call to call, as the engine's do, but never lose
// or narrow a column. The runner refuses other output, failing the
// epoch with an error wrapping ErrTransformOutput. The batches it emits
// then pass through the destination's schema checks (sink.SchemaChecker)
// like the engine's.
//
// An error it returns fails the epoch (and the attempt) with the stream
// named; the next attempt reads the epoch again. A panic is recovered
// and fails it the same way with a *PanicError.
type TransformFunc func(ctx context.Context, b TransformBatch) error

// TransformBatch is one call of a TransformFunc. It is valid only until
// the function returns (Emit and Reject panic after) and is not safe for
// concurrent use.
type TransformBatch struct{ c *runner.TransformCall }

// Stream returns the source's stream name.
func (b TransformBatch) Stream() string { return b.c.Stream }

// Table returns the destination table the batch is written to.
func (b TransformBatch) Table() string { return b.c.Table }

// Epoch returns the epoch the rows are read into, and Lane the writer
// lane; for logs only: both differ between attempts for the same rows.
func (b TransformBatch) Epoch() uint64 { return b.c.Epoch }

// Lane returns the writer lane, from 0 (see Epoch).
func (b TransformBatch) Lane() int { return b.c.Lane }

// Record returns the batch's rows, as the engine made them: the
// stream's columns, then the metadata columns. The runner releases it
// after the call; Retain it to keep it (and Release it later).
func (b TransformBatch) Record() arrow.RecordBatch { return b.c.In }

// Emit adds rec to the rows written for the batch, after the batches
// emitted before it. Its rows stand for rows of Record, at most one each
// (a row kept, changed or with other columns); the rows of Record that
// no emitted row stands for, less those rejected, are counted filtered
// (Counts.Filtered). Rows made beyond those go through EmitAdded. Emit
// takes a reference of its own (rec.Retain), so the caller releases what
// it made as usual; Emit(b.Record()) writes the batch as it came. A
// batch without rows writes nothing; nil is ignored. More rows emitted
// than the batch has, less those rejected, fail the epoch
// (ErrTransformOutput).
func (b TransformBatch) Emit(rec arrow.RecordBatch) { b.c.Emit(rec) }

// EmitAdded is Emit for rows the transform makes beyond the rows of
// Record (of a row split in several, all but the one Emit writes):
// they are counted added (Counts.Added). Each needs an _openetl_id of
// its own (DerivedID).
func (b TransformBatch) EmitAdded(rec arrow.RecordBatch) { b.c.EmitAdded(rec) }

// Reject sets row (an index into Record) aside: it is quarantined like
// the records the engine can't take, under the pipeline's _quarantine/
// with reason (required: e.g. "invalid_email"), detail, its seq, op and
// _openetl_id, rejected_by "transform" and the row as the transform got
// it, as a JSON object; it is counted in Counts.Quarantined. Don't also
// emit a row you reject. Rejecting a row twice, or a row out of range,
// fails the epoch (ErrTransformOutput).
func (b TransformBatch) Reject(row int, reason, detail string) { b.c.Reject(row, reason, detail) }

// Transform sets fn as the Go transform of the named streams (see
// TransformFunc): their rows pass through it between the engine and the
// destination's writers. Default none. A stream has one transform:
// compose several in one function. Rows it drops are counted in
// Counts.Filtered, rows it adds (EmitAdded) in Counts.Added, rows it
// rejects in Counts.Quarantined, so that Read + Added = Written +
// Filtered + Quarantined (Result, Status, Inspect, the
// openetl.rows.filtered metric). Guarantees says which streams pass
// through one. Build fails when fn is nil, when no stream is named,
// when a stream has a transform already and when a named stream is not
// in the source's catalog.
func (b *Builder) Transform(fn TransformFunc, streams ...string) *Builder {
	switch {
	case fn == nil:
		b.errs = append(b.errs, errors.New("transform: nil function"))
		return b
	case len(streams) == 0:
		b.errs = append(b.errs, errors.New("transform: no stream names (name the streams it applies to)"))
		return b
	}
	if b.cfg.Transforms == nil {
		b.cfg.Transforms = map[string]runner.Transform{}
	}
	t := runTransform(fn)
	for _, s := range streams {
		if b.cfg.Transforms[s] != nil {
			b.errs = append(b.errs, fmt.Errorf("transform: stream %q has one already (compose them in one function)", s))
			continue
		}
		b.cfg.Transforms[s] = t
	}
	return b
}

// runTransform adapts fn to the runner, recovering its panics with their
// stack.
func runTransform(fn TransformFunc) runner.Transform {
	return func(ctx context.Context, c *runner.TransformCall) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &PanicError{Value: v, Stack: debug.Stack()}
			}
		}()
		return fn(ctx, TransformBatch{c})
	}
}

// ErrTransformOutput is wrapped by the error that fails an epoch because
// a transform's output breaks the rules of TransformFunc: a metadata or
// key column dropped or retyped, nulls in _openetl_id, _openetl_seq or
// _openetl_op, a column of its own named with the _openetl_ prefix or
// not as the destination takes names, a column lost or narrowed since
// the table's earlier batches, a bad Reject, more rows emitted with Emit
// than the batch had. Its message names the
// stream, the column and what to do. IsPermanent reports it: the same
// rows get the same output next time.
var ErrTransformOutput = runner.ErrTransformOutput

// PanicError is the error a TransformFunc's panic becomes, wrapped in
// the error that fails the epoch (which names the stream): errors.As
// finds it.
type PanicError struct {
	// Value is what the function panicked with; Stack the goroutine's
	// stack where it did (it may show argument values: it is never
	// logged).
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("transform panicked: %v", e.Value) }

// Permanent returns true: a deterministic transform panics again on the
// same rows (IsPermanent).
func (e *PanicError) Permanent() bool { return true }

// DerivedID returns the _openetl_id for the n-th row (from 1) that a
// transform makes out of the row whose _openetl_id is id, so that rows
// split from one get IDs of their own, stable across replays (as the
// engine's are), and a destination that skips rows by ID keeps them all:
// the 32 lowercase hex digits of the big-endian XXH3-128 (seed 0) of
// "openetl.derived" ‖ 0x00 ‖ u32le(len(id)) ‖ id ‖ u32le(n). It is fixed
// forever; DerivedID("79f31045bf5ab5655cdd3b5607862643", 1) is
// "c29134d84f0b57796b9b8bcaa0f9bc66" (see TestDerivedIDVectors).
func DerivedID(id string, n int) string { return runner.DerivedID(id, n) }

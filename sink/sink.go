// Package sink defines the contract every destination implements: the
// built-in ones (sink/parquet, sink/iceberg, sink/clickhouse,
// sink/postgres) and any a user writes. Built-in destinations use nothing but this package and
// package checkpoint's types; sink/sinktest checks a destination against
// the contract.
//
// For each attempt the runner asks the Destination for one Writer per
// lane (Destination.Writer), telling each the spec of every stream it
// will write (WriterConfig, StreamSpec): the table name, write mode,
// primary key, delete handling and declared schema, all decided once by
// the pipeline (etl.Builder.Mode, etl.Builder.Deletes) and the source's
// catalog. A destination's own configuration holds only physical
// options.
//
// An epoch is committed in steps: the runner hands each lane's Writer
// Arrow record batches with Write, asks it at the epoch's barrier to
// make the data durable with PreCommit, records the returned
// Committables in the checkpoint log, and only then asks lane 0's Writer
// to make the epoch visible with Commit, and, after the last epoch of a
// completed Sync, to Finish. The source is told it may drop the
// positions of an epoch (source.Acker) once the epoch is visible: after
// its Commit, or, for a destination whose Capabilities declare Deferred
// (its Commit may leave epochs waiting), once its lane-0 Writer reports
// it visible (Visibility). An attempt starts with lane 0's Recover,
// which raises the destination's fence; then, before any Write, a
// destination that is a Collector removes what failed attempts staged
// that no checkpoint record names (see Collector for the order that
// keeps a newer attempt's staged data safe; CollectStaged keeps it).
//
// Every destination appends; Capabilities declares what it does beyond
// that (Merge, HardDeletes, Overwrite), and Build, and each attempt
// before it claims the pipeline, refuses a stream whose spec asks for
// more, naming the stream: a Writer never gets a mode it did not
// declare. Optional capabilities (SpecChecker, SchemaChecker, Namer,
// Collector, Classifier, PipelineChecker) are listed in optional.go; a destination that can't honour a stream's
// spec for reasons of its own (a key, a physical option) implements
// SpecChecker, and Build fails the same way.
package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
)

// Class is how a destination commits, which decides with the source's
// replay class the stream's delivery guarantee (package delivery).
type Class uint8

const (
	// DeliverAck: data is visible as soon as it is written; PreCommit only
	// flushes. At least once.
	DeliverAck Class = iota
	// StageAndApply: PreCommit stages durable but invisible data; Commit
	// applies it atomically and idempotently (files plus a manifest, an
	// Iceberg commit).
	StageAndApply
	// Transactional: PreCommit prepares a transaction; Commit commits it
	// with the epoch recorded in the same transaction.
	Transactional
)

// String returns "deliver-ack", "stage-and-apply" or "transactional".
func (c Class) String() string {
	switch c {
	case DeliverAck:
		return "deliver-ack"
	case StageAndApply:
		return "stage-and-apply"
	case Transactional:
		return "transactional"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Capabilities describes what a destination can take. Every
// destination appends; the write modes and delete handling beyond that
// are declared here, and a stream's spec that asks for one its
// destination does not declare fails Build, and each attempt before it
// claims the pipeline, naming the stream (package delivery): a Writer
// never gets a spec its destination's Capabilities don't declare. A
// destination that declares a mode must write it as StreamSpec says,
// which sink/sinktest checks.
type Capabilities struct {
	// Merge: the destination can upsert by primary key (Merge mode),
	// guarded by _openetl_seq, with soft deletes: a deleted key keeps a
	// row marked ColumnDeleted (SoftDeletes, the default).
	Merge bool
	// HardDeletes: a merged stream's deletes can remove the key's row
	// instead (HardDeletes). Only with Merge.
	HardDeletes bool
	// Overwrite: the destination can replace a table's contents with
	// the rows of a completed Sync, in one step at Finish (Overwrite
	// mode).
	Overwrite bool
	// SkipByID: applying skips rows whose _openetl_id is already present.
	SkipByID bool
	// Deferred: a Commit that returns nil may leave some of the epoch's
	// data, or of earlier epochs', invisible, to make it visible at a
	// later Commit, at Finish or when the writer closes (Iceberg groups
	// epochs into fewer table commits, and holds an Overwrite table's
	// refresh until Finish); such data can still be lost (its staged
	// files expire) and the epoch reported Lost by a later Recover.
	// Lane 0's Writer must then implement Visibility, and the runner
	// acknowledges to the source (source.Acker) only the positions of
	// epochs it reports visible; an attempt whose lane-0 Writer doesn't
	// fails before its Recover, with a permanent error. Without Deferred
	// every epoch whose Commit returned nil counts as visible.
	Deferred bool
	// MaxIdentifier is the longest table or column name it accepts in
	// bytes; 0 means no limit.
	MaxIdentifier int
	// IdentifierCase is how it folds names: "" keeps them, "lower" or
	// "upper" folds them. With SimpleIdentifiers, names may hold only
	// ASCII letters, digits and '_', not leading with a digit.
	// ReservedWords are words it reserves (case-insensitively). The
	// engine gives every table and column a name under these rules that
	// never changes once given; Write's stream argument is that table
	// name.
	IdentifierCase    string
	SimpleIdentifiers bool
	ReservedWords     []string
	// Unsupported lists the Arrow type classes it can't take yet (see
	// engine.Config.Unsupported for the names): such columns are left out
	// of the rows it gets, and their values kept under the pipeline's
	// _held/ directory until it can.
	Unsupported []string
	// Patches: the destination applies patch batches (PatchMetadataKey):
	// it sets a column of rows already written, which is how held values
	// are released once it takes their column (Unsupported no longer
	// names the column's type class, or its SchemaChecker now accepts
	// the column). Without it held values stay under _held/.
	Patches bool
}

// Committable is what a Writer's PreCommit returns: an opaque, durable
// description of the epoch's staged data on one lane. The runner saves it
// in the checkpoint record and hands it back to Commit, possibly in another
// process after a crash, so it must be self-contained. Keep it small
// (references to staged files, not the data).
type Committable []byte

// Outcome is what Recover found about the epoch in the checkpoint HEAD.
type Outcome uint8

const (
	// Applied: the epoch is already visible at the destination.
	Applied Outcome = iota
	// Recoverable: the epoch is not visible, but its committables are
	// intact; the runner calls Commit with them.
	Recoverable
	// Lost: the epoch's staged data is gone; the runner rewinds the log to
	// the record before it.
	Lost
)

// String returns "applied", "recoverable" or "lost".
func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Recoverable:
		return "recoverable"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Destination is a connector that writes data. Its methods may be called
// from several goroutines at once.
type Destination interface {
	// Class reports how the destination commits. It must not change.
	Class() Class
	// Capabilities reports what the destination can take. It must not
	// change.
	Capabilities() Capabilities
	// Writer returns the writer of one lane for one attempt. The runner
	// calls it once per lane per attempt, lanes numbered from 0, and
	// closes every writer it got when the attempt ends. cfg names the
	// pipeline and lane and gives every stream's spec: a writer learns a
	// table's write mode, key and delete handling from it (cfg.Spec),
	// never from the destination's own configuration. Every spec's
	// mode and delete handling is one Capabilities declares; a
	// destination that can't honour a spec for another reason should
	// refuse it in CheckStream (SpecChecker), before the attempt claims
	// the pipeline; Writer may fail too.
	Writer(ctx context.Context, cfg WriterConfig) (Writer, error)
}

// Writer writes one lane's share of the data. Write and PreCommit are
// called from the lane's goroutine, one at a time, in order. On lane 0,
// Recover, Commit and Finish are called from the commit goroutine, one
// at a time, possibly while Write and PreCommit of later epochs run: a
// Writer must allow that.
//
// Every method is part of the commit protocol, none is optional: a
// Writer that holds nothing back still has Finish (returning nil), so
// that a Writer wrapping another (a fault injector, instrumentation)
// can't drop it by accident and silently leave grouped or overwrite
// commits unfinished. A wrapper either embeds the inner sink.Writer,
// which forwards every method, or implements each one.
type Writer interface {
	// Write adds a batch of rows of one table to the current epoch. stream
	// is the table's destination name (the stream's name unless the
	// destination has naming rules, see Capabilities). The batch's schema
	// is the stream's schema as the engine knows it, which may have gained
	// columns (nullable) or widened types since the previous batch of the
	// same stream. Write does not retain rec after it returns, unless it
	// calls rec.Retain (and later Release); the runner releases it.
	Write(ctx context.Context, stream string, rec arrow.RecordBatch) error

	// PreCommit makes every row written since the previous PreCommit
	// durable and returns a committable describing it. Unless the class
	// is DeliverAck, the data stays invisible to readers. Called once per
	// epoch, epochs increasing; an epoch with no rows still gets a call.
	PreCommit(ctx context.Context, epoch uint64) (Committable, error)

	// Commit makes the epoch's data visible, given every lane's
	// committable for it (index = lane). The runner calls it on lane 0 only
	// after the epoch's checkpoint record is the log's HEAD, in epoch order.
	// It must be idempotent: calling it again for an applied epoch,
	// from this process or another, changes nothing and returns nil. It
	// returns an error wrapping ErrFenced when Recover of a newer
	// generation has raised the destination's fence.
	Commit(ctx context.Context, epoch uint64, committables []Committable) error

	// Recover is called on lane 0 once per attempt, after the attempt has
	// claimed the pipeline with generation gen and before any other call;
	// when it reports Lost, the runner rewinds the log to the record
	// before head and calls it again with that record (nil when the lost
	// epoch was the first).
	// It raises the destination's fence to gen, so that a Commit by an
	// older generation fails from now on, and reports whether head's
	// epoch (nil for a new pipeline) is applied, recoverable or lost.
	// It fails with an error wrapping ErrFenced, raising nothing, when a
	// newer generation has raised the fence; and, before it raises the
	// fence, with an *AheadError (see CheckAhead) when the destination
	// has applied an epoch of the pipeline after head's epoch (any epoch,
	// when head is nil): the checkpoint log was lost or replaced.
	// When head is Final and its Finish did not happen (the process
	// died before it, or before head's Commit), a Writer that holds
	// anything back for Finish (see Finish) finishes it in Recover,
	// applying head's epoch first if need be, and reports Applied: the
	// runner calls Finish only right after a Commit of a Final epoch,
	// never after Recover, and this attempt's rows start a new refresh.
	Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (Outcome, error)

	// Finish is called on lane 0, from the commit goroutine, right after
	// Commit of an epoch whose checkpoint record is Final: the attempt
	// read every split to its end (a Sync that completed). It makes
	// visible everything the epochs up to this one wrote that Commit held
	// back: files grouped into fewer commits, the new contents of an
	// Overwrite stream's table. An error fails the attempt (Sync returns
	// it): the record stays HEAD, so the next attempt's Recover gets it
	// with head.Final set and must finish the job there. Like Commit it
	// must be idempotent and must fail with ErrFenced once a newer
	// generation has raised the fence. A Writer that holds nothing back
	// has nothing to finish: its Finish returns nil.
	Finish(ctx context.Context, epoch uint64) error

	// Close releases the writer's resources and discards rows written
	// since the last PreCommit. It is called once, last.
	Close(ctx context.Context) error
}

// Visibility is implemented by the Writer of a destination whose
// Capabilities declare Deferred: it says which committed epochs readers
// see, and so which the destination can no longer report Lost. The
// runner asks lane 0's Writer after each Commit that returned nil, and
// tells the source it may drop positions only up to the newest epoch
// at or before the one reported (and, as for every destination, one
// epoch behind the Commit), so that no rewind past an epoch whose staged
// data disappeared goes back past a position the source dropped.
type Visibility interface {
	// Visible returns the newest epoch E such that every epoch up to E
	// the writer's Recover, Commit and Finish calls so far were given is
	// visible at the destination (and won't be reported Lost); 0 when it
	// can't say of any. It is called from the commit goroutine, between
	// those calls, and must not do I/O: it reports what they found.
	Visible() uint64
}

// Errors returned by writers.
var (
	// ErrFenced is wrapped by Commit when a newer generation has raised
	// the destination's fence: this attempt is a zombie and must stop.
	// It is checkpoint.ErrFenced, the one sentinel for a fenced attempt
	// wherever it is noticed (the checkpoint log's HEAD, a destination's
	// fence): errors.Is(err, sink.ErrFenced) and errors.Is(err,
	// checkpoint.ErrFenced) say the same.
	ErrFenced = checkpoint.ErrFenced
	// ErrAhead is matched (errors.Is) by the *AheadError that Recover,
	// and the runner's recovery, return when the destination holds more
	// of the pipeline than the checkpoint log knows.
	ErrAhead = errors.New("sink: destination is ahead of the checkpoint log")
)

// AheadError says that the destination holds an epoch or a generation
// of the pipeline that the checkpoint log does not know: the log is
// empty, or its HEAD is at an earlier epoch than one the destination has
// applied, or the destination's fence was raised by a generation the log
// never issued. The checkpoint store was lost, replaced by another, or
// restored from an older copy. Writing on would be writing "past" the
// destination: its newer epochs would be skipped as applied while the
// log's records claim their rows, or rows would land twice. Nothing is
// written; every attempt fails the same way until the user either
// restores the checkpoint store that wrote the destination, or starts
// over into an empty destination or under a new pipeline name (which
// reads everything again).
//
// Recover must check it before it raises the fence, so that the store,
// once restored, is not fenced by the attempts that failed. A Writer
// returns it (wrapped or not) when it finds an applied epoch of the
// pipeline after head's (any epoch, when head is nil); the runner
// returns it when Recover reports ErrFenced although no newer attempt
// has claimed the pipeline in the log. errors.Is(err, ErrAhead) matches
// it.
type AheadError struct {
	// Pipeline is the pipeline's name.
	Pipeline string
	// Where says what at the destination holds it: a table or stream,
	// or its fence.
	Where string
	// Epoch is the epoch applied there (0 when unknown, for a fence);
	// Generation the generation that applied it or raised the fence (0
	// when unknown).
	Epoch      uint64
	Generation checkpoint.Generation
	// HeadEpoch is the epoch of the log's HEAD record, 0 for none;
	// Claimed is the generation the attempt claimed in the log.
	HeadEpoch uint64
	Claimed   checkpoint.Generation
	// Detail is what the destination reported, when the runner made the
	// error from it (a fence above Claimed); "" otherwise.
	Detail string
}

func (e *AheadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sink: pipeline %q: destination is ahead of the checkpoint log: %s ", e.Pipeline, e.Where)
	switch {
	case e.Epoch > 0 && e.Generation > 0:
		fmt.Fprintf(&b, "holds epoch %d (generation %d)", e.Epoch, e.Generation)
	case e.Epoch > 0:
		fmt.Fprintf(&b, "holds epoch %d", e.Epoch)
	case e.Generation > 0:
		fmt.Fprintf(&b, "was raised by generation %d, which the log never issued", e.Generation)
	default:
		b.WriteString("was raised by a generation the log never issued")
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	if e.HeadEpoch > 0 {
		fmt.Fprintf(&b, "; the log's HEAD is at epoch %d", e.HeadEpoch)
	} else {
		b.WriteString("; the log has no record")
	}
	fmt.Fprintf(&b, " (this attempt: generation %d)", e.Claimed)
	b.WriteString(": the checkpoint store was lost, replaced or restored from an older copy;" +
		" nothing was written: restore the store that wrote this destination, or start over into an empty destination or under a new pipeline name")
	return b.String()
}

// Is reports whether target is ErrAhead.
func (e *AheadError) Is(target error) bool { return target == ErrAhead }

// Permanent returns true: running the pipeline again fails the same way
// until a person restores the store or starts over.
func (e *AheadError) Permanent() bool { return true }

// CheckAhead is the check every Writer's Recover makes, before it
// raises the fence, for each place it keeps an applied epoch of the
// pipeline: epoch, applied by generation applied (0 when it doesn't
// keep it), found in where. It returns an error wrapping ErrFenced when
// applied is above claimed, the generation Recover got (a newer
// attempt applied it, or the log never issued that generation: the
// runner tells which); an *AheadError when epoch is after the epoch of
// head, the record Recover got (nil: none); nil otherwise.
func CheckAhead(pipeline, where string, epoch uint64, applied, claimed checkpoint.Generation, head *checkpoint.Record) error {
	if applied > claimed {
		return fmt.Errorf("sink: pipeline %q: %s holds epoch %d applied by generation %d, above generation %d: %w",
			pipeline, where, epoch, applied, claimed, ErrFenced)
	}
	var headEpoch uint64
	if head != nil {
		headEpoch = head.Epoch
	}
	if epoch <= headEpoch {
		return nil
	}
	return &AheadError{Pipeline: pipeline, Where: where, Epoch: epoch, Generation: applied, HeadEpoch: headEpoch, Claimed: claimed}
}

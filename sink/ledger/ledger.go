package ledger

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// Marker is what the destination keeps of one pipeline for the commit
// protocol: the fence and the last epoch applied. Books read and write it
// inside the destination's transactions; the zero Marker is a pipeline
// the destination has never seen.
type Marker struct {
	// Fence is the newest generation that recovered: Commit and Finish
	// by an older one fail with sink.ErrFenced.
	Fence checkpoint.Generation
	// Epoch is the last epoch applied (0: none), Generation the
	// generation whose Commit (or Recover) applied it.
	Epoch      uint64
	Generation checkpoint.Generation
	// Finished is the last Final epoch finished (0: none); see Finisher.
	Finished uint64
}

// Books keeps the Markers of a destination, in its transactions. SQL
// keeps them in a table of a database/sql database; implement Books for
// any other store with transactions.
type Books[T any] interface {
	// Tx runs f in one transaction of the destination, and commits it
	// when f returns nil; otherwise it rolls it back and returns f's
	// error. Transactions that read one pipeline's Marker must be
	// serializable with each other, across processes: of two that read
	// it, only one may commit a write of it (the other waits until the
	// first ends, then reads what it wrote; or it fails). Cancelling ctx
	// rolls the transaction back.
	Tx(ctx context.Context, f func(tx T) error) error
	// Marker returns pipeline's Marker as tx sees it, the zero Marker
	// when there is none.
	Marker(ctx context.Context, tx T, pipeline string) (Marker, error)
	// SetMarker writes pipeline's Marker in tx.
	SetMarker(ctx context.Context, tx T, pipeline string, m Marker) error
}

// Staged is one lane's staged data of one epoch: what the lane's Stager
// returned from Stage, with where it came from. The helper carries it in
// the lane's committable, through the checkpoint log, to the Applier,
// possibly in another process.
type Staged struct {
	Pipeline string
	Epoch    uint64
	Lane     int
	// Data is what Stage returned: a reference to the staged rows (a
	// staging table's key, file names), not the rows. Never empty: the
	// helper passes no Staged for a lane that staged nothing.
	Data []byte
}

// Stager is the data path of one writer lane: it takes the rows and
// stages them, durable and invisible. The helper calls it from the lane's
// goroutine, one call at a time, in order. On lane 0 the Applier runs
// alongside (Commit of epoch N while the lane writes N+1), so the two
// must share no state without a lock.
type Stager interface {
	// Write adds a batch of rows of the table stream to the current
	// epoch, as sink.Writer.Write: it must not keep rec, its arrays or
	// their buffers after it returns, unless it calls rec.Retain.
	Write(ctx context.Context, stream string, rec arrow.RecordBatch) error
	// Stage makes every row written since the previous Stage durable and
	// invisible, and returns a reference to it for the Applier: small,
	// self-contained, valid in another process. nil (or empty) when the
	// lane wrote no row this epoch: Apply and Intact are then not called
	// for it.
	Stage(ctx context.Context, epoch uint64) ([]byte, error)
	// Close releases the lane's resources and discards rows written
	// since the last Stage.
	Close(ctx context.Context) error
}

// Applier is the data path of lane 0's commit: it applies an epoch's
// staged data inside the transaction of Books that records the epoch as
// applied, so that an epoch lands whole or not at all, and once. Its
// methods run on the commit goroutine, one at a time.
type Applier[T any] interface {
	// Apply makes s's rows visible, in tx. Once tx commits the helper
	// never asks for s again: Apply may drop s's staged data in tx (a
	// move rather than a copy). An error rolls tx back; Commit returns
	// it, and the runner retries.
	Apply(ctx context.Context, tx T, s Staged) error
	// Intact reports whether s's staged data is all there. Recover asks
	// it about each lane of the checkpoint's HEAD epoch when that epoch
	// is not applied, and reports the epoch sink.Lost when one is not
	// (its staged data expired or was dropped): the runner then reads it
	// again from the record before.
	Intact(ctx context.Context, tx T, s Staged) (bool, error)
	// Discard drops pipeline's staged data except keep's: what attempts
	// that died or were fenced left behind. Recover calls it in the
	// transaction that raises the fence, before this attempt's lanes
	// stage anything; keep holds the HEAD epoch's lanes when Commit still
	// needs them, and is empty otherwise.
	Discard(ctx context.Context, tx T, pipeline string, keep []Staged) error
}

// Finisher may be implemented by an Applier that holds data back
// across epochs (say the new contents of a table that a full refresh
// replaces) and makes it visible when a Sync has read everything.
type Finisher[T any] interface {
	// Finish makes visible, in tx, everything that pipeline's epochs up
	// to epoch (a Final one) held back. It runs once per Final epoch: in
	// Writer.Finish right after that epoch's Commit, or, when the process
	// died before, in the next attempt's Recover, in the transaction that
	// applies the epoch when it was not applied yet.
	Finish(ctx context.Context, tx T, pipeline string, epoch uint64) error
}

// Config says what a Writer is made of. Pipeline, Stager, Books and
// Applier are required.
type Config[T any] struct {
	// Pipeline and Lane are what the runner passed to
	// sink.Destination.Writer.
	Pipeline string
	Lane     int
	// Stager is the lane's data path: Write, Stage, Close.
	Stager Stager
	// Books keeps the pipeline's Marker; Applier applies staged data in
	// its transactions (and finishes, when it is a Finisher).
	Books   Books[T]
	Applier Applier[T]
	// Name starts the Writer's error messages ("sqlite: ..."). Default
	// "ledger".
	Name string
	// Where says, in a *sink.AheadError, where the destination keeps
	// what is ahead of the log ("the SQLite database"). Default Name.
	Where string
	// Logger gets a line at Info per Recover. Default: discard.
	Logger *slog.Logger
}

// Writer is a sink.Writer built from a Stager, an
// Applier and Books: it keeps the commit protocol, and the Stager and
// Applier only move data.
//
//   - PreCommit calls Stage and wraps what it returns, with the
//     pipeline, epoch and lane, into the committable.
//   - Recover, in one transaction of Books: fails with sink.ErrFenced
//     when the Marker's fence is above the generation; with a
//     *sink.AheadError (sink.CheckAhead) when the Marker's epoch is after
//     the HEAD record's (any epoch, when there is no HEAD); raises the
//     fence; reports HEAD's epoch Applied when the Marker has it,
//     Recoverable when every lane's staged data of it is Intact and the
//     epoch before it is applied, Lost otherwise; and Discards the
//     staged data Commit won't need. A Final HEAD not finished yet is
//     applied and finished there, and reported Applied.
//   - Commit, in one transaction: fails with sink.ErrFenced when the
//     Marker's fence is above the generation Recover raised it to; does
//     nothing for an epoch the Marker has applied; fails when the epoch
//     before it is not applied (the destination lost epochs); otherwise
//     Applies every lane's staged data and records the epoch.
//   - Finish, in one transaction: fenced like Commit; calls the
//     Applier's Finish (when it is a Finisher) once per Final epoch.
//
// Write, PreCommit and Close run on the lane's goroutine; Recover,
// Commit and Finish on the commit goroutine, possibly at the same time:
// they share nothing but the generation (atomic).
type Writer[T any] struct {
	cfg Config[T]
	gen atomic.Uint64 // set by Recover, read by Commit and Finish
}

var _ sink.Writer = (*Writer[any])(nil)

// NewWriter returns the Writer cfg describes. It fails when a required
// field of cfg is missing.
func NewWriter[T any](cfg Config[T]) (*Writer[T], error) {
	switch {
	case cfg.Pipeline == "":
		return nil, errors.New("ledger: Config.Pipeline is empty")
	case cfg.Stager == nil:
		return nil, errors.New("ledger: Config.Stager is nil")
	case cfg.Books == nil:
		return nil, errors.New("ledger: Config.Books is nil")
	case cfg.Applier == nil:
		return nil, errors.New("ledger: Config.Applier is nil")
	}
	if cfg.Name == "" {
		cfg.Name = "ledger"
	}
	if cfg.Where == "" {
		cfg.Where = cfg.Name
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Writer[T]{cfg: cfg}, nil
}

// Write passes the batch to the Stager.
func (w *Writer[T]) Write(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	return w.cfg.Stager.Write(ctx, stream, rec)
}

// PreCommit stages the epoch's rows with the Stager and returns the
// committable that carries its reference to Commit.
func (w *Writer[T]) PreCommit(ctx context.Context, epoch uint64) (sink.Committable, error) {
	data, err := w.cfg.Stager.Stage(ctx, epoch)
	if err != nil {
		return nil, err
	}
	return w.seal(epoch, data)
}

// Close closes the Stager.
func (w *Writer[T]) Close(ctx context.Context) error { return w.cfg.Stager.Close(ctx) }

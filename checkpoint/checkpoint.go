// Package checkpoint is the checkpoint log: immutable records, one per
// committed epoch, and a HEAD that names the current one. Moving HEAD with
// a conditional write is the commit point of every epoch; writing HEAD
// with the next generation is how an attempt claims a pipeline and fences
// any older attempt still running.
//
// Layout under the store's root, per pipeline:
//
//	{pipeline}/_checkpoints/{epoch:020d}-{generation:020d}.json   records
//	{pipeline}/_checkpoints/HEAD                                  the pointer
//	{pipeline}/_staging/...                                       side files of epochs being committed
//	{pipeline}/_quarantine/{stream}/{epoch:020d}.jsonl            quarantined records of committed epochs
//	{pipeline}/_held/{stream}/{epoch:020d}.jsonl                  held-back values of committed epochs
//
// HEAD is a small JSON object: the generation that holds the pipeline,
// the record it points at (or none), a sequence number and a nonce that
// make every version's bytes unique. Records are created only if absent
// and never overwritten.
//
// Open a store with Open ("file:///abs/dir", "mem://"), OpenDir or NewMem;
// stores in S3, GCS and Azure Blob come from package checkpoint/cloud
// (cloud.Open with "s3://bucket/prefix", "gs://...", "azblob://...", or
// cloud.NewBucketStore for a gocloud.dev bucket whose client you
// configure), kept apart so that only its users link the clouds' SDKs.
// Every store runs the same protocol over a small object layer (package
// object: create-if-absent, read with a version token, replace-if-token,
// put, list), so the backends differ only in that layer: a directory (hard
// links and flock), memory, and S3, GCS and Azure Blob through gocloud.dev
// (If-None-Match, and If-Match or a generation match). NewStore runs the
// protocol over an object layer of your own.
package checkpoint

import (
	"context"
	"errors"
	"time"
)

// Generation numbers the attempts of a pipeline. Each attempt claims the
// next one; 0 means "none".
type Generation uint64

// Ref names one record: records are immutable and never overwritten, so an
// epoch rewritten after a rewind gets a record of its own, told apart by
// the generation that wrote it.
type Ref struct {
	Epoch      uint64     `json:"epoch"`
	Generation Generation `json:"generation"`
}

// Counts are the rows of one stream in one epoch: Read + Replayed +
// Added = Written + Filtered + Quarantined, which is Read = Written +
// Filtered + Quarantined for a stream whose transform (if any) makes no
// more rows than it gets and that replayed nothing. Replayed counts the
// quarantined records a replay (etl.Pipeline.Replay) put through the
// engine again, which are not read from the source. Filtered counts the rows a transform dropped, Added the
// rows it made beyond those it got (both 0 without a transform);
// Quarantined counts the records the engine or a transform rejected.
// Held counts values (cells) of written rows that were held back
// because the destination can't take their column's type; Released
// counts held values of earlier epochs written to their rows in this
// one, once the destination took their column (each value is held in
// one epoch and released, if ever, in a later one).
type Counts struct {
	Read        int64 `json:"read"`
	Written     int64 `json:"written"`
	Quarantined int64 `json:"quarantined"`
	Held        int64 `json:"held,omitempty"`
	Filtered    int64 `json:"filtered,omitempty"`
	Added       int64 `json:"added,omitempty"`
	Replayed    int64 `json:"replayed,omitempty"`
	Released    int64 `json:"released,omitempty"`
}

// Add returns the sums of c's and o's counts.
func (c Counts) Add(o Counts) Counts {
	return Counts{Read: c.Read + o.Read, Written: c.Written + o.Written, Quarantined: c.Quarantined + o.Quarantined,
		Held: c.Held + o.Held, Filtered: c.Filtered + o.Filtered, Added: c.Added + o.Added, Replayed: c.Replayed + o.Replayed,
		Released: c.Released + o.Released}
}

// File is a side file an epoch wrote (quarantined records, say), relative
// to the pipeline's directory in the store.
type File struct {
	Kind   string `json:"kind"` // "quarantine" or "held"
	Stream string `json:"stream"`
	Path   string `json:"path"`
	Rows   int64  `json:"rows"`
}

// Record is one checkpoint: everything needed to resume after epoch Epoch
// and to apply it at the destination.
type Record struct {
	Pipeline   string     `json:"pipeline"`
	Epoch      uint64     `json:"epoch"`
	Generation Generation `json:"generation"`
	// Prev is the record this one follows; nil for a pipeline's first.
	Prev *Ref `json:"prev,omitempty"`
	// Time is when the epoch was committed. It is stored as RFC 3339 with
	// nanoseconds: it reads back Equal, with a fixed zone and no monotonic
	// clock reading.
	Time time.Time `json:"time"`
	// Resume holds each split's resume state at the epoch's barrier.
	Resume map[string][]byte `json:"resume"`
	// Engine is the engine's exported state (schemas, names).
	Engine []byte `json:"engine,omitempty"`
	// Committables are the writer lanes' PreCommit results, index = lane.
	Committables [][]byte `json:"committables"`
	// Files lists side files written in this epoch.
	Files []File `json:"files,omitempty"`
	// Counts are this epoch's rows per stream.
	Counts map[string]Counts `json:"counts,omitempty"`
	// Totals are the rows per stream over every epoch up to this one.
	Totals map[string]Counts `json:"totals,omitempty"`
	// Final marks the last epoch of an attempt that read every split to
	// its end (a Sync that completed its read): a full refresh ends here,
	// and the next attempt's reads start a new one. Records written before
	// this field existed read as false.
	Final bool `json:"final,omitempty"`
	// Replay is the runner's opaque account of the quarantined records
	// replayed so far (etl.Pipeline.Replay), carried from each record to
	// the next, so that a replay committed once is never repeated; nil
	// until the first replay commits.
	Replay []byte `json:"replay,omitempty"`
	// Released is the runner's opaque account of the held values
	// (_held/) written to their rows so far, carried from each record to
	// the next like Replay, so that a value released once is never
	// released again; nil until the first release commits.
	Released []byte `json:"released,omitempty"`
	// Retired, when set, says why the log is retired: etl.Reshard gave
	// its splits to the shards of another count. An attempt that claims
	// a retired log stops before it reads (etl.ErrRetired).
	Retired string `json:"retired,omitempty"`
}

// Ref returns the record's reference.
func (r *Record) Ref() Ref { return Ref{Epoch: r.Epoch, Generation: r.Generation} }

// Store is a checkpoint log. Implementations must be safe for concurrent
// use by several goroutines and, for stores that several processes can
// reach, by several processes: the HEAD writes of Claim, Commit and Rewind
// are compare-and-swap operations with exactly one winner.
type Store interface {
	// Claim starts an attempt: it moves the pipeline's HEAD to the next
	// generation, keeping the record it points at, and returns that
	// generation and the record (nil for a new pipeline). Every older
	// generation's next Commit or Rewind fails with ErrFenced.
	Claim(ctx context.Context, pipeline string) (Generation, *Record, error)

	// Head reads the pipeline's HEAD without claiming it: the generation
	// that holds it and the record it points at (nil before the first
	// commit); 0 and nil for a pipeline never claimed. It fences nothing.
	Head(ctx context.Context, pipeline string) (Generation, *Record, error)

	// Commit writes rec (rec.Pipeline, rec.Generation == gen) as an
	// immutable record and moves HEAD to it, if HEAD still belongs to gen
	// and still points at rec.Prev. It returns ErrFenced when a newer
	// generation has claimed the pipeline (or gen was never claimed), and
	// ErrConflict when HEAD moved otherwise or a record with rec's epoch
	// and generation already exists with other content. When Commit
	// returns nil the epoch is committed; when it returns an error, HEAD
	// did not move (though rec's record may have been written: nothing
	// points at it, and no other record can take its name).
	//
	// rec.Prev, when set, must have a lower epoch and a generation no
	// higher than gen. Retrying a Commit that succeeded, with the same
	// record, returns nil while HEAD still points at it.
	Commit(ctx context.Context, gen Generation, rec *Record) error

	// Get reads a record by reference; ErrNotFound when there is none.
	Get(ctx context.Context, pipeline string, ref Ref) (*Record, error)

	// Rewind moves HEAD back to the record to, an ancestor of HEAD, when
	// HEAD's epoch was lost at the destination; the zero Ref rewinds to
	// before the first record (Claim then returns a nil record). It fails
	// with ErrNotFound when to does not exist, with an error when it is not
	// an ancestor, and with ErrFenced as Commit does. Rewinding to HEAD's
	// own record does nothing.
	Rewind(ctx context.Context, pipeline string, gen Generation, to Ref) error

	// WriteFile writes a side file (quarantined records) under the
	// pipeline's directory, replacing any file of that name atomically.
	// name is a slash-separated relative path; ErrBadName when a segment
	// is empty, starts with '.' (so no ".."), or ends in ".lock", or when
	// it would land in _checkpoints/.
	WriteFile(ctx context.Context, pipeline, name string, data []byte) error

	// ReadFile reads a side file written by WriteFile; an error wrapping
	// ErrNotFound when there is none.
	ReadFile(ctx context.Context, pipeline, name string) ([]byte, error)

	// Close releases the store's resources.
	Close(ctx context.Context) error
}

// Errors returned by stores.
var (
	// ErrFenced is returned by Commit and Rewind when a newer generation
	// has claimed the pipeline: the caller is a zombie and must stop
	// without touching the destination. The error's message names the
	// newer generation and, when HEAD records it, its holder (host,
	// process and claim time).
	// sink.ErrFenced is this same error, which destinations wrap.
	ErrFenced = errors.New("fenced by a newer generation")
	// ErrConflict is returned by Commit when HEAD no longer points at the
	// record's Prev although the generation is unchanged, or when a record
	// of the same epoch and generation exists with other content (two
	// writers in one generation: a bug in the caller).
	ErrConflict = errors.New("checkpoint: HEAD moved under the writer")
	// ErrNotFound is returned by Get for a record that does not exist, and
	// by Rewind for a target that does not.
	ErrNotFound = errors.New("checkpoint: record not found")
	// ErrBadName is returned for a pipeline name that cannot name a
	// directory: empty, longer than 200 bytes, with characters other than
	// ASCII letters, digits, '-', '_' and '.', starting with '.' or ending
	// in ".lock"; and by WriteFile for a side-file name it rejects.
	ErrBadName = errors.New("checkpoint: invalid pipeline name")
)

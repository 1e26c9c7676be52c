package etl

import (
	"context"

	"github.com/openetl/etl/internal/runner"
)

// Replay selects the quarantined records of one stream that
// Pipeline.Replay puts through the engine again. The zero value of each
// field but Stream selects everything.
type Replay struct {
	// Stream is the source stream whose records are replayed; required,
	// and it must be one the Pipeline selects.
	Stream string
	// Reasons selects the records set aside for one of these reasons
	// (the engine's: "parse_error", "type_conflict", "out_of_range",
	// "missing_key", "too_large", "too_deep", "unchanged_value",
	// "filter_column"); empty: any reason.
	Reasons []string
	// FromEpoch and ToEpoch bound, inclusive, the epochs the records were
	// set aside in (the epoch of their file,
	// _quarantine/{stream}/{epoch:020d}.jsonl); 0 leaves that end open.
	FromEpoch, ToEpoch uint64
}

// ReplayResult is what a Replay did. Selected = Written + Quarantined
// for a stream without a transform (with one, Result.Streams adds the
// rows it filtered and added). A Replay that failed part way counts the
// epochs it committed; running it again replays the rest.
type ReplayResult struct {
	// Result is the replay's attempt: its generation, the epochs it
	// committed and its counts (Replayed in Streams, not Read: nothing
	// was read from the source).
	Result
	// Selected counts the quarantined records the replay put through the
	// engine again; Written those that now passed and were written;
	// Quarantined those set aside again, with their new reason.
	Selected, Written, Quarantined int64
}

// Replay puts quarantined records of one stream (sel) through the
// engine again, after the cause is fixed: a Pipeline built with a new
// schema policy (SchemaPolicy), larger documents allowed
// (MaxDocumentBytes), other JSON options, or a transform that now takes
// them. It is one attempt like a Sync's, which claims the pipeline
// (fencing a Run elsewhere: stop it first), recovers, and then, instead
// of reading the source, reads the stream's published quarantine files
// back (see QuarantineName) and gives each selected record, with its
// original op, seq, key and payload, to the engine under the
// Pipeline's current policy and options. What passes is written like a
// record read from the source, with the _openetl_id and _openetl_seq
// its first reading would have had; what fails is quarantined again in
// the replay's epoch, with its new reason and detail and "split"
// "_openetl.replay".
//
// Replay delivers under the stream's guarantee (Guarantees), or better:
// the lines it replayed are kept in the checkpoint record of the epoch
// that wrote their rows, like a split's resume state, so into a
// destination that stages and applies or commits transactions (every
// built-in one) it is exactly once. A crash or a cancelled ctx repeats
// nothing that committed, and a record once replayed is never selected
// again, by this Replay or a later one — except, for one that failed
// again, its new line, which a later Replay selects like any other:
// replaying twice writes nothing new. A Replay that fails returns the
// counts of the epochs it saw committed; one whose destination Commit
// failed after its commit point is applied by the next attempt's
// recovery, and Inspect's Totals count it (Replayed). The source's
// positions are left as they were, so the next Sync reads on from where
// the last one stopped; no AfterSync steps run.
//
// Only append streams replay: a replayed version may be older than the
// row a merge table now holds, and an overwrite table is replaced by
// the next full refresh anyway; a merge or overwrite stream, an empty
// Stream or an empty epoch range fails with an error wrapping
// delivery.ErrInvalid. Rows a transform rejected (quarantine lines with
// "rejected_by": "transform") are not replayed: their lines hold the
// row as the transform got it, not the source's record. The checkpoint
// store must list files (checkpoint.FileLister; every built-in store
// does), or Replay fails with an error wrapping errors.ErrUnsupported.
// Files of epochs after HEAD's (left by epochs a rewind undid) are
// passed by.
//
// Like Sync, it returns ErrBusy while a Sync or Run of this Pipeline
// runs and ErrClosed after Close.
func (p *Pipeline) Replay(ctx context.Context, sel Replay) (ReplayResult, error) {
	end, err := p.begin()
	if err != nil {
		return ReplayResult{}, err
	}
	defer end()
	res, err := runner.Replay(ctx, p.cfg, runner.ReplaySelection{Stream: sel.Stream, Reasons: sel.Reasons,
		FromEpoch: sel.FromEpoch, ToEpoch: sel.ToEpoch})
	c := res.Streams[sel.Stream]
	return ReplayResult{Result: Result(res), Selected: c.Replayed, Written: c.Written, Quarantined: c.Quarantined},
		budgetError(err)
}

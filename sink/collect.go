package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/openetl/etl/checkpoint"
)

// Collector is implemented by a Destination that stages data which can
// outlive the attempt that staged it: files an attempt wrote before it
// crashed or was fenced, staging tables or partitions of epochs whose
// checkpoint record was never written. The runner calls Collect once
// per attempt, after lane 0's Recover has settled the record the
// attempt resumes from (and applied it, or rewound past it) and before
// any Write of the attempt, so that nothing the attempt itself stages
// exists yet. A destination without it keeps what failed attempts
// staged; the runner still removes its own staged side files.
//
// What Collect may remove is what the pipeline staged that no record at
// or after req.Head names: the record the attempt resumes from, since
// records after it are this attempt's. Anything else an older attempt
// staged can never be committed (its next checkpoint write is fenced),
// and an epoch before Head's was applied before Head was written.
// What it must never remove is what a newer attempt stages: an attempt
// that claims the pipeline after this one may run beside it (this one
// is then a zombie that doesn't know it yet). Collect keeps to the
// order of CollectStaged, which makes that safe without names that
// carry a generation: list what is staged, then ask req.Held, and
// remove only what the listing found if Held returned nil. Whatever a
// newer attempt stages, it stages after its claim, and a claim before
// Held's check makes Held fail; so a listing Held follows with nil
// holds nothing of a newer attempt. (It relies on a listing that shows
// every object written before it started, which S3, GCS, Azure Blob,
// local directories and memory give.)
//
// Collect must be idempotent and safe to interrupt: removing something
// already gone is no error, and what a crash leaves the next attempt's
// Collect removes. An error is reported (logged at Warn) and does not
// fail the attempt: what is left over only takes space.
type Collector interface {
	// Collect removes what req.Pipeline staged that req.Head does not
	// name, as the Collector's doc says, and returns what it removed.
	// It changes nothing when Held fails.
	Collect(ctx context.Context, req CollectRequest) (Collected, error)
}

// CollectRequest is what Collect gets.
type CollectRequest struct {
	// Pipeline is the pipeline whose staged data to collect.
	Pipeline string
	// Generation is the attempt's generation, which Recover got.
	Generation checkpoint.Generation
	// Head is the record the attempt resumes from, after recovery (nil:
	// none): everything its committables name stays.
	Head *checkpoint.Record
	// Held returns nil while Generation still holds the pipeline in the
	// checkpoint log, and an error wrapping ErrFenced once a newer
	// generation has claimed it (or another error when it can't tell).
	// Call it after listing what is staged and before removing any of
	// it (CollectStaged does). Nil means the pipeline is held.
	Held func(ctx context.Context) error
}

// held calls Held, when set.
func (r CollectRequest) held(ctx context.Context) error {
	if r.Held == nil {
		return nil
	}
	return r.Held(ctx)
}

// Collected counts what a Collect removed and kept.
type Collected struct {
	// Removed counts the staged units removed: files, or staging
	// partitions or tables; Bytes their size when the destination knows
	// it (0 otherwise).
	Removed int
	Bytes   int64
	// Kept counts the staged units found that Head names, which stay.
	Kept int
	// Versions counts old metadata versions removed beyond the history
	// a destination keeps (sink/parquet's manifests).
	Versions int
}

// Add returns the sums of c's and o's counts.
func (c Collected) Add(o Collected) Collected {
	return Collected{Removed: c.Removed + o.Removed, Bytes: c.Bytes + o.Bytes, Kept: c.Kept + o.Kept,
		Versions: c.Versions + o.Versions}
}

// Staged is one staged unit a Collector found: its name in the
// destination (a key, a table, a partition) and its size when known.
type Staged struct {
	Name  string
	Bytes int64
}

// CollectStaged is the order every Collector keeps, for destinations
// that can list what they staged: list returns what the pipeline has
// staged now; keep reports whether req.Head names one (it stays);
// after the listing, req.Held must return nil, or nothing is removed
// and its error is returned; then remove removes each listed unit that
// Head doesn't name (a unit already gone must be no error). It removes
// as many as it can and returns the counts with the errors joined.
func CollectStaged(ctx context.Context, req CollectRequest, list func(context.Context) ([]Staged, error),
	keep func(Staged) bool, remove func(context.Context, Staged) error) (Collected, error) {
	var out Collected
	found, err := list(ctx)
	if err != nil {
		return out, fmt.Errorf("sink: collect %q: list staged: %w", req.Pipeline, err)
	}
	var gone []Staged
	for _, s := range found {
		if keep(s) {
			out.Kept++
		} else {
			gone = append(gone, s)
		}
	}
	if len(gone) == 0 {
		return out, nil
	}
	// After the listing, never before: a claim by a newer attempt before
	// this check fails it, and one after it comes after the listing, so
	// nothing it stages was listed.
	if err := req.held(ctx); err != nil {
		return out, fmt.Errorf("sink: collect %q: generation %d no longer holds the pipeline, nothing removed: %w",
			req.Pipeline, req.Generation, err)
	}
	var errs []error
	for _, s := range gone {
		if err := ctx.Err(); err != nil {
			errs = append(errs, context.Cause(ctx))
			break
		}
		if err := remove(ctx, s); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", s.Name, err))
			continue
		}
		out.Removed++
		out.Bytes += s.Bytes
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("sink: collect %q: %w", req.Pipeline, err)
	}
	return out, nil
}

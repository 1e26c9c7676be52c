package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/openetl/etl/source"
)

// ErrRetired is wrapped by the error of an attempt whose checkpoint log
// is retired (checkpoint.Record.Retired; etl.ErrRetired).
var ErrRetired = errors.New("the checkpoint log is retired")

// Settle runs one attempt that only settles the pipeline's checkpoint
// log with its destination, as every attempt's start does: it claims the
// log (the next generation, fencing any older attempt there), recovers
// HEAD's epoch at the destination (raising the destination's fence,
// applying the epoch if it was committed but not applied, rewinding the
// log past it if it was lost) and returns, without opening the source or
// reading anything. The Result's Generation is the one it claimed and
// its Epoch the record HEAD points at afterwards. It doesn't retry and
// runs no Steps. It settles a retired log too.
func Settle(ctx context.Context, cfg Config) (Result, error) {
	cfg.settle = true
	cfg.Steps = nil
	cfg.Retry = nil
	cfg.replay = nil
	res, _, err := attempt(ctx, cfg, true, Result{})
	return res, err
}

// SplitIDs asks cfg's source which splits it reads of the streams cfg
// selects, given resume states: it discovers the catalog and opens the
// source with resume, and reads none of the splits. Open must not fail
// for states of splits the source doesn't read (source.Source says it
// ignores them).
func SplitIDs(ctx context.Context, cfg Config, resume map[source.SplitID][]byte) ([]source.SplitID, error) {
	catalog, err := cfg.Source.Discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("source: discover: %w", err)
	}
	streams, err := selectStreams(catalog, cfg.Streams)
	if err != nil {
		return nil, err
	}
	splits, err := cfg.Source.Open(ctx, streams, resume)
	if err != nil {
		return nil, fmt.Errorf("source: open: %w", err)
	}
	ids := make([]source.SplitID, len(splits))
	for i, sp := range splits {
		ids[i] = sp.ID()
	}
	return ids, nil
}

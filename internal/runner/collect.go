package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// stagingDir is where staged side files wait for their epoch's commit
// (stagedSideName), in the checkpoint store.
const stagingDir = "_staging/"

// collect removes what failed attempts staged that the record this
// attempt resumes from (r.head, after recovery) doesn't name: the
// runner's own staged side files in the checkpoint store, and the
// destination's staged data when it is a sink.Collector. It runs once,
// after recovery and before any Write of this attempt, in the order
// sink.CollectStaged keeps (list, check that this generation still
// holds the pipeline, remove), so that nothing a newer attempt stages
// is touched. Errors are logged, never returned: leftovers only take
// space, and the next attempt collects them.
func (r *runner) collect(ctx context.Context) {
	req := sink.CollectRequest{Pipeline: r.cfg.Name, Generation: r.gen, Head: r.head, Held: r.held}
	side, err := r.collectSide(ctx, req)
	if err != nil {
		r.log.Warn("could not remove the side files failed attempts staged; they only take space", "err", err)
	}
	var dest sink.Collected
	if c, ok := r.cfg.Destination.(sink.Collector); ok {
		dest, err = c.Collect(ctx, req)
		if err != nil {
			r.log.Warn("could not remove what failed attempts staged at the destination; it only takes space", "err", err)
		}
	}
	r.collected(side, dest)
}

// held returns nil while this attempt's generation holds the pipeline's
// HEAD, an error wrapping checkpoint.ErrFenced once a newer one does.
func (r *runner) held(ctx context.Context) error {
	g, _, err := r.cfg.Store.Head(ctx, r.cfg.Name)
	if err != nil {
		return fmt.Errorf("checkpoints: read HEAD: %w", err)
	}
	if g != r.gen {
		return fmt.Errorf("generation %d holds the pipeline, not %d: %w", g, r.gen, checkpoint.ErrFenced)
	}
	return nil
}

// collectSide removes staged side files under _staging/ that r.head
// doesn't list. Their names carry the generation that staged them
// (stagedSideName); a newer generation's are left alone even before
// Held is asked.
func (r *runner) collectSide(ctx context.Context, req sink.CollectRequest) (sink.Collected, error) {
	lister, ok := r.cfg.Store.(checkpoint.FileLister)
	del, ok2 := r.cfg.Store.(checkpoint.FileDeleter)
	if !ok || !ok2 {
		return sink.Collected{}, nil
	}
	keep := map[string]bool{}
	if r.head != nil {
		for _, f := range r.head.Files {
			keep[f.Path] = true
		}
	}
	return sink.CollectStaged(ctx, req,
		func(ctx context.Context) ([]sink.Staged, error) {
			names, err := lister.ListFiles(ctx, r.cfg.Name, stagingDir)
			if err != nil {
				return nil, err
			}
			out := make([]sink.Staged, 0, len(names))
			for _, n := range names {
				if g, ok := sideGeneration(n); ok && g > r.gen {
					continue // a newer attempt's
				}
				out = append(out, sink.Staged{Name: n})
			}
			return out, nil
		},
		func(s sink.Staged) bool { return keep[s.Name] },
		func(ctx context.Context, s sink.Staged) error {
			err := del.DeleteFile(ctx, r.cfg.Name, s.Name)
			if errors.Is(err, checkpoint.ErrNotFound) {
				return nil
			}
			return err
		})
}

// sideGeneration parses the generation out of a staged side file's name,
// _staging/{epoch:020d}-{generation:020d}/...; ok is false for any other
// name.
func sideGeneration(name string) (checkpoint.Generation, bool) {
	dir, _, ok := strings.Cut(strings.TrimPrefix(name, stagingDir), "/")
	if !ok {
		return 0, false
	}
	var epoch, gen uint64
	if n, err := fmt.Sscanf(dir, "%020d-%020d", &epoch, &gen); err != nil || n != 2 || len(dir) != 41 {
		return 0, false
	}
	return checkpoint.Generation(gen), true
}

package iceberg

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// errApplied is returned by a commit whose table already records the
// epoch (or a later one) for the pipeline: another committer applied it.
var errApplied = errors.New("iceberg: epoch already applied")

// errMarked is returned by a commit that marks a table as the pipeline's
// when another writer marked it first.
var errMarked = errors.New("iceberg: table already has the pipeline's fence")

// markers are a pipeline's markers in one table's properties.
type markers struct {
	epoch uint64                // last epoch applied, 0 if none
	gen   checkpoint.Generation // generation that applied it
	fence checkpoint.Generation // highest generation that recovered or committed
}

func readMarkers(props map[string]string, pipeline string) (markers, error) {
	var m markers
	get := func(key string) (uint64, error) {
		s, ok := props[key]
		if !ok {
			return 0, nil
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("iceberg: table property %s = %q is not a number: edited by hand?", key, s)
		}
		return v, nil
	}
	var err error
	var g, f uint64
	if m.epoch, err = get(epochKey(pipeline)); err != nil {
		return m, err
	}
	if g, err = get(genKey(pipeline)); err != nil {
		return m, err
	}
	if f, err = get(fenceKey(pipeline)); err != nil {
		return m, err
	}
	m.gen, m.fence = checkpoint.Generation(g), checkpoint.Generation(f)
	return m, nil
}

// fenceRequirement is a table.Requirement checked by the catalog against
// the table's current metadata at commit time: the pipeline's fence must
// not be above gen, and, for an epoch commit (epoch > 0), the table must
// not already record epoch or a later one. The SQL catalog validates
// requirements against the metadata it loaded and then swaps the
// metadata location only if it is still the one it loaded, so the check
// and the commit are atomic.
type fenceRequirement struct {
	Type       string `json:"type"`
	Pipeline   string `json:"pipeline"`
	Generation uint64 `json:"generation"`
	Epoch      uint64 `json:"epoch,omitempty"`
	// Unmarked requires the table to have no fence of the pipeline yet
	// (marking a table must never lower a fence).
	Unmarked bool `json:"unmarked,omitempty"`
	// Pin, when set, requires the table's current snapshot to be this
	// one (-1: none), for a commit of position deletes found in it;
	// otherwise the commit fails with errMoved, which iceberg-go does
	// not replay on the new head (it would delete the wrong rows).
	Pin *int64 `json:"pin,omitempty"`
}

var _ table.Requirement = (*fenceRequirement)(nil)

func (r *fenceRequirement) GetType() string { return r.Type }

func (r *fenceRequirement) Validate(meta table.Metadata) error {
	if meta == nil {
		return errors.New("iceberg: table does not exist: dropped while the pipeline runs?")
	}
	m, err := readMarkers(meta.Properties(), r.Pipeline)
	if err != nil {
		return err
	}
	if _, ok := meta.Properties()[fenceKey(r.Pipeline)]; ok && r.Unmarked {
		return errMarked
	}
	if m.fence > checkpoint.Generation(r.Generation) {
		return fmt.Errorf("iceberg: pipeline %q: generation %d is fenced by generation %d: %w",
			r.Pipeline, r.Generation, m.fence, sink.ErrFenced)
	}
	if r.Epoch > 0 && m.epoch >= r.Epoch {
		return fmt.Errorf("%w: table records epoch %d of generation %d", errApplied, m.epoch, m.gen)
	}
	if r.Pin != nil {
		cur := int64(-1)
		if s := meta.CurrentSnapshot(); s != nil {
			cur = s.SnapshotID
		}
		if cur != *r.Pin {
			return fmt.Errorf("%w: snapshot %d, not %d", errMoved, cur, *r.Pin)
		}
	}
	return nil
}

// fencedCatalog wraps the catalog for one commit: every CommitTable it
// passes on carries req. Tables loaded through it commit through it, so
// the library's own retries (refresh and replay) are checked too.
//
// It also turns a failed branch assertion ("branch main has changed",
// which iceberg-go v0.7.0 returns as a plain error) into
// table.ErrCommitFailed, after checking it against freshly loaded
// metadata, so that the library's refresh-and-replay redoes the commit on
// the new head instead of giving up.
type fencedCatalog struct {
	inner table.CatalogIO
	req   *fenceRequirement
	// atomic: the catalog validates requirement objects in process (the
	// SQL catalog). Others (REST) serialize requirements and would reject
	// ours: for them it is checked on freshly loaded metadata right before
	// the commit, a best effort with a window of one request.
	atomic bool
}

func (c *fencedCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	t, err := c.inner.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	return table.New(ident, t.Metadata(), t.MetadataLocation(), t.FS, c), nil
}

func (c *fencedCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	all := append(append(make([]table.Requirement, 0, len(reqs)+1), reqs...), c.req)
	if !c.atomic {
		cur, err := c.inner.LoadTable(ctx, ident)
		if err != nil {
			return nil, "", err
		}
		if err := c.req.Validate(cur.Metadata()); err != nil {
			return nil, "", err
		}
		all = reqs
	}
	meta, loc, err := c.inner.CommitTable(ctx, ident, all, updates)
	if err == nil || errors.Is(err, table.ErrCommitFailed) || errors.Is(err, sink.ErrFenced) || errors.Is(err, errApplied) || errors.Is(err, errMarked) || errors.Is(err, errMoved) {
		return meta, loc, err
	}
	// Did a requirement other than ours fail because another writer
	// moved the table? Then it is a conflict the library may replay.
	cur, lerr := c.inner.LoadTable(ctx, ident)
	if lerr != nil {
		return meta, loc, err
	}
	if rerr := c.req.Validate(cur.Metadata()); rerr != nil {
		return nil, "", rerr
	}
	for _, r := range reqs {
		if r.GetType() == "assert-ref-snapshot-id" || r.GetType() == "assert-current-schema-id" || r.GetType() == "assert-last-assigned-field-id" {
			if verr := r.Validate(cur.Metadata()); verr != nil {
				return nil, "", fmt.Errorf("%w: %w", table.ErrCommitFailed, verr)
			}
		}
	}
	return meta, loc, err
}

// fenced loads table ident through a fencedCatalog with req.
func (d *Destination) fenced(ctx context.Context, ident table.Identifier, req *fenceRequirement) (*table.Table, error) {
	fc := &fencedCatalog{inner: d.cat, req: req, atomic: d.cat.CatalogType() == catalog.SQL}
	return fc.LoadTable(ctx, ident)
}

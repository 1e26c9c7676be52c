package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow/array"
	ice "github.com/apache/iceberg-go"
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

// errOutcomeUnknown marks a failed commit that the catalog may have
// taken all the same: the files it adds are not removed.
var errOutcomeUnknown = errors.New("iceberg: the commit's outcome is unknown")

// errMarkersExpired is returned for a table whose markers are kept in
// snapshot summaries when the snapshots that carry them were expired.
var errMarkersExpired = errors.New("iceberg: the pipeline's markers can't be read")

// markers are a pipeline's markers in one table (its properties or a
// snapshot's summary, see Fence).
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

// markersOf reads the pipeline's markers of a table as d keeps them (see
// Fence): from its properties, from its snapshot summaries, or the
// higher of both. found reports whether any marker of the pipeline is
// there. A table whose current snapshot's ancestry was expired before
// reaching one that carries the markers, while its properties carry
// none, gives an error where summaries count: its markers can't be read,
// and nothing may be committed to it on a guess.
func (d *Destination) markersOf(meta table.Metadata, pipeline string) (m markers, found bool, err error) {
	return readTableMarkers(meta, pipeline, d.reading())
}

// reading is how d reads markers: as Config.Fence says, and as
// FenceSnapshots once a FenceAuto destination switched to summaries.
func (d *Destination) reading() Fence {
	if d.summariesOnly() {
		return FenceSnapshots
	}
	return d.fence
}

// readTableMarkers reads the markers where says. FenceSnapshots reads
// table properties too (a table the pipeline wrote with its markers in
// properties before), but a summary walk cut by expiry is an error even
// then: properties no longer written may be stale.
func readTableMarkers(meta table.Metadata, pipeline string, where Fence) (m markers, found bool, err error) {
	props := meta.Properties()
	if m, err = readMarkers(props, pipeline); err != nil {
		return m, false, err
	}
	_, e := props[epochKey(pipeline)]
	_, f := props[fenceKey(pipeline)]
	found = e || f
	if where == FenceProperties {
		return m, found, nil
	}
	s, sfound, cut, err := summaryMarkers(meta, pipeline)
	if err != nil {
		return m, false, err
	}
	if cut != nil && (!found || where == FenceSnapshots) {
		return m, false, fmt.Errorf("%w: pipeline %q: table %s: no snapshot from the current one back to %d carries the pipeline's markers, "+
			"and the snapshot before it was expired (was the table rewritten by another engine and its snapshots expired?)",
			errMarkersExpired, pipeline, meta.Location(), *cut)
	}
	if !sfound {
		return m, found, nil
	}
	if s.epoch > m.epoch || (s.epoch == m.epoch && s.gen > m.gen) {
		m.epoch, m.gen = s.epoch, s.gen
	}
	m.fence = max(m.fence, s.fence)
	return m, true, nil
}

// summaryMarkers reads the pipeline's markers from the summary of the
// newest snapshot, walking back from the current one, that carries them.
// cut is the snapshot whose parent was expired when the walk stopped
// there without finding them.
func summaryMarkers(meta table.Metadata, pipeline string) (m markers, found bool, cut *int64, err error) {
	s := meta.CurrentSnapshot()
	for s != nil {
		if s.Summary != nil {
			props := s.Summary.Properties
			_, e := props[epochKey(pipeline)]
			_, f := props[fenceKey(pipeline)]
			if e || f {
				m, err = readMarkers(props, pipeline)
				return m, true, nil, err
			}
		}
		if s.ParentSnapshotID == nil {
			return m, false, nil, nil
		}
		p := meta.SnapshotByID(*s.ParentSnapshotID)
		if p == nil {
			id := s.SnapshotID
			return m, false, &id, nil
		}
		s = p
	}
	return m, false, nil, nil
}

// markerProps are m as properties, for a table's properties or a
// snapshot's summary.
func markerProps(pipeline string, m markers) ice.Properties {
	return ice.Properties{
		epochKey(pipeline): strconv.FormatUint(m.epoch, 10),
		genKey(pipeline):   strconv.FormatUint(uint64(m.gen), 10),
		fenceKey(pipeline): strconv.FormatUint(uint64(m.fence), 10),
	}
}

// propsKept reports whether the catalog kept every one of props in the
// table's properties (a catalog may accept an update and drop custom
// properties).
func propsKept(meta table.Metadata, props ice.Properties) bool {
	if meta == nil {
		return false
	}
	have := meta.Properties()
	for k, v := range props {
		if have[k] != v {
			return false
		}
	}
	return true
}

// summariesOnly reports whether the pipeline's markers are written to
// snapshot summaries only: FenceSnapshots, or FenceAuto once the catalog
// refused or dropped them as table properties.
func (d *Destination) summariesOnly() bool {
	return d.fence == FenceSnapshots || (d.fence == FenceAuto && d.summaries.Load())
}

// useSummaries switches a FenceAuto destination to summaries only, once.
func (d *Destination) useSummaries(ident table.Identifier, why string, err error) {
	if d.fence == FenceAuto && d.summaries.CompareAndSwap(false, true) {
		d.log.Warn("iceberg: the catalog "+why+" the pipeline's table properties; keeping its markers in snapshot summaries (Config.Fence FenceSnapshots)",
			"table", ident, "err", err)
	}
}

// markerSnapshot adds to tx a snapshot without files whose summary holds
// props: how FenceSnapshots raises a fence or moves a marker.
func markerSnapshot(ctx context.Context, tbl *table.Table, tx *table.Transaction, props ice.Properties) error {
	as, err := table.SchemaToArrowSchema(tbl.Schema(), nil, false, false)
	if err != nil {
		return err
	}
	rdr, err := array.NewRecordReader(as, nil)
	if err != nil {
		return err
	}
	defer rdr.Release()
	return tx.Append(ctx, rdr, props)
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
	// Where the markers are read (Config.Fence).
	Where Fence `json:"-"`
}

var _ table.Requirement = (*fenceRequirement)(nil)

func (r *fenceRequirement) GetType() string { return r.Type }

func (r *fenceRequirement) Validate(meta table.Metadata) error {
	if meta == nil {
		return errors.New("iceberg: table does not exist: dropped while the pipeline runs?")
	}
	m, found, err := readTableMarkers(meta, r.Pipeline, r.Where)
	if err != nil {
		return err
	}
	if found && r.Unmarked {
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
		if c.req.Where != FenceProperties {
			// The markers in snapshot summaries were checked on cur: the
			// commit must apply to cur's snapshot and no other, which the
			// catalog checks (assert-ref-snapshot-id) atomically with it.
			if all, err = pinMain(reqs, cur.Metadata()); err != nil {
				return nil, "", err
			}
		}
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
		// The catalog may have taken this very commit before its error
		// (a connection lost on the way back): the table then records
		// the epoch (errApplied) and moved (errMoved) because of it, and
		// the files the commit adds must stay.
		return nil, "", fmt.Errorf("%w: %w (the commit failed: %w)", errOutcomeUnknown, rerr, err)
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

// pinMain returns reqs with a requirement that branch main is at meta's
// current snapshot: reqs' own, when it has one for main that says so
// (a snapshot producer's, or a rollback's); a commit whose own says
// another snapshot lost a race (table.ErrCommitFailed, which iceberg-go
// refreshes and replays).
func pinMain(reqs []table.Requirement, meta table.Metadata) ([]table.Requirement, error) {
	var cur *int64
	if s := meta.CurrentSnapshot(); s != nil {
		id := s.SnapshotID
		cur = &id
	}
	for _, r := range reqs {
		if r.GetType() != "assert-ref-snapshot-id" {
			continue
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		var a struct {
			Ref        string `json:"ref"`
			SnapshotID *int64 `json:"snapshot-id"`
		}
		if err := json.Unmarshal(b, &a); err != nil {
			return nil, err
		}
		if a.Ref != table.MainBranch {
			continue
		}
		if (a.SnapshotID == nil) != (cur == nil) || (cur != nil && *a.SnapshotID != *cur) {
			return nil, fmt.Errorf("%w: branch main moved since the commit's snapshot was read", table.ErrCommitFailed)
		}
		return reqs, nil
	}
	return append(slices.Clone(reqs), table.AssertRefSnapshotID(table.MainBranch, cur)), nil
}

// fenced loads table ident through a fencedCatalog with req.
func (d *Destination) fenced(ctx context.Context, ident table.Identifier, req *fenceRequirement) (*table.Table, error) {
	req.Where = d.reading()
	fc := &fencedCatalog{inner: d.cat, req: req, atomic: d.cat.CatalogType() == catalog.SQL}
	return fc.LoadTable(ctx, ident)
}

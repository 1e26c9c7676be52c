package iceberg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/compaction"
)

// MaintainOptions selects what Maintain does. The zero value expires
// nothing, deletes no orphans and compacts nothing.
type MaintainOptions struct {
	// ExpireOlderThan expires snapshots older than this (keeping at
	// least RetainLast, default 1, and the current one). 0 skips expiry.
	ExpireOlderThan time.Duration
	// RetainLast is the number of most recent snapshots expiry keeps.
	// Default 1.
	RetainLast int
	// OrphansOlderThan deletes files under the table's location that no
	// snapshot refers to and that are older than this: data files of
	// epochs never committed (an attempt died between PreCommit and the
	// checkpoint), and metadata of commits that lost a race. Keep it well
	// above the longest time between a PreCommit and the commit that
	// adds its files: Config.Grouping's Interval plus an epoch (files
	// waiting for their group are in no snapshot yet), an Overwrite
	// table's whole refresh, or the time a crashed pipeline may stay
	// down, whichever is longest, or files of a recoverable epoch are
	// lost. 0 skips it.
	OrphansOlderThan time.Duration
	// Compact rewrites small data files (and the deletes that
	// apply to them) into files of about TargetFileBytes (default the
	// Destination's Config.TargetFileBytes) with iceberg-go's compaction.
	Compact         bool
	TargetFileBytes int64

	// keep are files orphan removal leaves (a writer's waiting files).
	keep map[string]bool
	// pipeline, when set, limits the run to the tables carrying that
	// pipeline's markers (a writer's schedule: another pipeline sharing
	// the namespace has waiting files this writer doesn't know).
	pipeline string
}

// TableReport is what Maintain did to one table.
type TableReport struct {
	Table            string
	ExpiredSnapshots int
	OrphansDeleted   int
	FilesRewritten   int
	FilesWritten     int
}

// Maintain runs snapshot expiry, compaction and orphan cleanup, as opts
// says, on every table of the Destination's namespace, one after the
// other; the host calls it when it likes (a cron, between syncs, or while
// a pipeline runs: a Commit that races it reloads and redoes its
// transaction). The pipeline markers survive them, so exactly-once
// bookkeeping does: table properties are not touched, and markers kept in
// snapshot summaries (Config.Fence) are carried into the compaction's
// snapshot and, before an expiry, onto the current snapshot. It returns the
// reports of the tables it finished and the first error.
func (d *Destination) Maintain(ctx context.Context, opts MaintainOptions) ([]TableReport, error) {
	if opts.RetainLast <= 0 {
		opts.RetainLast = 1
	}
	if opts.TargetFileBytes <= 0 {
		opts.TargetFileBytes = d.targetBytes
	}
	ok, err := d.cat.CheckNamespaceExists(ctx, d.ns)
	if err != nil || !ok {
		return nil, err
	}
	var idents []table.Identifier
	if opts.pipeline != "" {
		tbls, err := d.pipelineTables(ctx, opts.pipeline)
		if err != nil {
			return nil, err
		}
		for _, tbl := range tbls {
			idents = append(idents, tbl.Identifier())
		}
	} else {
		for ident, err := range d.cat.ListTables(ctx, d.ns) {
			if err != nil {
				return nil, fmt.Errorf("iceberg: list tables of %v: %w", d.ns, err)
			}
			idents = append(idents, ident)
		}
	}
	var out []TableReport
	for _, ident := range idents {
		r, err := d.maintain(ctx, ident, opts)
		if err != nil {
			return out, fmt.Errorf("iceberg: maintain %v: %w", ident, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func (d *Destination) maintain(ctx context.Context, ident table.Identifier, opts MaintainOptions) (TableReport, error) {
	r := TableReport{Table: ident[len(ident)-1]}
	if opts.Compact {
		if err := d.retry(ctx, ident, func(tbl *table.Table) error {
			cfg := compaction.DefaultConfig()
			cfg.TargetFileSizeBytes = opts.TargetFileBytes
			cfg.MinFileSizeBytes = opts.TargetFileBytes * 3 / 4
			cfg.MaxFileSizeBytes = opts.TargetFileBytes * 9 / 5
			cfg.MinInputFiles = 2
			plan, err := compaction.Analyze(ctx, tbl, cfg)
			if err != nil {
				return err
			}
			if len(plan.Groups) == 0 {
				return nil
			}
			groups := make([]table.CompactionTaskGroup, len(plan.Groups))
			for i, g := range plan.Groups {
				groups[i] = table.CompactionTaskGroup{PartitionKey: g.PartitionKey, Tasks: g.Tasks, TotalSizeBytes: g.TotalSizeBytes}
			}
			// Position-delete files that name rows of several data files
			// are dead once every file they name is rewritten: removed in
			// the same snapshot (iceberg-go removes deletion vectors and
			// deletes of one file by itself).
			rewritten := map[string]struct{}{}
			for _, g := range plan.Groups {
				for _, t := range g.Tasks {
					rewritten[t.File.FilePath()] = struct{}{}
				}
			}
			fsys, err := tbl.FS(ctx)
			if err != nil {
				return err
			}
			dead, err := compaction.CollectDeadPositionDeletes(ctx, fsys, tbl.CurrentSnapshot(), rewritten)
			if err != nil {
				return err
			}
			// Where the markers live in snapshot summaries, the rewrite's
			// snapshot carries them over, and requires the table to be
			// still at the snapshot they were read from.
			var carry map[string]string
			if d.fence != FenceProperties {
				if carry = carriedMarkers(tbl.Metadata()); len(carry) > 0 {
					tbl = d.pinned(tbl)
				}
			}
			res, err := tbl.RewriteDataFiles(ctx, groups, table.RewriteDataFilesOptions{ExtraDeleteFilesToRemove: dead, SnapshotProps: carry})
			if err != nil {
				return err
			}
			r.FilesRewritten, r.FilesWritten = res.RemovedDataFiles, res.AddedDataFiles
			return nil
		}); err != nil {
			return r, fmt.Errorf("compact: %w", err)
		}
	}
	if opts.ExpireOlderThan > 0 && d.fence != FenceProperties {
		// Expiry keeps the current snapshot: it must carry the markers
		// (another writer's snapshot may be on top of the one that does).
		if err := d.retry(ctx, ident, func(tbl *table.Table) error {
			carry := carriedMarkers(tbl.Metadata())
			cur := tbl.CurrentSnapshot()
			if len(carry) == 0 || cur == nil || cur.Summary != nil && hasAll(cur.Summary.Properties, carry) {
				return nil
			}
			tbl = d.pinned(tbl)
			tx := tbl.NewTransaction()
			if err := markerSnapshot(ctx, tbl, tx, carry); err != nil {
				return err
			}
			_, err := tx.Commit(ctx)
			return err
		}); err != nil {
			return r, fmt.Errorf("carry the markers before expiry: %w", err)
		}
	}
	if opts.ExpireOlderThan > 0 {
		if err := d.retry(ctx, ident, func(tbl *table.Table) error {
			before := len(tbl.Metadata().Snapshots())
			tx := tbl.NewTransaction()
			if err := tx.ExpireSnapshots(table.WithOlderThan(opts.ExpireOlderThan), table.WithRetainLast(opts.RetainLast)); err != nil {
				return err
			}
			next, err := tx.Commit(ctx)
			if err != nil {
				return err
			}
			r.ExpiredSnapshots = before - len(next.Metadata().Snapshots())
			return nil
		}); err != nil {
			return r, fmt.Errorf("expire snapshots: %w", err)
		}
	}
	if opts.OrphansOlderThan > 0 {
		tbl, err := d.cat.LoadTable(ctx, ident)
		if err != nil {
			return r, err
		}
		cleanup := []table.OrphanCleanupOption{table.WithFilesOlderThan(opts.OrphansOlderThan)}
		var kept atomic.Int64
		if len(opts.keep) > 0 {
			fsys, err := tbl.FS(ctx)
			if err != nil {
				return r, err
			}
			cleanup = append(cleanup, table.WithDeleteFunc(func(path string) error {
				if opts.keep[path] {
					kept.Add(1)
					return nil
				}
				return fsys.Remove(path)
			}))
		}
		res, err := tbl.DeleteOrphanFiles(ctx, cleanup...)
		if err != nil {
			return r, fmt.Errorf("delete orphan files: %w", err)
		}
		r.OrphansDeleted = len(res.DeletedFiles) - int(kept.Load())
	}
	d.log.Info("iceberg: table maintained", "table", r.Table, "expired", r.ExpiredSnapshots,
		"orphans", r.OrphansDeleted, "rewritten", r.FilesRewritten, "written", r.FilesWritten)
	return r, nil
}

// retry runs op on a freshly loaded table until it does not lose a race,
// up to Config.MaxCommitTries times.
func (d *Destination) retry(ctx context.Context, ident table.Identifier, op func(*table.Table) error) error {
	var err error
	for k := range d.maxTries {
		if k > 0 {
			if werr := conflictWait(ctx, k); werr != nil {
				return errors.Join(werr, err)
			}
		}
		var tbl *table.Table
		if tbl, err = d.cat.LoadTable(ctx, ident); err != nil {
			return err
		}
		if err = op(tbl); err == nil || !isConflict(err) {
			return err
		}
	}
	return errors.Join(errors.New("lost the race too often"), err)
}

// Maintenance has lane 0's writer run Maintain by itself, every Every,
// from the commit goroutine between two Commits (Config.Maintenance).
type Maintenance struct {
	// Every is the time between runs, measured by lane 0's Commit calls:
	// a Commit at least Every after the previous run (or the writer's
	// Recover) runs Maintain once its table commits are done. Required
	// (> 0).
	Every time.Duration
	// Options says what each run does, to the tables that carry this
	// writer's pipeline's markers only (another pipeline sharing the
	// namespace has files waiting that this writer doesn't know). Its
	// OrphansOlderThan must exceed the longest epoch (files of the epochs
	// being written are in no snapshot or record yet); the files waiting
	// for their group, which the writer knows, are never removed.
	Options MaintainOptions
}

// maybeMaintain runs the Destination's Maintenance when it is due
// (commit goroutine, after a Commit). A failure is logged, not returned:
// the epoch is committed, and the next run tries again.
func (w *writer) maybeMaintain(ctx context.Context, byTable map[string]*epochFiles) {
	m := w.d.maintenance
	if m == nil || time.Since(w.maintained) < m.Every {
		return
	}
	w.maintained = time.Now()
	keep := map[string]bool{}
	for _, f := range byTable {
		for _, fd := range append(slices.Clone(f.data), f.deletes...) {
			keep[fd.Path] = true
		}
	}
	opts := m.Options
	opts.keep, opts.pipeline = keep, w.pipeline
	if _, err := w.d.Maintain(ctx, opts); err != nil {
		w.d.log.Warn("iceberg: scheduled maintenance failed; it runs again in Config.Maintenance.Every",
			"pipeline", w.pipeline, "err", err)
	}
}

// carriedMarkers are the markers of every pipeline found in the
// summaries of meta's current snapshot and its ancestors, each from the
// newest snapshot that carries it.
func carriedMarkers(meta table.Metadata) map[string]string {
	out := map[string]string{}
	seen := map[string]bool{}
	for s := meta.CurrentSnapshot(); s != nil; {
		if s.Summary != nil {
			here := map[string]bool{}
			for k := range s.Summary.Properties {
				if p, ok := markerPipeline(k); ok && !seen[p] {
					here[p] = true
				}
			}
			for k, v := range s.Summary.Properties {
				if p, ok := markerPipeline(k); ok && here[p] {
					out[k] = v
				}
			}
			for p := range here {
				seen[p] = true
			}
		}
		if s.ParentSnapshotID == nil {
			break
		}
		s = meta.SnapshotByID(*s.ParentSnapshotID)
	}
	return out
}

// markerPipeline returns the pipeline of marker key k
// (openetl.{pipeline}.epoch, .generation or .fence). The pipeline may
// have dots of its own (a shard's key, etl.ShardKey); the field has none.
func markerPipeline(k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, "openetl.")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return "", false
	}
	p, field := rest[:i], rest[i+1:]
	if field != "epoch" && field != "generation" && field != "fence" {
		return "", false
	}
	return p, true
}

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// pinnedCatalog commits a table only while the table's branch main is
// still at pin: a commit that carries markers read from that snapshot
// must not be replayed on another (it would write older markers over
// newer ones, a raised fence included). A lost race is reported as a
// plain conflict, which iceberg-go does not replay; Maintain's retry
// reloads the table and starts over.
type pinnedCatalog struct {
	inner table.CatalogIO
	pin   *int64
}

// pinned returns tbl committing through a pinnedCatalog at its current
// snapshot.
func (d *Destination) pinned(tbl *table.Table) *table.Table {
	var pin *int64
	if s := tbl.CurrentSnapshot(); s != nil {
		id := s.SnapshotID
		pin = &id
	}
	c := &pinnedCatalog{inner: d.cat, pin: pin}
	return table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), tbl.FS, c)
}

func (c *pinnedCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	return c.inner.LoadTable(ctx, ident)
}

func (c *pinnedCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	reqs = append(slices.Clone(reqs), table.AssertRefSnapshotID(table.MainBranch, c.pin))
	meta, loc, err := c.inner.CommitTable(ctx, ident, reqs, updates)
	if err != nil && (errors.Is(err, table.ErrCommitFailed) || isConflict(err)) {
		return nil, "", fmt.Errorf("requirement failed: branch main moved from snapshot %v: %v", c.pin, err)
	}
	return meta, loc, err
}

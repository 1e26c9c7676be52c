package iceberg

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// transaction). The pipeline markers are table properties, which none of
// these touch, so exactly-once bookkeeping survives them. It returns the
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
			res, err := tbl.RewriteDataFiles(ctx, groups, table.RewriteDataFilesOptions{ExtraDeleteFilesToRemove: dead})
			if err != nil {
				return err
			}
			r.FilesRewritten, r.FilesWritten = res.RemovedDataFiles, res.AddedDataFiles
			return nil
		}); err != nil {
			return r, fmt.Errorf("compact: %w", err)
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
	for range d.maxTries {
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

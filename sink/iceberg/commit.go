package iceberg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"time"

	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// Commit applies epoch: for each table with files in committables that
// are not in the table yet (the epoch's and, carried by the lanes, those
// of earlier epochs Grouping left waiting), when the table's group is due
// (see Grouping; Overwrite tables wait for Finish), one Iceberg commit
// adds the files (an append snapshot; for Merge tables a row-delta
// snapshot per epoch with its deletes, in epoch order; position deletes
// are found and written here, see the package doc) and sets
// the pipeline's markers (in the table's properties or its snapshot
// summaries, Config.Fence): the epoch (every
// file of that epoch and before is in the table), the generation, and
// the fence raised to this generation. The commit requires, checked by
// the catalog against the table's current metadata, that the fence is
// not above this writer's generation and that the table does not already
// record an epoch at or after the oldest file it adds: files the table
// records are skipped, which makes Commit idempotent, from this process
// or another. It fails with an error wrapping sink.ErrFenced when a
// newer generation has recovered.
//
// A commit that loses a race (another writer moved the table) reloads the
// table and redoes its transaction, up to Config.MaxCommitTries times.
// Tables are applied one by one: after a failure some may be applied and
// others not, and calling Commit again (or Recover, then Commit) finishes
// the rest.
//
// Commit may run while the lane's goroutine writes and pre-commits later
// epochs: they share only the catalog and the record of which epochs
// tables hold.
func (w *writer) Commit(ctx context.Context, epoch uint64, committables []sink.Committable) error {
	byTable, err := w.decodeAll(epoch, committables)
	if err != nil {
		return err
	}
	// The epoch's record is HEAD: Close may apply its files.
	w.last = &lastCommit{epoch: epoch, byTable: byTable}
	if err := w.applyAll(ctx, epoch, byTable, applyDue); err != nil {
		return err
	}
	w.maybeMaintain(ctx, byTable)
	w.d.log.Debug("iceberg: epoch committed", "pipeline", w.pipeline, "epoch", epoch, "tables", len(byTable))
	return nil
}

// applyLevel says what applyAll applies.
type applyLevel uint8

const (
	// applyDue: every table but Overwrite ones, once one table's group
	// is due (Commit).
	applyDue applyLevel = iota
	// applyGroups: every table but Overwrite ones, due or not (Close
	// after a read that did not end: a refresh goes on).
	applyGroups
	// applyFinal: every table (a Final epoch: Finish, or Recover of a
	// Final head).
	applyFinal
)

// applyAll applies the files of epoch's committables not yet in their
// tables, as level says. Committing every waiting table together keeps
// the tables' epoch markers equal (but for a crash between two tables'
// commits): were a waiting file lost and the log rewound to before it,
// the rewind would otherwise pass epochs another table had already
// applied.
func (w *writer) applyAll(ctx context.Context, epoch uint64, byTable map[string]*epochFiles, level applyLevel) error {
	gen := checkpoint.Generation(w.gen.Load())
	now := time.Now()
	names := slices.Sorted(maps.Keys(byTable))
	final := level == applyFinal
	force := level >= applyGroups
	vis := epoch // lowered by each table's files still waiting
	if len(names) == 0 && level == applyDue {
		// An epoch without files changes no table, but a zombie must
		// not be told it committed one (its runner would go on, and
		// acknowledge the source).
		if err := w.checkFence(ctx, gen); err != nil {
			return err
		}
	}
	if !force {
		waiting := 0
		for _, name := range names {
			tbl, err := w.d.cat.LoadTable(ctx, w.d.ident(name))
			if err != nil {
				return fmt.Errorf("iceberg: load table %v: %w", w.d.ident(name), err)
			}
			m, _, err := w.d.markersOf(tbl.Metadata(), w.pipeline)
			if err != nil {
				return err
			}
			if m.fence > gen {
				// A zombie learns it is one even when it has nothing to
				// commit (the commit itself checks it atomically).
				return fmt.Errorf("iceberg: pipeline %q: generation %d is fenced by generation %d: %w",
					w.pipeline, gen, m.fence, sink.ErrFenced)
			}
			p := byTable[name].after(m.epoch)
			if p.empty() {
				w.d.noteApplied(w.pipeline, name, m.epoch)
				delete(w.waitSince, name)
				continue
			}
			vis = min(vis, p.minEpoch-1)
			if w.mode(name) == sink.Overwrite {
				continue
			}
			waiting++
			if w.due(name, p, now) {
				force = true
			}
		}
		if !force {
			if waiting > 0 {
				w.d.log.Debug("iceberg: epoch waits for its group", "pipeline", w.pipeline, "epoch", epoch, "tables", waiting)
			}
			w.visible.Store(vis)
			return nil
		}
	}
	vis = epoch
	for _, name := range names {
		from, err := w.apply(ctx, epoch, gen, name, byTable[name], final)
		if err != nil {
			return err
		}
		if from > 0 {
			vis = min(vis, from-1)
		}
	}
	w.visible.Store(vis)
	return nil
}

// checkFence fails with an error wrapping sink.ErrFenced when one of
// the pipeline's tables (those Recover raised the fence on, and those
// this writer committed to, the first that still exists) has a fence
// above gen. Recover raises the fence on every table of the pipeline
// before it returns, so one is enough. With no table yet there is no
// fence to check (and no data of the pipeline a zombie could change).
func (w *writer) checkFence(ctx context.Context, gen checkpoint.Generation) error {
	for _, ident := range w.fenceAt {
		tbl, err := w.d.cat.LoadTable(ctx, ident)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			continue
		}
		if err != nil {
			return fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		m, _, err := w.d.markersOf(tbl.Metadata(), w.pipeline)
		if err != nil {
			return err
		}
		if m.fence > gen {
			return fmt.Errorf("iceberg: pipeline %q: generation %d is fenced by generation %d (table %v): %w",
				w.pipeline, gen, m.fence, ident, sink.ErrFenced)
		}
		return nil
	}
	return nil
}

// Visible implements sink.Visibility: the newest epoch every file of
// which, and of every epoch before it, is in its table, as the last
// Recover, Commit, Finish or Close of this writer found: the epoch
// they were given, less the epochs whose files still wait for their
// group (or, in an Overwrite table, for Finish). Those may still be
// lost (their files removed before the group is committed), and Recover
// then reports them Lost; the runner acknowledges to the source only
// the positions of visible epochs.
func (w *writer) Visible() uint64 { return w.visible.Load() }

// apply commits one table's files of epoch not yet in it (an Overwrite
// table's only when final). It returns the oldest epoch of files it
// left waiting (an Overwrite table's refresh), 0 for none.
func (w *writer) apply(ctx context.Context, epoch uint64, gen checkpoint.Generation, name string, files *epochFiles, final bool) (uint64, error) {
	ident := w.d.ident(name)
	mode := w.mode(name)
	req := &fenceRequirement{Type: "openetl-fence", Pipeline: w.pipeline, Generation: uint64(gen), Where: w.d.reading()}
	var lastErr error
	// refused is the error of a commit with the markers as table
	// properties, under FenceAuto: it is tried again without them.
	var refused error
	lost := 0 // races lost in a row
	for try := 0; try < w.d.maxTries; try++ {
		if lost > 0 {
			if err := conflictWait(ctx, lost); err != nil {
				return 0, fmt.Errorf("iceberg: table %v: commit of epoch %d: %w (after losing a race: %w)", ident, epoch, err, lastErr)
			}
		}
		req.Epoch, req.Pin = 0, nil
		tbl, err := w.d.fenced(ctx, ident, req)
		if err != nil {
			return 0, fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		if err := req.Validate(tbl.Metadata()); err != nil {
			return 0, err
		}
		m, _, err := w.d.markersOf(tbl.Metadata(), w.pipeline)
		if err != nil {
			return 0, err
		}
		p := files.after(m.epoch)
		if p.empty() {
			w.d.noteApplied(w.pipeline, name, m.epoch)
			delete(w.waitSince, name)
			return 0, nil
		}
		if !final && mode == sink.Overwrite {
			return p.minEpoch, nil // the refresh goes on
		}
		// upTo is the epoch the commit applies the table up to: epoch,
		// or, for a group of a format v3 table with deletion vectors,
		// only its oldest epoch (see commitsPerEpoch); the loop then
		// commits the next.
		upTo := epoch
		if gs := p.byEpoch(); len(gs) > 1 && commitsPerEpoch(tbl, p) {
			p, upTo = gs[0], gs[0].minEpoch
		}
		// Checked here to skip work; the catalog checks it again,
		// atomically with the commit.
		req.Epoch = p.minEpoch
		if err := req.Validate(tbl.Metadata()); err != nil {
			if errors.Is(err, errApplied) {
				continue
			}
			return 0, err
		}
		// A file that is gone (removed by a newer attempt's cleanup, or
		// by a lifecycle rule) must not be added: readers would fail on
		// it. The commit fails; the next Recover reports the epoch Lost.
		if missing, err := firstMissing(ctx, tbl, p); err != nil {
			return 0, err
		} else if missing != "" {
			return 0, fmt.Errorf("iceberg: table %v: epoch %d: data file %s is gone: not committing it", ident, epoch, missing)
		}
		// The markers each snapshot of the commit records in its summary
		// (Config.Fence): the epoch up to which its files are in; the
		// fence may be written there, as the commit requires the table to
		// be at the snapshot it was read from.
		var marks func(uint64) ice.Properties
		if w.d.fence != FenceProperties {
			marks = func(e uint64) ice.Properties {
				return markerProps(w.pipeline, markers{epoch: e, gen: gen, fence: max(gen, m.fence)})
			}
		}
		tx := tbl.NewTransaction()
		st, err := w.stageAll(ctx, name, tbl, tx, mode, upTo, uint64(gen), p, marks)
		if err != nil {
			st.abort(ctx, w, name, tbl, true)
			return 0, fmt.Errorf("iceberg: table %v: stage epoch %d: %w", ident, epoch, err)
		}
		if st != nil && st.idx != nil {
			// The positions hold for this snapshot only.
			pin := currentSnapshot(tbl)
			req.Pin = &pin
		}
		var props ice.Properties
		if !w.d.summariesOnly() && refused == nil {
			props = ice.Properties{
				epochKey(w.pipeline): strconv.FormatUint(upTo, 10),
				genKey(w.pipeline):   strconv.FormatUint(uint64(gen), 10),
			}
			// Only where the fence check is atomic with the commit (SQL
			// catalogs): elsewhere a zombie's commit racing Recover's
			// raise could write the fence property back down, so only
			// Recover writes it.
			if w.d.cat.CatalogType() == catalog.SQL {
				props[fenceKey(w.pipeline)] = strconv.FormatUint(uint64(max(gen, m.fence)), 10)
			}
			if err := tx.SetProperties(props); err != nil {
				st.abort(ctx, w, name, tbl, true)
				return 0, fmt.Errorf("iceberg: table %v: set markers: %w", ident, err)
			}
		}
		next, err := tx.Commit(ctx)
		if err != nil {
			// The position-delete files are removed only when the commit
			// surely did not happen; after another error the catalog may
			// have taken it, and they would then be the table's.
			clean := !errors.Is(err, errOutcomeUnknown) &&
				(isConflict(err) || errors.Is(err, errMoved) || errors.Is(err, errApplied) || errors.Is(err, sink.ErrFenced))
			st.abort(ctx, w, name, tbl, clean)
		}
		switch {
		case err == nil:
			if refused != nil {
				w.d.useSummaries(ident, "refused", refused)
			} else if props != nil && w.d.fence == FenceAuto && !propsKept(next.Metadata(), props) {
				w.d.useSummaries(ident, "dropped", nil)
			}
			st.done(ctx, w, name, next, p)
			w.d.noteApplied(w.pipeline, name, upTo)
			if !slices.ContainsFunc(w.fenceAt, func(id table.Identifier) bool { return slices.Equal(id, ident) }) {
				w.fenceAt = append(w.fenceAt, ident)
			}
			if upTo < epoch {
				try, lost = -1, 0 // the next epoch's commit, with tries of its own
				continue
			}
			delete(w.waitSince, name)
			w.d.log.Debug("iceberg: table committed", "pipeline", w.pipeline, "table", name, "epoch", epoch,
				"from_epoch", p.minEpoch, "files", len(p.data), "deletes", len(p.deletes), "rows", p.rows)
			return 0, nil
		case errors.Is(err, errApplied):
			lastErr = err
			continue // another committer added some of the files: recompute
		case errors.Is(err, errMoved):
			lastErr = err
			lost++
			w.d.log.Info("iceberg: table moved while its position deletes were found; finding them again",
				"pipeline", w.pipeline, "table", name, "epoch", epoch)
			continue
		case errors.Is(err, sink.ErrFenced):
			return 0, err
		case isConflict(err):
			lastErr = err
			lost++
			w.d.log.Warn("iceberg: commit lost a race; reloading the table and redoing it",
				"pipeline", w.pipeline, "table", name, "epoch", epoch, "try", try+1, "err", err)
			continue
		case props != nil && w.d.fence == FenceAuto && w.d.mayRefuse(err):
			// Does the catalog refuse the properties? The commit is tried
			// once more with the markers in the snapshot summaries only
			// (they were there too: had the catalog taken the commit after
			// all, the next try finds the epoch applied).
			refused, lastErr = err, err
			w.d.log.Warn("iceberg: commit failed; trying it again without the pipeline's table properties",
				"pipeline", w.pipeline, "table", name, "epoch", epoch, "err", err)
			continue
		default:
			return 0, fmt.Errorf("iceberg: table %v: commit epoch %d: %w", ident, epoch, err)
		}
	}
	return 0, fmt.Errorf("iceberg: table %v: commit of epoch %d lost the race %d times: %w", ident, epoch, w.d.maxTries, lastErr)
}

// commitsPerEpoch reports whether a group of epochs p is committed to
// tbl one catalog commit per epoch: on a format v3 table, where
// deletion vectors find the rows they delete, as a later epoch of the
// group may delete rows of a data file an earlier one adds, and
// iceberg-go v0.7.0 refuses a deletion vector whose data file is not in
// the table before the commit ("referenced data files missing"), even
// when the same transaction adds it.
func commitsPerEpoch(tbl *table.Table, p pending) bool {
	_, locating := p.locates()
	return locating && tbl.Metadata().Version() >= 3
}

// staged is what stage did besides adding to the transaction: the key
// index it staged changes in and the position-delete files it wrote.
type staged struct {
	idx   *keyIndex
	files []ice.DataFile
}

// abort drops the key index it changed, which the next commit rebuilds,
// and, when remove, the position-delete files (best effort; Collect
// removes those left).
func (st *staged) abort(ctx context.Context, w *writer, name string, tbl *table.Table, remove bool) {
	if st == nil {
		return
	}
	if st.idx != nil && w.indexes[name] == st.idx {
		delete(w.indexes, name)
	}
	if !remove || len(st.files) == 0 {
		return
	}
	if fsys, err := tbl.FS(ctx); err == nil {
		for _, f := range st.files {
			_ = fsys.Remove(f.FilePath())
		}
	}
}

// done applies the staged index changes once next is committed, and
// removes the files of keys deleted for good and of patches, which no
// snapshot refers to and which the table's epoch marker now says are
// applied (best effort; Collect and Maintain remove those left).
func (st *staged) done(ctx context.Context, w *writer, name string, next *table.Table, p pending) {
	if st == nil || st.idx == nil {
		return
	}
	st.idx.snapshot = currentSnapshot(next)
	fsys, err := next.FS(ctx)
	if err != nil {
		return
	}
	for _, fd := range p.deletes {
		if len(fd.Locate) > 0 || fd.Patch {
			_ = fsys.Remove(fd.Path)
		}
	}
}

// locates reports whether some of p's files remove older rows by
// position, and the key's field IDs.
func (p pending) locates() ([]int, bool) {
	for _, fd := range append(slices.Clone(p.data), p.deletes...) {
		if len(fd.Locate) > 0 {
			return fd.Locate, true
		}
	}
	return nil, false
}

// stage adds p's files to tx: one append snapshot, one row-delta
// snapshot per epoch when there are deletes (the deletes of an epoch
// must apply to rows of earlier epochs, i.e. lower data sequence
// numbers), or for Overwrite one snapshot replacing every data file of
// the table. An epoch whose files are marked Locate gets position
// deletes (deletion vectors on a v3 table), found in table name's key
// index and written here. On a v3 table appends are row deltas too.
func (w *writer) stage(ctx context.Context, name string, tbl *table.Table, tx *table.Transaction, mode sink.Mode, epoch, gen uint64, p pending, marks func(uint64) ice.Properties) (*staged, error) {
	spec, sc := tbl.Spec(), tbl.Schema()
	props := w.snapshotProps(epoch, gen)
	if marks != nil {
		maps.Copy(props, marks(epoch))
	}
	if mode == sink.Overwrite {
		data, err := dataFiles(p.data, spec, sc)
		if err != nil {
			return nil, err
		}
		old, err := currentDataFiles(ctx, tbl)
		if err != nil {
			return nil, err
		}
		props["openetl.overwrite"] = "true"
		return nil, tx.ReplaceDataFilesWithDataFiles(ctx, old, data, props)
	}
	ids, locating := p.locates()
	v3 := tbl.Metadata().Version() >= 3
	if len(p.deletes) == 0 && !locating {
		data, err := dataFiles(p.data, spec, sc)
		if err != nil {
			return nil, err
		}
		if v3 {
			// iceberg-go's AddDataFiles wants v3 files to carry
			// first_row_id; a row delta assigns the snapshot's.
			return nil, tx.NewRowDelta(props).AddRows(data...).Commit(ctx)
		}
		return nil, tx.AddDataFiles(ctx, data, props)
	}
	st := &staged{}
	var fsys iceio.IO
	if locating {
		x, err := w.keyIndex(ctx, name, tbl, ids)
		if err != nil {
			return nil, err
		}
		if fsys, err = tbl.FS(ctx); err != nil {
			return nil, err
		}
		st.idx = x
	}
	groups := p.byEpoch()
	for i, e := range groups {
		data, err := dataFiles(e.data, spec, sc)
		if err != nil {
			return st, err
		}
		_, byPos := e.locates()
		var deletes, replaced []ice.DataFile
		if !byPos {
			if deletes, err = dataFiles(e.deletes, spec, sc); err != nil {
				return st, err
			}
		}
		if st.idx != nil {
			dels, err := locate(ctx, fsys, st.idx, e, data, !byPos)
			if err != nil {
				return st, err
			}
			switch {
			case byPos && v3:
				// Format v3: deletion vectors, one per data file.
				added, old, err := w.writeDeletionVectors(ctx, tbl, st.idx, dels)
				st.files = append(st.files, added...)
				if err != nil {
					return st, err
				}
				deletes, replaced = added, old
			case byPos:
				pos, err := w.writePositionDeletes(ctx, tbl, st.idx, dels)
				st.files = append(st.files, pos...)
				if err != nil {
					return st, err
				}
				deletes = pos
			}
		}
		// Each snapshot's markers say what it holds: a rollback to one
		// (takeBack) must not claim the group's later epochs. The last
		// holds every file up to epoch, which takeBack looks for even
		// when the epoch has no file of the table (its files waited).
		me := e.minEpoch
		if i == len(groups)-1 {
			me = epoch
		}
		sprops := w.snapshotProps(me, gen)
		if marks != nil {
			maps.Copy(sprops, marks(me))
		}
		if len(data) == 0 && len(deletes) == 0 && len(replaced) == 0 {
			// Only keys deleted for good that have no row: nothing to
			// add or delete, but the epoch's snapshot records it.
			if err := markerSnapshot(ctx, tbl, tx, sprops); err != nil {
				return st, err
			}
			continue
		}
		rd := tx.NewRowDelta(sprops).AddRows(data...).AddDeletes(deletes...)
		if len(replaced) > 0 {
			rd.RemoveDeletes(replaced...)
		}
		if err := rd.Commit(ctx); err != nil {
			return st, err
		}
	}
	return st, nil
}

// currentDataFiles lists the data files of tbl's current snapshot.
func currentDataFiles(ctx context.Context, tbl *table.Table) ([]ice.DataFile, error) {
	if tbl.CurrentSnapshot() == nil {
		return nil, nil
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("list data files: %w", err)
	}
	out := make([]ice.DataFile, 0, len(tasks))
	for _, t := range tasks {
		if len(t.DeleteFiles) > 0 || len(t.EqualityDeleteFiles) > 0 || len(t.DeletionVectorFiles) > 0 {
			return nil, fmt.Errorf("data file %s has delete files: an overwrite table only gets appends (was it written in merge mode?)", t.File.FilePath())
		}
		out = append(out, t.File)
	}
	return out, nil
}

func dataFiles(fs []fileDesc, spec ice.PartitionSpec, sc *ice.Schema) ([]ice.DataFile, error) {
	out := make([]ice.DataFile, 0, len(fs))
	for _, f := range fs {
		df, err := f.dataFile(spec, sc)
		if err != nil {
			return nil, err
		}
		out = append(out, df)
	}
	return out, nil
}

// Recover raises the pipeline's fence to gen on every table of the
// namespace that the pipeline has written (it has the pipeline's
// markers), each with a commit that requires the fence not to
// be above gen, so two attempts recovering at once can't lower it; it
// fails with an error wrapping sink.ErrFenced when a newer generation has
// recovered. Then it reports what became of head's epoch: Applied when
// every file its committables list (its own and those carried from
// earlier epochs) is in its table by the table's epoch marker (or it had
// no files, or head is nil), Recoverable when every file not yet in its
// table is still there, Lost otherwise. Files still waiting are carried
// on by lane 0 into its next committables (see Grouping), so a group, or
// an Overwrite table's refresh, goes on across attempts — unless head is
// Final (it ended a Sync that read everything, and the process died
// before Finish): then Recover commits them all, as Finish would have,
// and reports Applied, and this attempt starts a new refresh.
//
// Before it raises any fence it fails with a *sink.AheadError when a
// table's epoch marker of the pipeline is after head's epoch (any epoch
// when head is nil): the checkpoint log was lost or replaced, and the
// tables hold epochs it doesn't know.
//
// Tables created after Recover start with no fence; a zombie committing
// to such a table can still not apply an epoch twice (the epoch marker is
// checked atomically with each commit).
func (w *writer) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	if gen == 0 {
		return 0, errors.New("iceberg: Recover with generation 0")
	}
	if err := w.raiseFences(ctx, gen, head); err != nil {
		return 0, err
	}
	w.gen.Store(uint64(gen))
	out, byTable, err := w.outcome(ctx, head)
	if err != nil {
		return 0, err
	}
	if out == sink.Recoverable && head.Final {
		// The head ended a read (a Sync) and the process died before
		// Finish: finish it here, so that this attempt's reads start a
		// new refresh rather than adding to that one.
		if err := w.applyAll(ctx, head.Epoch, byTable, applyFinal); err != nil {
			return 0, err
		}
		w.inheritMu.Lock()
		w.inherit = nil
		w.inheritMu.Unlock()
		out = sink.Applied
	}
	var epoch uint64
	if head != nil {
		epoch = head.Epoch
	}
	w.d.log.Info("iceberg: recovered", "pipeline", w.pipeline, "generation", gen, "epoch", epoch, "outcome", out.String())
	return out, nil
}

// raiseFences raises the fence on every table of the pipeline, once
// each has been checked: not fenced by a newer generation, and no epoch
// after head's.
func (w *writer) raiseFences(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) error {
	ok, err := w.d.cat.CheckNamespaceExists(ctx, w.d.ns)
	if err != nil {
		return fmt.Errorf("iceberg: namespace %v: %w", w.d.ns, err)
	}
	if !ok {
		return nil
	}
	var idents []table.Identifier
	for ident, err := range w.d.cat.ListTables(ctx, w.d.ns) {
		if err != nil {
			return fmt.Errorf("iceberg: list tables of %v: %w", w.d.ns, err)
		}
		idents = append(idents, ident)
	}
	req := &fenceRequirement{Type: "openetl-fence", Pipeline: w.pipeline, Generation: uint64(gen), Where: w.d.reading()}
	var ours []table.Identifier
	for _, ident := range idents {
		tbl, err := w.d.cat.LoadTable(ctx, ident)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			continue // dropped meanwhile
		}
		if err != nil {
			return fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		m, found, err := w.d.markersOf(tbl.Metadata(), w.pipeline)
		if errors.Is(err, errMarkersExpired) {
			// Nothing can be committed to it (Commit fails the same way).
			w.d.log.Warn("iceberg: table skipped: markers unreadable", "pipeline", w.pipeline, "table", ident, "err", err)
			continue
		}
		if err != nil {
			return err
		}
		if !found {
			continue // not a table of this pipeline
		}
		// A zombie learns it is one first: a newer generation may have
		// applied epochs after this one's head.
		if err := req.Validate(tbl.Metadata()); err != nil {
			return err
		}
		if err := sink.CheckAhead(w.pipeline, fmt.Sprintf("table %v", ident), m.epoch, m.gen, gen, head); err != nil {
			return err
		}
		ours = append(ours, ident)
	}
	for _, ident := range ours {
		if err := w.raiseFence(ctx, ident, gen, req); err != nil {
			return err
		}
	}
	w.fenceAt = ours
	return nil
}

// raiseFence raises the fence of one table: a table property, or, where
// the markers live in snapshot summaries only, a snapshot without files
// that records them with the new fence.
func (w *writer) raiseFence(ctx context.Context, ident table.Identifier, gen checkpoint.Generation, req *fenceRequirement) error {
	var lastErr, refused error
	lost := 0
	for try := 0; try < w.d.maxTries; try++ {
		if lost > 0 {
			if err := conflictWait(ctx, lost); err != nil {
				return fmt.Errorf("iceberg: table %v: raise fence: %w (after losing a race: %w)", ident, err, lastErr)
			}
		}
		tbl, err := w.d.fenced(ctx, ident, req)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			return nil // dropped meanwhile
		}
		if err != nil {
			return fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		m, found, err := w.d.markersOf(tbl.Metadata(), w.pipeline)
		if err != nil {
			return err
		}
		if !found {
			return nil // not a table of this pipeline
		}
		if err := req.Validate(tbl.Metadata()); err != nil {
			return err
		}
		if m.fence == gen {
			return nil
		}
		tx := tbl.NewTransaction()
		var props ice.Properties
		if w.d.summariesOnly() || refused != nil {
			err = markerSnapshot(ctx, tbl, tx, markerProps(w.pipeline, markers{epoch: m.epoch, gen: m.gen, fence: gen}))
		} else {
			props = ice.Properties{fenceKey(w.pipeline): strconv.FormatUint(uint64(gen), 10)}
			err = tx.SetProperties(props)
			if err == nil && w.d.fence == FenceAuto && w.d.cat.CatalogType() != catalog.SQL {
				// Where the catalog can't check the fence atomically with
				// a commit (REST), the raise also moves main: a zombie's
				// commit that checked the fence just before requires the
				// snapshot it checked (pinMain), and is refused.
				err = markerSnapshot(ctx, tbl, tx, markerProps(w.pipeline, markers{epoch: m.epoch, gen: m.gen, fence: gen}))
			}
		}
		if err != nil {
			return fmt.Errorf("iceberg: table %v: raise fence: %w", ident, err)
		}
		next, err := tx.Commit(ctx)
		switch {
		case err == nil:
			if refused != nil {
				w.d.useSummaries(ident, "refused", refused)
			} else if props != nil && w.d.fence == FenceAuto && !propsKept(next.Metadata(), props) {
				w.d.useSummaries(ident, "dropped", nil)
				continue // and raise it in a snapshot
			}
			return nil
		case errors.Is(err, sink.ErrFenced):
			return err
		case isConflict(err):
			lastErr = err
			lost++
			continue
		case props != nil && w.d.fence == FenceAuto && w.d.mayRefuse(err):
			refused, lastErr = err, err // try it in a snapshot
			continue
		default:
			return fmt.Errorf("iceberg: table %v: raise fence: %w", ident, err)
		}
	}
	return fmt.Errorf("iceberg: table %v: raising the fence lost the race %d times: %w", ident, w.d.maxTries, lastErr)
}

func (w *writer) outcome(ctx context.Context, head *checkpoint.Record) (sink.Outcome, map[string]*epochFiles, error) {
	if head == nil {
		return sink.Applied, nil, nil
	}
	if head.Pipeline != "" && head.Pipeline != w.pipeline {
		return 0, nil, fmt.Errorf("iceberg: Recover of pipeline %q given a record of pipeline %q", w.pipeline, head.Pipeline)
	}
	cs := make([]sink.Committable, len(head.Committables))
	for i, c := range head.Committables {
		cs[i] = c
	}
	byTable, err := w.decodeAll(head.Epoch, cs)
	if err != nil {
		return 0, nil, err
	}
	out := sink.Applied
	waiting := map[string]pending{}
	var had []string // tables whose marker is at head's epoch
	lost := false
	for _, name := range slices.Sorted(maps.Keys(byTable)) {
		tbl, err := w.d.cat.LoadTable(ctx, w.d.ident(name))
		if errors.Is(err, catalog.ErrNoSuchTable) {
			w.d.log.Warn("iceberg: table of the head epoch is gone", "pipeline", w.pipeline, "epoch", head.Epoch, "table", name)
			lost = true
			continue
		}
		if err != nil {
			return 0, nil, fmt.Errorf("iceberg: load table %s: %w", name, err)
		}
		m, _, err := w.d.markersOf(tbl.Metadata(), w.pipeline)
		if err != nil {
			return 0, nil, err
		}
		if m.epoch >= head.Epoch {
			had = append(had, name)
		}
		p := byTable[name].after(m.epoch)
		if p.empty() || lost {
			continue
		}
		out = sink.Recoverable
		missing, err := firstMissing(ctx, tbl, p)
		if err != nil {
			return 0, nil, err
		}
		if missing != "" {
			w.d.log.Warn("iceberg: data file of the head epoch is gone", "pipeline", w.pipeline, "epoch", head.Epoch, "path", missing)
			lost = true
			continue
		}
		waiting[name] = p
	}
	if lost {
		// The runner rewinds and writes this epoch's number again, from
		// the previous record's positions: tables that have it (a Commit
		// cut short between tables) give it back, or the new epoch of the
		// same number would be skipped as applied and its rows lost.
		for _, name := range had {
			if err := w.takeBack(ctx, name, head.Epoch); err != nil {
				return 0, nil, err
			}
		}
		w.visible.Store(0)
		return sink.Lost, nil, nil
	}
	vis := head.Epoch
	for _, p := range waiting {
		vis = min(vis, p.minEpoch-1)
	}
	w.visible.Store(vis)
	// Lane 0 carries the files still waiting into its committables, so
	// the group (or the refresh) goes on across the attempts.
	w.inheritMu.Lock()
	w.inherit = waiting
	w.inheritMu.Unlock()
	return out, byTable, nil
}

// firstMissing returns the path of the first of p's files that does not
// exist, or "".
func firstMissing(ctx context.Context, tbl *table.Table, p pending) (string, error) {
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return "", err
	}
	for _, f := range append(slices.Clone(p.data), p.deletes...) {
		st, err := fsys.Open(f.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return f.Path, nil
		}
		if err != nil {
			return "", fmt.Errorf("iceberg: open %s: %w", f.Path, err)
		}
		_ = st.Close()
	}
	return "", nil
}

// takeBack rolls table name back to the snapshot before the ones that
// applied epoch (a commit adds one snapshot marked with its epoch, or
// one per epoch with deletes, the last marked with its epoch and the
// others with theirs), and its epoch marker to
// the epoch of the newest snapshot of the pipeline before them, fenced
// like a commit. A table whose first snapshots applied epoch is emptied
// instead. Nothing happens when the table's marker is below epoch.
func (w *writer) takeBack(ctx context.Context, name string, epoch uint64) error {
	ident := w.d.ident(name)
	gen := w.gen.Load()
	mark := strconv.FormatUint(epoch, 10)
	ours := func(s *table.Snapshot) (string, bool) {
		if s == nil || s.Summary == nil || s.Summary.Properties["openetl.pipeline"] != w.pipeline {
			return "", false
		}
		return s.Summary.Properties["openetl.epoch"], true
	}
	var lastErr, refused error
	lost := 0
	for try := 0; try < w.d.maxTries; try++ {
		if lost > 0 {
			if err := conflictWait(ctx, lost); err != nil {
				return fmt.Errorf("iceberg: table %v: take back epoch %d: %w (after losing a race: %w)", ident, epoch, err, lastErr)
			}
		}
		req := &fenceRequirement{Type: "openetl-fence", Pipeline: w.pipeline, Generation: gen, Where: w.d.reading()}
		tbl, err := w.d.fenced(ctx, ident, req)
		if err != nil {
			return fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		m, _, err := w.d.markersOf(tbl.Metadata(), w.pipeline)
		if err != nil {
			return err
		}
		if m.epoch < epoch {
			return nil
		}
		// Walk back from the current snapshot past other writers' (e.g.
		// compaction) to the epoch's, then past them.
		// A parent that was expired (Maintain's ExpireOlderThan) is not
		// the table's start: emptying the table there would drop every
		// older epoch's rows, so the walk stops with an error instead.
		var expired *int64
		parent := func(s *table.Snapshot) *table.Snapshot {
			if s.ParentSnapshotID == nil {
				return nil
			}
			p := tbl.SnapshotByID(*s.ParentSnapshotID)
			if p == nil && expired == nil {
				expired = s.ParentSnapshotID
			}
			return p
		}
		s := tbl.CurrentSnapshot()
		for s != nil {
			if e, ok := ours(s); ok && e == mark {
				break
			}
			s = parent(s)
		}
		if s == nil {
			return fmt.Errorf("iceberg: table %v records epoch %d but no snapshot applied it: can't take it back", ident, epoch)
		}
		for s != nil {
			if e, ok := ours(s); !ok || e != mark {
				break
			}
			s = parent(s)
		}
		var prev uint64
		for p := s; p != nil; p = parent(p) {
			if e, ok := ours(p); ok {
				if prev, err = strconv.ParseUint(e, 10, 64); err != nil {
					return fmt.Errorf("iceberg: table %v: snapshot %d's openetl.epoch %q: %w", ident, p.SnapshotID, e, err)
				}
				break
			}
		}
		if s == nil && expired != nil {
			return fmt.Errorf("iceberg: table %v: can't take back epoch %d: the snapshot before it (%d) was expired, "+
				"so the table can't be rolled back to it (emptying the table would lose older epochs' rows); "+
				"expire snapshots only while no epoch is lost (Maintain after a clean Sync) and keep more of them (RetainLast)",
				ident, epoch, *expired)
		}
		tx := tbl.NewTransaction()
		if s != nil {
			err = tx.RollbackToSnapshot(s.SnapshotID)
		} else {
			err = tx.Delete(ctx, ice.AlwaysTrue{}, w.snapshotProps(prev, gen))
		}
		if err != nil {
			return fmt.Errorf("iceberg: table %v: take back epoch %d: %w", ident, epoch, err)
		}
		var props ice.Properties
		if !w.d.summariesOnly() && refused == nil {
			props = ice.Properties{
				epochKey(w.pipeline): strconv.FormatUint(prev, 10),
				genKey(w.pipeline):   strconv.FormatUint(gen, 10),
			}
			if err := tx.SetProperties(props); err != nil {
				return err
			}
		}
		if w.d.fence != FenceProperties {
			// The snapshot rolled back to has older markers, the fence
			// included: a snapshot on top of it records the current ones.
			mp := markerProps(w.pipeline, markers{epoch: prev, gen: checkpoint.Generation(gen), fence: m.fence})
			if err := markerSnapshot(ctx, tbl, tx, mp); err != nil {
				return fmt.Errorf("iceberg: table %v: take back epoch %d: %w", ident, epoch, err)
			}
		}
		_, err = tx.Commit(ctx)
		switch {
		case err == nil && refused != nil:
			w.d.useSummaries(ident, "refused", refused)
			fallthrough
		case err == nil:
			w.d.resetApplied(w.pipeline, name, prev)
			w.d.log.Warn("iceberg: epoch lost after some tables had it: taken back", "pipeline", w.pipeline,
				"table", name, "epoch", epoch, "marker", prev)
			return nil
		case errors.Is(err, sink.ErrFenced):
			return err
		case isConflict(err):
			lastErr = err
			lost++
			continue
		case props != nil && w.d.fence == FenceAuto && w.d.mayRefuse(err):
			refused, lastErr = err, err // try it without the properties
			continue
		default:
			return fmt.Errorf("iceberg: table %v: take back epoch %d: %w", ident, epoch, err)
		}
	}
	return fmt.Errorf("iceberg: table %v: taking back epoch %d lost the race %d times: %w", ident, epoch, w.d.maxTries, lastErr)
}

package iceberg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"

	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// Commit applies epoch: for each table with files in committables, one
// Iceberg commit adds the files (an append snapshot, or for Merge tables
// a row-delta snapshot with the equality deletes) and sets the
// pipeline's markers in the table's properties: the epoch, the
// generation, and the fence raised to this generation. The commit
// requires, checked by the catalog against the table's current metadata,
// that the fence is not above this writer's generation and that the table
// does not already record the epoch: a table that does is skipped, which
// makes Commit idempotent, from this process or another. It fails with an
// error wrapping sink.ErrFenced when a newer generation has recovered.
//
// A commit that loses a race (another writer moved the table) reloads the
// table and redoes its transaction, up to Config.MaxCommitTries times.
// Tables are applied one by one: after a failure some may be applied and
// others not, and calling Commit again (or Recover, then Commit) finishes
// the rest.
//
// Commit may run while the lane's goroutine writes and pre-commits later
// epochs: they share only the catalog.
func (w *writer) Commit(ctx context.Context, epoch uint64, committables []sink.Committable) error {
	gen := checkpoint.Generation(w.gen.Load())
	byTable, err := w.decodeAll(epoch, committables)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(byTable)) {
		if err := w.apply(ctx, epoch, gen, name, byTable[name]); err != nil {
			return err
		}
	}
	w.d.log.Debug("iceberg: epoch committed", "pipeline", w.pipeline, "epoch", epoch, "tables", len(byTable))
	return nil
}

// apply commits one table's files of epoch.
func (w *writer) apply(ctx context.Context, epoch uint64, gen checkpoint.Generation, name string, files *epochFiles) error {
	ident := w.d.ident(name)
	req := &fenceRequirement{Type: "openetl-fence", Pipeline: w.pipeline, Generation: uint64(gen), Epoch: epoch}
	var lastErr error
	for try := 0; try < w.d.maxTries; try++ {
		tbl, err := w.d.fenced(ctx, ident, req)
		if err != nil {
			return fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		// Checked here to skip work; the catalog checks it again,
		// atomically with the commit.
		if err := req.Validate(tbl.Metadata()); err != nil {
			if errors.Is(err, errApplied) {
				return nil
			}
			return err
		}
		m, _ := readMarkers(tbl.Properties(), w.pipeline)
		spec := tbl.Spec()
		data, err := dataFiles(files.data, spec, tbl.Schema())
		if err != nil {
			return err
		}
		deletes, err := dataFiles(files.deletes, spec, tbl.Schema())
		if err != nil {
			return err
		}
		tx := tbl.NewTransaction()
		props := w.snapshotProps(epoch, uint64(gen))
		if len(deletes) == 0 {
			err = tx.AddDataFiles(ctx, data, props)
		} else {
			err = tx.NewRowDelta(props).AddRows(data...).AddDeletes(deletes...).Commit(ctx)
		}
		if err != nil {
			return fmt.Errorf("iceberg: table %v: stage epoch %d: %w", ident, epoch, err)
		}
		if err := tx.SetProperties(ice.Properties{
			epochKey(w.pipeline): strconv.FormatUint(epoch, 10),
			genKey(w.pipeline):   strconv.FormatUint(uint64(gen), 10),
			fenceKey(w.pipeline): strconv.FormatUint(uint64(max(gen, m.fence)), 10),
		}); err != nil {
			return fmt.Errorf("iceberg: table %v: set markers: %w", ident, err)
		}
		_, err = tx.Commit(ctx)
		switch {
		case err == nil:
			w.d.log.Debug("iceberg: table committed", "pipeline", w.pipeline, "table", name, "epoch", epoch,
				"files", len(data), "deletes", len(deletes), "rows", files.rows)
			return nil
		case errors.Is(err, errApplied):
			return nil
		case errors.Is(err, sink.ErrFenced):
			return err
		case isConflict(err):
			lastErr = err
			w.d.log.Warn("iceberg: commit lost a race; reloading the table and redoing it",
				"pipeline", w.pipeline, "table", name, "epoch", epoch, "err", err)
			continue
		default:
			return fmt.Errorf("iceberg: table %v: commit epoch %d: %w", ident, epoch, err)
		}
	}
	return fmt.Errorf("iceberg: table %v: commit of epoch %d lost the race %d times: %w", ident, epoch, w.d.maxTries, lastErr)
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
// namespace that the pipeline has written (its markers are in the
// table's properties), each with a commit that requires the fence not to
// be above gen, so two attempts recovering at once can't lower it; it
// fails with an error wrapping sink.ErrFenced when a newer generation has
// recovered. Then it reports what became of head's epoch: Applied when
// every table of it records that epoch or a later one (or it had no
// files, or head is nil), Recoverable when every file not yet applied is
// still there, Lost otherwise.
//
// Tables created after Recover start with no fence; a zombie committing
// to such a table can still not apply an epoch twice (the epoch marker is
// checked atomically with each commit).
func (w *writer) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	if gen == 0 {
		return 0, errors.New("iceberg: Recover with generation 0")
	}
	if err := w.raiseFences(ctx, gen); err != nil {
		return 0, err
	}
	w.gen.Store(uint64(gen))
	out, err := w.outcome(ctx, head)
	if err != nil {
		return 0, err
	}
	var epoch uint64
	if head != nil {
		epoch = head.Epoch
	}
	w.d.log.Info("iceberg: recovered", "pipeline", w.pipeline, "generation", gen, "epoch", epoch, "outcome", out.String())
	return out, nil
}

// raiseFences raises the fence on every table of the pipeline.
func (w *writer) raiseFences(ctx context.Context, gen checkpoint.Generation) error {
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
	req := &fenceRequirement{Type: "openetl-fence", Pipeline: w.pipeline, Generation: uint64(gen)}
	for _, ident := range idents {
		if err := w.raiseFence(ctx, ident, gen, req); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) raiseFence(ctx context.Context, ident table.Identifier, gen checkpoint.Generation, req *fenceRequirement) error {
	var lastErr error
	for try := 0; try < w.d.maxTries; try++ {
		tbl, err := w.d.fenced(ctx, ident, req)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			return nil // dropped meanwhile
		}
		if err != nil {
			return fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		props := tbl.Properties()
		if _, ours := props[epochKey(w.pipeline)]; !ours {
			if _, fenced := props[fenceKey(w.pipeline)]; !fenced {
				return nil // not a table of this pipeline
			}
		}
		if err := req.Validate(tbl.Metadata()); err != nil {
			return err
		}
		m, _ := readMarkers(props, w.pipeline)
		if m.fence == gen {
			return nil
		}
		tx := tbl.NewTransaction()
		if err := tx.SetProperties(ice.Properties{fenceKey(w.pipeline): strconv.FormatUint(uint64(gen), 10)}); err != nil {
			return err
		}
		_, err = tx.Commit(ctx)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, sink.ErrFenced):
			return err
		case isConflict(err):
			lastErr = err
			continue
		default:
			return fmt.Errorf("iceberg: table %v: raise fence: %w", ident, err)
		}
	}
	return fmt.Errorf("iceberg: table %v: raising the fence lost the race %d times: %w", ident, w.d.maxTries, lastErr)
}

func (w *writer) outcome(ctx context.Context, head *checkpoint.Record) (sink.Outcome, error) {
	if head == nil {
		return sink.Applied, nil
	}
	if head.Pipeline != "" && head.Pipeline != w.pipeline {
		return 0, fmt.Errorf("iceberg: Recover of pipeline %q given a record of pipeline %q", w.pipeline, head.Pipeline)
	}
	cs := make([]sink.Committable, len(head.Committables))
	for i, c := range head.Committables {
		cs[i] = c
	}
	byTable, err := w.decodeAll(head.Epoch, cs)
	if err != nil {
		return 0, err
	}
	out := sink.Applied
	for _, name := range slices.Sorted(maps.Keys(byTable)) {
		tbl, err := w.d.cat.LoadTable(ctx, w.d.ident(name))
		if errors.Is(err, catalog.ErrNoSuchTable) {
			w.d.log.Warn("iceberg: table of the head epoch is gone", "pipeline", w.pipeline, "epoch", head.Epoch, "table", name)
			return sink.Lost, nil
		}
		if err != nil {
			return 0, fmt.Errorf("iceberg: load table %s: %w", name, err)
		}
		m, err := readMarkers(tbl.Properties(), w.pipeline)
		if err != nil {
			return 0, err
		}
		if m.epoch >= head.Epoch {
			continue
		}
		out = sink.Recoverable
		fsys, err := tbl.FS(ctx)
		if err != nil {
			return 0, err
		}
		files := byTable[name]
		for _, f := range append(slices.Clone(files.data), files.deletes...) {
			st, err := fsys.Open(f.Path)
			if errors.Is(err, fs.ErrNotExist) {
				w.d.log.Warn("iceberg: data file of the head epoch is gone", "pipeline", w.pipeline, "epoch", head.Epoch, "path", f.Path)
				return sink.Lost, nil
			}
			if err != nil {
				return 0, fmt.Errorf("iceberg: open %s: %w", f.Path, err)
			}
			_ = st.Close()
		}
	}
	return out, nil
}

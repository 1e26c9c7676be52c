package iceberg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/internal/patches"
	"github.com/openetl/etl/sink"
)

// Patches (sink.PatchMetadataKey): how held values reach rows already
// in a table. Write keeps a table's patch batches (retained) until
// PreCommit, which writes them as one Parquet file per table and schema
// under the table's data location (named with the pipeline's write
// UUID, like its data files, so Collect removes it when no checkpoint
// names it) and lists it among the table's deletes, marked Patch: the
// file is never added to the table. Commit, in the transaction that
// applies the epoch, after the epoch's own snapshots, reads the patches,
// finds the live row of each patched _openetl_id in the table as the
// transaction leaves it (reading the _openetl_id column of the live
// data files, leaving out rows that position deletes and deletion
// vectors delete), reads those rows in the table's current schema (a
// row written before the column was added lacks it: null), sets each
// patched column where the row has a null, writes the rows that changed
// as new data files and deletes their old positions (position deletes;
// deletion vectors, merged with the file's earlier ones, on a v3
// table), in one row-delta snapshot carrying the epoch's markers. The
// copies keep their _openetl_id and _openetl_seq. The commit is the
// epoch's, under its fence and epoch marker: a Commit redone after the
// catalog took it finds the epoch applied and changes nothing.

// patchFormat is the committable format with patch files (fileDesc.Patch):
// a version that knows only committableFormat refuses it instead of
// adding a patch file as a delete file.
const patchFormat = 4

// isPatch reports whether a batch of schema sc is a patch batch.
func isPatch(sc *arrow.Schema) bool {
	v, ok := sc.Metadata().GetValue(sink.PatchMetadataKey)
	return ok && v == sink.PatchMetadataValue
}

// writePatch keeps rec, a patch batch of table stream, until PreCommit.
func (w *writer) writePatch(stream string, rec arrow.RecordBatch) error {
	sc := rec.Schema()
	ids, seqs := sc.FieldIndices(sink.ColumnID), sc.FieldIndices(sink.ColumnSeq)
	if len(ids) != 1 || len(seqs) != 1 || sc.NumFields() < 3 || sc.Field(ids[0]).Type.ID() != arrow.STRING {
		return fmt.Errorf("iceberg: a patch batch of %q has fields %s: want one or more columns, %s (utf8) and %s", stream, sc, sink.ColumnID, sink.ColumnSeq)
	}
	if w.mode(stream) == sink.Overwrite {
		return fmt.Errorf("iceberg: table %q is written in overwrite mode: it takes no patch batches (its next refresh writes every column whole)", stream)
	}
	if w.patches == nil {
		w.patches = map[string][]arrow.RecordBatch{}
	}
	rec.Retain()
	w.patches[stream] = append(w.patches[stream], rec)
	return nil
}

// dropPatches releases the kept patch batches.
func (w *writer) dropPatches() {
	for _, recs := range w.patches {
		for _, r := range recs {
			r.Release()
		}
	}
	clear(w.patches)
}

// stagePatches writes the kept patch batches, a file per table and
// schema, under each table's data location, and returns them as files
// to carry (deletes marked Patch). Patches of a table that does not
// exist change nothing and are dropped.
func (w *writer) stagePatches(ctx context.Context) ([]tableFiles, error) {
	if len(w.patches) == 0 {
		return nil, nil
	}
	defer w.dropPatches()
	var out []tableFiles
	for _, name := range slices.Sorted(maps.Keys(w.patches)) {
		tbl, err := w.d.cat.LoadTable(ctx, w.d.ident(name))
		if err != nil {
			if isNoSuchTable(err) {
				w.d.log.Warn("iceberg: patches of a table that does not exist change nothing", "table", name)
				continue
			}
			return out, fmt.Errorf("iceberg: load table %v: %w", w.d.ident(name), err)
		}
		tf := tableFiles{Table: name}
		recs := w.patches[name]
		for len(recs) > 0 {
			sc := recs[0].Schema()
			var same, rest []arrow.RecordBatch
			for _, r := range recs {
				if r.Schema().Equal(sc) {
					same = append(same, r)
				} else {
					rest = append(rest, r)
				}
			}
			recs = rest
			// The table takes the patched columns (a release without new
			// rows of the columns' type evolves it here).
			if tbl, err = w.d.ensureTable(ctx, w.pipeline, name, arrow.NewSchema(sc.Fields(), nil)); err != nil {
				w.removeFiles(ctx, append(out, tf))
				return nil, err
			}
			fd, err := w.writePatchFile(ctx, tbl, sc, same)
			if err != nil {
				w.removeFiles(ctx, append(out, tf))
				return nil, err
			}
			tf.Deletes = append(tf.Deletes, fd)
		}
		out = append(out, tf)
	}
	return out, nil
}

// writePatchFile writes recs (of schema sc) as a Parquet file under
// tbl's data location and describes it.
func (w *writer) writePatchFile(ctx context.Context, tbl *table.Table, sc *arrow.Schema, recs []arrow.RecordBatch) (fileDesc, error) {
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return fileDesc{}, err
	}
	wfs, ok := fsys.(iceio.WriteFileIO)
	if !ok {
		return fileDesc{}, fmt.Errorf("iceberg: table %v: its file IO can't write files", tbl.Identifier())
	}
	path := strings.TrimSuffix(tbl.Location(), "/") + "/data/" + fmt.Sprintf("00000-0-%s-patch.parquet", writeUUID(w.pipeline))
	fw, err := wfs.Create(path)
	if err != nil {
		return fileDesc{}, fmt.Errorf("iceberg: create %s: %w", path, err)
	}
	cw := &countingWriter{w: fw}
	// The schema metadata (the patch mark) is not needed in the file.
	plain := arrow.NewSchema(sc.Fields(), nil)
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	pw, err := pqarrow.NewFileWriter(plain, cw, props, pqarrow.DefaultWriterProps())
	if err != nil {
		_ = fw.Close()
		_ = fsys.Remove(path)
		return fileDesc{}, fmt.Errorf("iceberg: %s: %w", path, err)
	}
	var rows int64
	for _, r := range recs {
		pr := array.NewRecordBatch(plain, r.Columns(), r.NumRows())
		err := pw.WriteBuffered(pr)
		pr.Release()
		if err != nil {
			_ = pw.Close()
			_ = fsys.Remove(path)
			return fileDesc{}, fmt.Errorf("iceberg: write %s: %w", path, err)
		}
		rows += r.NumRows()
	}
	if err := pw.Close(); err != nil {
		_ = fsys.Remove(path)
		return fileDesc{}, fmt.Errorf("iceberg: write %s: %w", path, err)
	}
	spec := tbl.Spec()
	w.d.log.Debug("iceberg: patches staged", "pipeline", w.pipeline, "table", tbl.Identifier(), "path", path, "rows", rows)
	return fileDesc{Path: path, Rows: rows, Bytes: cw.n, SpecID: int32(spec.ID()), Patch: true}, nil
}

// hasPatches reports whether tfs list a patch file.
func hasPatches(tfs []tableFiles) bool {
	for _, tf := range tfs {
		if slices.ContainsFunc(tf.Deletes, func(fd fileDesc) bool { return fd.Patch }) {
			return true
		}
	}
	return false
}

// isNoSuchTable reports whether err says a table does not exist.
func isNoSuchTable(err error) bool {
	return errors.Is(err, catalog.ErrNoSuchTable)
}

// splitPatches returns p without its patch files, and those.
func (p pending) splitPatches() (pending, []fileDesc) {
	var patches []fileDesc
	rest := p
	rest.deletes = nil
	for _, fd := range p.deletes {
		if fd.Patch {
			patches = append(patches, fd)
		} else {
			rest.deletes = append(rest.deletes, fd)
		}
	}
	return rest, patches
}

// stageAll is stage with patches: p's other files are staged first, then
// one row-delta snapshot applies the patches to the table as the
// transaction leaves it.
func (w *writer) stageAll(ctx context.Context, name string, tbl *table.Table, tx *table.Transaction, mode sink.Mode, epoch, gen uint64, p pending, marks func(uint64) ice.Properties) (*staged, error) {
	rest, patches := p.splitPatches()
	if len(patches) == 0 {
		return w.stage(ctx, name, tbl, tx, mode, epoch, gen, p, marks)
	}
	if mode == sink.Overwrite {
		return nil, fmt.Errorf("patch files in an overwrite table's epoch: an overwrite table takes no patches")
	}
	var st *staged
	if !rest.empty() {
		var err error
		if st, err = w.stage(ctx, name, tbl, tx, mode, epoch, gen, rest, marks); err != nil {
			return st, err
		}
	}
	if st == nil {
		st = &staged{}
	}
	stt, err := tx.StagedTable()
	if err != nil {
		return st, err
	}
	cur := stt.Table
	res, err := w.applyPatches(ctx, cur, patches)
	st.files = append(st.files, res.files...)
	if err != nil {
		return st, err
	}
	if res.idx != nil {
		// The commit must find the table at the snapshot the rows were
		// found in (fenceRequirement.Pin). A Merge table's key index no
		// longer says where the patched rows are: the next commit
		// rebuilds it.
		delete(w.indexes, name)
		if st.idx == nil {
			st.idx = res.idx
		}
	}
	props := w.snapshotProps(epoch, gen)
	props["openetl.patch"] = "true"
	if marks != nil {
		maps.Copy(props, marks(epoch))
	}
	if len(res.data) == 0 {
		if rest.empty() {
			// Nothing to commit but, when the markers are table
			// properties, the markers. In snapshot summaries
			// (Config.Fence) the table does not record the epoch: its
			// patch file stays, and is applied (to the same effect)
			// again with a later epoch's files.
			st.idx = nil
		}
		return st, nil
	}
	rd := tx.NewRowDelta(props).AddRows(res.data...).AddDeletes(res.deletes...)
	if len(res.replaced) > 0 {
		rd.RemoveDeletes(res.replaced...)
	}
	if err := rd.Commit(ctx); err != nil {
		return st, err
	}
	w.d.log.Info("iceberg: held values released", "pipeline", w.pipeline, "table", name, "epoch", epoch, "rows", res.rows)
	return st, nil
}

// patched is what applyPatches wrote.
type patched struct {
	idx                     *keyIndex
	data, deletes, replaced []ice.DataFile
	files                   []ice.DataFile // written: removed when the commit surely fails
	rows                    int64
}

// loadPatches reads patch files into their columns.
func loadPatches(ctx context.Context, fsys iceio.IO, files []fileDesc) (map[string]*patches.Column, error) {
	tables := make([]arrow.Table, 0, len(files))
	names := make([]string, 0, len(files))
	defer func() {
		for _, t := range tables {
			t.Release()
		}
	}()
	for _, fd := range files {
		tbl, err := readParquet(ctx, fsys, fd.Path)
		if err != nil {
			return nil, err
		}
		tables = append(tables, tbl)
		names = append(names, fd.Path)
	}
	cols, err := patches.Read(tables, names)
	if err != nil {
		return nil, fmt.Errorf("iceberg: %w", err)
	}
	return cols, nil
}

// readParquet reads the Parquet file at path whole.
func readParquet(ctx context.Context, fsys iceio.IO, path string) (arrow.Table, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("iceberg: open %s: %w", path, err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		return nil, fmt.Errorf("iceberg: read %s: %w", path, err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("iceberg: read %s: %w", path, err)
	}
	tbl, err := fr.ReadTable(ctx)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("iceberg: read %s: %w", path, err)
	}
	return tbl, nil
}

// idKey is the key index's key of the string s (appendKey's encoding).
func idKey(s string) string {
	b := append([]byte{1}, binary.AppendUvarint(nil, uint64(len(s)))...)
	return string(append(b, s...))
}

// applyPatches finds the live rows of cur the patches set a value on,
// writes their copies with the values set as data files of cur, and
// deletes the rows by position (deletion vectors on a v3 table).
func (w *writer) applyPatches(ctx context.Context, cur *table.Table, files []fileDesc) (patched, error) {
	var res patched
	if cur.CurrentSnapshot() == nil {
		return res, nil
	}
	idField, ok := cur.Schema().FindFieldByName(sink.ColumnID)
	if !ok {
		return res, nil
	}
	fsys, err := cur.FS(ctx)
	if err != nil {
		return res, err
	}
	cols, err := loadPatches(ctx, fsys, files)
	if err != nil {
		return res, err
	}
	defer patches.Release(cols)
	want := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(cols)) {
		if _, ok := cur.Schema().FindFieldByName(name); !ok {
			return res, fmt.Errorf("patches set column %q, which table %v does not have", name, cur.Identifier())
		}
		for id := range cols[name].At {
			want[idKey(id)] = true
		}
	}
	x, err := buildKeyIndex(ctx, cur, []int{idField.ID}, want)
	if err != nil {
		return res, fmt.Errorf("find the patched rows: %w", err)
	}
	res.idx = x
	// The patched ids that have a live row.
	var ids []string
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(cols)) {
		for id := range cols[name].At {
			if seen[id] {
				continue
			}
			seen[id] = true
			if _, ok := x.m[idKey(id)]; ok {
				if n := len(x.extra[idKey(id)]); n > 0 {
					return res, fmt.Errorf("%s %q is in %d live rows of table %v: not patching it", sink.ColumnID, id, n+1, cur.Identifier())
				}
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return res, nil
	}
	slices.Sort(ids)
	sc, recs, err := cur.Scan(table.WithRowFilter(ice.IsIn(ice.Reference(sink.ColumnID), ids...))).ToArrowRecords(ctx)
	if err != nil {
		return res, fmt.Errorf("read the patched rows: %w", err)
	}
	var out []arrow.RecordBatch
	defer func() {
		for _, r := range out {
			if r != nil {
				r.Release()
			}
		}
	}()
	dels := map[uint32][]uint32{}
	done := map[string]bool{}
	for rec, err := range recs {
		if err != nil {
			return res, fmt.Errorf("read the patched rows: %w", err)
		}
		nr, err := patchBatch(ctx, rec, cols, func(id string) error {
			if done[id] {
				return fmt.Errorf("%s %q is in more than one live row of table %v: not patching it", sink.ColumnID, id, cur.Identifier())
			}
			done[id] = true
			l, ok := x.m[idKey(id)]
			if !ok {
				return fmt.Errorf("%s %q: the table's scan has a row the index has not", sink.ColumnID, id)
			}
			dels[l.file] = append(dels[l.file], l.pos)
			return nil
		})
		rec.Release()
		if err != nil {
			return res, err
		}
		if nr != nil {
			out = append(out, nr)
			res.rows += nr.NumRows()
		}
	}
	if len(out) == 0 {
		return res, nil
	}
	seq := func(yield func(arrow.RecordBatch, error) bool) {
		for i, r := range out {
			out[i] = nil // iceberg-go releases what it was given
			if !yield(r, nil) {
				return
			}
		}
	}
	for df, err := range table.WriteRecords(ctx, cur, sc, seq, table.WithTargetFileSize(w.d.targetBytes),
		table.WithWriteUUID(writeUUID(w.pipeline))) {
		if err != nil {
			return res, fmt.Errorf("write the patched rows: %w", err)
		}
		res.data = append(res.data, df)
		res.files = append(res.files, df)
	}
	if cur.Metadata().Version() >= 3 {
		added, replaced, err := w.writeDeletionVectors(ctx, cur, x, dels)
		res.files = append(res.files, added...)
		if err != nil {
			return res, err
		}
		res.deletes, res.replaced = added, replaced
	} else {
		pos, err := w.writePositionDeletes(ctx, cur, x, dels)
		res.files = append(res.files, pos...)
		if err != nil {
			return res, err
		}
		res.deletes = pos
	}
	return res, nil
}

// patchBatch returns the rows of rec that a patch changes, with the
// patched columns set where the row had a null, or nil when none does.
// found is called with the _openetl_id of each row returned.
func patchBatch(ctx context.Context, rec arrow.RecordBatch, cols map[string]*patches.Column, found func(id string) error) (arrow.RecordBatch, error) {
	sc := rec.Schema()
	idIdx := sc.FieldIndices(sink.ColumnID)
	if len(idIdx) != 1 {
		return nil, fmt.Errorf("the table's rows have no %s", sink.ColumnID)
	}
	var ids interface {
		Len() int
		Value(int) string
	}
	switch a := rec.Column(idIdx[0]).(type) {
	case *array.String:
		ids = a
	case *array.LargeString:
		ids = a
	case *array.StringView:
		ids = a
	default:
		return nil, fmt.Errorf("%s is %s, not a string", sink.ColumnID, a.DataType())
	}
	n := int(rec.NumRows())
	// take[c][k]: for the k-th changed row, its value of column c: an
	// index into the column, or (>= n) into the column's patch values.
	take := make([][]int64, sc.NumFields())
	var rows []int
	for i := range n {
		id := ids.Value(i)
		changed := false
		for c, f := range sc.Fields() {
			pc := cols[f.Name]
			if pc == nil || rec.Column(c).IsValid(i) {
				continue
			}
			if _, ok := pc.At[id]; ok {
				changed = true
				break
			}
		}
		if !changed {
			continue
		}
		if err := found(id); err != nil {
			return nil, err
		}
		rows = append(rows, i)
		for c, f := range sc.Fields() {
			v := int64(i)
			if pc := cols[f.Name]; pc != nil && rec.Column(c).IsNull(i) {
				if k, ok := pc.At[id]; ok {
					v = int64(n + k)
				}
			}
			take[c] = append(take[c], v)
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}
	arrs := make([]arrow.Array, sc.NumFields())
	defer func() {
		for _, a := range arrs {
			if a != nil {
				a.Release()
			}
		}
	}()
	for c, f := range sc.Fields() {
		src := rec.Column(c)
		src.Retain()
		if pc := cols[f.Name]; pc != nil && slices.ContainsFunc(take[c], func(v int64) bool { return v >= int64(n) }) {
			vals, err := conform(ctx, pc.Values, f.Type)
			if err != nil {
				src.Release()
				return nil, fmt.Errorf("patches of column %q: %s to the table's %s: %w", f.Name, pc.Values.DataType(), f.Type, err)
			}
			both, err := array.Concatenate([]arrow.Array{src, vals}, memory.DefaultAllocator)
			src.Release()
			vals.Release()
			if err != nil {
				return nil, fmt.Errorf("patches of column %q: %w", f.Name, err)
			}
			src = both
		}
		ib := array.NewInt64Builder(memory.DefaultAllocator)
		ib.AppendValues(take[c], nil)
		idx := ib.NewInt64Array()
		ib.Release()
		out, err := compute.TakeArray(ctx, src, idx)
		idx.Release()
		src.Release()
		if err != nil {
			return nil, fmt.Errorf("patch column %q: %w", f.Name, err)
		}
		arrs[c] = out
	}
	return array.NewRecordBatch(sc, arrs, int64(len(rows))), nil
}

// conform returns a as type to: struct fields matched by name (a field
// a lacks is null), lists element-wise, other types cast.
func conform(ctx context.Context, a arrow.Array, to arrow.DataType) (arrow.Array, error) {
	if arrow.TypeEqual(a.DataType(), to) {
		a.Retain()
		return a, nil
	}
	switch to := to.(type) {
	case *arrow.StructType:
		sa, ok := a.(*array.Struct)
		if !ok {
			break
		}
		st := sa.DataType().(*arrow.StructType)
		d := sa.Data()
		children := make([]arrow.ArrayData, to.NumFields())
		defer func() {
			for _, c := range children {
				if c != nil {
					c.Release()
				}
			}
		}()
		for i, f := range to.Fields() {
			j, ok := st.FieldIdx(f.Name)
			if !ok {
				nulls := array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, d.Offset()+d.Len())
				children[i] = nulls.Data()
				children[i].Retain()
				nulls.Release()
				continue
			}
			child := array.MakeFromData(d.Children()[j])
			c, err := conform(ctx, child, f.Type)
			child.Release()
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			children[i] = c.Data()
			children[i].Retain()
			c.Release()
		}
		out := array.NewData(to, d.Len(), d.Buffers(), children, d.NullN(), d.Offset())
		defer out.Release()
		return array.MakeFromData(out), nil
	case *arrow.ListType:
		la, ok := a.(*array.List)
		if !ok {
			break
		}
		d := la.Data()
		child := array.MakeFromData(d.Children()[0])
		c, err := conform(ctx, child, to.Elem())
		child.Release()
		if err != nil {
			return nil, err
		}
		defer c.Release()
		out := array.NewData(to, d.Len(), d.Buffers(), []arrow.ArrayData{c.Data()}, d.NullN(), d.Offset())
		defer out.Release()
		return array.MakeFromData(out), nil
	}
	return compute.CastArray(ctx, a, compute.SafeCastOptions(to))
}

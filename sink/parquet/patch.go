package parquet

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/zeebo/xxh3"
	"gocloud.dev/blob"

	"github.com/openetl/etl/internal/patches"
	"github.com/openetl/etl/sink"
)

// Patches (sink.PatchMetadataKey): how held values reach rows already
// written, in files that are never changed. A lane keeps a stream's
// patch batches until PreCommit, which stages them as a Parquet file of
// their own (the patch's columns, _openetl_id and _openetl_seq), marked
// Patch in the committable. Commit, applying the epoch to the stream,
// reads the staged patches, finds the files of the current manifest
// that hold a patched row (reading their _openetl_id column), rewrites
// each such file whole with the values set where the row has a null (or
// lacks the column), under a key of its own, and lists the rewritten
// files in the stream's next manifest version in place of the ones they
// replace, beside the epoch's new files: copy-on-write, switched by the
// same create-if-absent manifest write, so a reader that follows the
// manifest sees every row once, patched or not, never both. A Commit
// cut short before the manifest write leaves rewritten files unlisted,
// and the next Commit writes them again (same keys, same contents); one
// after it finds the epoch applied. The entry of a rewritten file keeps
// the entry it replaced (File.Replaced), so that Recover can take the
// epoch back (a lost head epoch) by listing the old file again.

// patchFormat is the committable format with patch files; a version that
// knows no patches refuses it instead of copying patches in as rows.
const patchFormat = 2

// patchState is a lane's patch batches of the epoch, by stream, kept
// (retained) until PreCommit stages them.
type patchState struct {
	recs map[string][]arrow.RecordBatch
}

// isPatch reports whether a batch of schema sc is a patch batch.
func isPatch(sc *arrow.Schema) bool {
	v, ok := sc.Metadata().GetValue(sink.PatchMetadataKey)
	return ok && v == sink.PatchMetadataValue
}

// writePatch keeps rec, a patch batch of stream, until PreCommit.
func (w *writer) writePatch(stream string, rec arrow.RecordBatch) error {
	sc := rec.Schema()
	ids, seqs := sc.FieldIndices(sink.ColumnID), sc.FieldIndices(sink.ColumnSeq)
	if len(ids) != 1 || len(seqs) != 1 || sc.NumFields() < 3 || sc.Field(ids[0]).Type.ID() != arrow.STRING {
		return fmt.Errorf("parquet: a patch batch of %q has fields %s: want one or more columns, %s (utf8) and %s", stream, sc, sink.ColumnID, sink.ColumnSeq)
	}
	if w.patch.recs == nil {
		w.patch.recs = map[string][]arrow.RecordBatch{}
	}
	rec.Retain()
	w.patch.recs[stream] = append(w.patch.recs[stream], rec)
	return nil
}

// stagePatches writes the lane's patch batches, a file per stream and
// schema, to staging keys, and adds them to w.staged marked Patch. It
// reports whether there were any.
func (w *writer) stagePatches(ctx context.Context) (bool, error) {
	if len(w.patch.recs) == 0 {
		return false, nil
	}
	defer w.dropPatches()
	for _, stream := range slices.Sorted(maps.Keys(w.patch.recs)) {
		recs := w.patch.recs[stream]
		for len(recs) > 0 {
			// One file per schema, in the order the batches came.
			sc := recs[0].Schema()
			var same []arrow.RecordBatch
			rest := recs[:0:0]
			for _, r := range recs {
				if r.Schema().Equal(sc) {
					same = append(same, r)
				} else {
					rest = append(rest, r)
				}
			}
			recs = rest
			n := w.seq
			w.seq++
			key := w.d.stagingKey(w.pipeline, stream, w.nonce, w.lane, n)
			rows, size, err := w.d.writeFile(ctx, key, sc, same)
			if err != nil {
				return false, err
			}
			w.staged = append(w.staged, stagedFile{Stream: stream, Staged: key, Rows: rows, Bytes: size, n: n, Patch: true})
			w.d.log.Debug("parquet: patches staged", "pipeline", w.pipeline, "lane", w.lane, "stream", stream, "key", key, "rows", rows)
		}
	}
	return true, nil
}

// dropPatches releases the kept patch batches.
func (w *writer) dropPatches() {
	for _, recs := range w.patch.recs {
		for _, r := range recs {
			r.Release()
		}
	}
	clear(w.patch.recs)
}

// writeFile writes recs (of schema sc) as one Parquet file at key and
// returns its rows and bytes. A failure leaves nothing at key.
func (d *Destination) writeFile(ctx context.Context, key string, sc *arrow.Schema, recs []arrow.RecordBatch) (rows, size int64, err error) {
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw, err := d.bucket.NewWriter(bctx, key, &blob.WriterOptions{ContentType: "application/vnd.apache.parquet"})
	if err != nil {
		return 0, 0, fmt.Errorf("parquet: create %s: %w", key, err)
	}
	cw := &countingWriter{w: bw}
	fw, err := pqarrow.NewFileWriter(sc, cw, d.fileProps(recs[0]), d.arrowProps)
	if err != nil {
		cancel()
		_ = bw.Close()
		return 0, 0, fmt.Errorf("parquet: %s: schema not writable as Parquet: %w", key, err)
	}
	for _, r := range recs {
		if err := fw.WriteBuffered(r); err != nil {
			cancel()
			_ = bw.Close()
			return 0, 0, fmt.Errorf("parquet: write %s: %w", key, err)
		}
		rows += r.NumRows()
	}
	if err := fw.Close(); err != nil {
		cancel()
		_ = bw.Close()
		return 0, 0, fmt.Errorf("parquet: finish %s: %w", key, err)
	}
	if err := bw.Close(); err != nil {
		return 0, 0, fmt.Errorf("parquet: upload %s: %w", key, err)
	}
	return rows, cw.n, nil
}

// splitPatchFiles returns files without the patch files, and those.
func splitPatchFiles(files []stagedFile) (rows, patches []stagedFile) {
	for _, f := range files {
		if f.Patch {
			patches = append(patches, f)
		} else {
			rows = append(rows, f)
		}
	}
	return rows, patches
}

// loadPatches reads a stream's staged patch files into their columns.
func (w *writer) loadPatches(ctx context.Context, files []stagedFile) (map[string]*patches.Column, error) {
	tables := make([]arrow.Table, 0, len(files))
	names := make([]string, 0, len(files))
	defer func() {
		for _, t := range tables {
			t.Release()
		}
	}()
	for _, f := range files {
		tbl, err := w.d.readTable(ctx, f.Staged, nil)
		if err != nil {
			return nil, fmt.Errorf("%w (staged patches of epoch's stream %q: is the epoch lost?)", err, f.Stream)
		}
		tables = append(tables, tbl)
		names = append(names, f.Staged)
	}
	cols, err := patches.Read(tables, names)
	if err != nil {
		return nil, fmt.Errorf("parquet: %w", err)
	}
	return cols, nil
}

// readTable reads the Parquet file at key, only the leaf columns named
// by cols when not nil.
func (d *Destination) readTable(ctx context.Context, key string, cols []string) (arrow.Table, error) {
	data, err := d.bucket.ReadAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("parquet: read %s: %w", key, err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("parquet: open %s: %w", key, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("parquet: open %s: %w", key, err)
	}
	var tbl arrow.Table
	if cols == nil {
		tbl, err = fr.ReadTable(ctx)
	} else {
		var idx []int
		for _, c := range cols {
			if i := pf.MetaData().Schema.ColumnIndexByName(c); i >= 0 {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			return nil, nil
		}
		rgs := make([]int, pf.NumRowGroups())
		for i := range rgs {
			rgs[i] = i
		}
		tbl, err = fr.ReadRowGroups(ctx, idx, rgs)
	}
	if err != nil {
		return nil, fmt.Errorf("parquet: read %s: %w", key, err)
	}
	return tbl, nil
}

// patchedKey is the key of file's copy with the patches of the staged
// patch file pf (whose final key names its epoch, lane and nonce): one
// per (patch file, file), so that a Commit done again writes the same
// contents to the same key.
func patchedKey(pf stagedFile, file string) string {
	return fmt.Sprintf("%s-r%016x.parquet", strings.TrimSuffix(pf.Final, ".parquet"), xxh3.HashString(file))
}

// applyPatches rewrites the files of prev that hold a row the patches
// set a value on, and returns the manifest entries of the rewritten
// files by the key of the file each replaces (File.Replaced).
func (w *writer) applyPatches(ctx context.Context, epoch uint64, stream string, prev *Manifest, staged []stagedFile) (map[string]File, error) {
	if prev == nil || len(prev.Files) == 0 {
		return nil, nil
	}
	cols, err := w.loadPatches(ctx, staged)
	if err != nil {
		return nil, err
	}
	defer patches.Release(cols)
	names := slices.Sorted(maps.Keys(cols))
	out := map[string]File{}
	for _, f := range prev.Files {
		hit, err := w.holdsPatched(ctx, f.Key, cols)
		if err != nil {
			return nil, err
		}
		if !hit {
			continue
		}
		key := patchedKey(staged[0], f.Key)
		nf, changed, err := w.rewrite(ctx, f, key, names, cols)
		if err != nil {
			return nil, err
		}
		if !changed {
			continue
		}
		nf.Patched = epoch
		was := f
		was.Replaced = nil // one level: only the last epoch is ever taken back
		nf.Replaced = &was
		out[f.Key] = nf
	}
	return out, nil
}

// holdsPatched reports whether the file at key has a row with an id the
// patches set a value on.
func (w *writer) holdsPatched(ctx context.Context, key string, cols map[string]*patches.Column) (bool, error) {
	tbl, err := w.d.readTable(ctx, key, []string{sink.ColumnID})
	if err != nil || tbl == nil {
		return false, err
	}
	defer tbl.Release()
	for _, chunk := range tbl.Column(0).Data().Chunks() {
		ids, ok := chunk.(*array.String)
		if !ok {
			return false, fmt.Errorf("parquet: %s: %s is %s, not utf8", key, sink.ColumnID, chunk.DataType())
		}
		for i := range ids.Len() {
			for _, c := range cols {
				if _, ok := c.At[ids.Value(i)]; ok {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// rewrite writes the file f with the patches set where its rows have a
// null (or lack the column) to key, and returns its entry; changed is
// false (and nothing is written) when no row took a value.
func (w *writer) rewrite(ctx context.Context, f File, key string, names []string, cols map[string]*patches.Column) (File, bool, error) {
	tbl, err := w.d.readTable(ctx, f.Key, nil)
	if err != nil {
		return File{}, false, err
	}
	defer tbl.Release()
	n := int(tbl.NumRows())
	sc := tbl.Schema()
	idIdx := sc.FieldIndices(sink.ColumnID)
	if len(idIdx) != 1 {
		return File{}, false, fmt.Errorf("parquet: %s has no %s column", f.Key, sink.ColumnID)
	}
	arrs := make([]arrow.Array, sc.NumFields())
	defer func() {
		for _, a := range arrs {
			if a != nil {
				a.Release()
			}
		}
	}()
	for i := range arrs {
		if arrs[i], err = patches.Chunk(tbl, i); err != nil {
			return File{}, false, err
		}
	}
	ids := arrs[idIdx[0]].(*array.String)
	fields := slices.Clone(sc.Fields())
	changed := false
	for _, name := range names {
		pc := cols[name]
		var orig arrow.Array
		at := -1
		if idx := sc.FieldIndices(name); len(idx) == 1 {
			at = idx[0]
			orig = arrs[at]
			orig.Retain()
		} else {
			orig = array.MakeArrayOfNull(memory.DefaultAllocator, pc.Field.Type, n)
		}
		// take picks each row's value from orig, or from the patches
		// (after orig) where the row has a null and a patch.
		ib := array.NewInt64Builder(memory.DefaultAllocator)
		ib.Reserve(n)
		set := 0
		for i := range n {
			if k, ok := pc.At[ids.Value(i)]; ok && orig.IsNull(i) {
				ib.UnsafeAppend(int64(n + k))
				set++
			} else {
				ib.UnsafeAppend(int64(i))
			}
		}
		idx := ib.NewArray()
		ib.Release()
		if set == 0 {
			// Every patched row has a value there (a nested column
			// written without the part that was held): nothing to set.
			idx.Release()
			orig.Release()
			continue
		}
		if !arrow.TypeEqual(orig.DataType(), pc.Field.Type) {
			// The file has the column as an older (narrower) type.
			cast, err := compute.CastArray(ctx, orig, compute.SafeCastOptions(pc.Field.Type))
			orig.Release()
			if err != nil {
				idx.Release()
				return File{}, false, fmt.Errorf("parquet: patch column %q of %s: the file has it as %s, the patches as %s: %w", name, f.Key, sc.Field(at).Type, pc.Field.Type, err)
			}
			orig = cast
		}
		both, err := array.Concatenate([]arrow.Array{orig, pc.Values}, memory.DefaultAllocator)
		orig.Release()
		if err != nil {
			idx.Release()
			return File{}, false, fmt.Errorf("parquet: patch column %q of %s: %w", name, f.Key, err)
		}
		col, err := compute.TakeArray(ctx, both, idx)
		both.Release()
		idx.Release()
		if err != nil {
			return File{}, false, fmt.Errorf("parquet: patch column %q of %s: %w", name, f.Key, err)
		}
		changed = true
		fd := pc.Field
		fd.Nullable = true
		if at >= 0 {
			fd.Metadata = fields[at].Metadata
			arrs[at].Release()
			arrs[at], fields[at] = col, fd
		} else {
			arrs = append(arrs, col)
			fields = append(fields, fd)
		}
	}
	if !changed {
		return File{}, false, nil
	}
	md := sc.Metadata()
	nsc := arrow.NewSchema(fields, &md)
	rec := array.NewRecordBatch(nsc, arrs, int64(n))
	defer rec.Release()
	rows, size, err := w.d.writeFile(ctx, key, nsc, []arrow.RecordBatch{rec})
	if err != nil {
		return File{}, false, err
	}
	w.d.log.Debug("parquet: file rewritten with released values", "pipeline", w.pipeline, "from", f.Key, "to", key, "rows", rows)
	return File{Key: key, Rows: rows, Bytes: size, Epoch: f.Epoch}, true, nil
}

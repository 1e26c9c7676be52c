package iceberg

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	ice "github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
)

// Position deletes of a Merge table are found at Commit, on the commit
// goroutine of lane 0, against the table as it is: each key of an epoch
// (read back from the epoch's data files, and from its file of keys
// deleted for good) has its older rows looked up in a keyIndex, which
// maps every key to the data file and row that hold its live row, and
// those rows are written to a position-delete file committed in the
// epoch's row delta. The index describes one snapshot of the table: when
// the table's current snapshot is another (another writer committed, a
// compaction rewrote files, another process applied epochs, Recover took
// one back), it is rebuilt from the table's live data files and their
// position deletes. The commit then requires the table still to be at
// that snapshot (fenceRequirement.Pin), so the positions can't go stale
// between the look-up and the commit.

// Field IDs of the position-delete schema (Iceberg spec).
const (
	posFileID = 2147483546
	posPosID  = 2147483545
)

// posDeleteSchema is the position-delete schema (file_path, pos) with
// file_path dictionary-encoded in Arrow; in Parquet it is the spec's
// string column.
var posDeleteSchema = func() *arrow.Schema {
	f := table.PositionalDeleteArrowSchema.Field(0)
	f.Type = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	return arrow.NewSchema([]arrow.Field{f, table.PositionalDeleteArrowSchema.Field(1)}, nil)
}()

// errMoved fails a commit of position deletes whose table moved after
// they were found: the commit reloads the table and finds them again.
var errMoved = errors.New("iceberg: table moved since its position deletes were found")

// loc is a row of a data file: the file's index in keyIndex.files and the
// row's position in it.
type loc struct{ file, pos uint32 }

// fileMeta is a data file the index refers to.
type fileMeta struct {
	path string
	part map[int]any
}

// key is one row's key: a single integer column's value in n (ints), or
// else its appendKey encoding in b.
type key struct {
	b []byte
	n int64
}

// keyIndex maps a Merge table's keys to their live rows. Commit updates
// it in place while it stages a transaction; a transaction that fails
// drops it (the next commit rebuilds it).
type keyIndex struct {
	ids      []int // the key's field IDs
	snapshot int64 // the snapshot it describes; -1 before the first
	files    []fileMeta
	// ints: the key is one integer column, whose non-null values are in
	// mi; every other key is in m.
	ints bool
	mi   map[int64]loc
	m    map[string]loc
	// extra holds further rows of a key: a table rebuilt after epochs
	// written with equality deletes has rows those deletes hide, which
	// are deleted again by position (harmlessly) when the key changes.
	extra map[string][]loc
	// version is the table's format version: an upgrade to v3 keeps the
	// snapshot, and the index is rebuilt for its deletion vectors.
	version int
	// dvs holds each data file's deletion vector (format v3 tables),
	// which a new one for the file must include and replace.
	dvs map[uint32]ice.DataFile
	// posDels holds, on a v3 table, the rows of each data file that
	// position-delete files (left from format v2) delete and its
	// deletion vector, if it has one, does not hold. Readers ignore a
	// data file's position deletes once it has a deletion vector (v3
	// spec), so a new one for the file must hold them too; a file whose
	// deletion vector leaves some out (written by another writer, or by
	// this package before it merged them) gets a new one at the next
	// commit that writes deletion vectors.
	posDels map[uint32][]uint32
}

func newKeyIndex(ids []int, ints bool, snapshot int64, version, size int) *keyIndex {
	x := &keyIndex{ids: slices.Clone(ids), ints: ints, snapshot: snapshot, version: version, m: make(map[string]loc),
		extra: make(map[string][]loc), dvs: make(map[uint32]ice.DataFile), posDels: make(map[uint32][]uint32)}
	if ints {
		x.mi = make(map[int64]loc, size)
	} else {
		x.m = make(map[string]loc, size)
	}
	return x
}

func (x *keyIndex) addFile(path string, part map[int]any) (uint32, error) {
	if len(x.files) >= math.MaxUint32 {
		return 0, errors.New("iceberg: too many data files for the key index")
	}
	x.files = append(x.files, fileMeta{path: path, part: part})
	return uint32(len(x.files) - 1), nil
}

// extraKey is the key of k in extra.
func (x *keyIndex) extraKey(k key) string {
	if k.b == nil {
		return string(binary.LittleEndian.AppendUint64(nil, uint64(k.n)))
	}
	return string(k.b)
}

// replace calls fn with every live row of k and makes l its row (none
// when del).
func (x *keyIndex) replace(k key, l loc, del bool, fn func(loc)) {
	if k.b == nil {
		if old, ok := x.mi[k.n]; ok {
			fn(old)
		}
		if del {
			delete(x.mi, k.n)
		} else {
			x.mi[k.n] = l
		}
	} else {
		if old, ok := x.m[string(k.b)]; ok {
			fn(old)
		}
		if del {
			delete(x.m, string(k.b))
		} else {
			x.m[string(k.b)] = l
		}
	}
	if len(x.extra) > 0 {
		ek := x.extraKey(k)
		for _, old := range x.extra[ek] {
			fn(old)
		}
		delete(x.extra, ek)
	}
}

// put records a row of k while the index is built.
func (x *keyIndex) put(k key, l loc) {
	dup := false
	if k.b == nil {
		if _, dup = x.mi[k.n]; !dup {
			x.mi[k.n] = l
		}
	} else if _, dup = x.m[string(k.b)]; !dup {
		x.m[string(k.b)] = l
	}
	if dup {
		ek := x.extraKey(k)
		x.extra[ek] = append(x.extra[ek], l)
	}
}

func (x *keyIndex) len() int { return len(x.mi) + len(x.m) }

func currentSnapshot(tbl *table.Table) int64 {
	if s := tbl.CurrentSnapshot(); s != nil {
		return s.SnapshotID
	}
	return -1
}

// intKey reports whether the key ids of sc is one integer column.
func intKey(sc *ice.Schema, ids []int) bool {
	if len(ids) != 1 {
		return false
	}
	f, ok := sc.FindFieldByID(ids[0])
	if !ok {
		return false
	}
	switch f.Type.(type) {
	case ice.Int32Type, ice.Int64Type:
		return true
	}
	return false
}

// keyIndex returns the index of table name at tbl's current snapshot,
// rebuilt from the table when the one it has describes another.
func (w *writer) keyIndex(ctx context.Context, name string, tbl *table.Table, ids []int) (*keyIndex, error) {
	snap := currentSnapshot(tbl)
	if x := w.indexes[name]; x != nil && x.snapshot == snap && x.version == tbl.Metadata().Version() && slices.Equal(x.ids, ids) {
		return x, nil
	}
	delete(w.indexes, name)
	start := time.Now()
	x, err := buildKeyIndex(ctx, tbl, ids, nil)
	if err != nil {
		return nil, fmt.Errorf("iceberg: table %v: index keys: %w", tbl.Identifier(), err)
	}
	w.indexes[name] = x
	w.d.log.Info("iceberg: key index built for position deletes", "table", name, "snapshot", snap,
		"files", len(x.files), "keys", x.len(), "took", time.Since(start))
	return x, nil
}

// buildKeyIndex reads the key columns of tbl's live data files, leaving
// out the rows their deletion vectors and position deletes delete. With
// want set it holds only those keys (by their bytes: a release's
// _openetl_ids), while still listing every live file, its deletion
// vector and (v3) its position deletes, which writeDeletionVectors needs.
func buildKeyIndex(ctx context.Context, tbl *table.Table, ids []int, want map[string]bool) (*keyIndex, error) {
	ints := intKey(tbl.Schema(), ids)
	version := tbl.Metadata().Version()
	if tbl.CurrentSnapshot() == nil {
		return newKeyIndex(ids, ints, -1, version, 0), nil
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return nil, err
	}
	var rows int64
	hasDV := false
	for _, t := range tasks {
		rows += t.File.Count()
		hasDV = hasDV || len(t.DeletionVectorFiles) > 0
	}
	if want != nil {
		rows = int64(len(want))
	}
	x := newKeyIndex(ids, ints, currentSnapshot(tbl), version, int(rows))
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	// A data file's scan task lists no position-delete files when it has
	// a deletion vector; they are found in the delete manifests.
	var posFiles []ice.ManifestEntry
	if hasDV {
		if posFiles, err = positionDeleteEntries(tbl.CurrentSnapshot(), fsys); err != nil {
			return nil, err
		}
	}
	deleted := map[string]map[string][]int64{} // position-delete file → data file → rows
	positions := func(df ice.DataFile, path string) ([]int64, error) {
		m, ok := deleted[df.FilePath()]
		if !ok {
			m = map[string][]int64{}
			deleted[df.FilePath()] = m
			if err := readPositions(ctx, fsys, df.FilePath(), func(path string, pos int64) {
				m[path] = append(m[path], pos)
			}); err != nil {
				return nil, err
			}
		}
		return m[path], nil
	}
	seen := map[string]bool{}
	for _, t := range tasks {
		path := t.File.FilePath()
		if seen[path] {
			continue // a file split into several tasks
		}
		seen[path] = true
		fi, err := x.addFile(path, t.File.Partition())
		if err != nil {
			return nil, err
		}
		var bm *dv.RoaringPositionBitmap
		dfs := t.DeleteFiles
		if len(t.DeletionVectorFiles) > 0 {
			df := t.DeletionVectorFiles[0]
			if bm, err = dv.ReadDV(fsys, df); err != nil {
				return nil, fmt.Errorf("read the deletion vector of %s: %w", path, err)
			}
			x.dvs[fi] = df
			dfs = applying(posFiles, t)
		}
		dels := map[int64]bool{}
		for _, df := range dfs {
			ps, err := positions(df, path)
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				if bm != nil && bm.Contains(uint64(p)) {
					continue
				}
				if !dels[p] && version >= 3 {
					x.posDels[fi] = append(x.posDels[fi], uint32(p))
				}
				dels[p] = true
			}
		}
		if err := readKeys(ctx, fsys, path, ids, ints, func(pos int, k key) {
			if (want == nil || want[string(k.b)]) && !dels[int64(pos)] && (bm == nil || !bm.Contains(uint64(pos))) {
				x.put(k, loc{file: fi, pos: uint32(pos)})
			}
		}); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// positionDeleteEntries lists the live position-delete files of snap
// that are not deletion vectors.
func positionDeleteEntries(snap *table.Snapshot, fsys iceio.IO) ([]ice.ManifestEntry, error) {
	mfs, err := snap.Manifests(fsys)
	if err != nil {
		return nil, err
	}
	var out []ice.ManifestEntry
	for _, mf := range mfs {
		if mf.ManifestContent() != ice.ManifestContentDeletes {
			continue
		}
		es, err := mf.FetchEntries(fsys, true)
		if err != nil {
			return nil, fmt.Errorf("read manifest %s: %w", mf.FilePath(), err)
		}
		for _, e := range es {
			if df := e.DataFile(); df.ContentType() == ice.EntryContentPosDeletes && !table.IsDeletionVector(df) {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// applying returns the position-delete files of es that apply to t's
// data file by the spec's rule (leaving out that it has a deletion
// vector): the same partition spec and partition, a data sequence number
// not below the data file's (unknown ones apply), and no other
// referenced data file.
func applying(es []ice.ManifestEntry, t table.FileScanTask) []ice.DataFile {
	var out []ice.DataFile
	data := t.File
	for _, e := range es {
		df := e.DataFile()
		if ref := df.ReferencedDataFile(); ref != nil && *ref != data.FilePath() {
			continue
		}
		if seq := e.SequenceNum(); seq >= 0 && t.DataSequenceNumber != nil && seq < *t.DataSequenceNumber {
			continue
		}
		if df.SpecID() != data.SpecID() || !maps.EqualFunc(df.Partition(), data.Partition(), func(a, b any) bool { return reflect.DeepEqual(a, b) }) {
			continue
		}
		out = append(out, df)
	}
	return out
}

// readKeys calls fn with the position and key of every row of the
// Parquet file at path, the key's columns found by their field IDs: for
// ints, a non-null value in key.n, else appendKey's encoding in key.b
// (valid during the call).
func readKeys(ctx context.Context, fsys iceio.IO, path string, ids []int, ints bool, fn func(pos int, k key)) error {
	f, err := fsys.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer pr.Close()
	if pr.NumRows() >= math.MaxUint32 {
		return fmt.Errorf("read %s: %d rows is too many for the key index", path, pr.NumRows())
	}
	sc := pr.MetaData().Schema
	cols := make([]int, len(ids))
	for i, id := range ids {
		cols[i] = -1
		for c := 0; c < sc.NumColumns(); c++ {
			if sc.Column(c).SchemaNode().FieldID() == int32(id) {
				cols[i] = c
				break
			}
		}
		if cols[i] < 0 {
			return fmt.Errorf("read %s: no column with field ID %d (a key column)", path, id)
		}
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer rr.Release()
	pos := 0
	var buf []byte
	for rr.Next() {
		rec := rr.RecordBatch()
		n := int(rec.NumRows())
		if ints {
			var val func(int) int64
			switch a := rec.Column(0).(type) {
			case *array.Int64:
				val = a.Value
			case *array.Int32:
				val = func(i int) int64 { return int64(a.Value(i)) }
			}
			if val != nil {
				a := rec.Column(0)
				for i := 0; i < n; i++ {
					if a.IsNull(i) {
						buf = buf[:0]
						if buf, err = appendKey(buf, a, i); err != nil {
							return err
						}
						fn(pos, key{b: buf})
					} else {
						fn(pos, key{n: val(i)})
					}
					pos++
				}
				continue
			}
		}
		for i := 0; i < n; i++ {
			buf = buf[:0]
			for c := range cols {
				if buf, err = appendKey(buf, rec.Column(c), i); err != nil {
					return err
				}
			}
			fn(pos, key{b: buf})
			pos++
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// readPositions calls fn with every (file_path, pos) of a position-delete
// file.
func readPositions(ctx context.Context, fsys iceio.IO, path string, fn func(string, int64)) error {
	f, err := fsys.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer pr.Close()
	sc := pr.MetaData().Schema
	cols := []int{-1, -1}
	for c := 0; c < sc.NumColumns(); c++ {
		switch sc.Column(c).SchemaNode().FieldID() {
		case posFileID:
			cols[0] = c
		case posPosID:
			cols[1] = c
		}
	}
	if cols[0] < 0 || cols[1] < 0 {
		return fmt.Errorf("read %s: not a position-delete file", path)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		ps, ok1 := rec.Column(0).(*array.String)
		pp, ok2 := rec.Column(1).(*array.Int64)
		if !ok1 || !ok2 {
			return fmt.Errorf("read %s: position-delete columns are %s and %s", path, rec.Column(0).DataType(), rec.Column(1).DataType())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			fn(ps.Value(i), pp.Value(i))
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// locate stages one epoch's keys in x and returns the rows of earlier
// epochs (and earlier files of this one) they replace: for each data file
// of the epoch (data, built from e.data) every key's older rows, then its
// row becomes the key's; for each file of keys deleted for good, every
// key's rows.
//
// An epoch written with equality deletes (eq: the table's mode changed
// while its files waited) only has its rows recorded: its own deletes
// remove the older ones.
func locate(ctx context.Context, fsys iceio.IO, x *keyIndex, e pending, data []ice.DataFile, eq bool) (map[uint32][]uint32, error) {
	dels := map[uint32][]uint32{}
	add := func(l loc) { dels[l.file] = append(dels[l.file], l.pos) }
	if eq {
		add = func(loc) {}
	}
	for i, fd := range e.data {
		if !eq && !slices.Equal(fd.Locate, x.ids) {
			return nil, fmt.Errorf("data file %s: key field IDs %v, the index's are %v", fd.Path, fd.Locate, x.ids)
		}
		fi, err := x.addFile(fd.Path, data[i].Partition())
		if err != nil {
			return nil, err
		}
		if err := readKeys(ctx, fsys, fd.Path, x.ids, x.ints, func(pos int, k key) {
			x.replace(k, loc{file: fi, pos: uint32(pos)}, false, add)
		}); err != nil {
			return nil, err
		}
	}
	for _, fd := range e.deletes {
		if eq {
			break
		}
		if err := readKeys(ctx, fsys, fd.Path, x.ids, x.ints, func(_ int, k key) {
			x.replace(k, loc{}, true, add)
		}); err != nil {
			return nil, err
		}
	}
	return dels, nil
}

// writePositionDeletes writes dels (rows by file of x) as position-delete
// files of tbl, one per partition, sorted by file and position, and
// returns them. Their names carry the pipeline's write UUID, so Collect
// removes those of a commit that never happened.
func (w *writer) writePositionDeletes(ctx context.Context, tbl *table.Table, x *keyIndex, dels map[uint32][]uint32) ([]ice.DataFile, error) {
	if len(dels) == 0 {
		return nil, nil
	}
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	wfs, ok := fsys.(iceio.WriteFileIO)
	if !ok {
		return nil, fmt.Errorf("the table's file IO can't write files")
	}
	groups := map[string][]uint32{} // partition → files
	parts := map[string]map[int]any{}
	for fi := range dels {
		part := x.files[fi].part
		raw, err := json.Marshal(part)
		if err != nil {
			return nil, err
		}
		groups[string(raw)] = append(groups[string(raw)], fi)
		parts[string(raw)] = part
	}
	var out []ice.DataFile
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		files := groups[g]
		slices.SortFunc(files, func(a, b uint32) int { return cmp.Compare(x.files[a].path, x.files[b].path) })
		df, err := w.writePositionFile(tbl, wfs, x, files, dels, parts[g])
		if err != nil {
			for _, f := range out {
				_ = fsys.Remove(f.FilePath())
			}
			return nil, err
		}
		out = append(out, df)
	}
	return out, nil
}

func (w *writer) writePositionFile(tbl *table.Table, wfs iceio.WriteFileIO, x *keyIndex, files []uint32, dels map[uint32][]uint32, part map[int]any) (ice.DataFile, error) {
	path := strings.TrimSuffix(tbl.Location(), "/") + "/data/" + fmt.Sprintf("00000-0-%s-deletes.parquet", writeUUID(w.pipeline))
	fw, err := wfs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	cw := &countingWriter{w: fw}
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDictionaryDefault(true))
	pw, err := pqarrow.NewFileWriter(posDeleteSchema, cw, props, pqarrow.DefaultWriterProps())
	if err != nil {
		_ = fw.Close()
		return nil, err
	}
	// file_path as a dictionary (few files, many rows): the column is
	// written dictionary-encoded without building or hashing a string
	// per row.
	paths := array.NewStringBuilder(memory.DefaultAllocator)
	for _, fi := range files {
		paths.Append(x.files[fi].path)
	}
	dict := paths.NewStringArray()
	paths.Release()
	defer dict.Release()
	var n int64
	minPos, maxPos := int64(-1), int64(-1)
	idx := make([]int32, 0, 64<<10)
	pos := make([]int64, 0, 64<<10)
	flush := func() error {
		if len(idx) == 0 {
			return nil
		}
		ib := array.NewInt32Builder(memory.DefaultAllocator)
		ib.AppendValues(idx, nil)
		ia := ib.NewInt32Array()
		ib.Release()
		pb := array.NewInt64Builder(memory.DefaultAllocator)
		pb.AppendValues(pos, nil)
		pa := pb.NewInt64Array()
		pb.Release()
		da := array.NewDictionaryArray(posDeleteSchema.Field(0).Type, ia, dict)
		ia.Release()
		rec := array.NewRecordBatch(posDeleteSchema, []arrow.Array{da, pa}, int64(len(idx)))
		da.Release()
		pa.Release()
		defer rec.Release()
		idx, pos = idx[:0], pos[:0]
		return pw.WriteBuffered(rec)
	}
	for di, fi := range files {
		ps := dels[fi]
		slices.Sort(ps)
		ps = slices.Compact(ps)
		for _, p := range ps {
			idx = append(idx, int32(di))
			pos = append(pos, int64(p))
			if minPos < 0 || int64(p) < minPos {
				minPos = int64(p)
			}
			maxPos = max(maxPos, int64(p))
			n++
			if len(idx) == cap(idx) {
				if err := flush(); err != nil {
					_ = pw.Close()
					return nil, err
				}
			}
		}
	}
	if err := flush(); err != nil {
		_ = pw.Close()
		return nil, err
	}
	if err := pw.Close(); err != nil { // closes fw too
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	le := func(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
	first, last := x.files[files[0]].path, x.files[files[len(files)-1]].path
	db, err := ice.NewDataFileBuilder(tbl.Spec(), ice.EntryContentPosDeletes, path, ice.ParquetFile, part, nil, nil, n, cw.n)
	if err != nil {
		return nil, err
	}
	db.ValueCounts(map[int]int64{posFileID: n, posPosID: n}).
		NullValueCounts(map[int]int64{posFileID: 0, posPosID: 0}).
		LowerBoundValues(map[int][]byte{posFileID: []byte(first), posPosID: le(minPos)}).
		UpperBoundValues(map[int][]byte{posFileID: []byte(last), posPosID: le(maxPos)})
	return db.Build(), nil
}

// writeDeletionVectors writes dels (rows by file of x) as deletion
// vectors of tbl (format v3), one per data file in one Puffin file, each
// holding the rows of the file's earlier deletion vector and of its
// position deletes (x.posDels) too, and returns them with the vectors
// they replace; x then names the new ones. A data file whose deletion
// vector leaves out some of its position deletes gets a new one too,
// whether dels has rows of it or not. The Puffin file's name carries the
// pipeline's write UUID, like a position-delete file's.
func (w *writer) writeDeletionVectors(ctx context.Context, tbl *table.Table, x *keyIndex, dels map[uint32][]uint32) (added, replaced []ice.DataFile, err error) {
	files := slices.Collect(maps.Keys(dels))
	repairs := 0
	for fi := range x.posDels {
		if _, ok := x.dvs[fi]; ok {
			if _, ok := dels[fi]; !ok {
				files = append(files, fi)
				repairs++
			}
		}
	}
	if len(files) == 0 {
		return nil, nil, nil
	}
	slices.Sort(files)
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return nil, nil, err
	}
	wfs, ok := fsys.(iceio.WriteFileIO)
	if !ok {
		return nil, nil, fmt.Errorf("the table's file IO can't write files")
	}
	meta := tbl.Metadata()
	dw := dv.NewDVWriter(wfs, func(id int32) *ice.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	spec := tbl.Spec()
	specID := int32(spec.ID())
	byPath := make(map[string]uint32, len(files))
	for _, fi := range files {
		f := x.files[fi]
		byPath[f.path] = fi
		if old, ok := x.dvs[fi]; ok {
			bm, err := dv.ReadDV(fsys, old)
			if err != nil {
				return nil, nil, fmt.Errorf("read the deletion vector of %s: %w", f.path, err)
			}
			dw.Load(f.path, bm, specID, f.part)
			replaced = append(replaced, old)
		}
		ps := make([]int64, 0, len(dels[fi])+len(x.posDels[fi]))
		for _, p := range slices.Concat(dels[fi], x.posDels[fi]) {
			ps = append(ps, int64(p))
		}
		if err := dw.Add(f.path, ps, specID, f.part); err != nil {
			return nil, nil, err
		}
	}
	path := strings.TrimSuffix(tbl.Location(), "/") + "/data/" + fmt.Sprintf("00000-0-%s-dv.puffin", writeUUID(w.pipeline))
	if added, err = dw.Flush(ctx, path); err != nil {
		_ = fsys.Remove(path)
		return nil, nil, fmt.Errorf("write deletion vectors %s: %w", path, err)
	}
	for _, df := range added {
		ref := df.ReferencedDataFile()
		if ref == nil {
			return nil, nil, fmt.Errorf("deletion vector in %s names no data file", path)
		}
		x.dvs[byPath[*ref]] = df
		delete(x.posDels, byPath[*ref])
	}
	if repairs > 0 {
		w.d.log.Warn("iceberg: deletion vectors rewritten to hold their data files' position deletes",
			"table", tbl.Identifier(), "files", repairs)
	}
	return added, replaced, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Close() error {
	if cl, ok := c.w.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

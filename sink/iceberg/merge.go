package iceberg

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/openetl/etl/sink"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"
)

// Metadata columns merge mode reads and writes.
const (
	colSeq     = sink.ColumnSeq
	colOp      = sink.ColumnOp
	colDeleted = sink.ColumnDeleted
)

// winner is the latest version of one key in the epoch.
type winner struct {
	rec, row int
	seq      int64
}

// mergeRows reduces an epoch's batches of a Merge table to the latest
// version of each key (highest _openetl_seq; on a tie the one written
// last) and returns them, with _openetl_deleted added (soft deletes) or
// the deleted keys left out (hard deletes), plus the key columns of every
// key the epoch touched, for the equality deletes (allKeys), or of the
// keys left out, which have no row in data (position deletes find the
// others' older rows from data's keys). It releases recs.
func mergeRows(ctx context.Context, recs []arrow.RecordBatch, spec sink.StreamSpec, allKeys bool) (data, keys []arrow.RecordBatch, err error) {
	defer func() {
		for _, r := range recs {
			r.Release()
		}
		if err != nil {
			for _, r := range append(data, keys...) {
				r.Release()
			}
			data, keys = nil, nil
		}
	}()
	var total int
	for _, r := range recs {
		total += int(r.NumRows())
	}
	// A key of one integer column (the usual id) is looked up by value;
	// any other, and a null, by its appendKey encoding.
	var wins map[string]winner
	var winsInt map[int64]winner
	if len(spec.Key) == 1 {
		winsInt = make(map[int64]winner, total)
		wins = make(map[string]winner)
	} else {
		wins = make(map[string]winner, total)
	}
	var buf []byte
	for ri, r := range recs {
		kcols, err := keyColumns(r, spec.Key)
		if err != nil {
			return nil, nil, err
		}
		seqs, ok := column(r, colSeq).(*array.Int64)
		if !ok {
			return nil, nil, fmt.Errorf("iceberg: merge needs an int64 %s column", colSeq)
		}
		var intVal func(int) int64
		if winsInt != nil {
			switch a := kcols[0].(type) {
			case *array.Int64:
				intVal = a.Value
			case *array.Int32:
				intVal = func(i int) int64 { return int64(a.Value(i)) }
			}
		}
		for i := 0; i < int(r.NumRows()); i++ {
			if intVal != nil && kcols[0].IsValid(i) {
				k, s := intVal(i), seqs.Value(i)
				if w, ok := winsInt[k]; ok && w.seq > s {
					continue
				}
				winsInt[k] = winner{rec: ri, row: i, seq: s}
				continue
			}
			buf = buf[:0]
			for _, c := range kcols {
				if buf, err = appendKey(buf, c, i); err != nil {
					return nil, nil, err
				}
			}
			s := seqs.Value(i)
			if w, ok := wins[string(buf)]; ok && w.seq > s {
				continue
			}
			wins[string(buf)] = winner{rec: ri, row: i, seq: s}
		}
	}
	masks := make([]*array.BooleanBuilder, len(recs))
	keep := make([][]bool, len(recs))
	for i, r := range recs {
		keep[i] = make([]bool, r.NumRows())
		masks[i] = array.NewBooleanBuilder(memory.DefaultAllocator)
	}
	for _, w := range wins {
		keep[w.rec][w.row] = true
	}
	for _, w := range winsInt {
		keep[w.rec][w.row] = true
	}
	for i, r := range recs {
		if r.NumRows() == 0 {
			masks[i].Release()
			continue
		}
		masks[i].AppendValues(keep[i], nil)
		mask := masks[i].NewBooleanArray()
		masks[i].Release()
		latest, err := compute.FilterRecordBatch(ctx, r, mask, compute.DefaultFilterOptions())
		mask.Release()
		if err != nil {
			return nil, nil, fmt.Errorf("iceberg: merge: filter: %w", err)
		}
		hard := spec.Deletes == sink.HardDeletes
		if allKeys || hard {
			src := latest
			if !allKeys {
				if src, err = onlyDeletes(ctx, latest); err != nil {
					latest.Release()
					return nil, nil, err
				}
			}
			k, err := project(src, spec.Key)
			if src != latest {
				src.Release()
			}
			if err != nil {
				latest.Release()
				return nil, nil, err
			}
			if k.NumRows() > 0 {
				keys = append(keys, k)
			} else {
				k.Release()
			}
		}
		d, err := withDeleted(ctx, latest, hard)
		latest.Release()
		if err != nil {
			return nil, nil, err
		}
		if d.NumRows() == 0 {
			d.Release()
			continue
		}
		data = append(data, d)
	}
	return data, keys, nil
}

func column(r arrow.RecordBatch, name string) arrow.Array {
	if idx := r.Schema().FieldIndices(name); len(idx) > 0 {
		return r.Column(idx[0])
	}
	return nil
}

func keyColumns(r arrow.RecordBatch, key []string) ([]arrow.Array, error) {
	out := make([]arrow.Array, len(key))
	for i, k := range key {
		if out[i] = column(r, k); out[i] == nil {
			return nil, fmt.Errorf("iceberg: merge key column %q is not in the rows (schema %s)", k, r.Schema())
		}
	}
	return out, nil
}

// appendKey appends a self-delimiting encoding of a's value at i.
func appendKey(buf []byte, a arrow.Array, i int) ([]byte, error) {
	if a.IsNull(i) {
		return append(buf, 0), nil
	}
	buf = append(buf, 1)
	switch a := a.(type) {
	case *array.Int64:
		return binary.LittleEndian.AppendUint64(buf, uint64(a.Value(i))), nil
	case *array.Int32:
		return binary.LittleEndian.AppendUint64(buf, uint64(int64(a.Value(i)))), nil
	case *array.Int16:
		return binary.LittleEndian.AppendUint64(buf, uint64(int64(a.Value(i)))), nil
	case *array.Int8:
		return binary.LittleEndian.AppendUint64(buf, uint64(int64(a.Value(i)))), nil
	case *array.String:
		s := a.Value(i)
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		return append(buf, s...), nil
	case *array.Binary:
		b := a.Value(i)
		buf = binary.AppendUvarint(buf, uint64(len(b)))
		return append(buf, b...), nil
	case *array.FixedSizeBinary:
		return append(buf, a.Value(i)...), nil
	case *array.Date32:
		return binary.LittleEndian.AppendUint32(buf, uint32(a.Value(i))), nil
	case *array.Timestamp:
		return binary.LittleEndian.AppendUint64(buf, uint64(a.Value(i))), nil
	case *array.Decimal128:
		v := a.Value(i)
		buf = binary.LittleEndian.AppendUint64(buf, v.LowBits())
		return binary.LittleEndian.AppendUint64(buf, uint64(v.HighBits())), nil
	case *array.Boolean:
		if a.Value(i) {
			return append(buf, 1), nil
		}
		return append(buf, 0), nil
	case *array.Float64:
		return binary.LittleEndian.AppendUint64(buf, math.Float64bits(a.Value(i))), nil
	}
	return nil, fmt.Errorf("iceberg: merge key of type %s is not supported", a.DataType())
}

// project returns r's columns named cols, in that order.
func project(r arrow.RecordBatch, cols []string) (arrow.RecordBatch, error) {
	fields := make([]arrow.Field, len(cols))
	arrs := make([]arrow.Array, len(cols))
	for i, c := range cols {
		idx := r.Schema().FieldIndices(c)
		if len(idx) == 0 {
			return nil, fmt.Errorf("iceberg: merge key column %q is not in the rows", c)
		}
		fields[i] = r.Schema().Field(idx[0])
		arrs[i] = r.Column(idx[0])
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, r.NumRows()), nil
}

// onlyDeletes returns r's rows whose _openetl_op is "delete".
func onlyDeletes(ctx context.Context, r arrow.RecordBatch) (arrow.RecordBatch, error) {
	ops, ok := column(r, colOp).(*array.String)
	if !ok {
		return nil, fmt.Errorf("iceberg: merge needs a utf8 %s column", colOp)
	}
	b := array.NewBooleanBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.Reserve(ops.Len())
	for i := 0; i < ops.Len(); i++ {
		b.UnsafeAppend(ops.IsValid(i) && ops.Value(i) == sink.OpDelete)
	}
	flags := b.NewBooleanArray()
	defer flags.Release()
	return compute.FilterRecordBatch(ctx, r, flags, compute.DefaultFilterOptions())
}

// withDeleted returns r with the column _openetl_deleted (true where
// _openetl_op is "delete") appended, or, for hard deletes, r without its
// deleted rows.
func withDeleted(ctx context.Context, r arrow.RecordBatch, hard bool) (arrow.RecordBatch, error) {
	ops, ok := column(r, colOp).(*array.String)
	if !ok {
		return nil, fmt.Errorf("iceberg: merge needs a utf8 %s column", colOp)
	}
	b := array.NewBooleanBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.Reserve(ops.Len())
	for i := 0; i < ops.Len(); i++ {
		del := ops.IsValid(i) && ops.Value(i) == sink.OpDelete
		if hard {
			b.UnsafeAppend(!del)
		} else {
			b.UnsafeAppend(del)
		}
	}
	flags := b.NewBooleanArray()
	defer flags.Release()
	if hard {
		return compute.FilterRecordBatch(ctx, r, flags, compute.DefaultFilterOptions())
	}
	if len(r.Schema().FieldIndices(colDeleted)) > 0 {
		r.Retain()
		return r, nil
	}
	fields := append(r.Schema().Fields(), arrow.Field{Name: colDeleted, Type: arrow.FixedWidthTypes.Boolean})
	md := r.Schema().Metadata()
	cols := append(append([]arrow.Array{}, r.Columns()...), flags)
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, r.NumRows()), nil
}

// writeMerge writes a Merge table's epoch: the latest version of each key
// as data files, and an equality-delete file with every key the epoch
// touched. Committed in one row-delta snapshot, the deletes remove the
// keys' older rows (data sequence numbers below the snapshot's) and not
// the new ones (same sequence number).
//
// With position deletes (the default) the epoch writes no delete file:
// its data files, and a file with the keys it deleted for good (hard
// deletes; written like an equality-delete file but never added to the
// table), are marked Locate, and Commit finds and deletes the keys'
// older rows by position (posdelete.go).
func (w *writer) writeMerge(ctx context.Context, name string, spec sink.StreamSpec, tf tableFiles, recs []arrow.RecordBatch) (tableFiles, error) {
	locate := w.d.mergeDeletes(name) == PositionDeletes
	data, keys, err := mergeRows(ctx, recs, spec, !locate)
	if err != nil {
		return tf, err
	}
	release := func() {
		for _, r := range append(data, keys...) {
			if r != nil {
				r.Release()
			}
		}
	}
	defer release()
	tf.Rows = 0
	for _, d := range data {
		tf.Rows += d.NumRows()
	}
	var tbl *table.Table
	var last *arrow.Schema
	schemas := make([]*arrow.Schema, 0, len(data)+1)
	for _, d := range data {
		schemas = append(schemas, d.Schema())
	}
	if len(data) == 0 {
		if len(keys) == 0 {
			return tf, nil
		}
		// Only hard deletes: the table must exist to hold the deletes.
		schemas = append(schemas, keys[0].Schema())
	}
	for _, sc := range schemas {
		if last != nil && last.Equal(sc) {
			continue
		}
		last = sc
		if tbl, err = w.d.ensureTable(ctx, w.pipeline, name, sc); err != nil {
			return tf, err
		}
	}
	for start := 0; start < len(data); {
		end := start + 1
		for end < len(data) && data[end].Schema().Equal(data[start].Schema()) {
			end++
		}
		files, err := w.write(ctx, tbl, data[start:end])
		tf.Data = append(tf.Data, files...)
		if err != nil {
			w.removeFiles(ctx, []tableFiles{tf})
			return tf, err
		}
		start = end
	}
	ids := make([]int, len(spec.Key))
	for i, k := range spec.Key {
		f, ok := tbl.Schema().FindFieldByName(k)
		if !ok {
			return tf, fmt.Errorf("iceberg: table %s has no key column %q", name, k)
		}
		ids[i] = f.ID
	}
	if locate {
		for i := range tf.Data {
			tf.Data[i].Locate = ids
		}
		if len(keys) == 0 {
			return tf, nil
		}
	}
	seq := func(yield func(arrow.RecordBatch, error) bool) {
		for _, k := range keys { // retained by iceberg-go as needed; released here
			if !yield(k, nil) {
				return
			}
		}
	}
	dels, err := tbl.NewTransaction().WriteEqualityDeletes(ctx, ids, seq)
	for _, df := range dels {
		fd, derr := describe(df)
		if derr != nil {
			err = derr
			break
		}
		if locate {
			fd.Locate = ids
		}
		tf.Deletes = append(tf.Deletes, fd)
	}
	if err != nil {
		w.removeFiles(ctx, []tableFiles{tf})
		return tf, fmt.Errorf("iceberg: table %s: write equality deletes: %w", name, err)
	}
	return tf, nil
}

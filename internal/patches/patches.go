// Package patches gathers staged patch batches (sink.PatchMetadataKey:
// rows of _openetl_id, _openetl_seq and the columns they set) into one
// value index per column, for the destinations that apply them by
// rewriting rows: sink/parquet and sink/iceberg.
package patches

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/sink"
)

// Column is one column's patch values: Values[At[id]] is the value for
// the row whose _openetl_id is id. Rows whose value is null set nothing
// and are not in At.
type Column struct {
	Field  arrow.Field
	Values arrow.Array
	At     map[string]int
}

// Read gathers tables of patch rows into their columns by name. names[i]
// says what tables[i] is, for errors. It doesn't release the tables;
// Release frees what it returns.
func Read(tables []arrow.Table, names []string) (map[string]*Column, error) {
	parts := map[string][]arrow.Array{}
	fields := map[string]arrow.Field{}
	idsOf := map[string][]*array.String{}
	var keep []arrow.Array
	defer func() {
		for _, a := range keep {
			a.Release()
		}
	}()
	for t, tbl := range tables {
		sc := tbl.Schema()
		idIdx := sc.FieldIndices(sink.ColumnID)
		if len(idIdx) != 1 {
			return nil, fmt.Errorf("patches %s have no %s", names[t], sink.ColumnID)
		}
		ids, err := Chunk(tbl, idIdx[0])
		if err != nil {
			return nil, err
		}
		keep = append(keep, ids)
		sids, ok := ids.(*array.String)
		if !ok {
			return nil, fmt.Errorf("patches %s: %s is %s, not utf8", names[t], sink.ColumnID, ids.DataType())
		}
		for i, f := range sc.Fields() {
			if f.Name == sink.ColumnID || f.Name == sink.ColumnSeq {
				continue
			}
			if have, ok := fields[f.Name]; ok && !arrow.TypeEqual(have.Type, f.Type) {
				return nil, fmt.Errorf("patches give column %q as %s and as %s", f.Name, have.Type, f.Type)
			}
			fields[f.Name] = f
			col, err := Chunk(tbl, i)
			if err != nil {
				return nil, err
			}
			keep = append(keep, col)
			parts[f.Name] = append(parts[f.Name], col)
			idsOf[f.Name] = append(idsOf[f.Name], sids)
		}
	}
	out := map[string]*Column{}
	for name, ps := range parts {
		vals, err := array.Concatenate(ps, memory.DefaultAllocator)
		if err != nil {
			Release(out)
			return nil, fmt.Errorf("patches of column %q: %w", name, err)
		}
		c := &Column{Field: fields[name], Values: vals, At: map[string]int{}}
		k := 0
		for _, ids := range idsOf[name] {
			for i := range ids.Len() {
				if vals.IsValid(k) { // a null sets nothing
					c.At[ids.Value(i)] = k
				}
				k++
			}
		}
		out[name] = c
	}
	return out, nil
}

// Release frees the columns Read returned.
func Release(cols map[string]*Column) {
	for _, c := range cols {
		c.Values.Release()
	}
}

// Chunk returns column i of tbl as one array (retained: the caller
// releases it).
func Chunk(tbl arrow.Table, i int) (arrow.Array, error) {
	chunks := tbl.Column(i).Data().Chunks()
	switch len(chunks) {
	case 0:
		return array.MakeArrayOfNull(memory.DefaultAllocator, tbl.Schema().Field(i).Type, 0), nil
	case 1:
		chunks[0].Retain()
		return chunks[0], nil
	}
	return array.Concatenate(chunks, memory.DefaultAllocator)
}

package parquet

import (
	"hash/maphash"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	pq "github.com/apache/arrow-go/v18/parquet"
)

// dictSample is the most values of a column that DictionaryAuto looks at.
const dictSample = 4096

var dictSeed = maphash.MakeSeed()

// fileProps returns the writer properties of a file whose first batch is
// rec.
func (d *Destination) fileProps(rec arrow.RecordBatch) *pq.WriterProperties {
	if d.dict != DictionaryAuto {
		return d.props
	}
	opts := append(d.baseProps[:len(d.baseProps):len(d.baseProps)], pq.WithDictionaryDefault(false))
	for i, f := range rec.Schema().Fields() {
		if lowCardinality(rec.Column(i)) {
			opts = append(opts, pq.WithDictionaryFor(f.Name, true))
		}
	}
	return pq.NewWriterProperties(opts...)
}

// lowCardinality reports whether col is worth a dictionary: an Arrow
// dictionary, or text or binary whose sampled values are at most one in
// four distinct.
func lowCardinality(col arrow.Array) bool {
	var hash func(i int) uint64
	switch c := col.(type) {
	case *array.Dictionary:
		return true
	case *array.String:
		hash = func(i int) uint64 { return maphash.String(dictSeed, c.Value(i)) }
	case *array.LargeString:
		hash = func(i int) uint64 { return maphash.String(dictSeed, c.Value(i)) }
	case *array.Binary:
		hash = func(i int) uint64 { return maphash.Bytes(dictSeed, c.Value(i)) }
	case *array.LargeBinary:
		hash = func(i int) uint64 { return maphash.Bytes(dictSeed, c.Value(i)) }
	default:
		return false
	}
	seen := make(map[uint64]struct{}, 64)
	n := 0
	for i := 0; i < col.Len() && n < dictSample; i++ {
		if col.IsNull(i) {
			continue
		}
		n++
		seen[hash(i)] = struct{}{}
		if len(seen)*4 > dictSample {
			return false // past any sample's threshold
		}
	}
	return n > 0 && len(seen)*4 <= n
}

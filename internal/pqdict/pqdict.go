// Package pqdict decides which Parquet columns get dictionary encoding,
// for sink/parquet.
//
// arrow-go tries a dictionary on every column by default. On a column
// whose values are unique per row (ids, emails, timestamps) that costs a
// hash-table insert per value until the dictionary outgrows its page
// limit (1 MiB by default: a whole row group of int64s) and is abandoned;
// measured, that was about half the writer's CPU, and zstd packs the
// plain pages as small or smaller. Text with few distinct values
// (statuses, countries, enums) gains from one. (iceberg-go's writer
// needs none of this: with its 20000-row pages it drops a dictionary that
// doesn't shrink the first page, and a paired benchmark showed no gain.)
package pqdict

import (
	"hash/maphash"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Sample is the most values of a column LowCardinality looks at.
const Sample = 4096

var seed = maphash.MakeSeed()

// LowCardinality reports whether col is worth a dictionary: an Arrow
// dictionary column, or text or binary of which at most one in four of
// the first Sample non-null values is distinct. Other types are not
// (zstd handles repeated numbers well). It allocates a small map, once
// per call: call it per file, not per batch.
func LowCardinality(col arrow.Array) bool {
	var hash func(i int) uint64
	switch c := col.(type) {
	case *array.Dictionary:
		return true
	case *array.String:
		hash = func(i int) uint64 { return maphash.String(seed, c.Value(i)) }
	case *array.LargeString:
		hash = func(i int) uint64 { return maphash.String(seed, c.Value(i)) }
	case *array.Binary:
		hash = func(i int) uint64 { return maphash.Bytes(seed, c.Value(i)) }
	case *array.LargeBinary:
		hash = func(i int) uint64 { return maphash.Bytes(seed, c.Value(i)) }
	default:
		return false
	}
	seen := make(map[uint64]struct{}, 64)
	n := 0
	for i := 0; i < col.Len() && n < Sample; i++ {
		if col.IsNull(i) {
			continue
		}
		n++
		seen[hash(i)] = struct{}{}
		if len(seen)*4 > Sample {
			return false // past any sample's threshold
		}
	}
	return n > 0 && len(seen)*4 <= n
}

// Columns returns the names of rec's top-level columns that
// LowCardinality picks, in schema order.
func Columns(rec arrow.RecordBatch) []string {
	var out []string
	for i, f := range rec.Schema().Fields() {
		if LowCardinality(rec.Column(i)) {
			out = append(out, f.Name)
		}
	}
	return out
}

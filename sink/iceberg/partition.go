package iceberg

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	ice "github.com/apache/iceberg-go"
	"github.com/twmb/murmur3"
)

// partitioner finds the partition of each row of a batch for the engine's
// writer: a table's partition spec whose transforms it computes on Arrow
// arrays itself, row by row without boxing a value, as the Iceberg spec
// defines them (identity, year, month, day, hour, bucket, truncate and
// void, of top-level int, long, date, timestamp, timestamptz and string
// columns). Specs with other transforms or source types stay with
// iceberg-go's writer. TestPartitionerMatchesIcebergGo checks every
// transform against iceberg-go's own.
type partitioner struct {
	spec   ice.PartitionSpec
	schema *ice.Schema
	fields []pfield
	key    []byte
	index  map[string]int // a partition's key → its place in parts
	parts  []*partValue
	rows   []int32 // per row of the last batch: its partition
}

// partValue is one partition: its values, by partition field ID for the
// manifest, and its path under the table's data directory.
type partValue struct {
	values map[int]any
	path   string
}

type pkind uint8

const (
	pIdentity pkind = iota
	pYear
	pMonth
	pDay
	pHour
	pBucket
	pTruncate
	pVoid
)

// pfield is one field of the spec.
type pfield struct {
	id   int // the partition field's ID
	name string
	src  ice.Type
	kind pkind
	n    int64 // buckets, or the truncate width
	col  int   // the source column in the batch
}

// newPartitioner returns tbl's spec's partitioner, and false when the
// spec has a transform or source type it does not compute.
func newPartitioner(spec ice.PartitionSpec, schema *ice.Schema) (*partitioner, bool) {
	p := &partitioner{spec: spec, schema: schema, index: map[string]int{}}
	for _, f := range spec.Fields() {
		if len(f.SourceIDs) > 1 {
			return nil, false // a multi-argument transform
		}
		var top *ice.NestedField
		for _, c := range schema.Fields() {
			if c.ID == f.SourceID() {
				top = &c
				break
			}
		}
		if top == nil {
			return nil, false // a nested source column
		}
		pf := pfield{id: f.FieldID, name: top.Name, src: top.Type}
		timeish := false
		switch top.Type.(type) {
		case ice.Int32Type, ice.Int64Type:
		case ice.DateType, ice.TimestampType, ice.TimestampTzType:
			timeish = true
		case ice.StringType:
		default:
			return nil, false
		}
		switch t := f.Transform.(type) {
		case ice.IdentityTransform:
			pf.kind = pIdentity
		case ice.VoidTransform:
			pf.kind = pVoid
		case ice.YearTransform, ice.MonthTransform, ice.DayTransform:
			if !timeish {
				return nil, false
			}
			switch t.(type) {
			case ice.YearTransform:
				pf.kind = pYear
			case ice.MonthTransform:
				pf.kind = pMonth
			default:
				pf.kind = pDay
			}
		case ice.HourTransform:
			if _, ok := top.Type.(ice.DateType); !timeish || ok {
				return nil, false
			}
			pf.kind = pHour
		case ice.BucketTransform:
			if t.NumBuckets <= 0 {
				return nil, false
			}
			pf.kind, pf.n = pBucket, int64(t.NumBuckets)
		case ice.TruncateTransform:
			if t.Width <= 0 || timeish {
				return nil, false
			}
			pf.kind, pf.n = pTruncate, int64(t.Width)
		default:
			return nil, false
		}
		p.fields = append(p.fields, pf)
	}
	return p, true
}

// assign finds the partition of each row of rec (whose columns are the
// table's, as ToRequestedSchema gives them) into p.rows, adding the
// partitions not seen yet.
func (p *partitioner) assign(rec arrow.RecordBatch) error {
	cols := make([]arrow.Array, len(p.fields))
	for i, f := range p.fields {
		if f.kind == pVoid {
			continue
		}
		idx := rec.Schema().FieldIndices(f.name)
		if len(idx) != 1 {
			return fmt.Errorf("iceberg: partition source column %q is not in the batch", f.name)
		}
		cols[i] = rec.Column(idx[0])
		if !p.takes(f, cols[i]) {
			return fmt.Errorf("iceberg: partition source column %q has Arrow type %s", f.name, cols[i].DataType())
		}
	}
	n := int(rec.NumRows())
	p.rows = p.rows[:0]
	for row := range n {
		p.key = p.key[:0]
		for i, f := range p.fields {
			p.key = f.appendKey(p.key, cols[i], row)
		}
		at, ok := p.index[string(p.key)]
		if !ok {
			at = len(p.parts)
			p.index[string(p.key)] = at
			p.parts = append(p.parts, p.newPart(cols, row))
		}
		p.rows = append(p.rows, int32(at))
	}
	return nil
}

// takes reports whether a's Arrow type is the one f's source type gets.
func (p *partitioner) takes(f pfield, a arrow.Array) bool {
	switch f.src.(type) {
	case ice.Int32Type:
		_, ok := a.(*array.Int32)
		return ok
	case ice.Int64Type:
		_, ok := a.(*array.Int64)
		return ok
	case ice.DateType:
		_, ok := a.(*array.Date32)
		return ok
	case ice.TimestampType, ice.TimestampTzType:
		ts, ok := a.(*array.Timestamp)
		return ok && ts.DataType().(*arrow.TimestampType).Unit == arrow.Microsecond
	case ice.StringType:
		switch a.(type) {
		case *array.String, *array.LargeString:
			return true
		}
	}
	return false
}

// newPart makes the partition of rec's row.
func (p *partitioner) newPart(cols []arrow.Array, row int) *partValue {
	pv := &partValue{values: make(map[int]any, len(p.fields))}
	rec := make(structLike, len(p.fields))
	for i, f := range p.fields {
		v := f.value(cols[i], row)
		pv.values[f.id] = v
		rec[i] = v
	}
	pv.path = p.spec.PartitionToPath(rec, p.schema)
	return pv
}

// structLike is a partition tuple for PartitionToPath.
type structLike []any

func (s structLike) Size() int          { return len(s) }
func (s structLike) Get(pos int) any    { return s[pos] }
func (s structLike) Set(pos int, v any) { s[pos] = v }

// The transforms, on a row's value: ints for the numeric results (years,
// months, days, hours since 1970; a bucket; a truncated or identical
// int), the string for strings.

const (
	microsPerHour = int64(time.Hour / time.Microsecond)
	microsPerDay  = 24 * microsPerHour
)

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// intOf returns the row's value of an int, long, date or timestamp
// column as an int64 (days for a date, micros for a timestamp).
func intOf(a arrow.Array, row int) int64 {
	switch a := a.(type) {
	case *array.Int32:
		return int64(a.Value(row))
	case *array.Int64:
		return a.Value(row)
	case *array.Date32:
		return int64(a.Value(row))
	case *array.Timestamp:
		return int64(a.Value(row))
	}
	return 0
}

func strOf(a arrow.Array, row int) string {
	switch a := a.(type) {
	case *array.String:
		return a.Value(row)
	case *array.LargeString:
		return a.Value(row)
	}
	return ""
}

func (f pfield) isString() bool {
	_, ok := f.src.(ice.StringType)
	return ok
}

// days returns the days since 1970 of a date or timestamp value.
func (f pfield) days(v int64) int64 {
	if _, ok := f.src.(ice.DateType); ok {
		return v
	}
	return floorDiv(v, microsPerDay)
}

// num computes the transform of a non-null value of an int, long, date
// or timestamp column.
func (f pfield) num(v int64) int64 {
	switch f.kind {
	case pYear, pMonth:
		t := time.Unix(f.days(v)*86400, 0).UTC()
		years := int64(t.Year() - 1970)
		if f.kind == pYear {
			return years
		}
		return years*12 + int64(t.Month()) - 1
	case pDay:
		return f.days(v)
	case pHour:
		return floorDiv(v, microsPerHour)
	case pBucket:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		return bucketOf(murmur3.Sum32(b[:]), f.n)
	case pTruncate:
		return v - (((v % f.n) + f.n) % f.n)
	}
	return v // identity
}

func bucketOf(hash uint32, n int64) int64 {
	return int64((int32(hash) & math.MaxInt32) % int32(n))
}

// str computes the transform of a non-null string value: the string for
// identity and truncate, and for bucket ok false with the bucket in b.
func (f pfield) str(s string) (out string, b int64, isInt bool) {
	switch f.kind {
	case pBucket:
		return "", bucketOf(murmur3.StringSum32(s), f.n), true
	case pTruncate:
		n := f.n
		for i := range s {
			if n == 0 {
				return s[:i], 0, false
			}
			n--
		}
	}
	return s, 0, false
}

// appendKey appends the row's transform result to key: a null byte, or 1
// and the value (8 bytes, or the length and the bytes of a string).
func (f pfield) appendKey(key []byte, a arrow.Array, row int) []byte {
	if f.kind == pVoid || a.IsNull(row) {
		return append(key, 0)
	}
	if f.isString() {
		s, b, isInt := f.str(strOf(a, row))
		if isInt {
			return binary.LittleEndian.AppendUint64(append(key, 1), uint64(b))
		}
		key = binary.LittleEndian.AppendUint32(append(key, 2), uint32(len(s)))
		return append(key, s...)
	}
	return binary.LittleEndian.AppendUint64(append(key, 1), uint64(f.num(intOf(a, row))))
}

// value returns the row's partition value as iceberg-go records it: nil
// for null; int32 for year, month, hour and bucket; ice.Date for day;
// the source's Go type (int32, int64, ice.Date, ice.Timestamp, string)
// for identity and truncate.
func (f pfield) value(a arrow.Array, row int) any {
	if f.kind == pVoid || a.IsNull(row) {
		return nil
	}
	if f.isString() {
		s, b, isInt := f.str(strOf(a, row))
		if isInt {
			return int32(b)
		}
		return s
	}
	v := f.num(intOf(a, row))
	switch f.kind {
	case pYear, pMonth, pHour, pBucket:
		return int32(v)
	case pDay:
		return ice.Date(v)
	}
	switch f.src.(type) {
	case ice.Int32Type:
		return int32(v)
	case ice.DateType:
		return ice.Date(v)
	case ice.TimestampType, ice.TimestampTzType:
		return ice.Timestamp(v)
	}
	return v
}

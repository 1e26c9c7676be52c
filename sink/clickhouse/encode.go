package clickhouse

import (
	"encoding/json"
	"fmt"
	"math/big"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

// Quarantine reasons: why a row was set aside instead of written.
const (
	// ReasonOutOfRange: a date, timestamp or decimal beyond what the
	// column's ClickHouse type holds (Date before 1970 or after 2149,
	// DateTime outside 1970..2106, a decimal wider than 38 digits on a
	// server without Decimal256).
	ReasonOutOfRange = "out_of_range"
	// ReasonSubSecond: a timestamp with a fraction of a second, for a
	// DateTime column (servers without DateTime64): never truncated.
	ReasonSubSecond = "sub_second"
	// ReasonNullKey: a null in a key column of a merge table (ClickHouse
	// can't sort by a Nullable column).
	ReasonNullKey = "null_key"
	// ReasonNullArray: a null list (an Array column holds empty arrays,
	// not nulls: writing one would make null and empty the same).
	ReasonNullArray = "null_array"
)

// badRow is one quarantined row: the first column and reason found.
type badRow struct {
	row    int
	column string
	reason string
}

// checkColumn appends to bad the rows of arr whose value t can't hold.
// truncate allows sub-second timestamps (the destination's own
// _openetl_synced_at on a DateTime column).
func checkColumn(bad []badRow, name string, t colType, key, truncate bool, arr arrow.Array) []badRow {
	n := arr.Len()
	if key && arr.NullN() > 0 {
		for i := range n {
			if arr.IsNull(i) {
				bad = append(bad, badRow{i, name, ReasonNullKey})
			}
		}
	}
	switch t.kind {
	case kDate:
		lo, hi := int64(0), int64(dateMaxDays)
		if t.ch == "Date32" || t.ch == "Nullable(Date32)" {
			lo, hi = date32MinDays, date32MaxDays
		}
		for i := range n {
			if arr.IsValid(i) {
				if d := dateDays(arr, i); d < lo || d > hi {
					bad = append(bad, badRow{i, name, ReasonOutOfRange})
				}
			}
		}
	case kDateTime, kDateTime64:
		ts := arr.(*array.Timestamp)
		unit := ts.DataType().(*arrow.TimestampType).Unit
		lo, hi := int64(0), int64(dateTimeMaxSecs)
		if t.kind == kDateTime64 {
			lo, hi = dt64MinSecs, dt64MaxSecs
		}
		for i := range n {
			if !ts.IsValid(i) {
				continue
			}
			secs, frac := splitTimestamp(int64(ts.Value(i)), unit)
			switch {
			case secs < lo || secs > hi:
				bad = append(bad, badRow{i, name, ReasonOutOfRange})
			case t.kind == kDateTime && frac != 0 && !truncate:
				bad = append(bad, badRow{i, name, ReasonSubSecond})
			}
		}
	case kDecimal:
		var prec int32
		switch dt := arr.DataType().(type) {
		case *arrow.Decimal128Type:
			prec = dt.Precision
		case *arrow.Decimal256Type:
			prec = dt.Precision
		}
		if prec <= t.prec {
			break
		}
		limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.prec)), nil)
		for i := range n {
			if arr.IsValid(i) {
				if v := decimalBig(arr, i); new(big.Int).Abs(v).Cmp(limit) >= 0 {
					bad = append(bad, badRow{i, name, ReasonOutOfRange})
				}
			}
		}
	case kArray:
		if arr.NullN() > 0 {
			for i := range n {
				if arr.IsNull(i) {
					bad = append(bad, badRow{i, name, ReasonNullArray})
				}
			}
		}
	}
	return bad
}

func dateDays(arr arrow.Array, i int) int64 {
	switch a := arr.(type) {
	case *array.Date32:
		return int64(a.Value(i))
	case *array.Date64:
		return int64(a.Value(i)) / 86400000
	}
	return 0
}

// splitTimestamp returns a timestamp's whole seconds (floored) and the
// fraction in the unit.
func splitTimestamp(v int64, unit arrow.TimeUnit) (secs, frac int64) {
	per := int64(1)
	switch unit {
	case arrow.Millisecond:
		per = 1000
	case arrow.Microsecond:
		per = microsPerSecond
	case arrow.Nanosecond:
		per = nanosPerSecond
	}
	secs, frac = v/per, v%per
	if frac < 0 {
		secs, frac = secs-1, frac+per
	}
	return secs, frac * (nanosPerSecond / per)
}

func decimalBig(arr arrow.Array, i int) *big.Int {
	switch a := arr.(type) {
	case *array.Decimal128:
		return a.Value(i).BigInt()
	case *array.Decimal256:
		return a.Value(i).BigInt()
	}
	return new(big.Int)
}

// encode returns the rows sel of arr (every row when sel is nil) as the
// slice clickhouse-go's column Append takes for t: []T, or []*T with nil
// for a null in a Nullable column. Slices are allocated once per column
// per batch, never per row (decimals and fixed strings excepted: the
// driver takes them only as values that own their bytes).
//
// sc, when not nil, lends the slices of the most common columns (strings,
// timestamps): the driver copies what Append is given, so the writer's
// one scratch serves every column of every batch in turn.
func encode(t colType, arr arrow.Array, sel []int, truncate bool, sc *scratch) (any, error) {
	switch t.kind {
	case kInt8:
		return prim(arr.(*array.Int8).Int8Values(), arr, sel, t.nullable), nil
	case kInt16:
		return prim(arr.(*array.Int16).Int16Values(), arr, sel, t.nullable), nil
	case kInt32:
		return prim(arr.(*array.Int32).Int32Values(), arr, sel, t.nullable), nil
	case kInt64:
		return prim(arr.(*array.Int64).Int64Values(), arr, sel, t.nullable), nil
	case kUint8:
		return prim(arr.(*array.Uint8).Uint8Values(), arr, sel, t.nullable), nil
	case kUint16:
		return prim(arr.(*array.Uint16).Uint16Values(), arr, sel, t.nullable), nil
	case kUint32:
		return prim(arr.(*array.Uint32).Uint32Values(), arr, sel, t.nullable), nil
	case kUint64:
		return prim(arr.(*array.Uint64).Uint64Values(), arr, sel, t.nullable), nil
	case kFloat32:
		return prim(arr.(*array.Float32).Float32Values(), arr, sel, t.nullable), nil
	case kFloat64:
		return prim(arr.(*array.Float64).Float64Values(), arr, sel, t.nullable), nil
	case kBool:
		a := arr.(*array.Boolean)
		return gen(a, sel, t.nullable, a.Value), nil
	case kBoolU8:
		a := arr.(*array.Boolean)
		return gen(a, sel, t.nullable, func(i int) uint8 {
			if a.Value(i) {
				return 1
			}
			return 0
		}), nil
	case kString:
		return encodeString(arr, sel, t.nullable, sc)
	case kFixed:
		a := arr.(*array.FixedSizeBinary)
		return gen(a, sel, t.nullable, func(i int) string { return string(a.Value(i)) }), nil
	case kUUID:
		a := arr.(*array.FixedSizeBinary)
		return gen(a, sel, t.nullable, func(i int) uuid.UUID { return uuid.UUID(a.Value(i)) }), nil
	case kDecimal:
		return encodeDecimal(arr, sel, t)
	case kDate:
		return gen(arr, sel, t.nullable, func(i int) time.Time {
			return time.Unix(dateDays(arr, i)*86400, 0).UTC()
		}), nil
	case kDateTime, kDateTime64:
		a := arr.(*array.Timestamp)
		unit := a.DataType().(*arrow.TimestampType).Unit
		value := func(i int) time.Time {
			secs, frac := splitTimestamp(int64(a.Value(i)), unit)
			if t.kind == kDateTime {
				frac = 0 // only for truncate columns: checkColumn quarantined the rest
			}
			return time.Unix(secs, frac).UTC()
		}
		if sc != nil {
			return genInto(a, sel, t.nullable, value, &sc.times, &sc.timePtrs), nil
		}
		return gen(a, sel, t.nullable, value), nil
	case kArray:
		return encodeArray(t, arr, sel)
	case kJSON:
		var err error
		v := gen(arr, sel, t.nullable, func(i int) string {
			b, jerr := json.Marshal(arr.GetOneForMarshal(i))
			if jerr != nil && err == nil {
				err = jerr
			}
			return string(b)
		})
		return v, err
	}
	return nil, fmt.Errorf("no encoder for %s", t.ch)
}

// prim passes Arrow's value buffer through when it can (every row, not
// Nullable), else copies the selected rows once.
func prim[T any](vals []T, arr arrow.Array, sel []int, nullable bool) any {
	n := arr.Len()
	if sel != nil {
		n = len(sel)
	}
	row := func(k int) int {
		if sel != nil {
			return sel[k]
		}
		return k
	}
	if !nullable {
		if sel == nil {
			return vals
		}
		out := make([]T, n)
		for k := range out {
			out[k] = vals[row(k)]
		}
		return out
	}
	out := make([]*T, n)
	for k := range out {
		if i := row(k); arr.IsValid(i) {
			out[k] = &vals[i]
		}
	}
	return out
}

// gen is prim for values computed from the array.
func gen[T any](arr arrow.Array, sel []int, nullable bool, value func(int) T) any {
	n := arr.Len()
	if sel != nil {
		n = len(sel)
	}
	vals := make([]T, n)
	var ptrs []*T
	if nullable {
		ptrs = make([]*T, n)
	}
	for k := range vals {
		i := k
		if sel != nil {
			i = sel[k]
		}
		if arr.IsValid(i) {
			vals[k] = value(i)
			if nullable {
				ptrs[k] = &vals[k]
			}
		}
	}
	if nullable {
		return ptrs
	}
	return vals
}

func encodeString(arr arrow.Array, sel []int, nullable bool, sc *scratch) (any, error) {
	var value func(int) string
	switch a := arr.(type) {
	case *array.String:
		value = a.Value
	case *array.LargeString:
		value = a.Value
	case *array.Binary:
		value = a.ValueString
	case *array.LargeBinary:
		value = a.ValueString
	case *array.Dictionary:
		dict, err := encodeString(a.Dictionary(), nil, false, nil)
		if err != nil {
			return nil, err
		}
		words := dict.([]string)
		value = func(i int) string { return words[a.GetValueIndex(i)] }
	default:
		return nil, fmt.Errorf("no string encoder for %s", arr.DataType())
	}
	if sc != nil {
		return genInto(arr, sel, nullable, value, &sc.strs, &sc.strPtrs), nil
	}
	return gen(arr, sel, nullable, value), nil
}

// scratch is a writer's reusable column slices (see encode).
type scratch struct {
	strs     []string
	strPtrs  []*string
	times    []time.Time
	timePtrs []*time.Time
	u64      []uint64
	pipes    []string // the pipeline column: its name, then empty strings
}

// resize returns *s with length n, reallocated only when it is too short.
func resize[T any](s *[]T, n int) []T {
	if cap(*s) < n {
		*s = make([]T, n, n+n/4)
	}
	return (*s)[:n]
}

// constant returns n copies of v in the scratch's uint64 slice.
func (sc *scratch) constant(v uint64, n int) []uint64 {
	out := resize(&sc.u64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// pipeline returns a batch's _openetl_stage_pipeline column: name in the
// first row, empty strings after it. One stamped row per batch is enough
// to find a block's pipeline (a block holds whole batches, and Recover
// looks for any row of it), and an empty string costs the driver much
// less than a copy of the name in every row.
func (sc *scratch) pipeline(name string, n int) []string {
	if cap(sc.pipes) < n {
		sc.pipes = make([]string, n, n+n/4)
	}
	out := sc.pipes[:n]
	out[0] = name
	return out
}

// genInto is gen writing into reused slices.
func genInto[T any](arr arrow.Array, sel []int, nullable bool, value func(int) T, valsBuf *[]T, ptrsBuf *[]*T) any {
	n := arr.Len()
	if sel != nil {
		n = len(sel)
	}
	vals := resize(valsBuf, n)
	var ptrs []*T
	if nullable {
		ptrs = resize(ptrsBuf, n)
	}
	var zero T
	for k := range vals {
		i := k
		if sel != nil {
			i = sel[k]
		}
		if arr.IsValid(i) {
			vals[k] = value(i)
			if nullable {
				ptrs[k] = &vals[k]
			}
		} else {
			vals[k] = zero
			if nullable {
				ptrs[k] = nil
			}
		}
	}
	if nullable {
		return ptrs
	}
	return vals
}

func encodeDecimal(arr arrow.Array, sel []int, t colType) (any, error) {
	var scale int32
	var value func(int) decimal.Decimal
	switch a := arr.(type) {
	case *array.Decimal128:
		scale = a.DataType().(*arrow.Decimal128Type).Scale
		value = func(i int) decimal.Decimal {
			v := a.Value(i)
			if v.HighBits() == 0 || v.HighBits() == -1 {
				if lo := v.LowBits(); (v.HighBits() == 0 && lo < 1<<63) || (v.HighBits() == -1 && lo >= 1<<63) {
					return decimal.New(int64(lo), -scale)
				}
			}
			return decimal.NewFromBigInt(v.BigInt(), -scale)
		}
	case *array.Decimal256:
		scale = a.DataType().(*arrow.Decimal256Type).Scale
		value = func(i int) decimal.Decimal { return decimal.NewFromBigInt(a.Value(i).BigInt(), -scale) }
	default:
		return nil, fmt.Errorf("no decimal encoder for %s", arr.DataType())
	}
	if scale != t.scale {
		return nil, fmt.Errorf("decimal scale %d does not fit %s", scale, t.ch)
	}
	return gen(arr, sel, t.nullable, value), nil
}

// encodeArray encodes the list's values once, then gives each row its
// sub-slice.
func encodeArray(t colType, arr arrow.Array, sel []int) (any, error) {
	var offs func(i int) (int64, int64)
	var child arrow.Array
	switch a := arr.(type) {
	case *array.List:
		child = a.ListValues()
		offs = func(i int) (int64, int64) { s, e := a.ValueOffsets(i); return s, e }
	case *array.LargeList:
		child = a.ListValues()
		offs = func(i int) (int64, int64) { s, e := a.ValueOffsets(i); return s, e }
	default:
		return nil, fmt.Errorf("no array encoder for %s", arr.DataType())
	}
	vals, err := encode(*t.elem, child, nil, false, nil)
	if err != nil {
		return nil, err
	}
	switch v := vals.(type) {
	case []int8:
		return rows(v, arr, sel, offs), nil
	case []*int8:
		return rows(v, arr, sel, offs), nil
	case []int16:
		return rows(v, arr, sel, offs), nil
	case []*int16:
		return rows(v, arr, sel, offs), nil
	case []int32:
		return rows(v, arr, sel, offs), nil
	case []*int32:
		return rows(v, arr, sel, offs), nil
	case []int64:
		return rows(v, arr, sel, offs), nil
	case []*int64:
		return rows(v, arr, sel, offs), nil
	case []uint8:
		return rows(v, arr, sel, offs), nil
	case []*uint8:
		return rows(v, arr, sel, offs), nil
	case []uint16:
		return rows(v, arr, sel, offs), nil
	case []*uint16:
		return rows(v, arr, sel, offs), nil
	case []uint32:
		return rows(v, arr, sel, offs), nil
	case []*uint32:
		return rows(v, arr, sel, offs), nil
	case []uint64:
		return rows(v, arr, sel, offs), nil
	case []*uint64:
		return rows(v, arr, sel, offs), nil
	case []float32:
		return rows(v, arr, sel, offs), nil
	case []*float32:
		return rows(v, arr, sel, offs), nil
	case []float64:
		return rows(v, arr, sel, offs), nil
	case []*float64:
		return rows(v, arr, sel, offs), nil
	case []bool:
		return rows(v, arr, sel, offs), nil
	case []*bool:
		return rows(v, arr, sel, offs), nil
	case []string:
		return rows(v, arr, sel, offs), nil
	case []*string:
		return rows(v, arr, sel, offs), nil
	case []time.Time:
		return rows(v, arr, sel, offs), nil
	case []*time.Time:
		return rows(v, arr, sel, offs), nil
	case []uuid.UUID:
		return rows(v, arr, sel, offs), nil
	case []*uuid.UUID:
		return rows(v, arr, sel, offs), nil
	case []decimal.Decimal:
		return rows(v, arr, sel, offs), nil
	case []*decimal.Decimal:
		return rows(v, arr, sel, offs), nil
	}
	return nil, fmt.Errorf("no array encoder for %s", t.ch)
}

func rows[T any](vals []T, arr arrow.Array, sel []int, offs func(int) (int64, int64)) [][]T {
	n := arr.Len()
	if sel != nil {
		n = len(sel)
	}
	out := make([][]T, n)
	for k := range out {
		i := k
		if sel != nil {
			i = sel[k]
		}
		if arr.IsValid(i) {
			s, e := offs(i)
			out[k] = vals[s:e:e]
		} else {
			out[k] = []T{}
		}
	}
	return out
}

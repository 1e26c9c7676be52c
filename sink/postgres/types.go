package postgres

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/sink"
)

// Quarantine reasons: why a row was set aside instead of written.
const (
	// ReasonNUL: a text value holds a NUL character, which Postgres text
	// can't hold (or a JSON value of a jsonb column the escape \u0000,
	// which jsonb can't hold).
	ReasonNUL = "nul_in_text"
	// ReasonUTF8: a text value is not valid UTF-8.
	ReasonUTF8 = "invalid_utf8"
	// ReasonNanoseconds: a timestamp or time has nanoseconds; Postgres
	// keeps microseconds, and the value is never truncated.
	ReasonNanoseconds = "sub_microsecond"
	// ReasonNullKey: a key column of a merge table is null.
	ReasonNullKey = "null_key"
	// ReasonRange: a value outside its column type's range: a date or
	// timestamp outside Postgres's (4713 BC to 5874897 AD for dates, to
	// 294276 AD for timestamps), a time of day outside 00:00 to 24:00, a
	// number too large for its numeric(p,s).
	ReasonRange = "out_of_range"
	// ReasonScale: a number with more fractional digits than its
	// numeric(p,s) column keeps; Postgres would round it.
	ReasonScale = "beyond_scale"
	// ReasonLength: a text longer than its varchar(n) or char(n)
	// column; Postgres would cut it.
	ReasonLength = "too_long"
	// ReasonInvalid: a value whose text Postgres's input function for the
	// column's declared type rejects (a uuid, json, inet ... it can't
	// read). Found when the epoch is applied.
	ReasonInvalid = "invalid_value"
)

// unsupported are the Arrow type classes (engine.Config.Unsupported's
// names) the destination does not take: the engine holds them back.
var unsupported = []string{"duration", "interval", "struct", "null"}

// column is one column of a table as a lane stages it: its Arrow type,
// the type of its staging column (what the binary COPY encodes) and the
// type of the table's column (what Apply casts it to).
type column struct {
	Name   string `json:"n"`
	Target string `json:"t"`
	// Cast, when set, is the SQL expression that reads the staged value
	// as Target; default col::Target.
	Cast string `json:"c,omitempty"`
	wire string
	enc  encoder
	typ  arrow.DataType
}

// encoder appends row i of a to b as a binary COPY field value (without
// its length), or returns a quarantine reason.
type encoder func(b []byte, a arrow.Array, i int) ([]byte, string)

// pgEpochMicros is 2000-01-01 in microseconds since 1970: Postgres
// counts timestamps from there.
const pgEpochMicros = 946684800 * 1000000

// pgEpochDays is 2000-01-01 in days since 1970.
const pgEpochDays = 10957

// microsPerDay bounds a time of day: Postgres takes 00:00 to 24:00.
const microsPerDay = 86400 * 1000000

// mapType returns the staging type and the table type of an Arrow type,
// or an error for a type the destination does not take.
func mapType(dt arrow.DataType) (wire, target string, err error) {
	switch t := dt.(type) {
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Uint8Type:
		return "smallint", "smallint", nil
	case *arrow.Int32Type, *arrow.Uint16Type:
		return "integer", "integer", nil
	case *arrow.Int64Type, *arrow.Uint32Type:
		return "bigint", "bigint", nil
	case *arrow.Uint64Type:
		return "text", "numeric(20,0)", nil
	case *arrow.Float32Type:
		return "real", "real", nil
	case *arrow.Float64Type:
		return "double precision", "double precision", nil
	case *arrow.BooleanType:
		return "boolean", "boolean", nil
	case *arrow.StringType, *arrow.LargeStringType:
		return "text", "text", nil
	case *arrow.BinaryType, *arrow.LargeBinaryType, *arrow.FixedSizeBinaryType:
		return "bytea", "bytea", nil
	case *arrow.Date32Type:
		return "date", "date", nil
	case *arrow.TimestampType:
		if t.TimeZone != "" {
			return "timestamp with time zone", "timestamp with time zone", nil
		}
		return "timestamp without time zone", "timestamp without time zone", nil
	case *arrow.Time32Type, *arrow.Time64Type:
		return "time without time zone", "time without time zone", nil
	case *arrow.ListType:
		elem, ok := arrayElem(t.Elem())
		if !ok {
			return "", "", fmt.Errorf("postgres: Arrow type %s is not supported (lists of numbers, booleans, strings, binaries, dates, times and timestamps are)", dt)
		}
		return "text", elem + "[]", nil
	case *arrow.Decimal128Type:
		return "text", fmt.Sprintf("numeric(%d,%d)", t.Precision, t.Scale), nil
	}
	return "", "", fmt.Errorf("postgres: Arrow type %s is not supported", dt)
}

// arrayElem returns the table type of a list's elements, for the element
// types an array literal is written from.
func arrayElem(dt arrow.DataType) (string, bool) {
	if dt.ID() == arrow.LIST {
		// A list of lists would be a multidimensional array, which
		// Postgres wants rectangular.
		return "", false
	}
	_, target, err := mapType(dt)
	return target, err == nil
}

// newEncoder returns the encoder of dt's values for a table column of
// type target (dt's own, or a declared one). Values target can't hold
// unchanged get their quarantine reason here, before they are staged.
func newEncoder(dt arrow.DataType, target string) encoder {
	switch t := dt.(type) {
	case *arrow.Int8Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint16(b, uint16(int16(a.(*array.Int8).Value(i)))), ""
		}
	case *arrow.Int16Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint16(b, uint16(a.(*array.Int16).Value(i))), ""
		}
	case *arrow.Uint8Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint16(b, uint16(a.(*array.Uint8).Value(i))), ""
		}
	case *arrow.Int32Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint32(b, uint32(a.(*array.Int32).Value(i))), ""
		}
	case *arrow.Uint16Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint32(b, uint32(a.(*array.Uint16).Value(i))), ""
		}
	case *arrow.Int64Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint64(b, uint64(a.(*array.Int64).Value(i))), ""
		}
	case *arrow.Uint32Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint64(b, uint64(a.(*array.Uint32).Value(i))), ""
		}
	case *arrow.Uint64Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return strconv.AppendUint(b, a.(*array.Uint64).Value(i), 10), ""
		}
	case *arrow.Float32Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint32(b, math.Float32bits(a.(*array.Float32).Value(i))), ""
		}
	case *arrow.Float64Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return binary.BigEndian.AppendUint64(b, math.Float64bits(a.(*array.Float64).Value(i))), ""
		}
	case *arrow.BooleanType:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			if a.(*array.Boolean).Value(i) {
				return append(b, 1), ""
			}
			return append(b, 0), ""
		}
	case *arrow.StringType:
		r := textCheck(target)
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return text(b, a.(*array.String).Value(i), r)
		}
	case *arrow.LargeStringType:
		r := textCheck(target)
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return text(b, a.(*array.LargeString).Value(i), r)
		}
	case *arrow.BinaryType:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return append(b, a.(*array.Binary).Value(i)...), ""
		}
	case *arrow.LargeBinaryType:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return append(b, a.(*array.LargeBinary).Value(i)...), ""
		}
	case *arrow.FixedSizeBinaryType:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return append(b, a.(*array.FixedSizeBinary).Value(i)...), ""
		}
	case *arrow.Date32Type:
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			d := int64(a.(*array.Date32).Value(i)) - pgEpochDays
			if d < pgMinDay || d >= pgEndDay {
				return b, ReasonRange
			}
			return binary.BigEndian.AppendUint32(b, uint32(int32(d))), ""
		}
	case *arrow.TimestampType:
		unit := t.Unit
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			us, reason := timestampMicros(int64(a.(*array.Timestamp).Value(i)), unit)
			if reason != "" {
				return b, reason
			}
			return binary.BigEndian.AppendUint64(b, uint64(us-pgEpochMicros)), ""
		}
	case *arrow.Time32Type:
		unit := t.Unit
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			us, reason := timeMicros(int64(a.(*array.Time32).Value(i)), unit)
			if reason != "" {
				return b, reason
			}
			return binary.BigEndian.AppendUint64(b, uint64(us)), ""
		}
	case *arrow.Time64Type:
		unit := t.Unit
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			us, reason := timeMicros(int64(a.(*array.Time64).Value(i)), unit)
			if reason != "" {
				return b, reason
			}
			return binary.BigEndian.AppendUint64(b, uint64(us)), ""
		}
	case *arrow.Decimal128Type:
		scale, r := t.Scale, numericCheck(target)
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			at := len(b)
			b = appendDecimal(b, a.(*array.Decimal128).Value(i), scale)
			return b, check(r, b[at:])
		}
	case *arrow.ListType:
		elem := newElem(t.Elem(), strings.TrimSuffix(target, "[]"))
		return func(b []byte, a arrow.Array, i int) ([]byte, string) {
			return arrayLiteral(b, a.(*array.List), i, elem)
		}
	}
	return nil
}

// text appends s when Postgres text can hold it and r takes it.
func text(b []byte, s string, r rule) ([]byte, string) {
	if strings.IndexByte(s, 0) >= 0 {
		return b, ReasonNUL
	}
	if !utf8.ValidString(s) {
		return b, ReasonUTF8
	}
	if reason := check(r, s); reason != "" {
		return b, reason
	}
	return append(b, s...), ""
}

// Postgres's ranges, relative to 2000-01-01: dates in days from Julian
// day 0 (4714-11-24 BC) to DATE_END_JULIAN, timestamps in microseconds
// from the same day to 294277-01-01.
const (
	pgMinDay   = -2451545
	pgEndDay   = 2147483494 - 2451545
	pgMinMicro = -211813488000000000
	pgEndMicro = 9223371331200000000
)

// timestampMicros converts timestamp v in unit to microseconds since
// 1970, or returns why Postgres can't take it: outside its range
// (checked without overflowing), or with nanoseconds.
func timestampMicros(v int64, unit arrow.TimeUnit) (int64, string) {
	var per int64 = 1
	w := v
	switch unit {
	case arrow.Second:
		per = 1000000
	case arrow.Millisecond:
		per = 1000
	case arrow.Nanosecond:
		w /= 1000
	}
	if w > math.MaxInt64/per || w < math.MinInt64/per {
		return 0, ReasonRange
	}
	us := w * per
	if us < pgMinMicro+pgEpochMicros || us-pgEpochMicros >= pgEndMicro {
		return 0, ReasonRange
	}
	if unit == arrow.Nanosecond && v%1000 != 0 {
		return 0, ReasonNanoseconds
	}
	return us, ""
}

// timeMicros converts time of day v in unit to microseconds, or returns
// why Postgres can't take it (outside 00:00 to 24:00, nanoseconds).
func timeMicros(v int64, unit arrow.TimeUnit) (int64, string) {
	var us int64
	switch unit {
	case arrow.Second:
		if v < 0 || v > 86400 {
			return 0, ReasonRange
		}
		us = v * 1000000
	case arrow.Millisecond:
		if v < 0 || v > 86400000 {
			return 0, ReasonRange
		}
		us = v * 1000
	case arrow.Nanosecond:
		if v < 0 || v > microsPerDay*1000 {
			return 0, ReasonRange
		}
		if v%1000 != 0 {
			return 0, ReasonNanoseconds
		}
		us = v / 1000
	default:
		us = v
	}
	if us < 0 || us > microsPerDay {
		return 0, ReasonRange
	}
	return us, ""
}

// declaredText and declaredNumeric are the declared Postgres types a
// table keeps where the Arrow type is text (or decimal, for numeric):
// Apply casts the staged text to them. A bare char (character(1)) is
// not kept: its cast would cut longer values.
var (
	declaredText = regexp.MustCompile(`^(uuid|jsonb|json|inet|cidr|macaddr|macaddr8|xml|timetz|time with time zone|time\(\d\) with time zone|` +
		`character varying|varchar|bpchar|(character varying|varchar|character|char|bpchar)\(\d+\))$`)
	declaredNumeric = regexp.MustCompile(`^(numeric|decimal)(\(\d+(,\s*\d+)?\))?$`)
)

// declared returns the table type a declared Postgres type keeps for a
// column whose Arrow type gives target, or target. A list's declared
// type is its element's with [] after it, or _ before it (the catalog's
// name of an array type).
func declared(dt arrow.DataType, target string, c *sink.Column) string {
	if c == nil {
		return target
	}
	return declaredType(dt, target, strings.ToLower(strings.TrimSpace(c.Type)))
}

func declaredType(dt arrow.DataType, target, t string) string {
	switch dt.ID() {
	case arrow.STRING, arrow.LARGE_STRING:
		if declaredText.MatchString(t) || declaredNumeric.MatchString(t) {
			return t
		}
	case arrow.DECIMAL128:
		if declaredNumeric.MatchString(t) {
			return t
		}
	case arrow.FIXED_SIZE_BINARY:
		if t == "uuid" && dt.(*arrow.FixedSizeBinaryType).ByteWidth == 16 {
			return t
		}
	case arrow.LIST:
		elem, ok := strings.CutSuffix(t, "[]")
		if !ok {
			elem, ok = strings.CutPrefix(t, "_")
		}
		if ok && strings.HasSuffix(target, "[]") {
			return declaredType(dt.(*arrow.ListType).Elem(), strings.TrimSuffix(target, "[]"), elem) + "[]"
		}
	}
	return target
}

// selectExpr is the expression that reads c's staged value as its table
// type.
func (c column) selectExpr() string { return c.castExpr() + ` AS ` + ident(c.Name) }

// castExpr is selectExpr without the name.
func (c column) castExpr() string {
	if c.Cast != "" {
		return c.Cast
	}
	return ident(c.Name) + `::` + c.Target
}

// ident quotes an identifier.
func ident(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// literal quotes a string literal.
func literal(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

var copyHeader = []byte("PGCOPY\n\377\r\n\000\000\000\000\000\000\000\000\000")

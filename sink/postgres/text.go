package postgres

import (
	"math/bits"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// Values staged as text and cast by Apply: array literals, decimals,
// declared types. The text is Postgres's input form, read the same under
// any DateStyle, TimeZone or bytea_output; nothing here allocates per
// value.

// rule is what a declared type asks of a value's text before it is
// staged, where Postgres's cast would change the value instead of
// failing: numeric(p,s) rounds extra digits, varchar(n) and char(n) cut
// extra characters. Text a cast rejects outright is left to Apply (see
// sift).
type rule struct {
	kind byte // 0: none, 'n': numeric(p,s), 'l': at most n characters
	p, s int
	n    int
}

var (
	boundedNumeric = regexp.MustCompile(`^(?:numeric|decimal)\((\d+)(?:,\s*(\d+))?\)$`)
	boundedText    = regexp.MustCompile(`^(?:character varying|varchar|character|char|bpchar)\((\d+)\)$`)
)

// textCheck returns the rule of a table type.
func textCheck(target string) rule {
	if m := boundedNumeric.FindStringSubmatch(target); m != nil {
		p, _ := strconv.Atoi(m[1])
		s, _ := strconv.Atoi(m[2])
		return rule{kind: 'n', p: p, s: s}
	}
	if m := boundedText.FindStringSubmatch(target); m != nil {
		n, _ := strconv.Atoi(m[1])
		return rule{kind: 'l', n: n}
	}
	return rule{}
}

// numericCheck is textCheck for a decimal column's table type.
func numericCheck(target string) rule {
	if r := textCheck(target); r.kind == 'n' {
		return r
	}
	return rule{}
}

// check returns the quarantine reason of v under r, or "".
func check[T string | []byte](r rule, v T) string {
	switch r.kind {
	case 'n':
		return numericFits(v, r.p, r.s)
	case 'l':
		// Characters of UTF-8 text (validated before): the bytes that
		// start one.
		n := 0
		for k := 0; k < len(v); k++ {
			if v[k]&0xC0 != 0x80 {
				n++
			}
		}
		if n > r.n {
			return ReasonLength
		}
	}
	return ""
}

// numericFits returns ReasonScale when the number v has nonzero digits
// past the scale s, ReasonRange when its integer part has more than p-s
// digits (Postgres's "numeric field overflow") or it is infinite, and ""
// when numeric(p,s) holds it unchanged or v is not a plain number (NaN,
// or text Postgres rejects, which Apply finds).
func numericFits[T string | []byte](v T, p, s int) string {
	i, n := 0, len(v)
	for i < n && isSpace(v[i]) {
		i++
	}
	for n > i && isSpace(v[n-1]) {
		n--
	}
	if i < n && (v[i] == '+' || v[i] == '-') {
		i++
	}
	if i < n && (v[i] == 'i' || v[i] == 'I') {
		return ReasonRange // inf, infinity: numeric(p,s) has no infinity
	}
	// digits: the significant digits; point: how many of them (or, when
	// negative, zeros after the point before them) come before the
	// decimal point.
	lead, seen, dot := true, false, false
	digits, point, zeros := 0, 0, 0
digits:
	for ; i < n; i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			seen = true
			if lead && c == '0' {
				if dot {
					point--
				}
				continue
			}
			lead = false
			digits++
			if !dot {
				point++
			}
			if c == '0' {
				zeros++
			} else {
				zeros = 0
			}
		case c == '.' && !dot:
			dot = true
		default:
			break digits
		}
	}
	if !seen {
		return ""
	}
	if i < n {
		if v[i] != 'e' && v[i] != 'E' {
			return ""
		}
		i++
		neg := false
		if i < n && (v[i] == '+' || v[i] == '-') {
			neg = v[i] == '-'
			i++
		}
		if i == n || n-i > 6 {
			return ""
		}
		e := 0
		for ; i < n; i++ {
			if v[i] < '0' || v[i] > '9' {
				return ""
			}
			e = e*10 + int(v[i]-'0')
		}
		if neg {
			e = -e
		}
		point += e
	}
	digits -= zeros
	if digits <= 0 {
		return "" // zero
	}
	if digits-point > s {
		return ReasonScale
	}
	if point > p-s {
		return ReasonRange
	}
	return ""
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// elemEncoder appends element j of vals to an array literal (quoted
// where it must be), or returns a quarantine reason.
type elemEncoder func(b []byte, vals arrow.Array, j int) ([]byte, string)

// arrayLiteral appends row i of a as a Postgres array literal
// ({1,NULL,3}, {"a","b \"c\""}), which Apply casts to the table's
// array type.
func arrayLiteral(b []byte, a *array.List, i int, elem elemEncoder) ([]byte, string) {
	start, end := a.ValueOffsets(i)
	vals := a.ListValues()
	b = append(b, '{')
	for j := int(start); j < int(end); j++ {
		if j > int(start) {
			b = append(b, ',')
		}
		if vals.IsNull(j) {
			b = append(b, "NULL"...)
			continue
		}
		var reason string
		if b, reason = elem(b, vals, j); reason != "" {
			return b, reason
		}
	}
	return append(b, '}'), ""
}

// newElem returns the element encoder of dt for elements of table type
// target (arrayElem's, or a declared one).
func newElem(dt arrow.DataType, target string) elemEncoder {
	switch t := dt.(type) {
	case *arrow.Int8Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendInt(b, int64(v.(*array.Int8).Value(j)), 10), ""
		}
	case *arrow.Int16Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendInt(b, int64(v.(*array.Int16).Value(j)), 10), ""
		}
	case *arrow.Int32Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendInt(b, int64(v.(*array.Int32).Value(j)), 10), ""
		}
	case *arrow.Int64Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendInt(b, v.(*array.Int64).Value(j), 10), ""
		}
	case *arrow.Uint8Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendUint(b, uint64(v.(*array.Uint8).Value(j)), 10), ""
		}
	case *arrow.Uint16Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendUint(b, uint64(v.(*array.Uint16).Value(j)), 10), ""
		}
	case *arrow.Uint32Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendUint(b, uint64(v.(*array.Uint32).Value(j)), 10), ""
		}
	case *arrow.Uint64Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendUint(b, v.(*array.Uint64).Value(j), 10), ""
		}
	case *arrow.Float32Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendFloat(b, float64(v.(*array.Float32).Value(j)), 'g', -1, 32), ""
		}
	case *arrow.Float64Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return strconv.AppendFloat(b, v.(*array.Float64).Value(j), 'g', -1, 64), ""
		}
	case *arrow.BooleanType:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			if v.(*array.Boolean).Value(j) {
				return append(b, 't'), ""
			}
			return append(b, 'f'), ""
		}
	case *arrow.StringType:
		r := textCheck(target)
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return quoteElem(b, v.(*array.String).Value(j), r)
		}
	case *arrow.LargeStringType:
		r := textCheck(target)
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return quoteElem(b, v.(*array.LargeString).Value(j), r)
		}
	case *arrow.Decimal128Type:
		scale, r := t.Scale, numericCheck(target)
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			at := len(b)
			b = appendDecimal(b, v.(*array.Decimal128).Value(j), scale)
			return b, check(r, b[at:])
		}
	case *arrow.Date32Type:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			d := int64(v.(*array.Date32).Value(j))
			if d-pgEpochDays < pgMinDay || d-pgEpochDays >= pgEndDay {
				return b, ReasonRange
			}
			b = append(b, '"')
			b, bc := appendDate(b, d)
			if bc {
				b = append(b, " BC"...)
			}
			return append(b, '"'), ""
		}
	case *arrow.TimestampType:
		unit, tz := t.Unit, t.TimeZone != ""
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			us, reason := timestampMicros(int64(v.(*array.Timestamp).Value(j)), unit)
			if reason != "" {
				return b, reason
			}
			b = append(b, '"')
			b = appendTimestamp(b, us, tz)
			return append(b, '"'), ""
		}
	case *arrow.Time32Type:
		unit := t.Unit
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			us, reason := timeMicros(int64(v.(*array.Time32).Value(j)), unit)
			if reason != "" {
				return b, reason
			}
			return appendTime(b, us), ""
		}
	case *arrow.Time64Type:
		unit := t.Unit
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			us, reason := timeMicros(int64(v.(*array.Time64).Value(j)), unit)
			if reason != "" {
				return b, reason
			}
			return appendTime(b, us), ""
		}
	case *arrow.BinaryType:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return appendByteaElem(b, v.(*array.Binary).Value(j)), ""
		}
	case *arrow.LargeBinaryType:
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return appendByteaElem(b, v.(*array.LargeBinary).Value(j)), ""
		}
	case *arrow.FixedSizeBinaryType:
		if target == "uuid" && t.ByteWidth == 16 {
			return func(b []byte, v arrow.Array, j int) ([]byte, string) {
				return appendUUID(b, v.(*array.FixedSizeBinary).Value(j)), ""
			}
		}
		return func(b []byte, v arrow.Array, j int) ([]byte, string) {
			return appendByteaElem(b, v.(*array.FixedSizeBinary).Value(j)), ""
		}
	}
	return nil
}

// quoteElem appends s as a quoted array element, when Postgres text can
// hold it and r takes it.
func quoteElem(b []byte, s string, r rule) ([]byte, string) {
	if strings.IndexByte(s, 0) >= 0 {
		return b, ReasonNUL
	}
	if !utf8.ValidString(s) {
		return b, ReasonUTF8
	}
	if reason := check(r, s); reason != "" {
		return b, reason
	}
	b = append(b, '"')
	for k := 0; k < len(s); k++ {
		if s[k] == '"' || s[k] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[k])
	}
	return append(b, '"'), ""
}

const hexDigits = "0123456789abcdef"

// appendByteaElem appends p as a quoted bytea element in hex form
// ("\\x0a1b": the array literal's escaped backslash).
func appendByteaElem(b, p []byte) []byte {
	b = append(b, `"\\x`...)
	for _, c := range p {
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return append(b, '"')
}

// appendUUID appends the 16 bytes p as a uuid's text.
func appendUUID(b, p []byte) []byte {
	for k, c := range p {
		if k == 4 || k == 6 || k == 8 || k == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}

// appendDate appends the date days after 1970-01-01 (proleptic
// Gregorian) as YYYY-MM-DD, the year of at least four digits; bc reports
// a year before 1 AD, written as Postgres does (year 0 is 1 BC), for the
// caller to add " BC" after what follows.
func appendDate(b []byte, days int64) ([]byte, bool) {
	// Howard Hinnant's civil_from_days.
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	bc := y <= 0
	if bc {
		y = 1 - y
	}
	b = appendPadded(b, y, 4)
	b = append(b, '-')
	b = appendPadded(b, m, 2)
	b = append(b, '-')
	return appendPadded(b, d, 2), bc
}

// appendTimestamp appends the timestamp us microseconds after 1970 as
// Postgres's input text, with the offset +00 when tz.
func appendTimestamp(b []byte, us int64, tz bool) []byte {
	days := us / microsPerDay
	if us%microsPerDay < 0 {
		days--
	}
	b, bc := appendDate(b, days)
	b = append(b, ' ')
	b = appendTime(b, us-days*microsPerDay)
	if tz {
		b = append(b, "+00"...)
	}
	if bc {
		b = append(b, " BC"...)
	}
	return b
}

// appendTime appends a time of day, us microseconds after midnight, as
// HH:MM:SS[.ffffff].
func appendTime(b []byte, us int64) []byte {
	s := us / 1000000
	b = appendPadded(b, s/3600, 2)
	b = append(b, ':')
	b = appendPadded(b, s/60%60, 2)
	b = append(b, ':')
	b = appendPadded(b, s%60, 2)
	if f := us % 1000000; f != 0 {
		b = append(b, '.')
		b = appendPadded(b, f, 6)
		for b[len(b)-1] == '0' {
			b = b[:len(b)-1]
		}
	}
	return b
}

// appendPadded appends v >= 0 in decimal, zero-padded to width digits.
func appendPadded(b []byte, v int64, width int) []byte {
	var buf [20]byte
	s := strconv.AppendInt(buf[:0], v, 10)
	for k := len(s); k < width; k++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// appendDecimal appends n with scale digits after the point (none and
// -scale zeros when scale <= 0), exactly: the text numeric reads.
func appendDecimal(b []byte, n decimal128.Num, scale int32) []byte {
	if n.Sign() < 0 {
		b = append(b, '-')
		n = n.Negate()
	}
	hi, lo := uint64(n.HighBits()), n.LowBits()
	var buf [40]byte
	pos := len(buf)
	for {
		// Divide the 128-bit value by 10^19, writing the remainder's
		// digits: all 19 but for the last (most significant) chunk.
		qhi, r := hi/1e19, hi%1e19
		qlo, rem := bits.Div64(r, lo, 1e19)
		hi, lo = qhi, qlo
		last := hi == 0 && lo == 0
		for k := 0; k < 19; k++ {
			pos--
			buf[pos] = byte('0' + rem%10)
			rem /= 10
			if last && rem == 0 {
				break
			}
		}
		if last {
			break
		}
	}
	ds := buf[pos:]
	switch {
	case scale <= 0:
		b = append(b, ds...)
		if len(ds) > 1 || ds[0] != '0' {
			for k := int32(0); k < -scale; k++ {
				b = append(b, '0')
			}
		}
	case len(ds) <= int(scale):
		b = append(b, '0', '.')
		for k := len(ds); k < int(scale); k++ {
			b = append(b, '0')
		}
		b = append(b, ds...)
	default:
		at := len(ds) - int(scale)
		b = append(b, ds[:at]...)
		b = append(b, '.')
		b = append(b, ds[at:]...)
	}
	return b
}

package avrorow

import (
	"encoding/base64"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

func appendHex(dst, b []byte) []byte {
	for _, c := range b {
		dst = append(dst, hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

func appendPad(dst []byte, v int64, width int) []byte {
	var tmp [20]byte
	s := strconv.AppendInt(tmp[:0], v, 10)
	for i := len(s); i < width; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

// civil returns the proleptic Gregorian date of days since 1970-01-01
// (year 0 is 1 BC).
func civil(days int64) (y int64, m, d int) {
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// appendDate writes the date as Postgres does: YYYY-MM-DD, with " BC"
// for years before 1 (year 0 is 1 BC).
func appendDate(dst []byte, days int64) []byte {
	y, m, d := civil(days)
	bc := y <= 0
	if bc {
		y = 1 - y
	}
	dst = appendPad(dst, y, 4)
	dst = append(dst, '-', byte('0'+m/10), byte('0'+m%10), '-', byte('0'+d/10), byte('0'+d%10))
	return dst
}

// appendDateISO writes the date in ISO 8601's astronomical numbering
// (year 0 is 1 BC, -0001 is 2 BC), for JSON text.
func appendDateISO(dst []byte, days int64) []byte {
	y, m, d := civil(days)
	if y < 0 {
		dst = append(dst, '-')
		y = -y
	}
	dst = appendPad(dst, y, 4)
	return append(dst, '-', byte('0'+m/10), byte('0'+m%10), '-', byte('0'+d/10), byte('0'+d%10))
}

func appendBC(dst []byte, days int64) []byte {
	if y, _, _ := civil(days); y <= 0 {
		dst = append(dst, " BC"...)
	}
	return dst
}

// appendClock writes a time of day (or a span: hours are not bounded)
// HH:MM:SS with digits fractional digits of frac (a fraction of a second
// in units of 10^-digits).
func appendClock(dst []byte, secs int64, frac int64, digits int) []byte {
	if secs < 0 || frac < 0 {
		dst = append(dst, '-')
		secs, frac = -secs, -frac
	}
	h, m, s := secs/3600, secs/60%60, secs%60
	dst = appendPad(dst, h, 2)
	dst = append(dst, ':', byte('0'+m/10), byte('0'+m%10), ':', byte('0'+s/10), byte('0'+s%10))
	if digits > 0 {
		dst = append(dst, '.')
		dst = appendPad(dst, frac, digits)
	}
	return dst
}

// units per second of a time or timestamp value, and its digits.
func unitOf(l logical) (perSec int64, digits int) {
	switch l {
	case lTimeMillis, lTsMillis, lLocalMillis:
		return 1000, 3
	case lTimeNanos, lTsNanos, lLocalNanos:
		return 1_000_000_000, 9
	}
	return 1_000_000, 6
}

func floorDiv(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q--
		r += b
	}
	return q, r
}

// appendTime writes a time of day of v units (lTime*). Nanoseconds are
// written with 6 digits when they are whole microseconds (the engine
// holds more than 6 as out of range, never rounding).
func appendTime(dst []byte, v int64, l logical) []byte {
	per, digits := unitOf(l)
	if digits == 9 && v%1000 == 0 {
		v, per, digits = v/1000, 1_000_000, 6
	}
	secs, frac := v/per, v%per
	return appendClock(dst, secs, frac, digits)
}

// appendTimestamp writes a timestamp of v units since the epoch as
// "YYYY-MM-DD HH:MM:SS.fff[fff[fff]]" (sep ' '), or ISO 8601 (sep 'T').
func appendTimestamp(dst []byte, v int64, l logical, sep byte) []byte {
	per, digits := unitOf(l)
	if digits == 9 && v%1000 == 0 {
		v, per, digits = v/1000, 1_000_000, 6
	}
	secs, frac := floorDiv(v, per)
	days, tod := floorDiv(secs, 86400)
	if sep == ' ' {
		dst = appendDate(dst, days)
	} else {
		dst = appendDateISO(dst, days)
	}
	dst = append(dst, sep)
	dst = appendClock(dst, tod, frac, digits)
	if sep == ' ' {
		dst = appendBC(dst, days)
	}
	return dst
}

// appendInterval writes months, days and a span in microseconds as
// Postgres's interval output does ("1 mons 2 days 03:04:05.000006").
func appendInterval(dst []byte, months, days, micros int64) []byte {
	dst = strconv.AppendInt(dst, months, 10)
	dst = append(dst, " mons "...)
	dst = strconv.AppendInt(dst, days, 10)
	dst = append(dst, " days "...)
	secs, frac := micros/1_000_000, micros%1_000_000
	return appendClock(dst, secs, frac, 6)
}

func appendUUID(dst, b []byte) []byte {
	dst = appendHex(dst, b[0:4])
	dst = append(dst, '-')
	dst = appendHex(dst, b[4:6])
	dst = append(dst, '-')
	dst = appendHex(dst, b[6:8])
	dst = append(dst, '-')
	dst = appendHex(dst, b[8:10])
	dst = append(dst, '-')
	return appendHex(dst, b[10:16])
}

func appendFloat(dst []byte, f float64, size int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	if size == 64 && f != 0 && f > -1e15 && f < 1e15 {
		// Most doubles in events are short decimals (12.25): the
		// integer f·10^k for the least k that gives one whose quotient
		// is f again is such a decimal, written as it is. Both divisions
		// are exact-then-rounded, so its text parses back to f, as
		// strconv's shortest form does; strconv's search costs more.
		for k, p := range pow10 {
			m := f * p
			if m == math.Trunc(m) && m > -1<<62 && m < 1<<62 && m/p == f {
				return appendScaled(dst, int64(m), k)
			}
		}
	}
	return strconv.AppendFloat(dst, f, 'g', -1, size)
}

var pow10 = [...]float64{1, 10, 100, 1000, 10000, 1e5, 1e6}

// appendScaled writes m·10^-k in plain decimal, without trailing zeros
// after the point.
func appendScaled(dst []byte, m int64, k int) []byte {
	if m < 0 {
		dst = append(dst, '-')
		m = -m
	}
	var tmp [24]byte
	ds := strconv.AppendUint(tmp[:0], uint64(m), 10)
	for k > 0 && ds[len(ds)-1] == '0' {
		ds, k = ds[:len(ds)-1], k-1
	}
	if k == 0 {
		return append(dst, ds...)
	}
	if len(ds) <= k {
		dst = append(dst, '0', '.')
		for range k - len(ds) {
			dst = append(dst, '0')
		}
		return append(dst, ds...)
	}
	dst = append(dst, ds[:len(ds)-k]...)
	dst = append(dst, '.')
	return append(dst, ds[len(ds)-k:]...)
}

// appendDecimal writes the decimal whose unscaled value is b (big-endian
// two's complement) at scale, exactly: "-12.50". big is scratch for
// values wider than 128 bits.
func appendDecimal(dst, b []byte, scale int, big *bigScratch) []byte {
	neg := len(b) > 0 && b[0]&0x80 != 0
	// Drop redundant sign bytes.
	for len(b) > 1 && (b[0] == 0 && b[1]&0x80 == 0 || b[0] == 0xff && b[1]&0x80 != 0) {
		b = b[1:]
	}
	var digits [40]byte
	var ds []byte
	if len(b) <= 16 {
		var hi, lo uint64
		if neg {
			hi, lo = math.MaxUint64, math.MaxUint64
		}
		for _, c := range b {
			hi = hi<<8 | lo>>56
			lo = lo<<8 | uint64(c)
		}
		if neg {
			// Two's complement negation over 128 bits.
			lo, hi = ^lo, ^hi
			var carry uint64
			lo, carry = bits.Add64(lo, 1, 0)
			hi += carry
		}
		ds = appendU128(digits[:0], hi, lo)
	} else {
		ds = big.digits(b, neg)
	}
	if neg && !(len(ds) == 1 && ds[0] == '0') {
		dst = append(dst, '-')
	}
	if scale <= 0 {
		dst = append(dst, ds...)
		if ds[0] != '0' {
			for range -scale {
				dst = append(dst, '0')
			}
		}
		return dst
	}
	if len(ds) <= scale {
		dst = append(dst, '0', '.')
		for range scale - len(ds) {
			dst = append(dst, '0')
		}
		return append(dst, ds...)
	}
	dst = append(dst, ds[:len(ds)-scale]...)
	dst = append(dst, '.')
	return append(dst, ds[len(ds)-scale:]...)
}

func appendU128(dst []byte, hi, lo uint64) []byte {
	if hi == 0 {
		return strconv.AppendUint(dst, lo, 10)
	}
	const e19 = 10_000_000_000_000_000_000
	var chunks [3]uint64
	n := 0
	for hi != 0 {
		qhi, rhi := hi/e19, hi%e19
		qlo, r := bits.Div64(rhi, lo, e19)
		chunks[n] = r
		n++
		hi, lo = qhi, qlo
	}
	dst = strconv.AppendUint(dst, lo, 10)
	for i := n - 1; i >= 0; i-- {
		dst = appendPad(dst, int64(chunks[i]), 19)
	}
	return dst
}

// bigScratch converts decimals wider than 128 bits, reusing its memory.
type bigScratch struct {
	mag []byte
	n   big.Int
	out []byte
}

func (s *bigScratch) digits(b []byte, neg bool) []byte {
	s.mag = append(s.mag[:0], b...)
	if neg {
		// Magnitude of a two's complement value: invert, add one.
		for i := range s.mag {
			s.mag[i] = ^s.mag[i]
		}
		for i := len(s.mag) - 1; i >= 0; i-- {
			s.mag[i]++
			if s.mag[i] != 0 {
				break
			}
		}
	}
	s.n.SetBytes(s.mag)
	s.out = s.n.Append(s.out[:0], 10)
	return s.out
}

// appendJSONString writes s as a JSON string; ok is false when s is not
// UTF-8.
func appendJSONString(dst, s []byte) ([]byte, bool) {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			return dst, false
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), true
}

func appendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

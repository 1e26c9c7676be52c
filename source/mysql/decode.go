package mysql

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/openetl/etl/source"
)

// Rows events are decoded here, on the Read's goroutine, straight from
// the binlog's bytes into row payloads, rather than by go-mysql into
// boxed values (a map per row, fmt.Sprintf per DATETIME) that are then
// formatted again: the values' text is the same either way (the tests
// decode the same events both ways and compare). go-mysql's decoder still
// reads what this one does not: MariaDB's compressed rows events, MySQL's
// partial JSON updates and tables with MySQL binary JSON columns.
//
// The syncer's RowsEventDecodeFunc only decodes the event's header and
// defers the rows: they are decoded only for opened tables.

// deferredRows is what a rows event carries in Rows[0][0] until the
// reader decodes it: the event's body and where its rows begin.
type deferredRows struct {
	pos  int
	data []byte
}

// deferRows is the syncer's RowsEventDecodeFunc.
func deferRows(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	e.Rows = [][]any{{deferredRows{pos: pos, data: data}}}
	return nil
}

// deferred returns the rows event's undecoded rows, if they are.
func deferred(e *replication.RowsEvent) (deferredRows, bool) {
	if len(e.Rows) == 1 && len(e.Rows[0]) == 1 {
		d, ok := e.Rows[0][0].(deferredRows)
		return d, ok
	}
	return deferredRows{}, false
}

// fastEvent reports whether this decoder reads rows events of the type:
// plain (uncompressed, whole-value) v1 and v2 events.
func fastEvent(t replication.EventType) bool {
	switch t {
	case replication.WRITE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv1,
		replication.WRITE_ROWS_EVENTv2, replication.UPDATE_ROWS_EVENTv2, replication.DELETE_ROWS_EVENTv2:
		return true
	}
	return false
}

// fastTable reports whether this decoder reads every column of the
// table map (all but MySQL's binary JSON and the pre-5.0 types).
func fastTable(e *replication.TableMapEvent) bool {
	for i := range e.ColumnType {
		tp, _ := realType(e, i)
		switch tp {
		case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG,
			gomysql.MYSQL_TYPE_LONGLONG, gomysql.MYSQL_TYPE_YEAR, gomysql.MYSQL_TYPE_FLOAT, gomysql.MYSQL_TYPE_DOUBLE,
			gomysql.MYSQL_TYPE_NEWDECIMAL, gomysql.MYSQL_TYPE_BIT, gomysql.MYSQL_TYPE_ENUM, gomysql.MYSQL_TYPE_SET,
			gomysql.MYSQL_TYPE_TIMESTAMP, gomysql.MYSQL_TYPE_TIMESTAMP2, gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_DATETIME2,
			gomysql.MYSQL_TYPE_TIME, gomysql.MYSQL_TYPE_TIME2, gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_BLOB,
			gomysql.MYSQL_TYPE_GEOMETRY, gomysql.MYSQL_TYPE_VECTOR, gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING,
			gomysql.MYSQL_TYPE_STRING, gomysql.MYSQL_TYPE_NULL:
		default:
			return false
		}
	}
	return true
}

var errShort = errors.New("row image shorter than its values")

// image decodes one row image from data into b: one entry per binlog
// column, in binlog order (a column the image leaves out is
// "unchanged"). It returns the bytes read.
func (m *tableMap) image(b *rowBuf, data, bitmap []byte, scratch []byte) (int, error) {
	ncols := len(m.conv)
	present := 0
	for i := range ncols {
		if bitmap[i>>3]&(1<<(i&7)) != 0 {
			present++
		}
	}
	nb := (present + 7) / 8
	if len(data) < nb {
		return 0, errShort
	}
	nulls, pos := data[:nb], nb
	b.payload, b.offs = b.payload[:0], b.offs[:0]
	k := 0
	for i := range ncols {
		b.offs = append(b.offs, len(b.payload))
		if bitmap[i>>3]&(1<<(i&7)) == 0 {
			b.payload = source.AppendRowUnchanged(b.payload)
			continue
		}
		null := nulls[k>>3]&(1<<(k&7)) != 0
		k++
		if null {
			b.payload = source.AppendRowNull(b.payload)
			continue
		}
		var n int
		var err error
		b.payload, n, err = m.conv[i].decode(b.payload, data[pos:], m.ev.ColumnMeta[i], scratch)
		if err != nil {
			return 0, fmt.Errorf("column %d: %w", i, err)
		}
		pos += n
	}
	b.offs = append(b.offs, len(b.payload))
	return pos, nil
}

// decode appends one value's entry, decoded from the row image's bytes
// as the column's type stores it, and returns the bytes read.
func (c *binConv) decode(buf, data []byte, meta uint16, s []byte) ([]byte, int, error) {
	need := func(n int) error {
		if len(data) < n {
			return errShort
		}
		return nil
	}
	num := func(n int, v []byte) ([]byte, int, error) { return source.AppendRowValue(buf, v), n, nil }
	switch c.typ {
	case gomysql.MYSQL_TYPE_TINY:
		if err := need(1); err != nil {
			return buf, 0, err
		}
		if c.unsigned {
			return num(1, strconv.AppendUint(s[:0], uint64(data[0]), 10))
		}
		return num(1, strconv.AppendInt(s[:0], int64(int8(data[0])), 10))
	case gomysql.MYSQL_TYPE_SHORT:
		if err := need(2); err != nil {
			return buf, 0, err
		}
		v := binary.LittleEndian.Uint16(data)
		if c.unsigned {
			return num(2, strconv.AppendUint(s[:0], uint64(v), 10))
		}
		return num(2, strconv.AppendInt(s[:0], int64(int16(v)), 10))
	case gomysql.MYSQL_TYPE_INT24:
		if err := need(3); err != nil {
			return buf, 0, err
		}
		v := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16
		if c.unsigned {
			return num(3, strconv.AppendUint(s[:0], uint64(v), 10))
		}
		if v&0x800000 != 0 {
			v |= 0xff000000
		}
		return num(3, strconv.AppendInt(s[:0], int64(int32(v)), 10))
	case gomysql.MYSQL_TYPE_LONG:
		if err := need(4); err != nil {
			return buf, 0, err
		}
		v := binary.LittleEndian.Uint32(data)
		if c.unsigned {
			return num(4, strconv.AppendUint(s[:0], uint64(v), 10))
		}
		return num(4, strconv.AppendInt(s[:0], int64(int32(v)), 10))
	case gomysql.MYSQL_TYPE_LONGLONG:
		if err := need(8); err != nil {
			return buf, 0, err
		}
		v := binary.LittleEndian.Uint64(data)
		if c.unsigned {
			return num(8, strconv.AppendUint(s[:0], v, 10))
		}
		return num(8, strconv.AppendInt(s[:0], int64(v), 10))
	case gomysql.MYSQL_TYPE_YEAR:
		if err := need(1); err != nil {
			return buf, 0, err
		}
		y := int64(data[0])
		if y != 0 {
			y += 1900
		}
		return num(1, strconv.AppendInt(s[:0], y, 10))
	case gomysql.MYSQL_TYPE_FLOAT:
		if err := need(4); err != nil {
			return buf, 0, err
		}
		f := math.Float32frombits(binary.LittleEndian.Uint32(data))
		return num(4, strconv.AppendFloat(s[:0], float64(f), 'g', -1, 32))
	case gomysql.MYSQL_TYPE_DOUBLE:
		if err := need(8); err != nil {
			return buf, 0, err
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(data))
		return num(8, strconv.AppendFloat(s[:0], f, 'g', -1, 64))
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		t, n, err := appendDecimal(s[:0], data, int(meta>>8), int(meta&0xff))
		if err != nil {
			return buf, 0, err
		}
		return num(n, t)
	case gomysql.MYSQL_TYPE_BIT:
		nbits := int(meta>>8)*8 + int(meta&0xff)
		n := (nbits + 7) / 8
		if n < 1 || n > 8 {
			return buf, 0, fmt.Errorf("BIT of %d bytes", n)
		}
		if err := need(n); err != nil {
			return buf, 0, err
		}
		var v uint64
		for _, b := range data[:n] {
			v = v<<8 | uint64(b)
		}
		return num(n, strconv.AppendUint(s[:0], v, 10))
	case gomysql.MYSQL_TYPE_ENUM:
		n := int(meta & 0xff)
		if n != 1 && n != 2 {
			return buf, 0, fmt.Errorf("ENUM of %d bytes", n)
		}
		if err := need(n); err != nil {
			return buf, 0, err
		}
		v := int(data[0])
		if n == 2 {
			v = int(binary.LittleEndian.Uint16(data))
		}
		if v == 0 {
			return source.AppendRowValue(buf, nil), n, nil
		}
		if v > len(c.names) {
			return buf, 0, fmt.Errorf("ENUM index %d of %d members", v, len(c.names))
		}
		return appendRowString(buf, c.names[v-1]), n, nil
	case gomysql.MYSQL_TYPE_SET:
		n := int(meta & 0xff)
		if n < 1 || n > 8 {
			return buf, 0, fmt.Errorf("SET of %d bytes", n)
		}
		if err := need(n); err != nil {
			return buf, 0, err
		}
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(data[i])
		}
		t := s[:0]
		for v != 0 {
			bit := bits.TrailingZeros64(v)
			v &^= 1 << bit
			if bit >= len(c.names) {
				return buf, 0, fmt.Errorf("SET bit %d of %d members", bit, len(c.names))
			}
			if len(t) > 0 {
				t = append(t, ',')
			}
			t = append(t, c.names[bit]...)
		}
		return num(n, t)
	case gomysql.MYSQL_TYPE_TIMESTAMP:
		if err := need(4); err != nil {
			return buf, 0, err
		}
		sec := binary.LittleEndian.Uint32(data)
		if sec == 0 {
			return num(4, append(s[:0], "0000-00-00 00:00:00"...))
		}
		return num(4, appendUTC(s[:0], int64(sec), 0, 0))
	case gomysql.MYSQL_TYPE_TIMESTAMP2:
		dec := int(meta)
		n := 4 + (dec+1)/2
		if err := need(n); err != nil {
			return buf, 0, err
		}
		sec := int64(binary.BigEndian.Uint32(data))
		usec := fracMicros(data[4:n], dec)
		if sec == 0 {
			return num(n, appendZeroTime(s[:0], usec, dec))
		}
		return num(n, appendUTC(s[:0], sec, usec, dec))
	case gomysql.MYSQL_TYPE_DATETIME:
		if err := need(8); err != nil {
			return buf, 0, err
		}
		v := binary.LittleEndian.Uint64(data)
		if v == 0 {
			return num(8, append(s[:0], "0000-00-00 00:00:00"...))
		}
		d, t := v/1000000, v%1000000
		return num(8, appendDatetime(s[:0], int(d/10000), int(d%10000)/100, int(d%100), int(t/10000), int(t%10000)/100, int(t%100), 0, 0))
	case gomysql.MYSQL_TYPE_DATETIME2:
		dec := int(meta)
		n := 5 + (dec+1)/2
		if err := need(n); err != nil {
			return buf, 0, err
		}
		intPart := int64(bigEndian(data[:5])) - 0x8000000000
		frac := fracMicros(data[5:n], dec)
		if intPart == 0 {
			return num(n, appendZeroTime(s[:0], frac, dec))
		}
		tmp := intPart<<24 + frac
		if tmp < 0 {
			tmp = -tmp
		}
		ymdhms := tmp >> 24
		ymd, hms := ymdhms>>17, ymdhms%(1<<17)
		ym := ymd >> 5
		return num(n, appendDatetime(s[:0], int(ym/13), int(ym%13), int(ymd%(1<<5)), int(hms>>12), int((hms>>6)%(1<<6)), int(hms%(1<<6)), frac, dec))
	case gomysql.MYSQL_TYPE_TIME:
		if err := need(3); err != nil {
			return buf, 0, err
		}
		v := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16
		t := append(s[:0], "00:00:00"...)
		if v != 0 {
			t = appendPad(s[:0], int64(v/10000), 2)
			t = appendPad(append(t, ':'), int64((v%10000)/100), 2)
			t = appendPad(append(t, ':'), int64(v%100), 2)
		}
		return num(3, t)
	case gomysql.MYSQL_TYPE_TIME2:
		dec := int(meta)
		n := 3 + (dec+1)/2
		if err := need(n); err != nil {
			return buf, 0, err
		}
		return num(n, appendTime2(s[:0], data[:n], dec))
	case gomysql.MYSQL_TYPE_DATE:
		if err := need(3); err != nil {
			return buf, 0, err
		}
		v := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16
		if v == 0 {
			return num(3, append(s[:0], "0000-00-00"...))
		}
		t := appendPad(s[:0], int64(v/(16*32)), 4)
		t = appendPad(append(t, '-'), int64(v/32%16), 2)
		t = appendPad(append(t, '-'), int64(v%32), 2)
		return num(3, t)
	case gomysql.MYSQL_TYPE_BLOB, gomysql.MYSQL_TYPE_GEOMETRY, gomysql.MYSQL_TYPE_VECTOR:
		lb := int(meta)
		if lb < 1 || lb > 4 {
			return buf, 0, fmt.Errorf("BLOB length of %d bytes", lb)
		}
		if err := need(lb); err != nil {
			return buf, 0, err
		}
		var l int
		for i := lb - 1; i >= 0; i-- {
			l = l<<8 | int(data[i])
		}
		if err := need(lb + l); err != nil {
			return buf, 0, err
		}
		return c.appendText(buf, data[lb:lb+l], s), lb + l, nil
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING, gomysql.MYSQL_TYPE_STRING:
		max := int(meta)
		if c.typ == gomysql.MYSQL_TYPE_STRING {
			_, max = realTypeMeta(gomysql.MYSQL_TYPE_STRING, meta)
		}
		lb := 1
		if max >= 256 {
			lb = 2
		}
		if err := need(lb); err != nil {
			return buf, 0, err
		}
		l := int(data[0])
		if lb == 2 {
			l = int(binary.LittleEndian.Uint16(data))
		}
		if err := need(lb + l); err != nil {
			return buf, 0, err
		}
		return c.appendText(buf, data[lb:lb+l], s), lb + l, nil
	case gomysql.MYSQL_TYPE_NULL:
		return source.AppendRowNull(buf), 0, nil
	}
	return buf, 0, fmt.Errorf("column type %d", c.typ)
}

// appendText appends a string or bytes value: latin1 converted to UTF-8,
// BINARY(n) padded to n bytes.
func (c *binConv) appendText(buf, v, s []byte) []byte {
	if c.latin1 {
		return source.AppendRowValue(buf, latin1ToUTF8(s[:0], v))
	}
	if c.pad > len(v) {
		buf = binary.AppendUvarint(buf, uint64(c.pad)+2)
		buf = append(buf, v...)
		for range c.pad - len(v) {
			buf = append(buf, 0)
		}
		return buf
	}
	return source.AppendRowValue(buf, v)
}

// realTypeMeta is realType for a type and its metadata.
func realTypeMeta(tp byte, meta uint16) (byte, int) {
	if meta >= 256 {
		b0, b1 := byte(meta>>8), byte(meta&0xff)
		if b0&0x30 != 0x30 {
			return b0 | 0x30, int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
		}
		return b0, int(meta & 0xff)
	}
	return tp, int(meta)
}

func bigEndian(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// fracMicros reads the fractional seconds of a TIMESTAMP2 or DATETIME2
// with dec digits, in microseconds.
func fracMicros(b []byte, dec int) int64 {
	switch dec {
	case 1, 2:
		return int64(b[0]) * 10000
	case 3, 4:
		return int64(binary.BigEndian.Uint16(b)) * 100
	case 5, 6:
		return int64(bigEndian(b[:3]))
	}
	return 0
}

// appendPad appends v in decimal with at least width digits.
func appendPad(b []byte, v int64, width int) []byte {
	var d [20]byte
	i := len(d)
	for v >= 10 {
		i--
		d[i] = byte('0' + v%10)
		v /= 10
	}
	i--
	d[i] = byte('0' + v)
	for len(d)-i < width {
		i--
		d[i] = '0'
	}
	return append(b, d[i:]...)
}

// appendFrac appends ".ffffff" cut to dec digits (none when dec is 0).
func appendFrac(b []byte, usec int64, dec int) []byte {
	if dec <= 0 {
		return b
	}
	var d [6]byte
	for i := 5; i >= 0; i-- {
		d[i] = byte('0' + usec%10)
		usec /= 10
	}
	return append(append(b, '.'), d[:min(dec, 6)]...)
}

func appendDatetime(b []byte, y, mo, d, h, mi, s int, usec int64, dec int) []byte {
	b = appendPad(b, int64(y), 4)
	b = appendPad(append(b, '-'), int64(mo), 2)
	b = appendPad(append(b, '-'), int64(d), 2)
	b = appendPad(append(b, ' '), int64(h), 2)
	b = appendPad(append(b, ':'), int64(mi), 2)
	b = appendPad(append(b, ':'), int64(s), 2)
	return appendFrac(b, usec, dec)
}

func appendZeroTime(b []byte, usec int64, dec int) []byte {
	return appendFrac(append(b, "0000-00-00 00:00:00"...), usec, dec)
}

// appendUTC appends a TIMESTAMP's epoch seconds as a UTC date and time.
func appendUTC(b []byte, sec, usec int64, dec int) []byte {
	t := time.Unix(sec, 0).UTC()
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return appendDatetime(b, y, int(mo), d, h, mi, s, usec, dec)
}

// appendTime2 appends a TIME(dec) value as MySQL prints it:
// [-]HH:MM:SS[.ffffff], the fraction always dec digits long.
func appendTime2(b []byte, data []byte, dec int) []byte {
	var tmp, intPart, frac int64
	switch dec {
	case 1, 2:
		intPart = int64(bigEndian(data[:3])) - 0x800000
		frac = int64(data[3])
		if intPart < 0 && frac != 0 {
			intPart++
			frac -= 0x100
		}
		tmp = intPart<<24 + frac*10000
	case 3, 4:
		intPart = int64(bigEndian(data[:3])) - 0x800000
		frac = int64(binary.BigEndian.Uint16(data[3:5]))
		if intPart < 0 && frac != 0 {
			intPart++
			frac -= 0x10000
		}
		tmp = intPart<<24 + frac*100
	case 5, 6:
		tmp = int64(bigEndian(data[:6])) - 0x800000000000
		intPart = 1 // never the zero shortcut
	default:
		intPart = int64(bigEndian(data[:3])) - 0x800000
		tmp = intPart << 24
	}
	if tmp < 0 {
		b = append(b, '-')
		tmp = -tmp
	}
	hms := tmp >> 24
	b = appendPad(b, (hms>>12)%(1<<10), 2)
	b = appendPad(append(b, ':'), (hms>>6)%(1<<6), 2)
	b = appendPad(append(b, ':'), hms%(1<<6), 2)
	return appendFrac(b, tmp%(1<<24), dec)
}

var decimalBytes = [10]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}

// appendDecimal appends a packed DECIMAL(precision, scale) as its exact
// text with scale fractional digits, and returns the bytes read.
func appendDecimal(b, data []byte, precision, scale int) ([]byte, int, error) {
	integral := precision - scale
	uncompInt, compInt := integral/9, integral%9
	uncompFrac, compFrac := scale/9, scale%9
	size := uncompInt*4 + decimalBytes[compInt] + uncompFrac*4 + decimalBytes[compFrac]
	if precision <= 0 || precision > 65 || scale > 30 || scale > precision || size > len(data) {
		return b, 0, fmt.Errorf("DECIMAL(%d,%d) of %d bytes", precision, scale, len(data))
	}
	var d [32]byte
	copy(d[:], data[:size])
	var mask byte
	if d[0]&0x80 == 0 {
		mask = 0xff
		b = append(b, '-')
	}
	d[0] ^= 0x80
	word := func(p, n int) uint32 {
		var v uint32
		for _, c := range d[p : p+n] {
			v = v<<8 | uint32(c^mask)
		}
		return v
	}
	p, leading := 0, true
	if n := decimalBytes[compInt]; n > 0 {
		if v := word(0, n); v != 0 {
			b = strconv.AppendUint(b, uint64(v), 10)
			leading = false
		}
		p = n
	}
	for range uncompInt {
		v := word(p, 4)
		p += 4
		if leading {
			if v != 0 {
				b = strconv.AppendUint(b, uint64(v), 10)
				leading = false
			}
		} else {
			b = appendPad(b, int64(v), 9)
		}
	}
	if leading {
		b = append(b, '0')
	}
	if scale > 0 {
		b = append(b, '.')
		for range uncompFrac {
			b = appendPad(b, int64(word(p, 4)), 9)
			p += 4
		}
		if n := decimalBytes[compFrac]; n > 0 {
			b = appendPad(b, int64(word(p, n)), compFrac)
			p += n
		}
	}
	return b, size, nil
}

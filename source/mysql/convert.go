package mysql

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/openetl/etl/source"
)

// Values travel in the text form package engine parses for MySQL types,
// the same from the snapshot and from the binlog so that a row reads the
// same either way (the tests check it byte for byte):
//
//	integers, YEAR        decimal digits (BIGINT UNSIGNED max as
//	                      18446744073709551615, never -1)
//	DECIMAL               the exact digits with the column's scale
//	FLOAT, DOUBLE         the shortest text that parses back to the same
//	                      float32 / float64
//	BIT                   the value as an unsigned decimal number
//	DATE, DATETIME, TIME  as MySQL prints them (zero dates included)
//	TIMESTAMP             in UTC, as MySQL prints them under time_zone
//	                      '+00:00'; never in the machine's zone
//	ENUM, SET             the member names ("a,c"; "" for the empty SET
//	                      and the invalid ENUM value)
//	CHAR, VARCHAR, *TEXT  UTF-8
//	BINARY, *BLOB         the bytes (BINARY(n) padded to n with 0x00)
//	JSON                  the JSON text (MariaDB: as stored; MySQL: the
//	                      binary form decoded)

// colKind says how a declared column's snapshot value is written.
type colKind uint8

const (
	kindPlain colKind = iota // the server's text, or the number go-mysql parsed
	kindFloat                // FLOAT: selected as DOUBLE, written as a float32
	kindBit                  // BIT: big-endian bytes, written as a number
)

// kindOf returns the snapshot kind of a column of information_schema's
// DATA_TYPE and COLUMN_TYPE.
func kindOf(dataType, _ string) colKind {
	switch dataType {
	case "float":
		return kindFloat
	case "bit":
		return kindBit
	}
	return kindPlain
}

// selectExpr is the column's expression in the snapshot's SELECT: a FLOAT
// is cast to DOUBLE, since MySQL prints FLOAT with 6 digits.
func selectExpr(name string, k colKind) string {
	if k == kindFloat {
		return "CAST(" + quoteIdent(name) + " AS DOUBLE)"
	}
	return quoteIdent(name)
}

// supportedCharset reports whether text of the character set can be
// written as UTF-8 from the binlog's bytes.
func supportedCharset(cs string) bool {
	switch cs {
	case "", "utf8mb4", "utf8mb3", "utf8", "ascii", "latin1", "binary":
		return true
	}
	return false
}

// appendSnapshotValue appends one snapshot value (a row of the text
// protocol, parsed by go-mysql) to a row payload.
func appendSnapshotValue(buf []byte, k colKind, fv *gomysql.FieldValue, scratch []byte) []byte {
	switch fv.Type {
	case gomysql.FieldValueTypeNull:
		return source.AppendRowNull(buf)
	case gomysql.FieldValueTypeUnsigned:
		return source.AppendRowValue(buf, strconv.AppendUint(scratch[:0], fv.AsUint64(), 10))
	case gomysql.FieldValueTypeSigned:
		return source.AppendRowValue(buf, strconv.AppendInt(scratch[:0], fv.AsInt64(), 10))
	case gomysql.FieldValueTypeFloat:
		if k == kindFloat {
			return source.AppendRowValue(buf, strconv.AppendFloat(scratch[:0], float64(float32(fv.AsFloat64())), 'g', -1, 32))
		}
		return source.AppendRowValue(buf, strconv.AppendFloat(scratch[:0], fv.AsFloat64(), 'g', -1, 64))
	}
	b := fv.AsString()
	if k == kindBit {
		var v uint64
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		return source.AppendRowValue(buf, strconv.AppendUint(scratch[:0], v, 10))
	}
	return source.AppendRowValue(buf, b)
}

// binConv converts one binlog column's values.
type binConv struct {
	typ      byte // the column's real type (ENUM and SET unpacked from STRING)
	unsigned bool
	names    []string // ENUM and SET members, in UTF-8
	latin1   bool     // text in latin1, converted to UTF-8
	pad      int      // BINARY(n): pad to n bytes with 0x00
	frac     int      // TIME(n): fractional digits, which go-mysql leaves out when they are zero
}

// realType is the column's type with ENUM and SET (written as STRING with
// the real type in the metadata) unpacked, as the server's
// log_event_print_value does; and its byte length for STRING.
func realType(t *replication.TableMapEvent, i int) (byte, int) {
	tp, meta := t.ColumnType[i], t.ColumnMeta[i]
	if tp != gomysql.MYSQL_TYPE_STRING {
		return tp, 0
	}
	if meta >= 256 {
		b0, b1 := byte(meta>>8), byte(meta&0xff)
		if b0&0x30 != 0x30 {
			return b0 | 0x30, int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
		}
		return b0, int(meta & 0xff)
	}
	return tp, int(meta)
}

// binlogSig is the signature of a binlog column's type, compared with
// declaredSig to see a column change type while streaming: numeric types
// (integer width, signedness, decimal precision and scale); "" for
// others, whose text fits any text column.
func binlogSig(t *replication.TableMapEvent, i int, unsigned bool) string {
	tp, _ := realType(t, i)
	var s string
	switch tp {
	case gomysql.MYSQL_TYPE_TINY:
		s = "tinyint"
	case gomysql.MYSQL_TYPE_SHORT:
		s = "smallint"
	case gomysql.MYSQL_TYPE_INT24:
		s = "mediumint"
	case gomysql.MYSQL_TYPE_LONG:
		s = "int"
	case gomysql.MYSQL_TYPE_LONGLONG:
		s = "bigint"
	case gomysql.MYSQL_TYPE_FLOAT:
		s = "float"
	case gomysql.MYSQL_TYPE_DOUBLE:
		s = "double"
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		meta := t.ColumnMeta[i]
		s = fmt.Sprintf("decimal(%d,%d)", meta>>8, meta&0xff)
	default:
		return ""
	}
	if unsigned {
		s += " unsigned"
	}
	return s
}

// declaredSig is the signature (see binlogSig) of a COLUMN_TYPE.
func declaredSig(colType string) string {
	base, rest, _ := strings.Cut(colType, "(")
	base = strings.TrimSpace(strings.Fields(base + " x")[0])
	unsigned := strings.Contains(colType, "unsigned") || strings.Contains(colType, "zerofill")
	var s string
	switch base {
	case "tinyint", "bool", "boolean":
		s = "tinyint"
	case "smallint", "mediumint", "bigint":
		s = base
	case "int", "integer":
		s = "int"
	case "float":
		s = "float"
		if n, _, ok := strings.Cut(rest, ")"); ok && !strings.Contains(n, ",") {
			if p, err := strconv.Atoi(n); err == nil && p > 24 {
				s = "double"
			}
		}
	case "double", "real":
		s = "double"
	case "decimal", "numeric", "dec", "fixed":
		p, sc := 10, 0
		if args, _, ok := strings.Cut(rest, ")"); ok {
			a, b, _ := strings.Cut(args, ",")
			p, _ = strconv.Atoi(strings.TrimSpace(a))
			sc, _ = strconv.Atoi(strings.TrimSpace(b))
		}
		s = fmt.Sprintf("decimal(%d,%d)", p, sc)
	default:
		return ""
	}
	if unsigned {
		s += " unsigned"
	}
	return s
}

// newBinConv prepares the conversion of binlog column i of t.
// collations maps character columns to their collation IDs, enums and
// sets to their members (in their own character set), charsets collation
// IDs to character sets.
func newBinConv(t *replication.TableMapEvent, i int, unsigned bool, collation uint64, members []string,
	charsets map[uint64]string) (binConv, error) {
	tp, length := realType(t, i)
	c := binConv{typ: tp, unsigned: unsigned}
	cs := ""
	if collation != 0 {
		var ok bool
		if cs, ok = charsets[collation]; !ok {
			return c, fmt.Errorf("unknown collation ID %d", collation)
		}
	}
	if !supportedCharset(cs) {
		return c, fmt.Errorf("character set %s is not supported (only utf8mb4, utf8mb3, ascii, latin1 and binary)", cs)
	}
	c.latin1 = cs == "latin1"
	if tp == gomysql.MYSQL_TYPE_STRING && cs == "binary" {
		c.pad = length
	}
	if tp == gomysql.MYSQL_TYPE_TIME2 {
		c.frac = int(t.ColumnMeta[i])
	}
	if len(members) > 0 {
		c.names = make([]string, len(members))
		for k, m := range members {
			if c.latin1 {
				m = string(latin1ToUTF8(nil, []byte(m)))
			}
			c.names[k] = m
		}
	}
	return c, nil
}

// appendBinlogValue appends one value decoded by go-mysql from a rows
// event to a row payload.
func (c *binConv) appendValue(buf []byte, v any, scratch []byte) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return source.AppendRowNull(buf), nil
	case int8:
		return source.AppendRowValue(buf, strconv.AppendInt(scratch[:0], int64(v), 10)), nil
	case int16:
		return source.AppendRowValue(buf, strconv.AppendInt(scratch[:0], int64(v), 10)), nil
	case int32:
		return source.AppendRowValue(buf, strconv.AppendInt(scratch[:0], int64(v), 10)), nil
	case int:
		return source.AppendRowValue(buf, strconv.AppendInt(scratch[:0], int64(v), 10)), nil
	case int64:
		switch c.typ {
		case gomysql.MYSQL_TYPE_BIT:
			return source.AppendRowValue(buf, strconv.AppendUint(scratch[:0], uint64(v), 10)), nil
		case gomysql.MYSQL_TYPE_ENUM:
			// 1-based; 0 is the empty string MySQL stores for an invalid value.
			if v == 0 {
				return source.AppendRowValue(buf, nil), nil
			}
			if v < 0 || int(v) > len(c.names) {
				return buf, fmt.Errorf("ENUM index %d of %d members", v, len(c.names))
			}
			return appendRowString(buf, c.names[v-1]), nil
		case gomysql.MYSQL_TYPE_SET:
			s := scratch[:0]
			for bit := 0; bit < 64 && uint64(v)>>bit != 0; bit++ {
				if uint64(v)&(1<<bit) == 0 {
					continue
				}
				if bit >= len(c.names) {
					return buf, fmt.Errorf("SET bit %d of %d members", bit, len(c.names))
				}
				if len(s) > 0 {
					s = append(s, ',')
				}
				s = append(s, c.names[bit]...)
			}
			return source.AppendRowValue(buf, s), nil
		}
		return source.AppendRowValue(buf, strconv.AppendInt(scratch[:0], v, 10)), nil
	case uint8:
		return source.AppendRowValue(buf, strconv.AppendUint(scratch[:0], uint64(v), 10)), nil
	case uint16:
		return source.AppendRowValue(buf, strconv.AppendUint(scratch[:0], uint64(v), 10)), nil
	case uint32:
		return source.AppendRowValue(buf, strconv.AppendUint(scratch[:0], uint64(v), 10)), nil
	case uint64:
		return source.AppendRowValue(buf, strconv.AppendUint(scratch[:0], v, 10)), nil
	case float32:
		return source.AppendRowValue(buf, strconv.AppendFloat(scratch[:0], float64(v), 'g', -1, 32)), nil
	case float64:
		return source.AppendRowValue(buf, strconv.AppendFloat(scratch[:0], v, 'g', -1, 64)), nil
	case string:
		if c.frac > 0 && c.typ == gomysql.MYSQL_TYPE_TIME2 && strings.IndexByte(v, '.') < 0 {
			s := append(append(scratch[:0], v...), '.')
			for range c.frac {
				s = append(s, '0')
			}
			return source.AppendRowValue(buf, s), nil
		}
		if c.latin1 {
			return source.AppendRowValue(buf, latin1ToUTF8(scratch[:0], []byte(v))), nil
		}
		if c.pad > len(v) {
			buf = binary.AppendUvarint(buf, uint64(c.pad)+2)
			buf = append(buf, v...)
			for range c.pad - len(v) {
				buf = append(buf, 0)
			}
			return buf, nil
		}
		return appendRowString(buf, v), nil
	case []byte:
		if c.latin1 {
			return source.AppendRowValue(buf, latin1ToUTF8(scratch[:0], v)), nil
		}
		return source.AppendRowValue(buf, v), nil
	case *replication.JsonDiff:
		return buf, fmt.Errorf("a partial JSON update (binlog_row_value_options=PARTIAL_JSON)")
	}
	return buf, fmt.Errorf("unexpected value of type %T", v)
}

// appendRowString is source.AppendRowValue for a string.
func appendRowString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s))+2)
	return append(buf, s...)
}

// latin1ToUTF8 appends MySQL's latin1 (Windows-1252, with the five
// bytes cp1252 leaves undefined mapped to the C1 controls) as UTF-8.
func latin1ToUTF8(dst, b []byte) []byte {
	for _, c := range b {
		switch {
		case c < 0x80:
			dst = append(dst, c)
		case c < 0xa0:
			dst = utf8.AppendRune(dst, cp1252[c-0x80])
		default:
			dst = utf8.AppendRune(dst, rune(c))
		}
	}
	return dst
}

var cp1252 = [32]rune{
	0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x008D, 0x017D, 0x008F,
	0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
}

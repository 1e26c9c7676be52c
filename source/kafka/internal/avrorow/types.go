package avrorow

import (
	"slices"
	"strconv"
	"strings"
)

// base is a declared column's type, named as the engine's Postgres type
// table names it (engine package doc, "Declared rows").
type base uint8

const (
	tNull base = iota // only nulls seen so far; declared text
	tBool
	tInt4
	tInt8
	tFloat4
	tFloat8
	tNumeric     // numeric(p,s), p ≤ 38
	tNumericText // numeric: exact text of any precision
	tText
	tBytea
	tDate
	tTime
	tTimeTz
	tTimestamp
	tTimestampTz
	tInterval
	tUUID
	tJSON
	tEnum
)

// ctype is a declared column's type: a base, or a one-dimensional array
// of one (list).
type ctype struct {
	b      base
	list   bool
	p, s   int      // tNumeric
	labels []string // tEnum, in first-seen order
}

// Col is one declared column: its name and type.
type Col struct {
	Name string
	t    ctype
}

// Type returns the column's type name in the engine's Postgres type
// system ("int8", "numeric(10,2)", "_text", "enum('a','b')").
func (c Col) Type() string { return c.t.name() }

func (t ctype) name() string {
	var n string
	switch t.b {
	case tNull, tText:
		n = "text"
	case tBool:
		n = "bool"
	case tInt4:
		n = "int4"
	case tInt8:
		n = "int8"
	case tFloat4:
		n = "float4"
	case tFloat8:
		n = "float8"
	case tNumeric:
		n = "numeric(" + strconv.Itoa(t.p) + "," + strconv.Itoa(t.s) + ")"
	case tNumericText:
		n = "numeric"
	case tBytea:
		n = "bytea"
	case tDate:
		n = "date"
	case tTime:
		n = "time"
	case tTimeTz:
		n = "timetz"
	case tTimestamp:
		n = "timestamp"
	case tTimestampTz:
		n = "timestamptz"
	case tInterval:
		n = "interval"
	case tUUID:
		n = "uuid"
	case tJSON:
		n = "jsonb"
	case tEnum:
		var b strings.Builder
		b.WriteString("enum(")
		for i, l := range t.labels {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('\'')
			b.WriteString(strings.ReplaceAll(l, "'", "''"))
			b.WriteByte('\'')
		}
		b.WriteByte(')')
		n = b.String()
	}
	if t.list {
		return "_" + n
	}
	return n
}

func (t ctype) equal(u ctype) bool {
	return t.b == u.b && t.list == u.list && t.p == u.p && t.s == u.s && slices.Equal(t.labels, u.labels)
}

// digits10 is how many decimal digits an integer type's values need.
func intDigits(b base) int {
	if b == tInt4 {
		return 10
	}
	return 19
}

// join returns a type whose parser accepts the text of every value of
// both t and u, exactly: the widening Avro's promotions allow (int →
// long → double, float → double, narrower decimals into wider ones),
// enums with both label sets, and text for anything else (every value's
// text form kept).
func join(t, u ctype) ctype {
	if t.b == tNull && !t.list {
		return u
	}
	if u.b == tNull && !u.list {
		return t
	}
	if t.list != u.list {
		return ctype{b: tText}
	}
	if t.list {
		e := joinBase(ctype{b: t.b, p: t.p, s: t.s, labels: t.labels}, ctype{b: u.b, p: u.p, s: u.s, labels: u.labels})
		e.list = true
		return e
	}
	return joinBase(t, u)
}

func joinBase(t, u ctype) ctype {
	if t.b == u.b {
		switch t.b {
		case tNumeric:
			return decimalType(max(t.p-t.s, u.p-u.s), max(t.s, u.s))
		case tEnum:
			labels := slices.Clone(t.labels)
			for _, l := range u.labels {
				if !slices.Contains(labels, l) {
					labels = append(labels, l)
				}
			}
			return ctype{b: tEnum, labels: labels}
		}
		return t
	}
	if t.b > u.b {
		t, u = u, t // t.b < u.b below
	}
	switch {
	case t.b == tInt4 && u.b == tInt8:
		return ctype{b: tInt8}
	case t.b == tFloat4 && u.b == tFloat8:
		return ctype{b: tFloat8}
	case (t.b == tInt4 || t.b == tInt8) && (u.b == tFloat4 || u.b == tFloat8):
		return ctype{b: tFloat8}
	case (t.b == tInt4 || t.b == tInt8) && u.b == tNumeric:
		return decimalType(max(intDigits(t.b), u.p-u.s), u.s)
	case (t.b == tInt4 || t.b == tInt8 || t.b == tNumeric) && u.b == tNumericText:
		return ctype{b: tNumericText}
	}
	return ctype{b: tText}
}

// decimalType is numeric(ip+s, s), or unbounded numeric past 38 digits.
func decimalType(ip, s int) ctype {
	if ip+s > 38 {
		return ctype{b: tNumericText}
	}
	return ctype{b: tNumeric, p: ip + s, s: s}
}

// Join returns the columns that hold the values of both column lists:
// a's columns in order, each joined with b's column of the same name,
// then b's columns a lacks. Nothing a holds is lost: joining a later
// writer schema's columns only ever adds columns and widens types.
func Join(a, b []Col) []Col {
	out := slices.Clone(a)
	for _, c := range b {
		i := slices.IndexFunc(out, func(o Col) bool { return o.Name == c.Name })
		if i < 0 {
			out = append(out, c)
			continue
		}
		out[i].t = join(out[i].t, c.t)
	}
	return out
}

// slotOf returns the index in cols of the column named name, and its
// type; -1 when there is none.
func slotOf(cols []Col, name string) (int, ctype) {
	for j, c := range cols {
		if c.Name == name {
			return j, c.t
		}
	}
	return -1, ctype{}
}

// Covers reports whether cols already hold every column of own with its
// type: Join(cols, own) would change nothing.
func Covers(cols, own []Col) bool {
	j := Join(cols, own)
	if len(j) != len(cols) {
		return false
	}
	for i := range j {
		// Enum labels don't count: the engine's enum type names none,
		// and a label added to the writer schema changes no Arrow type.
		a, b := j[i].t, cols[i].t
		a.labels, b.labels = nil, nil
		if !a.equal(b) {
			return false
		}
	}
	return true
}

// RowSchema is a compiled writer schema of one message type: an Avro
// *Schema, a *ProtoSchema or a *JSONSchema.
type RowSchema interface {
	// Cols returns the schema's columns.
	Cols() []Col
	// RowDecoder returns a decoder of the schema's values into rows of
	// cols, which must cover its columns (Covers).
	RowDecoder(cols []Col) (RowDecoder, error)
}

// RowDecoder decodes values of one writer schema, reusing its buffers.
type RowDecoder interface {
	// Row decodes one value and appends its row payload to dst.
	Row(dst, payload []byte) ([]byte, error)
	// JSON appends the value as compact JSON text.
	JSON(dst, payload []byte) ([]byte, error)
}

// RowDecoder implements RowSchema.
func (s *Schema) RowDecoder(cols []Col) (RowDecoder, error) {
	d, err := NewDecoder(s, cols)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// RowDecoder implements RowSchema.
func (s *ProtoSchema) RowDecoder(cols []Col) (RowDecoder, error) {
	d, err := s.NewDecoder(cols)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// RowDecoder implements RowSchema.
func (s *JSONSchema) RowDecoder(cols []Col) (RowDecoder, error) {
	d, err := s.NewDecoder(cols)
	if err != nil {
		return nil, err
	}
	return d, nil
}

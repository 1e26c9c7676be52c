// Package avrorow decodes Avro binary values — and Protobuf binary values
// (proto.go) and JSON values of a JSON Schema (jsonschema.go) — into the
// engine's declared rows (source.AppendRow payloads in the engine's
// Postgres type system), from the writer schema alone: no generic values,
// no reflection, and no allocation per value in steady state. The three
// share the column types, their joining (Join, Covers) and the text
// forms below.
//
// A writer schema's top-level record fields are the columns (of a union
// of null and a record too, a null value being a row of nulls; a schema
// of another type is one column, "value"). Each field's Avro type maps to a
// declared type, and each value is written in the text form the engine
// parses into that type exactly:
//
//	Avro                                  declared type (Arrow)
//	null                                  text, always null
//	boolean                               bool
//	int / long                            int4 / int8
//	float / double                        float4 / float8
//	bytes, fixed                          bytea (binary)
//	string                                text
//	enum                                  enum('A','B',...) (utf8, marked enum)
//	decimal(p,s) on bytes or fixed        numeric(p,s) (decimal128); p > 38:
//	                                      numeric (utf8, the exact text)
//	uuid on string or fixed(16)           uuid (fixed_size_binary(16))
//	date                                  date (date32)
//	time-millis / time-micros             time (time64[us])
//	timestamp-millis / -micros / -nanos   timestamptz (timestamp[us, UTC])
//	local-timestamp-millis / -micros /    timestamp (timestamp[us])
//	-nanos
//	duration (fixed 12)                   interval (month_day_nano)
//	array of a type above                 _T (list<T>); nullable items allowed
//	union of null and one type            that type (null is null)
//	union of several scalar types         their join (below); the value of
//	                                      the branch written
//	record, map, array of complex items,  jsonb (utf8 JSON text, see below)
//	union with a complex branch
//
// Kafka Connect's and Debezium's semantic types (the connect.name schema
// property) map the same way: io.debezium.time.Date, Time, MicroTime,
// NanoTime, Timestamp, MicroTimestamp, NanoTimestamp (local),
// ZonedTimestamp (timestamptz), ZonedTime (timetz), MicroDuration
// (interval), io.debezium.data.Json (jsonb), Uuid (uuid), Enum (enum of
// its allowed values), VariableScaleDecimal (numeric, exact text);
// org.apache.kafka.connect.data.Decimal, Date, Time, Timestamp.
//
// Nothing is rounded: a nanosecond value with a sub-microsecond part, or
// a decimal wider than its declared precision, is written as it is and the
// engine holds the cell (out_of_range) rather than truncating it.
//
// JSON text (jsonb columns) writes records as objects, maps as objects,
// arrays as arrays, bytes and fixed as base64 strings, decimals as exact
// numbers, dates, times and timestamps as ISO 8601 strings (timestamps
// with a Z when UTC), NaN and infinities as strings, and a union with more
// than one non-null branch as {"<branch type name>": value}.
//
// Columns of several writer schemas (a topic's schema versions) join
// (Join): new columns are appended, and a column's types widen as Avro's
// promotions do (int → long → double, float → double, decimals to the
// wider of both), enums take both label sets, and any other mix becomes
// text, which every value's text form fits.
package avrorow

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/avro"
)

type kind uint8

const (
	kNull kind = iota
	kBool
	kInt
	kLong
	kFloat
	kDouble
	kBytes
	kString
	kFixed
	kEnum
	kArray
	kMap
	kRecord
	kUnion
)

type logical uint8

const (
	lNone logical = iota
	lDecimal
	lUUID
	lDate
	lTimeMillis
	lTimeMicros
	lTimeNanos
	lTsMillis
	lTsMicros
	lTsNanos
	lLocalMillis
	lLocalMicros
	lLocalNanos
	lDuration      // fixed(12): months, days, millis
	lMicroDuration // long microseconds (io.debezium.time.MicroDuration)
	lJSON          // string holding JSON (io.debezium.data.Json)
	lZonedTs       // string, ISO 8601 with an offset
	lZonedTime     // string, time of day with an offset
	lEnumString    // string of a listed set (io.debezium.data.Enum)
	lVarDecimal    // record {scale int, value bytes}
)

type field struct {
	name string
	t    *typ
}

// typ is a compiled Avro type. Named types are shared by pointer, so
// recursive schemas are cyclic graphs.
type typ struct {
	k        kind
	l        logical
	prec     int // decimal precision; 0 with lDecimal: unbounded
	scale    int
	size     int
	symbols  []string
	items    *typ
	values   *typ
	fields   []field
	branches []*typ
	name     string // full name of a named type; the branch name in tagged JSON
	multi    bool   // a union of more than one non-null branch
	// varScale, varValue are the field indexes of a VariableScaleDecimal.
	varScale, varValue int
	col                ctype // the declared type of a column of this type
}

// Schema is a compiled writer schema. It is safe for concurrent use; its
// Decoders are not.
type Schema struct {
	root *typ
	cols []Col
	// own[i] is the column index in cols of root field i (record roots;
	// -1: a field left out), or 0 for a one-column root.
	own []int
	env *envelope
	// nullable: the root is a union of null and the record whose fields
	// are the columns.
	nullable bool
}

// envelope locates a Debezium change event's parts in its root record.
type envelope struct {
	before, after, op int // root field indexes; -1 when absent
	row               *typ
}

// Errors.
var (
	// ErrSchema is wrapped by Parse, ParseProto and ParseJSONSchema for a
	// schema they can't use.
	ErrSchema = errors.New("schema")
	// ErrNotEnvelope is wrapped by Parse with debezium set for a schema
	// that is not a Debezium change event's.
	ErrNotEnvelope = errors.New("not a Debezium envelope schema (a record with before, after and op fields)")
	// ErrData is wrapped by decoding errors: the bytes don't match the
	// writer schema.
	ErrData = errors.New("payload does not match its schema")
)

// reservedPrefix starts the engine's metadata column names; a field so
// named can't be a declared column.
const reservedPrefix = "_openetl_"

// Parse compiles the writer schema text. refs are the texts of schemas it
// references (a registry's schema references), in dependency order. With
// debezium set, the schema must be a Debezium change event's envelope, and
// the columns are those of its before/after row record.
//
// Fields named with the engine's reserved prefix "_openetl_" (in any case)
// are not columns: their values are skipped.
func Parse(text string, refs []string, debezium bool) (*Schema, error) {
	var cache avro.SchemaCache
	for i, r := range refs {
		if _, err := cache.Parse(r); err != nil {
			return nil, fmt.Errorf("%w: avro: reference %d: %v", ErrSchema, i, err)
		}
	}
	sch, err := cache.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%w: avro: %v", ErrSchema, err)
	}
	c := compiler{named: map[string]*typ{}}
	root, err := c.compile(sch.Root(), "", 0)
	if err != nil {
		return nil, err
	}
	s := &Schema{root: root}
	if debezium {
		env, err := findEnvelope(root)
		if err != nil {
			return nil, err
		}
		s.env = env
		s.cols, s.own = recordCols(env.row)
		return s, nil
	}
	if root.k == kRecord && root.l != lVarDecimal {
		s.cols, s.own = recordCols(root)
		return s, nil
	}
	// A nullable record (["null", {record}]): its fields are the columns,
	// and a null value is a row of nulls.
	if r := nonNull(root); root.k == kUnion && r != nil && r.k == kRecord && r.l != lVarDecimal {
		s.nullable = true
		s.cols, s.own = recordCols(r)
		return s, nil
	}
	s.cols = []Col{{Name: "value", t: root.col}}
	s.own = []int{0}
	return s, nil
}

func recordCols(r *typ) ([]Col, []int) {
	var cols []Col
	own := make([]int, len(r.fields))
	for i, f := range r.fields {
		if strings.HasPrefix(strings.ToLower(f.name), reservedPrefix) {
			own[i] = -1
			continue
		}
		own[i] = len(cols)
		cols = append(cols, Col{Name: f.name, t: f.t.col})
	}
	return cols, own
}

func findEnvelope(root *typ) (*envelope, error) {
	if root.k != kRecord {
		return nil, ErrNotEnvelope
	}
	env := &envelope{before: -1, after: -1, op: -1}
	for i, f := range root.fields {
		switch f.name {
		case "before", "after":
			r := nonNull(f.t)
			if r == nil || r.k != kRecord {
				return nil, fmt.Errorf("%w: field %q is not a record or a union of null and a record", ErrNotEnvelope, f.name)
			}
			if env.row != nil && env.row != r {
				return nil, fmt.Errorf("%w: before and after are different records", ErrNotEnvelope)
			}
			env.row = r
			if f.name == "before" {
				env.before = i
			} else {
				env.after = i
			}
		case "op":
			if nonNull(f.t) == nil || nonNull(f.t).k != kString {
				return nil, fmt.Errorf("%w: field \"op\" is not a string", ErrNotEnvelope)
			}
			env.op = i
		}
	}
	if env.row == nil || env.op < 0 {
		return nil, ErrNotEnvelope
	}
	return env, nil
}

// nonNull returns t, or the one non-null branch of a union of null and
// one type; nil for another union.
func nonNull(t *typ) *typ {
	if t.k != kUnion {
		return t
	}
	var out *typ
	for _, b := range t.branches {
		if b.k == kNull {
			continue
		}
		if out != nil {
			return nil
		}
		out = b
	}
	return out
}

// Cols returns the schema's columns, in field order.
func (s *Schema) Cols() []Col { return s.cols }

// Debezium reports whether the schema was parsed as a Debezium envelope.
func (s *Schema) Debezium() bool { return s.env != nil }

// maxDepth bounds the nesting of a schema's types (and so of values).
const maxDepth = 64

type compiler struct {
	named map[string]*typ
}

func fullName(n *avro.SchemaNode) string {
	if strings.Contains(n.Name, ".") {
		return strings.TrimPrefix(n.Name, ".")
	}
	if n.Namespace != "" {
		return n.Namespace + "." + n.Name
	}
	return n.Name
}

func (c *compiler) compile(n *avro.SchemaNode, ns string, depth int) (*typ, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested more than %d levels", ErrSchema, maxDepth)
	}
	t := &typ{}
	switch n.Type {
	case "null":
		t.k = kNull
	case "boolean":
		t.k = kBool
	case "int":
		t.k = kInt
	case "long":
		t.k = kLong
	case "float":
		t.k = kFloat
	case "double":
		t.k = kDouble
	case "bytes":
		t.k = kBytes
	case "string":
		t.k = kString
	case "fixed":
		t.k, t.size = kFixed, n.Size
	case "enum":
		t.k, t.symbols = kEnum, n.Symbols
	case "array":
		t.k = kArray
	case "map":
		t.k = kMap
	case "record", "error":
		t.k = kRecord
	case "union":
		t.k = kUnion
		for i := range n.Branches {
			b, err := c.compile(&n.Branches[i], ns, depth+1)
			if err != nil {
				return nil, err
			}
			t.branches = append(t.branches, b)
		}
		cnt := 0
		for _, b := range t.branches {
			if b.k != kNull {
				cnt++
			}
		}
		t.multi = cnt > 1
		t.col = unionCol(t)
		return t, nil
	default:
		// A reference to a named type defined earlier (or the enclosing
		// one, for a recursive schema).
		name := strings.TrimPrefix(n.Type, ".")
		if r, ok := c.named[name]; ok {
			return r, nil
		}
		if !strings.Contains(name, ".") && ns != "" {
			if r, ok := c.named[ns+"."+name]; ok {
				return r, nil
			}
		}
		return nil, fmt.Errorf("%w: unknown type %q", ErrSchema, n.Type)
	}
	if t.k == kFixed || t.k == kEnum || t.k == kRecord {
		t.name = fullName(n)
		c.named[t.name] = t // before the fields: they may refer to it
		if i := strings.LastIndexByte(t.name, '.'); i >= 0 {
			ns = t.name[:i]
		} else {
			ns = ""
		}
	} else {
		t.name = n.Type
	}
	t.l = logicalOf(n, t)
	// A recursive record's fields see it before it is done: give it its
	// column type now (records are jsonb, but for VariableScaleDecimal).
	if t.k == kRecord {
		t.col = colOf(t)
	}
	switch t.k {
	case kArray:
		it, err := c.compile(n.Items, ns, depth+1)
		if err != nil {
			return nil, err
		}
		t.items = it
	case kMap:
		v, err := c.compile(n.Values, ns, depth+1)
		if err != nil {
			return nil, err
		}
		t.values = v
	case kRecord:
		for i := range n.Fields {
			f := &n.Fields[i]
			ft, err := c.compile(&f.Type, ns, depth+1)
			if err != nil {
				return nil, err
			}
			t.fields = append(t.fields, field{name: f.Name, t: ft})
		}
		if t.l == lVarDecimal {
			t.varScale, t.varValue = -1, -1
			for i, f := range t.fields {
				switch {
				case f.name == "scale" && f.t.k == kInt:
					t.varScale = i
				case f.name == "value" && f.t.k == kBytes:
					t.varValue = i
				}
			}
			if t.varScale < 0 || t.varValue < 0 || len(t.fields) != 2 {
				t.l = lNone
			}
		}
	}
	t.col = colOf(t)
	return t, nil
}

// connect returns the Kafka Connect semantic type name (connect.name) and
// the parameter key of n.
func connect(n *avro.SchemaNode, key string) (name, param string) {
	name, _ = n.Props["connect.name"].(string)
	if ps, ok := n.Props["connect.parameters"].(map[string]any); ok {
		switch v := ps[key].(type) {
		case string:
			param = v
		case int64:
			param = strconv.FormatInt(v, 10)
		}
	}
	return name, param
}

func logicalOf(n *avro.SchemaNode, t *typ) logical {
	switch lt := n.LogicalType; {
	case lt == "decimal" && (t.k == kBytes || t.k == kFixed):
		t.prec, t.scale = n.Precision, n.Scale
		return lDecimal
	case lt == "uuid" && (t.k == kString || t.k == kFixed && t.size == 16):
		return lUUID
	case lt == "date" && t.k == kInt:
		return lDate
	case lt == "time-millis" && t.k == kInt:
		return lTimeMillis
	case lt == "time-micros" && t.k == kLong:
		return lTimeMicros
	case lt == "timestamp-millis" && t.k == kLong:
		return lTsMillis
	case lt == "timestamp-micros" && t.k == kLong:
		return lTsMicros
	case lt == "timestamp-nanos" && t.k == kLong:
		return lTsNanos
	case lt == "local-timestamp-millis" && t.k == kLong:
		return lLocalMillis
	case lt == "local-timestamp-micros" && t.k == kLong:
		return lLocalMicros
	case lt == "local-timestamp-nanos" && t.k == kLong:
		return lLocalNanos
	case lt == "duration" && t.k == kFixed && t.size == 12:
		return lDuration
	}
	name, _ := connect(n, "")
	switch name {
	case "io.debezium.time.Date", "org.apache.kafka.connect.data.Date":
		if t.k == kInt {
			return lDate
		}
	case "io.debezium.time.Time", "org.apache.kafka.connect.data.Time":
		if t.k == kInt {
			return lTimeMillis
		}
	case "io.debezium.time.MicroTime":
		if t.k == kLong {
			return lTimeMicros
		}
	case "io.debezium.time.NanoTime":
		if t.k == kLong {
			return lTimeNanos
		}
	case "org.apache.kafka.connect.data.Timestamp":
		if t.k == kLong {
			return lTsMillis
		}
	case "io.debezium.time.Timestamp":
		if t.k == kLong {
			return lLocalMillis
		}
	case "io.debezium.time.MicroTimestamp":
		if t.k == kLong {
			return lLocalMicros
		}
	case "io.debezium.time.NanoTimestamp":
		if t.k == kLong {
			return lLocalNanos
		}
	case "io.debezium.time.MicroDuration":
		if t.k == kLong {
			return lMicroDuration
		}
	case "io.debezium.time.ZonedTimestamp":
		if t.k == kString {
			return lZonedTs
		}
	case "io.debezium.time.ZonedTime":
		if t.k == kString {
			return lZonedTime
		}
	case "io.debezium.data.Json":
		if t.k == kString {
			return lJSON
		}
	case "io.debezium.data.Uuid":
		if t.k == kString {
			return lUUID
		}
	case "io.debezium.data.Enum":
		_, allowed := connect(n, "allowed")
		if t.k == kString && allowed != "" {
			t.symbols = strings.Split(allowed, ",")
			return lEnumString
		}
	case "io.debezium.data.VariableScaleDecimal":
		if t.k == kRecord {
			return lVarDecimal
		}
	case "org.apache.kafka.connect.data.Decimal":
		// Without Avro's own decimal logical type (which the converters
		// normally add): the scale is a parameter, the precision an
		// optional one.
		_, scale := connect(n, "scale")
		_, prec := connect(n, "connect.decimal.precision")
		s, err := strconv.Atoi(scale)
		if t.k == kBytes && err == nil && s >= 0 {
			p, _ := strconv.Atoi(prec)
			t.prec, t.scale = p, s
			if p < s {
				t.prec = 0
			}
			return lDecimal
		}
	}
	return lNone
}

// colOf is the declared type of a column of t (not a union).
func colOf(t *typ) ctype {
	switch t.k {
	case kNull:
		return ctype{b: tNull}
	case kBool:
		return ctype{b: tBool}
	case kInt:
		switch t.l {
		case lDate:
			return ctype{b: tDate}
		case lTimeMillis:
			return ctype{b: tTime}
		}
		return ctype{b: tInt4}
	case kLong:
		switch t.l {
		case lTimeMicros, lTimeNanos:
			return ctype{b: tTime}
		case lTsMillis, lTsMicros, lTsNanos:
			return ctype{b: tTimestampTz}
		case lLocalMillis, lLocalMicros, lLocalNanos:
			return ctype{b: tTimestamp}
		case lMicroDuration:
			return ctype{b: tInterval}
		}
		return ctype{b: tInt8}
	case kFloat:
		return ctype{b: tFloat4}
	case kDouble:
		return ctype{b: tFloat8}
	case kBytes, kFixed:
		switch t.l {
		case lDecimal:
			if t.prec <= 0 {
				return ctype{b: tNumericText}
			}
			return decimalType(t.prec-t.scale, t.scale)
		case lUUID:
			return ctype{b: tUUID}
		case lDuration:
			return ctype{b: tInterval}
		}
		return ctype{b: tBytea}
	case kString:
		switch t.l {
		case lUUID:
			return ctype{b: tUUID}
		case lJSON:
			return ctype{b: tJSON}
		case lZonedTs:
			return ctype{b: tTimestampTz}
		case lZonedTime:
			return ctype{b: tTimeTz}
		case lEnumString:
			return ctype{b: tEnum, labels: t.symbols}
		}
		return ctype{b: tText}
	case kEnum:
		return ctype{b: tEnum, labels: t.symbols}
	case kArray:
		it := nonNull(t.items)
		if it == nil || it.k == kNull {
			return ctype{b: tJSON}
		}
		e := it.col
		if e.list || e.b == tJSON || it.k == kUnion {
			return ctype{b: tJSON}
		}
		e.list = true
		return e
	case kRecord:
		if t.l == lVarDecimal {
			return ctype{b: tNumericText}
		}
		return ctype{b: tJSON}
	}
	return ctype{b: tJSON} // maps
}

// unionCol is the declared type of a column of union t: a nullable type's
// own, the join of several scalar branches', or jsonb when a branch is
// complex.
func unionCol(t *typ) ctype {
	out := ctype{b: tNull}
	n := 0
	for _, b := range t.branches {
		if b.k == kNull {
			continue
		}
		n++
		if n > 1 && (out.list || out.b == tJSON || b.col.list || b.col.b == tJSON) {
			return ctype{b: tJSON}
		}
		out = join(out, b.col)
	}
	return out
}

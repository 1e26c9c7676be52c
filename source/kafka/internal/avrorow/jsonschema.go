package avrorow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// JSON Schema. A registry's JSON Schema schema describes JSON values;
// the payload after the wire format's header is the JSON text. An
// object schema's properties (in the order the schema lists them) are
// the columns; a schema of anything else is one column, "value".
//
//	JSON Schema                          declared type (Arrow)
//	"boolean"                            bool
//	"integer"                            int8
//	"number"                             float8
//	"string"                             text
//	"string" with "enum"                 enum('a',...)
//	"string", format "date-time"         timestamptz (timestamp[us, UTC])
//	"string", format "date"              date (date32)
//	"string", format "uuid"              uuid (fixed_size_binary(16))
//	"array" of one of the above          _T (list<T>)
//	"object", other arrays, no "type",   jsonb (utf8 JSON text, as written)
//	"const", "allOf"
//	["T", "null"], oneOf/anyOf of        T's, nullable
//	{"type": "null"} and T
//	several types                        their join (int8 and float8:
//	                                     float8; else text), or jsonb
//	                                     when one is an object or array
//
// "$ref"s to the schema's own definitions ("#/definitions/X",
// "#/$defs/X", any JSON pointer) and to its references (by their names)
// are followed (a chain of $refs to any length short of a cycle, which
// is an error). Every column is nullable: a property that is absent or
// null is null, whatever "required" says. A value whose JSON type the
// property's schema does not allow (a string for "integer", a fraction
// for "integer", an object for "string") makes the message undecodable,
// as a payload that does not match its schema. An integral number
// written with a fraction or an exponent is an "integer" (1.0, 1e3: draft
// 6 on), written as its digits, exactly; beyond int64 it is undecodable
// (plain digits beyond int64 go to the engine, which holds them). A \u
// escape of a lone UTF-16 surrogate makes the message undecodable: no
// text holds it, and it is not replaced by U+FFFD. Formats are checked by
// the engine, which holds a value its column can't take. Properties the
// schema does not list ("additionalProperties", "patternProperties") are
// not kept: a topic whose documents vary that way wants DecodeJSON,
// whose columns the engine infers from the documents.

// JSON value kinds, as bits.
const (
	jNull uint8 = 1 << iota
	jBool
	jInt
	jNum // a number with a fraction or exponent
	jStr
	jObj
	jArr
	jAny = jNull | jBool | jInt | jNum | jStr | jObj | jArr
)

// jfield is one column's plan.
type jfield struct {
	name    string
	col     ctype
	kinds   uint8 // the JSON kinds its schema allows
	elKinds uint8 // of its items, for a list column
}

// JSONSchema is a compiled JSON Schema. It is safe for concurrent use;
// its decoders are not.
type JSONSchema struct {
	fields []jfield
	props  map[string]int
	cols   []Col
	whole  bool // one column "value" of the whole document
}

// Cols returns the schema's columns.
func (s *JSONSchema) Cols() []Col { return s.cols }

// jobj is a JSON object with its keys in order.
type jobj struct {
	keys []string
	vals map[string]any
}

func (o *jobj) get(k string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[k]
	return v, ok
}

func decodeOrdered(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested more than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &jobj{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeOrdered(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			var a []any
			for dec.More() {
				v, err := decodeOrdered(dec, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
	}
	return tok, nil
}

func parseOrdered(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	v, err := decodeOrdered(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("text after the schema")
	}
	return v, nil
}

type jcompiler struct {
	refs map[string]any // reference name → parsed document
	// types holds each subschema's compiled type: compiled once however
	// many places refer to it (n $refs to a schema of n $refs ... are
	// linear work, not n^depth).
	types map[*jobj]jtype
	evals int // subschemas compiled, for tests
}

// jtype is typeOf's answer for a subschema.
type jtype struct {
	t         ctype
	kinds, el uint8
}

// maxRefChain bounds one chain of $refs (a $ref to a $ref to ...).
const maxRefChain = 1000

// ParseJSONSchema compiles a JSON Schema with the schemas it references.
func ParseJSONSchema(text string, refs []Ref) (*JSONSchema, error) {
	s, _, err := parseJSONSchema(text, refs)
	return s, err
}

func parseJSONSchema(text string, refs []Ref) (*JSONSchema, *jcompiler, error) {
	c := &jcompiler{refs: map[string]any{}, types: map[*jobj]jtype{}}
	s, err := c.compile(text, refs)
	return s, c, err
}

func (c *jcompiler) compile(text string, refs []Ref) (*JSONSchema, error) {
	for _, r := range refs {
		doc, err := parseOrdered(r.Text)
		if err != nil {
			return nil, fmt.Errorf("%w: json schema: reference %s: %v", ErrSchema, r.Name, err)
		}
		c.refs[r.Name] = doc
	}
	doc, err := parseOrdered(text)
	if err != nil {
		return nil, fmt.Errorf("%w: json schema: %v", ErrSchema, err)
	}
	root, rdoc, err := c.deref(doc, doc)
	if err != nil {
		return nil, err
	}
	s := &JSONSchema{props: map[string]int{}}
	o, _ := root.(*jobj)
	props, _ := o.get("properties")
	po, _ := props.(*jobj)
	if po == nil || !c.isObject(o) {
		f, err := c.field("value", root, rdoc, 0)
		if err != nil {
			return nil, err
		}
		s.whole = true
		s.fields = []jfield{f}
		s.cols = []Col{{Name: "value", t: f.col}}
		return s, nil
	}
	for _, name := range po.keys {
		f, err := c.field(name, po.vals[name], rdoc, 0)
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(strings.ToLower(name), reservedPrefix) {
			continue
		}
		s.props[name] = len(s.fields)
		s.fields = append(s.fields, f)
		s.cols = append(s.cols, Col{Name: name, t: f.col})
	}
	return s, nil
}

// isObject reports whether schema o describes objects only.
func (c *jcompiler) isObject(o *jobj) bool {
	t, ok := o.get("type")
	if !ok {
		return true // properties alone
	}
	switch t := t.(type) {
	case string:
		return t == "object"
	case []any:
		return len(t) == 1 && t[0] == "object"
	}
	return false
}

// deref follows s's $ref (within doc, or into a reference), and the
// $ref of what it names, ..., returning the schema and the document it
// is in. A chain that comes back to one of its own $refs is a cycle (an
// error); the budget is the chain's, not the schema's: a schema may use
// one definition any number of times.
func (c *jcompiler) deref(s, doc any) (any, any, error) {
	var chain []*jobj
	for {
		o, ok := s.(*jobj)
		if !ok {
			return s, doc, nil
		}
		r, ok := o.get("$ref")
		ref, isStr := r.(string)
		if !ok || !isStr {
			return s, doc, nil
		}
		if slices.Contains(chain, o) {
			return nil, nil, fmt.Errorf("%w: json schema: $ref %q: a cycle of $refs", ErrSchema, ref)
		}
		if chain = append(chain, o); len(chain) > maxRefChain {
			return nil, nil, fmt.Errorf("%w: json schema: a chain of more than %d $refs", ErrSchema, maxRefChain)
		}
		uri, ptr, _ := strings.Cut(ref, "#")
		if uri != "" {
			d, ok := c.refs[uri]
			if !ok {
				return nil, nil, fmt.Errorf("%w: json schema: $ref %q: no such reference", ErrSchema, ref)
			}
			doc = d
		}
		t := doc
		for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			if part == "" {
				continue
			}
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			switch v := t.(type) {
			case *jobj:
				if t, ok = v.get(part); !ok {
					return nil, nil, fmt.Errorf("%w: json schema: $ref %q: no such definition", ErrSchema, ref)
				}
			case []any:
				i, err := strconv.Atoi(part)
				if err != nil || i < 0 || i >= len(v) {
					return nil, nil, fmt.Errorf("%w: json schema: $ref %q: no such definition", ErrSchema, ref)
				}
				t = v[i]
			default:
				return nil, nil, fmt.Errorf("%w: json schema: $ref %q: no such definition", ErrSchema, ref)
			}
		}
		s = t
	}
}

// field compiles a property's schema.
func (c *jcompiler) field(name string, s, doc any, depth int) (jfield, error) {
	f := jfield{name: name}
	t, kinds, el, err := c.typeOf(s, doc, depth)
	if err != nil {
		return f, err
	}
	f.col, f.kinds, f.elKinds = t, kinds, el
	return f, nil
}

// typeOf returns the column type of values of s, the JSON kinds s
// allows, and its items' kinds when the type is a list.
func (c *jcompiler) typeOf(s, doc any, depth int) (ctype, uint8, uint8, error) {
	if depth > maxDepth {
		return ctype{}, 0, 0, fmt.Errorf("%w: json schema: nested more than %d levels", ErrSchema, maxDepth)
	}
	s, doc, err := c.deref(s, doc)
	if err != nil {
		return ctype{}, 0, 0, err
	}
	o, ok := s.(*jobj)
	if !ok {
		return ctype{b: tJSON}, jAny, 0, nil // true, false: any value
	}
	if t, ok := c.types[o]; ok {
		return t.t, t.kinds, t.el, nil
	}
	c.evals++
	t, kinds, el, err := c.objType(o, doc, depth)
	if err == nil {
		c.types[o] = jtype{t, kinds, el}
	}
	return t, kinds, el, err
}

// objType is typeOf for an object schema o of document doc.
func (c *jcompiler) objType(o *jobj, doc any, depth int) (ctype, uint8, uint8, error) {
	var types []string
	switch t := o.vals["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			if x, ok := x.(string); ok {
				types = append(types, x)
			}
		}
	}
	if len(types) == 0 {
		for _, k := range []string{"oneOf", "anyOf"} {
			bs, ok := o.vals[k].([]any)
			if !ok {
				continue
			}
			out, kinds := ctype{b: tNull}, uint8(0)
			var elk uint8
			for _, b := range bs {
				bt, bk, be, err := c.typeOf(b, doc, depth+1)
				if err != nil {
					return ctype{}, 0, 0, err
				}
				kinds |= bk
				elk |= be
				out = jjoin(out, bt, bk)
			}
			return out, kinds, elk, nil
		}
		return ctype{b: tJSON}, jAny, 0, nil
	}
	out, kinds := ctype{b: tNull}, uint8(0)
	var elk uint8
	for _, t := range types {
		var ct ctype
		var k uint8
		switch t {
		case "null":
			kinds |= jNull
			continue
		case "boolean":
			ct, k = ctype{b: tBool}, jBool
		case "integer":
			ct, k = ctype{b: tInt8}, jInt
		case "number":
			ct, k = ctype{b: tFloat8}, jInt|jNum
		case "string":
			ct, k = ctype{b: tText}, jStr
			switch format, _ := o.vals["format"].(string); format {
			case "date-time":
				ct.b = tTimestampTz
			case "date":
				ct.b = tDate
			case "uuid":
				ct.b = tUUID
			}
			if ct.b == tText {
				if vals, ok := o.vals["enum"].([]any); ok && len(vals) > 0 {
					var labels []string
					for _, v := range vals {
						if l, ok := v.(string); ok {
							labels = append(labels, l)
						}
					}
					if len(labels) == len(vals) {
						ct = ctype{b: tEnum, labels: labels}
					}
				}
			}
		case "object":
			ct, k = ctype{b: tJSON}, jObj
		case "array":
			ct, k = ctype{b: tJSON}, jArr
			if items, ok := o.vals["items"]; ok && len(types) <= 2 {
				if _, tuple := items.([]any); !tuple {
					it, ik, _, err := c.typeOf(items, doc, depth+1)
					if err != nil {
						return ctype{}, 0, 0, err
					}
					if it.b != tJSON && !it.list && it.b != tNull {
						ct, elk = it, ik
						ct.list = true
					}
				}
			}
		default:
			continue
		}
		kinds |= k
		out = jjoin(out, ct, k)
	}
	if out.b == tNull && !out.list && kinds&^jNull == 0 && len(types) > 0 && !containsType(types, "null") {
		return ctype{b: tJSON}, jAny, 0, nil // unknown type names only
	}
	return out, kinds, elk, nil
}

func containsType(types []string, t string) bool {
	for _, x := range types {
		if x == t {
			return true
		}
	}
	return false
}

// jjoin joins a branch's type into out: jsonb when either is JSON or a
// list (a JSON value of any kind is then written as it is).
func jjoin(out, t ctype, k uint8) ctype {
	if out.b == tNull && !out.list {
		return t
	}
	if k == jNull {
		return out
	}
	if out.b == tJSON || t.b == tJSON || out.list || t.list {
		return ctype{b: tJSON}
	}
	return join(out, t)
}

// JSONDecoder decodes JSON values of one schema into rows of a column
// list, reusing its buffers. It is not safe for concurrent use.
type JSONDecoder struct {
	s     *JSONSchema
	slot  []int
	tgt   []ctype
	at    [][2]int32 // each field's value in the payload; at[i][1] 0: absent
	spans []span
	buf   []byte
	key   []byte
	esc   []byte
}

// NewDecoder returns a decoder of s's values into rows of cols, which
// must cover s's columns.
func (s *JSONSchema) NewDecoder(cols []Col) (*JSONDecoder, error) {
	if !Covers(cols, s.cols) {
		return nil, fmt.Errorf("%w: the columns don't hold the schema's", ErrSchema)
	}
	d := &JSONDecoder{s: s, spans: make([]span, len(cols)), at: make([][2]int32, len(s.fields))}
	for _, f := range s.fields {
		slot, t := slotOf(cols, f.name)
		d.slot = append(d.slot, slot)
		d.tgt = append(d.tgt, t)
	}
	return d, nil
}

func jfail(what string, i int) error {
	return fmt.Errorf("%w: json: %s at byte %d", ErrData, what, i)
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// Row decodes one JSON value (the payload after the wire format's
// header) and appends its row payload to dst.
func (d *JSONDecoder) Row(dst, payload []byte) ([]byte, error) {
	b := payload
	d.buf = d.buf[:0]
	clear(d.spans)
	clear(d.at)
	i := skipWS(b, 0)
	if d.s.whole {
		end, err := skipValue(b, i, 0)
		if err != nil {
			return dst, err
		}
		if skipWS(b, end) != len(b) {
			return dst, jfail("text after the value", end)
		}
		d.at[0] = [2]int32{int32(i), int32(end)}
	} else {
		if i >= len(b) || b[i] != '{' {
			return dst, jfail("not a JSON object", i)
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == '}' {
			i++
		} else {
			for {
				if i >= len(b) || b[i] != '"' {
					return dst, jfail("object key expected", i)
				}
				kend, esc, err := skipString(b, i)
				if err != nil {
					return dst, err
				}
				key := b[i+1 : kend-1]
				if esc {
					d.key = appendUnescaped(d.key[:0], key)
					key = d.key
				}
				i = skipWS(b, kend)
				if i >= len(b) || b[i] != ':' {
					return dst, jfail("':' expected", i)
				}
				vstart := skipWS(b, i+1)
				vend, err := skipValue(b, vstart, 1)
				if err != nil {
					return dst, err
				}
				if fi, ok := d.s.props[string(key)]; ok {
					d.at[fi] = [2]int32{int32(vstart), int32(vend)}
				}
				i = skipWS(b, vend)
				if i < len(b) && b[i] == ',' {
					i = skipWS(b, i+1)
					continue
				}
				if i < len(b) && b[i] == '}' {
					i++
					break
				}
				return dst, jfail("',' or '}' expected", i)
			}
		}
		if skipWS(b, i) != len(b) {
			return dst, jfail("text after the object", i)
		}
	}
	for fi := range d.s.fields {
		slot := d.slot[fi]
		at := d.at[fi]
		if slot < 0 || at[1] == 0 {
			continue
		}
		mark := len(d.buf)
		var null bool
		var err error
		f := &d.s.fields[fi]
		d.buf, null, err = d.text(d.buf, f.name, b[at[0]:at[1]], f.kinds, f.elKinds, d.tgt[fi])
		if err != nil {
			return dst, err
		}
		if !null {
			d.spans[slot] = span{int32(mark), int32(len(d.buf)), true}
		}
	}
	return appendSpans(dst, d.buf, d.spans), nil
}

func kindOf(v []byte) uint8 {
	switch v[0] {
	case 'n':
		return jNull
	case 't', 'f':
		return jBool
	case '"':
		return jStr
	case '{':
		return jObj
	case '[':
		return jArr
	}
	if bytes.ContainsAny(v, ".eE") {
		return jNum
	}
	return jInt
}

// appendIntegral appends the decimal digits of JSON number v (valid,
// with a fraction or an exponent) when its value is an integer that fits
// in int64 (fits), exactly: no float in between. integral is false for a
// value with a fractional part.
func appendIntegral(dst, v []byte) (_ []byte, integral, fits bool) {
	i, neg := 0, v[0] == '-'
	if neg {
		i++
	}
	intStart := i
	i = digits(v, i)
	ip := v[intStart:i]
	var fp []byte
	if i < len(v) && v[i] == '.' {
		j := digits(v, i+1)
		fp, i = v[i+1:j], j
	}
	var exp int64
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		eneg := v[i] == '-'
		if v[i] == '+' || v[i] == '-' {
			i++
		}
		for ; i < len(v); i++ {
			if exp < 1<<40 { // past any payload's digits: saturate
				exp = exp*10 + int64(v[i]-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	// The value is the digits of ip then fp, times 10^e.
	total := len(ip) + len(fp)
	digit := func(j int) byte {
		if j < len(ip) {
			return ip[j]
		}
		return fp[j-len(ip)]
	}
	lead := 0
	for lead < total && digit(lead) == '0' {
		lead++
	}
	if lead == total {
		return append(dst, '0'), true, true
	}
	e := exp - int64(len(fp))
	end := int64(total) // the integer's digits are digit(lead..end), then zeros
	if e < 0 {
		end += e
		if end < int64(lead) {
			return dst, false, false
		}
		for j := int(end); j < total; j++ {
			if digit(j) != '0' {
				return dst, false, false
			}
		}
		e = 0
	}
	n := end - int64(lead) + e
	if n > 19 {
		return dst, true, false
	}
	if n == 19 {
		limit := "9223372036854775807"
		if neg {
			limit = "9223372036854775808"
		}
		for j := range 19 {
			c := byte('0')
			if int64(j) < end-int64(lead) {
				c = digit(lead + j)
			}
			if c != limit[j] {
				if c > limit[j] {
					return dst, true, false
				}
				break
			}
		}
	}
	if neg {
		dst = append(dst, '-')
	}
	for j := lead; j < int(end); j++ {
		dst = append(dst, digit(j))
	}
	for range e {
		dst = append(dst, '0')
	}
	return dst, true, true
}

var kindNames = [...]string{"null", "boolean", "integer", "number", "string", "object", "array"}

func kindName(k uint8) string {
	for i, n := range kindNames {
		if k == 1<<i {
			return n
		}
	}
	return "value"
}

// text appends the column text of value v (valid JSON) for tgt.
func (d *JSONDecoder) text(dst []byte, name string, v []byte, kinds, elKinds uint8, tgt ctype) ([]byte, bool, error) {
	k := kindOf(v)
	if k == jNull {
		return dst, true, nil
	}
	if k == jNum && kinds&(jNum|jInt) == jInt {
		// "integer" is any number whose value is integral (JSON Schema
		// draft 6 on): 1.0 and 1e3 are the integers 1 and 1000, written
		// as such for an int8 column, exactly.
		mark := len(dst)
		var integral, fits bool
		dst, integral, fits = appendIntegral(dst, v)
		switch {
		case !integral:
			return dst[:mark], false, fmt.Errorf("%w: json: property %q is a JSON number with a fraction, which its schema (integer) does not allow", ErrData, name)
		case tgt.b != tInt8 || tgt.list:
			dst, k = dst[:mark], jInt // a wider column (float8, text): as written
		case !fits:
			return dst[:mark], false, fmt.Errorf("%w: json: property %q is an integer beyond int64", ErrData, name)
		default:
			return dst, false, nil
		}
	}
	if k&kinds == 0 {
		return dst, false, fmt.Errorf("%w: json: property %q is a JSON %s, which its schema does not allow", ErrData, name, kindName(k))
	}
	switch {
	case tgt.list && k == jArr:
		el := tgt
		el.list = false
		dst = append(dst, '{')
		i := skipWS(v, 1)
		first := true
		for i < len(v) && v[i] != ']' {
			end, _ := skipValue(v, i, 0) // valid: checked when v was skipped
			if !first {
				dst = append(dst, ',')
			}
			first = false
			mark := len(dst)
			var null bool
			var err error
			if dst, null, err = d.text(dst, name, v[i:end], elKinds, 0, el); err != nil {
				return dst, false, err
			}
			if null {
				dst = append(dst, "NULL"...)
			} else {
				dst, d.esc = quoteElem(dst, mark, d.esc)
			}
			i = skipWS(v, end)
			if i < len(v) && v[i] == ',' {
				i = skipWS(v, i+1)
			}
		}
		return append(dst, '}'), false, nil
	case tgt.b == tJSON || k == jObj || k == jArr:
		return append(dst, v...), false, nil
	case k == jStr:
		return appendUnescaped(dst, v[1:len(v)-1]), false, nil
	}
	return append(dst, v...), false, nil
}

// JSON appends the value as compact JSON text (for message keys).
func (d *JSONDecoder) JSON(dst, payload []byte) ([]byte, error) {
	i := skipWS(payload, 0)
	end, err := skipValue(payload, i, 0)
	if err != nil {
		return dst, err
	}
	if skipWS(payload, end) != len(payload) {
		return dst, jfail("text after the value", end)
	}
	v := payload[i:end]
	for j := 0; j < len(v); j++ {
		c := v[j]
		if c == '"' {
			e, _, _ := skipString(v, j)
			dst = append(dst, v[j:e]...)
			j = e - 1
			continue
		}
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		dst = append(dst, c)
	}
	return dst, nil
}

// skipValue returns the end of the JSON value at b[i:], checking its
// syntax.
func skipValue(b []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, jfail("value nested too deep", i)
	}
	if i >= len(b) {
		return 0, jfail("value expected", i)
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := skipString(b, i)
		return end, err
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == end {
			return i + 1, nil
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return 0, jfail("object key expected", i)
				}
				e, _, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = skipWS(b, e)
				if i >= len(b) || b[i] != ':' {
					return 0, jfail("':' expected", i)
				}
				i = skipWS(b, i+1)
			}
			e, err := skipValue(b, i, depth+1)
			if err != nil {
				return 0, err
			}
			i = skipWS(b, e)
			if i < len(b) && b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if i < len(b) && b[i] == end {
				return i + 1, nil
			}
			return 0, jfail("',' or '"+string(end)+"' expected", i)
		}
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(b, i)
	}
	return 0, jfail("value expected", i)
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, jfail("bad literal", i)
	}
	return i + len(lit), nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func skipNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, jfail("bad number", start)
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, jfail("bad number", start)
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, jfail("bad number", start)
		}
		i = j
	}
	return i, nil
}

// skipString returns the end of the string at b[i] (after its closing
// quote) and whether it has escapes, checking its escapes and UTF-8.
func skipString(b []byte, i int) (int, bool, error) {
	start := i
	i++
	esc := false
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return 0, false, jfail("bad escape", i)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hexEscape(b, i)
				if !ok {
					return 0, false, jfail("bad escape", i)
				}
				if utf16.IsSurrogate(r) {
					// A character past U+FFFF is a high then a low
					// surrogate; either one alone is no character, and
					// no text holds it: the value can't be kept as it is.
					r2, ok := hexEscape(b, i+6)
					if r >= 0xdc00 || !ok || r2 < 0xdc00 || r2 > 0xdfff {
						return 0, false, jfail("lone UTF-16 surrogate escape", i)
					}
					i += 6
				}
				i += 6
			default:
				return 0, false, jfail("bad escape", i)
			}
		case c < 0x20:
			return 0, false, jfail("control character in a string", i)
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return 0, false, jfail("string is not UTF-8", i)
			}
			i += n
		}
	}
	return 0, false, jfail("unterminated string", start)
}

// hexEscape reads the \uXXXX escape at b[i:].
func hexEscape(b []byte, i int) (rune, bool) {
	if len(b)-i < 6 || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	for _, c := range b[i+2 : i+6] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return 0, false
		}
	}
	return hex4(b[i+2:]), true
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// appendUnescaped appends the text of a string's contents s (valid, as
// skipString checked).
func appendUnescaped(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		j := bytes.IndexByte(s[i:], '\\')
		if j < 0 {
			return append(dst, s[i:]...)
		}
		dst = append(dst, s[i:i+j]...)
		i += j
		c := s[i+1]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[i+2:])
			i += 6
			if utf16.IsSurrogate(r) { // a pair: skipString refuses lone ones
				r = utf16.DecodeRune(r, hex4(s[i+2:]))
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default:
			dst = append(dst, c)
		}
		i += 2
	}
	return dst
}

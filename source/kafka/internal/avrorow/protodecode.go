package avrorow

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Protobuf wire types.
const (
	wtVarint = 0
	wtI64    = 1
	wtLen    = 2
	wtSGroup = 3
	wtEGroup = 4
	wtI32    = 5
)

// pval is one field value read off the wire: v for varints and fixed
// values, raw for length-delimited ones.
type pval struct {
	f   int32 // the field's index in its message plan
	wt  uint8
	v   uint64
	raw []byte
}

// wire reads a message's fields in order.
type wire struct {
	b   []byte
	i   int
	off int // where b starts in the payload, for errors
}

func (w *wire) fail(what string) error {
	return fmt.Errorf("%w: protobuf: %s at byte %d", ErrData, what, w.off+w.i)
}

// next reads the next field into p: its wire type and value (a group's
// value is skipped: raw nil), returning its number; ok is false at the
// end.
func (w *wire) next(p *pval) (num int32, ok bool, err error) {
	if w.i >= len(w.b) {
		return 0, false, nil
	}
	tag, n := uvarint(w.b[w.i:])
	if n == 0 || tag>>3 == 0 || tag>>3 > math.MaxInt32 {
		return 0, false, w.fail("bad field tag")
	}
	w.i += n
	num, p.wt, p.v, p.raw = int32(tag>>3), uint8(tag&7), 0, nil
	switch p.wt {
	case wtVarint:
		v, n := uvarint(w.b[w.i:])
		if n == 0 {
			return 0, false, w.fail("truncated varint")
		}
		p.v, w.i = v, w.i+n
	case wtI64:
		if len(w.b)-w.i < 8 {
			return 0, false, w.fail("truncated fixed64")
		}
		p.v = binary.LittleEndian.Uint64(w.b[w.i:])
		w.i += 8
	case wtI32:
		if len(w.b)-w.i < 4 {
			return 0, false, w.fail("truncated fixed32")
		}
		p.v = uint64(binary.LittleEndian.Uint32(w.b[w.i:]))
		w.i += 4
	case wtLen:
		l, n := uvarint(w.b[w.i:])
		if n == 0 || l > uint64(len(w.b)-w.i-n) {
			return 0, false, w.fail("length past the end")
		}
		w.i += n
		p.raw = w.b[w.i : w.i+int(l) : w.i+int(l)]
		w.i += int(l)
	case wtSGroup:
		if err := w.skipGroup(num, 0); err != nil {
			return 0, false, err
		}
	default:
		return 0, false, w.fail(fmt.Sprintf("wire type %d", p.wt))
	}
	return num, true, nil
}

// skipGroup reads past a group's fields and its end tag.
func (w *wire) skipGroup(num int32, depth int) error {
	if depth > maxDepth {
		return w.fail("groups nested too deep")
	}
	for {
		if w.i >= len(w.b) {
			return w.fail("group without its end")
		}
		tag, n := uvarint(w.b[w.i:])
		if n == 0 {
			return w.fail("bad field tag")
		}
		if tag&7 == wtEGroup {
			w.i += n
			if int32(tag>>3) != num {
				return w.fail("group ends with another field's number")
			}
			return nil
		}
		if tag&7 == wtSGroup {
			w.i += n
			if err := w.skipGroup(int32(tag>>3), depth+1); err != nil {
				return err
			}
			continue
		}
		var p pval
		if _, _, err := w.next(&p); err != nil {
			return err
		}
	}
}

// wtNone matches no wire type.
const wtNone = 0xff

// nextOf returns the next value of field num with wire type wt, skipping
// the others; ok is false at the end.
func (w *wire) nextOf(num int32, wt uint8) (pval, bool, error) {
	var p pval
	for {
		n, ok, err := w.next(&p)
		if err != nil || !ok {
			return p, false, err
		}
		if n == num && p.wt == wt {
			return p, true, nil
		}
	}
}

// pair returns the last values of fields 1 (of wire type wt1) and 2 (of
// wt2) of message b, the fields of a well-known type or map entry.
func pair(b []byte, wt1, wt2 uint8) (f1, f2 pval, has1, has2 bool, err error) {
	w := wire{b: b}
	var p pval
	for {
		n, ok, err := w.next(&p)
		if err != nil || !ok {
			return f1, f2, has1, has2, err
		}
		switch {
		case n == 1 && p.wt == wt1:
			f1, has1 = p, true
		case n == 2 && p.wt == wt2:
			f2, has2 = p, true
		}
	}
}

// wantWire is the wire type of one value of kind k.
func wantWire(k protoreflect.Kind) uint8 {
	switch k {
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return wtI64
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return wtI32
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return wtLen
	case protoreflect.GroupKind:
		return wtSGroup
	}
	return wtVarint
}

// ok reports whether a value of wire type wt may be f's: its own wire
// type, or packed values of a repeated scalar.
func (f *pfield) ok(wt uint8) bool {
	w := wantWire(f.kind)
	return wt == w || f.list && f.packable && wt == wtLen
}

// ProtoDecoder decodes values of one message type into rows of a column
// list (the message's own or a join of it with others'), reusing its
// buffers. It is not safe for concurrent use.
type ProtoDecoder struct {
	s     *ProtoSchema
	slot  []int   // s.m.fields[i]'s column, or -1 to skip it
	tgt   []ctype // its column's type
	vals  []pval  // the message's field values, wire order
	cnt   []int32 // values per field
	last  []int32 // index in vals of each field's last value
	from  []int32 // index in vals where each field's values start (a oneof member set again starts anew)
	oneof []int32 // each oneof's member set last (a field index), or -1
	spans []span
	buf   []byte
	esc   []byte
	// cat holds the concatenated parts of messages given more than once
	// (merged), as a stack: a merge's parts stay put while nested
	// messages merge theirs after them.
	cat    []byte
	merged int // bytes copied into cat, for tests
}

// NewDecoder returns a decoder of s's values into rows of cols, which
// must cover s's columns.
func (s *ProtoSchema) NewDecoder(cols []Col) (*ProtoDecoder, error) {
	if !Covers(cols, s.cols) {
		return nil, fmt.Errorf("%w: the columns don't hold the schema's", ErrSchema)
	}
	d := &ProtoDecoder{s: s, spans: make([]span, len(cols)), cnt: make([]int32, len(s.m.fields)),
		last: make([]int32, len(s.m.fields)), from: make([]int32, len(s.m.fields)), oneof: make([]int32, s.m.oneofs)}
	for i, f := range s.m.fields {
		slot, t := -1, ctype{}
		if s.own[i] >= 0 {
			slot, t = slotOf(cols, f.name)
		}
		d.slot = append(d.slot, slot)
		d.tgt = append(d.tgt, t)
	}
	return d, nil
}

// Row decodes one value (the payload after the wire format's header and
// message index) and appends its row payload to dst.
func (d *ProtoDecoder) Row(dst, payload []byte) ([]byte, error) {
	m := d.s.m
	d.buf, d.vals, d.cat = d.buf[:0], d.vals[:0], d.cat[:0]
	clear(d.cnt)
	clear(d.from)
	clear(d.spans)
	for i := range d.oneof {
		d.oneof[i] = -1
	}
	w := wire{b: payload}
	var p pval
	for {
		num, ok, err := w.next(&p)
		if err != nil {
			return dst, err
		}
		if !ok {
			break
		}
		fi := m.field(num)
		if fi < 0 {
			continue
		}
		f := &m.fields[fi]
		if !f.ok(p.wt) {
			// A known field with another wire type: an unknown field, as
			// protobuf-go reads it (skipped; it sets no oneof member).
			continue
		}
		if f.oneof >= 0 {
			d.setOneof(f.oneof, fi)
		}
		if d.slot[fi] < 0 {
			continue
		}
		p.f = int32(fi)
		d.cnt[fi]++
		if f.direct {
			// A scalar: its text now (a later value of the field
			// overwrites the span: the last one wins).
			mark := len(d.buf)
			if d.buf, err = d.scalar(d.buf, f, p.v, p.raw, d.tgt[fi], false); err != nil {
				return dst, err
			}
			d.spans[d.slot[fi]] = span{int32(mark), int32(len(d.buf)), true}
			continue
		}
		d.last[fi] = int32(len(d.vals))
		d.vals = append(d.vals, p)
	}
	for fi := range m.fields {
		slot := d.slot[fi]
		if slot < 0 || m.fields[fi].direct && d.cnt[fi] > 0 {
			continue
		}
		mark := len(d.buf)
		var null bool
		var err error
		d.buf, null, err = d.field(d.buf, &m.fields[fi], fi, d.tgt[fi])
		if err != nil {
			return dst, err
		}
		if !null {
			d.spans[slot] = span{int32(mark), int32(len(d.buf)), true}
		}
	}
	return appendSpans(dst, d.buf, d.spans), nil
}

// setOneof records that member fi of oneof o is set, clearing the
// member set before it.
func (d *ProtoDecoder) setOneof(o int16, fi int) {
	prev := d.oneof[o]
	if prev == int32(fi) {
		return
	}
	d.oneof[o] = int32(fi)
	if prev < 0 {
		return
	}
	d.cnt[prev] = 0
	d.from[prev] = int32(len(d.vals))
	if slot := d.slot[prev]; slot >= 0 {
		d.spans[slot] = span{}
	}
}

// field appends the column text of top-level field fi from d.vals.
func (d *ProtoDecoder) field(dst []byte, f *pfield, fi int, tgt ctype) ([]byte, bool, error) {
	n := d.cnt[fi]
	switch {
	case f.isMap || f.list:
		// A list column's array literal; or JSON: an object of the map's
		// entries, an array of the values.
		json := !tgt.list
		open, end := byte('{'), byte('}')
		if json && !f.isMap {
			open, end = '[', ']'
		}
		el := tgt
		el.list = false
		dst = append(dst, open)
		first := true
		var err error
		for _, p := range d.vals {
			if n == 0 {
				break
			}
			if p.f != int32(fi) {
				continue
			}
			n--
			if json {
				dst, err = d.jsonValues(dst, f, p, &first, 1)
			} else {
				dst, err = d.pgValues(dst, f, p, el, &first)
			}
			if err != nil {
				return dst, false, err
			}
		}
		return append(dst, end), false, nil
	}
	if n == 0 {
		if f.presence || f.kind == protoreflect.MessageKind {
			return dst, true, nil
		}
		return d.zero(dst, f, false), false, nil
	}
	p := d.vals[d.last[fi]]
	if f.kind != protoreflect.MessageKind {
		dst, err := d.scalar(dst, f, p.v, p.raw, tgt, false)
		return dst, false, err
	}
	if n == 1 {
		return d.message(dst, f.msg, p.raw, tgt, false, 1)
	}
	// A message given more than once is the merge of its parts, as
	// their concatenation parses.
	mark := len(d.cat)
	for _, q := range d.vals[d.from[fi]:] {
		if q.f == int32(fi) {
			d.cat = append(d.cat, q.raw...)
		}
	}
	d.merged += len(d.cat) - mark
	dst, null, err := d.message(dst, f.msg, d.cat[mark:len(d.cat):len(d.cat)], tgt, false, 1)
	d.cat = d.cat[:mark]
	return dst, null, err
}

// pgValues appends the array elements in one value of a repeated field
// (several when packed).
func (d *ProtoDecoder) pgValues(dst []byte, f *pfield, p pval, el ctype, first *bool) ([]byte, error) {
	one := func(dst []byte, v uint64, raw []byte) ([]byte, error) {
		if !*first {
			dst = append(dst, ',')
		}
		*first = false
		mark := len(dst)
		var err error
		var null bool
		if f.kind == protoreflect.MessageKind {
			dst, null, err = d.message(dst, f.msg, raw, el, false, 2)
			if null {
				dst = append(dst, "NULL"...)
				return dst, err
			}
		} else {
			dst, err = d.scalar(dst, f, v, raw, el, false)
		}
		if err != nil {
			return dst, err
		}
		dst, d.esc = quoteElem(dst, mark, d.esc)
		return dst, nil
	}
	if p.wt != wtLen || !f.packable {
		return one(dst, p.v, p.raw)
	}
	var err error
	r := packed{b: p.raw, wt: wantWire(f.kind)}
	for {
		v, ok, perr := r.next()
		if perr != nil {
			return dst, perr
		}
		if !ok {
			return dst, nil
		}
		if dst, err = one(dst, v, nil); err != nil {
			return dst, err
		}
	}
}

// jsonValues appends, as JSON array items or object members, the values
// in one value of a repeated field or map entry.
func (d *ProtoDecoder) jsonValues(dst []byte, f *pfield, p pval, first *bool, depth int) ([]byte, error) {
	if f.isMap {
		if !*first {
			dst = append(dst, ',')
		}
		*first = false
		return d.mapEntry(dst, f.msg, p.raw, depth+1)
	}
	if p.wt == wtLen && f.packable {
		r := packed{b: p.raw, wt: wantWire(f.kind)}
		for {
			v, ok, err := r.next()
			if err != nil || !ok {
				return dst, err
			}
			if !*first {
				dst = append(dst, ',')
			}
			*first = false
			if dst, err = d.scalar(dst, f, v, nil, ctype{}, true); err != nil {
				return dst, err
			}
		}
	}
	if !*first {
		dst = append(dst, ',')
	}
	*first = false
	if f.kind == protoreflect.MessageKind {
		dst, _, err := d.message(dst, f.msg, p.raw, ctype{b: tJSON}, true, depth+1)
		return dst, err
	}
	return d.scalar(dst, f, p.v, p.raw, ctype{}, true)
}

// packed reads the values of a packed repeated field.
type packed struct {
	b  []byte
	i  int
	wt uint8
}

func (r *packed) next() (uint64, bool, error) {
	if r.i >= len(r.b) {
		return 0, false, nil
	}
	switch r.wt {
	case wtVarint:
		v, n := uvarint(r.b[r.i:])
		if n == 0 {
			return 0, false, fmt.Errorf("%w: protobuf: truncated packed varint", ErrData)
		}
		r.i += n
		return v, true, nil
	case wtI32:
		if len(r.b)-r.i < 4 {
			return 0, false, fmt.Errorf("%w: protobuf: truncated packed fixed32", ErrData)
		}
		b := r.b[r.i:]
		r.i += 4
		return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24, true, nil
	}
	if len(r.b)-r.i < 8 {
		return 0, false, fmt.Errorf("%w: protobuf: truncated packed fixed64", ErrData)
	}
	b := r.b[r.i:]
	r.i += 8
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56, true, nil
}

// zero appends the default value of a field without presence.
func (d *ProtoDecoder) zero(dst []byte, f *pfield, json bool) []byte {
	switch f.kind {
	case protoreflect.BoolKind:
		return append(dst, "false"...)
	case protoreflect.StringKind:
		if json {
			return append(dst, `""`...)
		}
		return dst
	case protoreflect.BytesKind:
		if json {
			return append(dst, `""`...)
		}
		return append(dst, '\\', 'x')
	case protoreflect.EnumKind:
		if json {
			dst, _ = appendJSONString(dst, []byte(f.enum0))
			return dst
		}
		return append(dst, f.enum0...)
	}
	return append(dst, '0')
}

// scalar appends a value of scalar field f (v, or raw for strings and
// bytes) as column text for tgt, or as JSON.
func (d *ProtoDecoder) scalar(dst []byte, f *pfield, v uint64, raw []byte, tgt ctype, json bool) ([]byte, error) {
	switch f.kind {
	case protoreflect.BoolKind:
		if v != 0 {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case protoreflect.Int32Kind:
		return appendInt(dst, int64(int32(v))), nil
	case protoreflect.Int64Kind, protoreflect.Sfixed64Kind:
		return appendInt(dst, int64(v)), nil
	case protoreflect.Sint32Kind:
		u := uint32(v)
		return appendInt(dst, int64(int32(u>>1)^-int32(u&1))), nil
	case protoreflect.Sint64Kind:
		return appendInt(dst, int64(v>>1)^-int64(v&1)), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(dst, uint64(uint32(v)), 10), nil
	case protoreflect.Sfixed32Kind:
		return appendInt(dst, int64(int32(uint32(v)))), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(dst, v, 10), nil
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		x, size := math.Float64frombits(v), 64
		if f.kind == protoreflect.FloatKind {
			x, size = float64(math.Float32frombits(uint32(v))), 32
			if tgt.b == tFloat8 {
				size = 64 // the float's exact value in a double column
			}
		}
		if json && (math.IsNaN(x) || math.IsInf(x, 0)) {
			dst = append(dst, '"')
			return append(appendFloat(dst, x, size), '"'), nil
		}
		return appendFloat(dst, x, size), nil
	case protoreflect.StringKind:
		if !json {
			return append(dst, raw...), nil
		}
		dst, ok := appendJSONString(dst, raw)
		if !ok {
			return dst, fmt.Errorf("%w: protobuf: field %s is not UTF-8", ErrData, f.name)
		}
		return dst, nil
	case protoreflect.BytesKind:
		if json {
			return appendBase64(dst, raw), nil
		}
		return appendHex(append(dst, '\\', 'x'), raw), nil
	case protoreflect.EnumKind:
		n := int32(v)
		name := ""
		if n >= 0 && int(n) < len(f.enum) {
			name = f.enum[n]
		} else if f.enumMap != nil {
			name = f.enumMap[n]
		}
		if name == "" {
			return appendInt(dst, int64(n)), nil // open enums: an unnamed number
		}
		if json {
			dst, _ = appendJSONString(dst, []byte(name))
			return dst, nil
		}
		return append(dst, name...), nil
	}
	return dst, fmt.Errorf("%w: protobuf: field %s of kind %v", ErrData, f.name, f.kind)
}

// message appends a message value: a well-known type's value (column
// text, or JSON), or the message as JSON.
func (d *ProtoDecoder) message(dst []byte, m *pmsg, b []byte, tgt ctype, json bool, depth int) ([]byte, bool, error) {
	if depth > maxDepth {
		return dst, false, fmt.Errorf("%w: protobuf: value nested too deep", ErrData)
	}
	switch m.wkt {
	case wTimestamp, wDuration:
		s, n, _, _, err := pair(b, wtVarint, wtVarint)
		if err != nil {
			return dst, false, err
		}
		secs, nanos := int64(s.v), int64(int32(n.v))
		if err := wktRange(m.wkt, secs, nanos); err != nil {
			return dst, false, err
		}
		if m.wkt == wTimestamp {
			if json {
				dst = append(dst, '"')
				return append(appendTsParts(dst, secs, nanos, 'T'), 'Z', '"'), false, nil
			}
			return appendTsParts(dst, secs, nanos, ' '), false, nil
		}
		if json {
			return appendDurationJSON(dst, secs, nanos), false, nil
		}
		if nanos%1000 == 0 {
			return appendInterval(dst, 0, 0, secs*1_000_000+nanos/1000), false, nil
		}
		dst = append(dst, "0 mons 0 days "...)
		return appendClock(dst, secs, nanos, 9), false, nil
	case wWrapper:
		f := &m.fields[m.field(1)]
		last, _, seen, _, err := pair(b, wantWire(f.kind), wtNone)
		if err != nil {
			return dst, false, err
		}
		if !seen {
			return d.zero(dst, f, json), false, nil
		}
		dst, err = d.scalar(dst, f, last.v, last.raw, tgt, json)
		return dst, false, err
	}
	dst, err := d.jsonMessage(dst, m, b, depth)
	return dst, false, err
}

// The valid range of a google.protobuf.Timestamp (0001-01-01T00:00:00Z
// to 9999-12-31T23:59:59.999999999Z) and Duration (about ±10000 years).
const (
	minTsSecs  = -62135596800
	maxTsSecs  = 253402300799
	maxDurSecs = 315576000000
)

// wktRange checks a Timestamp's or Duration's seconds and nanos against
// the type's definition; outside it the value is no instant or span
// (protobuf-go's CheckValid and protojson refuse it too), and the message
// is undecodable, never a wrapped or made-up value.
func wktRange(k wkt, secs, nanos int64) error {
	if k == wTimestamp {
		if secs < minTsSecs || secs > maxTsSecs || nanos < 0 || nanos > 999_999_999 {
			return fmt.Errorf("%w: protobuf: Timestamp out of range (seconds %d, nanos %d)", ErrData, secs, nanos)
		}
		return nil
	}
	if secs < -maxDurSecs || secs > maxDurSecs || nanos < -999_999_999 || nanos > 999_999_999 ||
		secs > 0 && nanos < 0 || secs < 0 && nanos > 0 {
		return fmt.Errorf("%w: protobuf: Duration out of range (seconds %d, nanos %d)", ErrData, secs, nanos)
	}
	return nil
}

// jsonMessage appends message m (bytes b) as JSON.
func (d *ProtoDecoder) jsonMessage(dst []byte, m *pmsg, b []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, fmt.Errorf("%w: protobuf: value nested too deep", ErrData)
	}
	switch m.wkt {
	case wTimestamp, wDuration, wWrapper:
		dst, _, err := d.message(dst, m, b, ctype{b: tJSON}, true, depth)
		return dst, err
	case wValue:
		return d.jsonValue(dst, b, depth)
	case wStruct:
		return d.jsonStruct(dst, b, depth)
	case wList:
		return d.jsonList(dst, b, depth)
	case wAny:
		url, val, _, _, err := pair(b, wtLen, wtLen)
		if err != nil {
			return dst, err
		}
		dst = append(dst, `{"@type":`...)
		dst, ok := appendJSONString(dst, url.raw)
		if !ok {
			return dst, fmt.Errorf("%w: protobuf: Any type_url is not UTF-8", ErrData)
		}
		dst = append(dst, `,"value":`...)
		return append(appendBase64(dst, val.raw), '}'), nil
	case wFieldMask:
		dst = append(dst, '"')
		w := wire{b: b}
		for first := true; ; first = false {
			p, ok, err := w.nextOf(1, wtLen)
			if err != nil || !ok {
				return append(dst, '"'), err
			}
			if !first {
				dst = append(dst, ',')
			}
			mark := len(dst)
			if dst, ok = appendJSONString(dst, p.raw); !ok {
				return dst, fmt.Errorf("%w: protobuf: FieldMask path is not UTF-8", ErrData)
			}
			dst = append(dst[:mark], dst[mark+1:len(dst)-1]...) // the path without its quotes
		}
	}
	dst = append(dst, '{')
	firstField := true
	for fi := range m.fields {
		f := &m.fields[fi]
		if f.group {
			continue
		}
		// The field's values, in order: one pass over the message each.
		// A value of another member of its oneof clears it: its values
		// start anew after that one (start).
		var last pval
		n, start := 0, 0
		repeated := f.list || f.isMap
		var err error
		first := true
		w := wire{b: b}
		var p pval
		for {
			num, ok, werr := w.next(&p)
			if werr != nil {
				return dst, werr
			}
			if !ok {
				break
			}
			if num != f.num {
				if f.oneof >= 0 {
					if fj := m.field(num); fj >= 0 && m.fields[fj].oneof == f.oneof && m.fields[fj].ok(p.wt) {
						n, start = 0, w.i
					}
				}
				continue
			}
			if !f.ok(p.wt) {
				continue // another wire type: an unknown field, skipped
			}
			n++
			if !repeated {
				last = p
				continue
			}
			if n == 1 {
				dst = d.jsonName(dst, f, &firstField)
				if f.isMap {
					dst = append(dst, '{')
				} else {
					dst = append(dst, '[')
				}
			}
			if dst, err = d.jsonValues(dst, f, p, &first, depth); err != nil {
				return dst, err
			}
		}
		switch {
		case repeated && n > 0 && f.isMap:
			dst = append(dst, '}')
		case repeated && n > 0:
			dst = append(dst, ']')
		case repeated && f.isMap:
			dst = append(d.jsonName(dst, f, &firstField), '{', '}')
		case repeated:
			dst = append(d.jsonName(dst, f, &firstField), '[', ']')
		case n > 0 && f.kind == protoreflect.MessageKind:
			dst = d.jsonName(dst, f, &firstField)
			if n == 1 {
				dst, err = d.jsonMessage(dst, f.msg, last.raw, depth+1)
			} else {
				dst, err = d.jsonMerged(dst, f, b, start, depth)
			}
			if err != nil {
				return dst, err
			}
		case n > 0:
			dst = d.jsonName(dst, f, &firstField)
			if dst, err = d.scalar(dst, f, last.v, last.raw, ctype{}, true); err != nil {
				return dst, err
			}
		case !f.presence && f.kind != protoreflect.MessageKind:
			dst = d.zero(d.jsonName(dst, f, &firstField), f, true)
		}
	}
	return append(dst, '}'), nil
}

// jsonMerged appends, as JSON, the merge of message field f's values in
// message b from byte start on: their concatenation, made once.
func (d *ProtoDecoder) jsonMerged(dst []byte, f *pfield, b []byte, start, depth int) ([]byte, error) {
	mark := len(d.cat)
	w := wire{b: b, i: start}
	var p pval
	for {
		num, ok, err := w.next(&p)
		if err != nil {
			return dst, err
		}
		if !ok {
			break
		}
		if num == f.num && f.ok(p.wt) {
			d.cat = append(d.cat, p.raw...)
		}
	}
	d.merged += len(d.cat) - mark
	dst, err := d.jsonMessage(dst, f.msg, d.cat[mark:len(d.cat):len(d.cat)], depth+1)
	d.cat = d.cat[:mark]
	return dst, err
}

func (d *ProtoDecoder) jsonName(dst []byte, f *pfield, first *bool) []byte {
	if !*first {
		dst = append(dst, ',')
	}
	*first = false
	dst, _ = appendJSONString(dst, []byte(f.name))
	return append(dst, ':')
}

// mapEntry appends a map entry (key 1, value 2) as an object member.
func (d *ProtoDecoder) mapEntry(dst []byte, m *pmsg, b []byte, depth int) ([]byte, error) {
	kf, vf := m.field(1), m.field(2)
	if kf < 0 || vf < 0 {
		return dst, fmt.Errorf("%w: protobuf: map entry type %s", ErrSchema, m.name)
	}
	key, val := &m.fields[kf], &m.fields[vf]
	k, v, hasK, hasV, err := pair(b, wantWire(key.kind), wantWire(val.kind))
	if err != nil {
		return dst, err
	}
	if key.kind == protoreflect.StringKind {
		var ok bool
		if dst, ok = appendJSONString(dst, k.raw); !ok {
			return dst, fmt.Errorf("%w: protobuf: map key is not UTF-8", ErrData)
		}
	} else {
		dst = append(dst, '"')
		if hasK {
			if dst, err = d.scalar(dst, key, k.v, nil, ctype{}, false); err != nil {
				return dst, err
			}
		} else {
			dst = d.zero(dst, key, false)
		}
		dst = append(dst, '"')
	}
	dst = append(dst, ':')
	switch {
	case val.kind == protoreflect.MessageKind:
		return d.jsonMessage(dst, val.msg, v.raw, depth+1)
	case hasV:
		return d.scalar(dst, val, v.v, v.raw, ctype{}, true)
	}
	return d.zero(dst, val, true), nil
}

// jsonValue appends a google.protobuf.Value.
func (d *ProtoDecoder) jsonValue(dst []byte, b []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, fmt.Errorf("%w: protobuf: value nested too deep", ErrData)
	}
	var kind int32
	var last, p pval
	w := wire{b: b}
	for {
		num, ok, err := w.next(&p)
		if err != nil {
			return dst, err
		}
		if !ok {
			break
		}
		if num >= 1 && num <= 6 {
			kind, last = num, p
		}
	}
	switch {
	case kind == 2 && last.wt == wtI64:
		f := math.Float64frombits(last.v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return dst, fmt.Errorf("%w: protobuf: Value number %v", ErrData, f)
		}
		return appendFloat(dst, f, 64), nil
	case kind == 3 && last.wt == wtLen:
		dst, ok := appendJSONString(dst, last.raw)
		if !ok {
			return dst, fmt.Errorf("%w: protobuf: Value string is not UTF-8", ErrData)
		}
		return dst, nil
	case kind == 4 && last.wt == wtVarint:
		if last.v != 0 {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case kind == 5 && last.wt == wtLen:
		return d.jsonStruct(dst, last.raw, depth+1)
	case kind == 6 && last.wt == wtLen:
		return d.jsonList(dst, last.raw, depth+1)
	}
	return append(dst, "null"...), nil
}

// jsonStruct appends a google.protobuf.Struct (map<string, Value>
// fields = 1).
func (d *ProtoDecoder) jsonStruct(dst []byte, b []byte, depth int) ([]byte, error) {
	dst = append(dst, '{')
	w := wire{b: b}
	for first := true; ; first = false {
		p, ok, err := w.nextOf(1, wtLen)
		if err != nil || !ok {
			return append(dst, '}'), err
		}
		k, v, _, _, err := pair(p.raw, wtLen, wtLen)
		if err != nil {
			return dst, err
		}
		if !first {
			dst = append(dst, ',')
		}
		if dst, ok = appendJSONString(dst, k.raw); !ok {
			return dst, fmt.Errorf("%w: protobuf: Struct key is not UTF-8", ErrData)
		}
		dst = append(dst, ':')
		if dst, err = d.jsonValue(dst, v.raw, depth+1); err != nil {
			return dst, err
		}
	}
}

// jsonList appends a google.protobuf.ListValue (repeated Value values =
// 1).
func (d *ProtoDecoder) jsonList(dst []byte, b []byte, depth int) ([]byte, error) {
	dst = append(dst, '[')
	w := wire{b: b}
	for first := true; ; first = false {
		p, ok, err := w.nextOf(1, wtLen)
		if err != nil || !ok {
			return append(dst, ']'), err
		}
		if !first {
			dst = append(dst, ',')
		}
		if dst, err = d.jsonValue(dst, p.raw, depth+1); err != nil {
			return dst, err
		}
	}
}

// JSON appends the value (the payload after the header and message
// index) as compact JSON text (for message keys).
func (d *ProtoDecoder) JSON(dst, payload []byte) ([]byte, error) {
	return d.jsonMessage(dst, d.s.m, payload, 0)
}

// appendTsParts writes a Timestamp's seconds and nanoseconds as
// appendTimestamp does: microseconds, or 9 digits when the value has a
// sub-microsecond part (which the engine holds, never rounding).
func appendTsParts(dst []byte, secs, nanos int64, sep byte) []byte {
	q, r := floorDiv(nanos, 1_000_000_000)
	secs += q
	days, tod := floorDiv(secs, 86400)
	if sep == ' ' {
		dst = appendDate(dst, days)
	} else {
		dst = appendDateISO(dst, days)
	}
	dst = append(dst, sep)
	switch {
	case r%1000 != 0:
		dst = appendClock(dst, tod, r, 9)
	case sep == 'T' && r == 0:
		dst = appendClock(dst, tod, 0, 0)
	default:
		dst = appendClock(dst, tod, r/1000, 6)
	}
	if sep == ' ' {
		dst = appendBC(dst, days)
	}
	return dst
}

// appendDurationJSON writes a Duration as the proto3 JSON mapping does:
// "-1.500s".
func appendDurationJSON(dst []byte, secs, nanos int64) []byte {
	dst = append(dst, '"')
	if secs < 0 || nanos < 0 {
		dst = append(dst, '-')
		secs, nanos = -secs, -nanos
	}
	dst = strconv.AppendInt(dst, secs, 10)
	if nanos != 0 {
		dst = append(dst, '.')
		switch {
		case nanos%1_000_000 == 0:
			dst = appendPad(dst, nanos/1_000_000, 3)
		case nanos%1000 == 0:
			dst = appendPad(dst, nanos/1000, 6)
		default:
			dst = appendPad(dst, nanos, 9)
		}
	}
	return append(dst, 's', '"')
}

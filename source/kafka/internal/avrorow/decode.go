package avrorow

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/openetl/etl/source"
)

// reader reads Avro binary values.
type reader struct {
	b     []byte
	i     int
	items int // array and map items left to this value: a bound on work
}

func (r *reader) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrData, what, r.i)
}

func (r *reader) long() (int64, error) {
	var u uint64
	var shift uint
	for n := 0; n < 10; n++ {
		if r.i >= len(r.b) {
			return 0, r.fail("truncated value")
		}
		c := r.b[r.i]
		r.i++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), nil
		}
		shift += 7
	}
	return 0, r.fail("varint longer than 10 bytes")
}

func (r *reader) int() (int64, error) {
	v, err := r.long()
	if err == nil && (v < math.MinInt32 || v > math.MaxInt32) {
		return 0, r.fail("int out of range")
	}
	return v, err
}

func (r *reader) fixed(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.i {
		return nil, r.fail("truncated value")
	}
	b := r.b[r.i : r.i+n : r.i+n]
	r.i += n
	return b, nil
}

func (r *reader) bytes() ([]byte, error) {
	n, err := r.long()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > int64(len(r.b)-r.i) {
		return nil, r.fail("length past the end")
	}
	return r.fixed(int(n))
}

func (r *reader) bool() (bool, error) {
	if r.i >= len(r.b) {
		return false, r.fail("truncated value")
	}
	c := r.b[r.i]
	r.i++
	if c > 1 {
		return false, r.fail("boolean not 0 or 1")
	}
	return c == 1, nil
}

// block reads an array or map block's item count (0 at the end).
func (r *reader) block() (int64, error) {
	n, err := r.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		if n == math.MinInt64 {
			return 0, r.fail("bad block count")
		}
		n = -n
		if _, err := r.long(); err != nil { // the block's size in bytes
			return 0, err
		}
	}
	if n > int64(r.items) {
		return 0, r.fail("more items than the value can hold")
	}
	r.items -= int(n)
	return n, nil
}

func (r *reader) branch(t *typ) (*typ, error) {
	i, err := r.long()
	if err != nil {
		return nil, err
	}
	if i < 0 || i >= int64(len(t.branches)) {
		return nil, r.fail(fmt.Sprintf("union branch %d of %d", i, len(t.branches)))
	}
	return t.branches[i], nil
}

// span is one column's value text in Decoder.buf.
type span struct {
	start, end int32
	set        bool
}

// Decoder decodes values of one writer schema into rows of a column list
// (the schema's own or a join of it with others'), reusing its buffers.
// It is not safe for concurrent use.
type Decoder struct {
	s     *Schema
	ncols int
	// ordered: the fields' columns (those not skipped) come in field
	// order, so Row writes each value's text where it goes.
	ordered bool
	fields  []field // the fields whose values are columns
	slot    []int   // fields[i]'s column, or -1 to skip it
	tgt     []ctype // fields[i]'s column type
	spans   [2][]span
	buf     []byte
	esc     []byte
	big     bigScratch
}

// NewDecoder returns a decoder of s's values into rows of cols, which
// must cover s's columns (Covers(cols, s.Cols())).
func NewDecoder(s *Schema, cols []Col) (*Decoder, error) {
	if !Covers(cols, s.cols) {
		return nil, fmt.Errorf("%w: the columns don't hold the schema's", ErrSchema)
	}
	d := &Decoder{s: s, ncols: len(cols)}
	switch {
	case s.env != nil:
		d.fields = s.env.row.fields
	case s.root.k == kRecord && s.root.l != lVarDecimal:
		d.fields = s.root.fields
	case s.nullable:
		d.fields = nonNull(s.root).fields
	default:
		d.fields = []field{{name: "value", t: s.root}}
	}
	for i, f := range d.fields {
		slot, t := -1, ctype{}
		if s.own[i] >= 0 {
			slot, t = slotOf(cols, f.name)
		}
		d.slot = append(d.slot, slot)
		d.tgt = append(d.tgt, t)
	}
	d.ordered = s.env == nil
	last := -1
	for _, slot := range d.slot {
		if slot >= 0 {
			d.ordered = d.ordered && slot > last
			last = slot
		}
	}
	d.spans[0] = make([]span, len(cols))
	d.spans[1] = make([]span, len(cols))
	return d, nil
}

func newReader(payload []byte) reader {
	return reader{b: payload, items: len(payload) + 1<<16}
}

// Row decodes one value (the payload after the wire format's header) and
// appends its row payload to dst.
func (d *Decoder) Row(dst, payload []byte) ([]byte, error) {
	d.buf = d.buf[:0]
	r := newReader(payload)
	if d.s.nullable {
		b, err := r.branch(d.s.root)
		if err != nil {
			return dst, err
		}
		if b.k == kNull {
			if r.i != len(r.b) {
				return dst, r.fail("bytes after the value")
			}
			clear(d.spans[0])
			return d.AppendRow(dst, 0), nil
		}
	}
	if d.ordered {
		return d.rowDirect(dst, &r)
	}
	if err := d.record(&r, 0); err != nil {
		return dst, err
	}
	if r.i != len(r.b) {
		return dst, r.fail("bytes after the value")
	}
	return d.AppendRow(dst, 0), nil
}

// rowDirect is Row for fields whose columns come in the fields' order:
// each value's text is written into dst at once, after a one-byte
// length header that is widened when the text is 126 bytes or longer.
func (d *Decoder) rowDirect(dst []byte, r *reader) ([]byte, error) {
	start, col := len(dst), 0
	for i, f := range d.fields {
		slot := d.slot[i]
		if slot < 0 {
			if err := d.skip(f.t, r, 1); err != nil {
				return dst[:start], err
			}
			continue
		}
		for ; col < slot; col++ {
			dst = source.AppendRowNull(dst)
		}
		col++
		h := len(dst)
		dst = append(dst, 0)
		var null bool
		var err error
		if dst, null, err = d.text(dst, f.t, r, d.tgt[i], 1); err != nil {
			return dst[:start], err
		}
		if null {
			dst = source.AppendRowNull(dst[:h])
			continue
		}
		n := uint64(len(dst)-h-1) + 2 // AppendRowValue's header
		if n < 0x80 {
			dst[h] = byte(n)
			continue
		}
		var hdr [binary.MaxVarintLen64]byte
		m := len(binary.AppendUvarint(hdr[:0], n))
		dst = append(dst, hdr[:m-1]...)
		copy(dst[h+m:], dst[h+1:len(dst)-(m-1)])
		copy(dst[h:], hdr[:m])
	}
	for ; col < d.ncols; col++ {
		dst = source.AppendRowNull(dst)
	}
	if r.i != len(r.b) {
		return dst[:start], r.fail("bytes after the value")
	}
	return dst, nil
}

// record decodes d.fields into spans[which].
func (d *Decoder) record(r *reader, which int) error {
	sp := d.spans[which]
	clear(sp)
	for i, f := range d.fields {
		if d.slot[i] < 0 {
			if err := d.skip(f.t, r, 1); err != nil {
				return err
			}
			continue
		}
		mark := len(d.buf)
		var null bool
		var err error
		d.buf, null, err = d.text(d.buf, f.t, r, d.tgt[i], 1)
		if err != nil {
			return err
		}
		if !null {
			sp[d.slot[i]] = span{int32(mark), int32(len(d.buf)), true}
		}
	}
	return nil
}

// AppendRow appends the row decoded last (by Row, or Envelope's before
// (which 0) or after (1)) to dst.
func (d *Decoder) AppendRow(dst []byte, which int) []byte {
	return appendSpans(dst, d.buf, d.spans[which])
}

// appendSpans appends a row payload of the column texts spans name in
// buf.
func appendSpans(dst, buf []byte, spans []span) []byte {
	for _, s := range spans {
		if !s.set {
			dst = source.AppendRowNull(dst)
			continue
		}
		dst = source.AppendRowValue(dst, buf[s.start:s.end])
	}
	return dst
}

// Envelope decodes a Debezium change event: its op (aliasing payload),
// and whether it has a before and an after row, which AppendRow then
// appends.
func (d *Decoder) Envelope(payload []byte) (op []byte, before, after bool, err error) {
	env := d.s.env
	if env == nil {
		return nil, false, false, fmt.Errorf("%w: not an envelope schema", ErrSchema)
	}
	d.buf = d.buf[:0]
	r := newReader(payload)
	clear(d.spans[0])
	clear(d.spans[1])
	for i, f := range d.s.root.fields {
		switch i {
		case env.before, env.after:
			t := f.t
			if t.k == kUnion {
				if t, err = r.branch(t); err != nil {
					return nil, false, false, err
				}
				if t.k == kNull {
					continue
				}
			}
			which := 0
			if i == env.after {
				which = 1
			}
			if err := d.record(&r, which); err != nil {
				return nil, false, false, err
			}
			if which == 0 {
				before = true
			} else {
				after = true
			}
		case env.op:
			t := f.t
			if t.k == kUnion {
				if t, err = r.branch(t); err != nil {
					return nil, false, false, err
				}
				if t.k == kNull {
					continue
				}
			}
			if op, err = r.bytes(); err != nil {
				return nil, false, false, err
			}
		default:
			if err := d.skip(f.t, &r, 1); err != nil {
				return nil, false, false, err
			}
		}
	}
	if r.i != len(r.b) {
		return nil, false, false, r.fail("bytes after the value")
	}
	return op, before, after, nil
}

// JSON appends the value as compact JSON text (for message keys).
func (d *Decoder) JSON(dst, payload []byte) ([]byte, error) {
	r := newReader(payload)
	dst, err := d.json(dst, d.s.root, &r, 0)
	if err != nil {
		return dst, err
	}
	if r.i != len(r.b) {
		return dst, r.fail("bytes after the value")
	}
	return dst, nil
}

func le32(b []byte) int64 { return int64(binary.LittleEndian.Uint32(b)) }

// text appends the column text of a value of t, for a column of type
// tgt; null reports a null (nothing appended).
func (d *Decoder) text(dst []byte, t *typ, r *reader, tgt ctype, depth int) (_ []byte, null bool, err error) {
	if depth > maxDepth {
		return dst, false, r.fail("value nested too deep")
	}
	switch t.k {
	case kNull:
		return dst, true, nil
	case kBool:
		b, err := r.bool()
		if err != nil {
			return dst, false, err
		}
		if b {
			return append(dst, "true"...), false, nil
		}
		return append(dst, "false"...), false, nil
	case kInt, kLong:
		var v int64
		if t.k == kInt {
			v, err = r.int()
		} else {
			v, err = r.long()
		}
		if err != nil {
			return dst, false, err
		}
		switch t.l {
		case lDate:
			return appendBC(appendDate(dst, v), v), false, nil
		case lTimeMillis, lTimeMicros, lTimeNanos:
			return appendTime(dst, v, t.l), false, nil
		case lTsMillis, lTsMicros, lTsNanos, lLocalMillis, lLocalMicros, lLocalNanos:
			return appendTimestamp(dst, v, t.l, ' '), false, nil
		case lMicroDuration:
			return appendInterval(dst, 0, 0, v), false, nil
		}
		return appendInt(dst, v), false, nil
	case kFloat:
		b, err := r.fixed(4)
		if err != nil {
			return dst, false, err
		}
		f := float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		if tgt.b == tFloat8 {
			// Avro's float → double promotion: the float's exact value.
			return appendFloat(dst, f, 64), false, nil
		}
		return appendFloat(dst, f, 32), false, nil
	case kDouble:
		b, err := r.fixed(8)
		if err != nil {
			return dst, false, err
		}
		return appendFloat(dst, math.Float64frombits(binary.LittleEndian.Uint64(b)), 64), false, nil
	case kBytes, kFixed:
		var b []byte
		if t.k == kBytes {
			b, err = r.bytes()
		} else {
			b, err = r.fixed(t.size)
		}
		if err != nil {
			return dst, false, err
		}
		switch t.l {
		case lDecimal:
			return appendDecimal(dst, b, t.scale, &d.big), false, nil
		case lUUID:
			if t.k == kFixed {
				return appendUUID(dst, b), false, nil
			}
		case lDuration:
			return appendInterval(dst, le32(b[0:4]), le32(b[4:8]), le32(b[8:12])*1000), false, nil
		}
		dst = append(dst, '\\', 'x')
		return appendHex(dst, b), false, nil
	case kString:
		b, err := r.bytes()
		if err != nil {
			return dst, false, err
		}
		return append(dst, b...), false, nil
	case kEnum:
		i, err := r.int()
		if err != nil {
			return dst, false, err
		}
		if i < 0 || i >= int64(len(t.symbols)) {
			return dst, false, r.fail(fmt.Sprintf("enum symbol %d of %d", i, len(t.symbols)))
		}
		return append(dst, t.symbols[i]...), false, nil
	case kArray:
		if t.col.list {
			return d.pgArray(dst, t, r, tgt, depth)
		}
	case kRecord:
		if t.l == lVarDecimal {
			return d.varDecimal(dst, t, r)
		}
	case kUnion:
		b, err := r.branch(t)
		if err != nil {
			return dst, false, err
		}
		if b.k == kNull {
			return dst, true, nil
		}
		if t.multi && t.col.b == tJSON {
			dst = append(dst, '{')
			dst, _ = appendJSONString(dst, []byte(b.name))
			dst = append(dst, ':')
			dst, err = d.json(dst, b, r, depth+1)
			return append(dst, '}'), false, err
		}
		return d.text(dst, b, r, tgt, depth+1)
	}
	dst, err = d.json(dst, t, r, depth)
	return dst, false, err
}

func appendInt(dst []byte, v int64) []byte {
	if v >= 0 && v < 10 {
		return append(dst, byte('0'+v))
	}
	return strconv.AppendInt(dst, v, 10)
}

func (d *Decoder) varDecimal(dst []byte, t *typ, r *reader) ([]byte, bool, error) {
	var scale int64
	var val []byte
	var err error
	for j := range t.fields {
		if j == t.varScale {
			scale, err = r.int()
		} else {
			val, err = r.bytes()
		}
		if err != nil {
			return dst, false, err
		}
	}
	if scale < -1000 || scale > 1000 {
		return dst, false, r.fail("decimal scale out of range")
	}
	return appendDecimal(dst, val, int(scale), &d.big), false, nil
}

// pgArray appends a Postgres array literal of t's items: {1,2,NULL},
// {"a b","c\"d"}.
func (d *Decoder) pgArray(dst []byte, t *typ, r *reader, tgt ctype, depth int) ([]byte, bool, error) {
	tgt.list = false
	dst = append(dst, '{')
	first := true
	for {
		n, err := r.block()
		if err != nil {
			return dst, false, err
		}
		if n == 0 {
			break
		}
		for range n {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			mark := len(dst)
			var null bool
			dst, null, err = d.text(dst, t.items, r, tgt, depth+1)
			if err != nil {
				return dst, false, err
			}
			if null {
				dst = append(dst, "NULL"...)
				continue
			}
			dst, d.esc = quoteElem(dst, mark, d.esc)
		}
	}
	return append(dst, '}'), false, nil
}

// quoteElem quotes the array element written at dst[mark:] when the
// engine's array parser would not read it back as it is; esc is scratch.
func quoteElem(dst []byte, mark int, esc []byte) ([]byte, []byte) {
	if !needsQuote(dst[mark:]) {
		return dst, esc
	}
	esc = append(esc[:0], dst[mark:]...)
	dst = append(dst[:mark], '"')
	for _, c := range esc {
		if c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return append(dst, '"'), esc
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

// needsQuote reports whether an array element's text must be quoted for
// the engine's array parser to read it back as it is.
func needsQuote(b []byte) bool {
	if len(b) == 0 || isSpace(b[0]) || isSpace(b[len(b)-1]) {
		return true
	}
	if len(b) == 4 && (b[0]|0x20) == 'n' && (b[1]|0x20) == 'u' && (b[2]|0x20) == 'l' && (b[3]|0x20) == 'l' {
		return true
	}
	for _, c := range b {
		switch c {
		case '{', '}', '"', '\\', ',':
			return true
		}
	}
	return false
}

// json appends a value of t as JSON text.
func (d *Decoder) json(dst []byte, t *typ, r *reader, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, r.fail("value nested too deep")
	}
	var err error
	switch t.k {
	case kNull:
		return append(dst, "null"...), nil
	case kBool:
		b, err := r.bool()
		if b {
			return append(dst, "true"...), err
		}
		return append(dst, "false"...), err
	case kInt, kLong:
		var v int64
		if t.k == kInt {
			v, err = r.int()
		} else {
			v, err = r.long()
		}
		if err != nil {
			return dst, err
		}
		switch t.l {
		case lDate:
			dst = append(dst, '"')
			return append(appendDateISO(dst, v), '"'), nil
		case lTimeMillis, lTimeMicros, lTimeNanos:
			dst = append(dst, '"')
			return append(appendTime(dst, v, t.l), '"'), nil
		case lTsMillis, lTsMicros, lTsNanos:
			dst = append(dst, '"')
			return append(appendTimestamp(dst, v, t.l, 'T'), 'Z', '"'), nil
		case lLocalMillis, lLocalMicros, lLocalNanos:
			dst = append(dst, '"')
			return append(appendTimestamp(dst, v, t.l, 'T'), '"'), nil
		}
		return appendInt(dst, v), nil
	case kFloat, kDouble:
		var f float64
		size := 64
		if t.k == kFloat {
			b, err := r.fixed(4)
			if err != nil {
				return dst, err
			}
			f, size = float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), 32
		} else {
			b, err := r.fixed(8)
			if err != nil {
				return dst, err
			}
			f = math.Float64frombits(binary.LittleEndian.Uint64(b))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			dst = append(dst, '"')
			return append(appendFloat(dst, f, size), '"'), nil
		}
		return appendFloat(dst, f, size), nil
	case kBytes, kFixed:
		var b []byte
		if t.k == kBytes {
			b, err = r.bytes()
		} else {
			b, err = r.fixed(t.size)
		}
		if err != nil {
			return dst, err
		}
		switch t.l {
		case lDecimal:
			return appendDecimal(dst, b, t.scale, &d.big), nil
		case lUUID:
			if t.k == kFixed {
				dst = append(dst, '"')
				return append(appendUUID(dst, b), '"'), nil
			}
		case lDuration:
			dst = append(dst, `{"months":`...)
			dst = appendInt(dst, le32(b[0:4]))
			dst = append(dst, `,"days":`...)
			dst = appendInt(dst, le32(b[4:8]))
			dst = append(dst, `,"millis":`...)
			dst = appendInt(dst, le32(b[8:12]))
			return append(dst, '}'), nil
		}
		return appendBase64(dst, b), nil
	case kString:
		b, err := r.bytes()
		if err != nil {
			return dst, err
		}
		dst, ok := appendJSONString(dst, b)
		if !ok {
			return dst, r.fail("string is not UTF-8")
		}
		return dst, nil
	case kEnum:
		i, err := r.int()
		if err != nil {
			return dst, err
		}
		if i < 0 || i >= int64(len(t.symbols)) {
			return dst, r.fail(fmt.Sprintf("enum symbol %d of %d", i, len(t.symbols)))
		}
		dst, _ = appendJSONString(dst, []byte(t.symbols[i]))
		return dst, nil
	case kArray, kMap:
		open, end := byte('['), byte(']')
		if t.k == kMap {
			open, end = '{', '}'
		}
		dst = append(dst, open)
		first := true
		for {
			n, err := r.block()
			if err != nil {
				return dst, err
			}
			if n == 0 {
				break
			}
			for range n {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				it := t.items
				if t.k == kMap {
					k, err := r.bytes()
					if err != nil {
						return dst, err
					}
					var ok bool
					if dst, ok = appendJSONString(dst, k); !ok {
						return dst, r.fail("map key is not UTF-8")
					}
					dst = append(dst, ':')
					it = t.values
				}
				if dst, err = d.json(dst, it, r, depth+1); err != nil {
					return dst, err
				}
			}
		}
		return append(dst, end), nil
	case kRecord:
		if t.l == lVarDecimal {
			dst, _, err = d.varDecimal(dst, t, r)
			return dst, err
		}
		dst = append(dst, '{')
		for i, f := range t.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst, _ = appendJSONString(dst, []byte(f.name))
			dst = append(dst, ':')
			if dst, err = d.json(dst, f.t, r, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case kUnion:
		b, err := r.branch(t)
		if err != nil {
			return dst, err
		}
		if b.k == kNull {
			return append(dst, "null"...), nil
		}
		if !t.multi {
			return d.json(dst, b, r, depth+1)
		}
		dst = append(dst, '{')
		dst, _ = appendJSONString(dst, []byte(b.name))
		dst = append(dst, ':')
		dst, err = d.json(dst, b, r, depth+1)
		return append(dst, '}'), err
	}
	return dst, r.fail("unknown type")
}

// skip reads past a value of t.
func (d *Decoder) skip(t *typ, r *reader, depth int) error {
	if depth > maxDepth {
		return r.fail("value nested too deep")
	}
	var err error
	switch t.k {
	case kNull:
	case kBool:
		_, err = r.bool()
	case kInt:
		_, err = r.int()
	case kLong:
		_, err = r.long()
	case kEnum:
		var i int64
		if i, err = r.int(); err == nil && (i < 0 || i >= int64(len(t.symbols))) {
			err = r.fail("enum symbol out of range")
		}
	case kFloat:
		_, err = r.fixed(4)
	case kDouble:
		_, err = r.fixed(8)
	case kBytes, kString:
		_, err = r.bytes()
	case kFixed:
		_, err = r.fixed(t.size)
	case kArray, kMap:
		for {
			n, err := r.block()
			if err != nil || n == 0 {
				return err
			}
			for range n {
				if t.k == kMap {
					if _, err := r.bytes(); err != nil {
						return err
					}
					err = d.skip(t.values, r, depth+1)
				} else {
					err = d.skip(t.items, r, depth+1)
				}
				if err != nil {
					return err
				}
			}
		}
	case kRecord:
		for _, f := range t.fields {
			if err := d.skip(f.t, r, depth+1); err != nil {
				return err
			}
		}
	case kUnion:
		b, err := r.branch(t)
		if err != nil {
			return err
		}
		return d.skip(b, r, depth+1)
	}
	return err
}

package avrorow

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Protobuf schemas. A registry's Protobuf schema is a .proto file (as
// text, or as a base64 FileDescriptorProto, as some serializers register
// it) with its imports as references; a message's wire-format header
// names which of the file's messages the value is (MessageIndex). Each
// message type compiles to a plan of its fields (pmsg) that the decoder
// follows over the wire bytes, with no generic messages.
//
//	Protobuf                              declared type (Arrow)
//	bool                                  bool
//	int32, sint32, sfixed32               int4
//	int64, sint64, sfixed64, uint32,      int8
//	fixed32
//	uint64, fixed64                       numeric(20,0) (decimal128)
//	float / double                        float4 / float8
//	string / bytes                        text / bytea
//	enum                                  enum('A',...): the value's name,
//	                                      or its number when unnamed
//	google.protobuf.Timestamp             timestamptz (timestamp[us, UTC])
//	google.protobuf.Duration              interval (month_day_nano)
//	google.protobuf.*Value wrappers       the wrapped scalar's type
//	repeated of a type above              _T (list<T>)
//	other messages, maps, repeated        jsonb (utf8 JSON text)
//	messages; Struct, Value, ListValue,
//	Any, Empty, FieldMask
//
// A message's columns are its fields, in declaration order; each member
// of a oneof is a column of its own, null but for the member set: the
// last one on the wire, a later member clearing an earlier one (in JSON
// text too), as Protobuf reads it.
// Presence: a field that tracks presence (proto2 optional and required,
// proto3 optional, oneof members, message fields, wrappers) is null when
// absent; a proto3 field without presence is its type's default when
// absent (0, false, "", empty bytes, the enum's zero value), as every
// Protobuf reader sees it; an absent repeated field is an empty list, an
// absent map {}. Groups are not columns (their values are skipped), nor
// fields named with the reserved prefix.
//
// JSON text follows the proto3 JSON mapping but for names (the fields'
// own names, not lowerCamelCase), 64-bit integers (numbers, not
// strings) and presence (fields without presence are written with their
// defaults; absent fields with presence are left out). Timestamps are
// RFC 3339 strings in UTC, Durations "1.5s", bytes base64, enums their
// names, Any {"@type": url, "value": base64 of its bytes}.

// Ref is a schema reference of a Protobuf or JSON Schema schema: the
// name its referrer names it by (an import path, a $ref URI), and its
// text.
type Ref struct {
	Name, Text string
}

// ProtoFile is a compiled Protobuf schema: a file and its imports. It is
// safe for concurrent use.
type ProtoFile struct {
	fd protoreflect.FileDescriptor

	mu   sync.Mutex
	msgs map[string]*ProtoSchema // by MessageIndex key
}

// ProtoSchema is one message type of a ProtoFile. It is safe for
// concurrent use; its decoders are not.
type ProtoSchema struct {
	m    *pmsg
	cols []Col
	own  []int // m.fields[i]'s column in cols, or -1
}

// Cols returns the message's columns, in field order.
func (s *ProtoSchema) Cols() []Col { return s.cols }

// mainProto is the path the registry's schema text is compiled under.
const mainProto = "openetl/registry_schema.proto"

// descriptorText returns the FileDescriptorProto of a schema registered
// as base64 of its bytes, or nil for .proto text.
func descriptorText(text string) *descriptorpb.FileDescriptorProto {
	t := strings.TrimSpace(text)
	if t == "" || strings.ContainsAny(t, " \t\n{;") {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(t)
	if err != nil {
		return nil
	}
	fdp := &descriptorpb.FileDescriptorProto{}
	if proto.Unmarshal(b, fdp) != nil {
		return nil
	}
	// JSON names play no part here; the compiler takes a descriptor
	// without them (as some serializers register it) for one of custom
	// names that conflict: give every field its default.
	var setJSON func(ms []*descriptorpb.DescriptorProto)
	setJSON = func(ms []*descriptorpb.DescriptorProto) {
		for _, m := range ms {
			for _, f := range m.Field {
				f.JsonName = proto.String(jsonName(f.GetName()))
			}
			setJSON(m.NestedType)
		}
	}
	setJSON(fdp.MessageType)
	return fdp
}

// jsonName is a field's default JSON name, as protoc makes it: the
// name without underscores, each letter after one upper-cased.
func jsonName(name string) string {
	var b strings.Builder
	up := false
	for _, c := range name {
		if c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteRune(c)
	}
	return b.String()
}

// ParseProto compiles a Protobuf schema: text (.proto source, or base64
// of a FileDescriptorProto) and the references it imports. The
// well-known types (google/protobuf/*.proto) need no reference.
func ParseProto(text string, refs []Ref) (*ProtoFile, error) {
	srcs := map[string]string{}
	descs := map[string]*descriptorpb.FileDescriptorProto{}
	add := func(path, text string) {
		if fdp := descriptorText(text); fdp != nil {
			fdp.Name = proto.String(path)
			descs[path] = fdp
			return
		}
		srcs[path] = text
	}
	for _, r := range refs {
		add(r.Name, r.Text)
	}
	add(mainProto, text)
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
			if d, ok := descs[path]; ok {
				return protocompile.SearchResult{Proto: d}, nil
			}
			if s, ok := srcs[path]; ok {
				return protocompile.SearchResult{Source: strings.NewReader(s)}, nil
			}
			return protocompile.SearchResult{}, fs.ErrNotExist
		})),
	}
	files, err := c.Compile(context.Background(), mainProto)
	if err != nil {
		return nil, fmt.Errorf("%w: protobuf: %v", ErrSchema, err)
	}
	return &ProtoFile{fd: files[0], msgs: map[string]*ProtoSchema{}}, nil
}

// MessageIndex reads the message index at the start of b (after the
// schema ID): a count then that many indexes, zigzag varints, a lone 0
// being [0]. It returns the path (message i of the file, then nested
// message j of that, ...) and the bytes it took; n is 0 when b does not
// start with one.
func MessageIndex(b []byte, path []int) (_ []int, n int) {
	path = path[:0]
	cnt, n := zigzag(b)
	if n == 0 || cnt < 0 || cnt > 64 {
		return path, 0
	}
	if cnt == 0 {
		return append(path, 0), n
	}
	for range cnt {
		v, m := zigzag(b[n:])
		if m == 0 || v < 0 || v > 1<<20 {
			return path, 0
		}
		path = append(path, int(v))
		n += m
	}
	return path, n
}

// AppendMessageIndex appends path's message index in its shortest
// encoding (a lone 0 for [0]), the one key of every encoding
// MessageIndex reads as path.
func AppendMessageIndex(dst []byte, path []int) []byte {
	if len(path) == 1 && path[0] == 0 {
		return append(dst, 0)
	}
	dst = binary.AppendVarint(dst, int64(len(path)))
	for _, i := range path {
		dst = binary.AppendVarint(dst, int64(i))
	}
	return dst
}

// Messages returns how many top-level message types the file has.
func (f *ProtoFile) Messages() int { return f.fd.Messages().Len() }

// MessageName returns the full name of the message at path (see
// MessageIndex), or "" when the file has none there.
func (f *ProtoFile) MessageName(path []int) string {
	msgs := f.fd.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range path {
		if i < 0 || i >= msgs.Len() {
			return ""
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	if md == nil {
		return ""
	}
	return string(md.FullName())
}

// FindMessage returns the path of the message of full name name, nested
// or not; ok is false when the file has none.
func (f *ProtoFile) FindMessage(name string) (path []int, ok bool) {
	var find func(msgs protoreflect.MessageDescriptors) bool
	find = func(msgs protoreflect.MessageDescriptors) bool {
		for i := range msgs.Len() {
			md := msgs.Get(i)
			path = append(path, i)
			if string(md.FullName()) == name || strings.HasPrefix(name, string(md.FullName())+".") && find(md.Messages()) {
				return true
			}
			path = path[:len(path)-1]
		}
		return false
	}
	return path, find(f.fd.Messages())
}

func zigzag(b []byte) (int64, int) {
	u, n := uvarint(b)
	if n == 0 {
		return 0, 0
	}
	return int64(u>>1) ^ -int64(u&1), n
}

// uvarint reads a base-128 varint; n is 0 when b holds none.
func uvarint(b []byte) (u uint64, n int) {
	var shift uint
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return u, i + 1
		}
		shift += 7
	}
	return 0, 0
}

// Message returns the schema of the message at path (see MessageIndex).
func (f *ProtoFile) Message(path []int) (*ProtoSchema, error) {
	var key strings.Builder
	for _, i := range path {
		fmt.Fprintf(&key, "%d.", i)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.msgs[key.String()]; ok {
		return s, nil
	}
	if len(path) == 0 {
		return nil, fmt.Errorf("%w: empty message index", ErrData)
	}
	msgs := f.fd.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range path {
		if i >= msgs.Len() {
			return nil, fmt.Errorf("%w: message index %v: the schema has no such message", ErrData, path)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	c := pcompiler{plans: map[protoreflect.FullName]*pmsg{}}
	m := c.msg(md)
	s := &ProtoSchema{m: m, own: make([]int, len(m.fields))}
	for i, fl := range m.fields {
		if fl.group || strings.HasPrefix(strings.ToLower(fl.name), reservedPrefix) {
			s.own[i] = -1
			continue
		}
		s.own[i] = len(s.cols)
		s.cols = append(s.cols, Col{Name: fl.name, t: fl.col})
	}
	if len(f.msgs) >= 256 {
		clear(f.msgs)
	}
	f.msgs[key.String()] = s
	return s, nil
}

// wkt is a well-known message type the decoder treats as a value.
type wkt uint8

const (
	wNone wkt = iota
	wTimestamp
	wDuration
	wWrapper // google.protobuf.*Value but Value: field 1 is the value
	wStruct
	wValue
	wList
	wAny
	wFieldMask
)

// pfield is one field of a message plan.
type pfield struct {
	name     string
	num      int32
	kind     protoreflect.Kind
	list     bool // repeated, not a map
	isMap    bool
	presence bool
	group    bool
	packable bool     // a scalar numeric kind: may come packed
	oneof    int16    // its oneof's index in the message, or -1
	direct   bool     // a singular scalar: Row writes its text at once
	enum     []string // enum value names by number (dense), and
	enumMap  map[int32]string
	enum0    string // the name of the enum's value 0 (its default)
	msg      *pmsg  // the message (or map entry) type
	col      ctype
}

// pmsg is a compiled message type.
type pmsg struct {
	name   protoreflect.FullName
	wkt    wkt
	fields []pfield
	byNum  []int16 // field index by number (-1: none), numbers below len
	numMap map[int32]int
	oneofs int // how many oneofs (real or synthetic) the message has
}

func (m *pmsg) field(num int32) int {
	if num >= 0 && int(num) < len(m.byNum) {
		return int(m.byNum[num])
	}
	if i, ok := m.numMap[num]; ok {
		return i
	}
	return -1
}

type pcompiler struct {
	plans map[protoreflect.FullName]*pmsg
}

func wktOf(n protoreflect.FullName) wkt {
	switch n {
	case "google.protobuf.Timestamp":
		return wTimestamp
	case "google.protobuf.Duration":
		return wDuration
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		return wWrapper
	case "google.protobuf.Struct":
		return wStruct
	case "google.protobuf.Value":
		return wValue
	case "google.protobuf.ListValue":
		return wList
	case "google.protobuf.Any":
		return wAny
	case "google.protobuf.FieldMask":
		return wFieldMask
	}
	return wNone
}

func (c *pcompiler) msg(md protoreflect.MessageDescriptor) *pmsg {
	if m, ok := c.plans[md.FullName()]; ok {
		return m
	}
	m := &pmsg{name: md.FullName(), wkt: wktOf(md.FullName()), oneofs: md.Oneofs().Len()}
	c.plans[m.name] = m // before the fields: they may refer to it
	fds := md.Fields()
	maxNum := int32(0)
	for i := range fds.Len() {
		maxNum = max(maxNum, int32(fds.Get(i).Number()))
	}
	if maxNum < 1024 {
		m.byNum = make([]int16, maxNum+1)
		for i := range m.byNum {
			m.byNum[i] = -1
		}
	} else {
		m.numMap = map[int32]int{}
	}
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := pfield{name: string(fd.Name()), num: int32(fd.Number()), kind: fd.Kind(),
			list: fd.IsList(), isMap: fd.IsMap(), presence: fd.HasPresence(), group: fd.Kind() == protoreflect.GroupKind,
			oneof: -1}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			f.oneof = int16(od.Index()) // a proto3 optional's synthetic oneof has one member: nothing to clear
		}
		switch f.kind {
		case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.GroupKind:
		default:
			f.packable = true
		}
		if ed := fd.Enum(); ed != nil {
			vals := ed.Values()
			dense := true
			for j := range vals.Len() {
				if n := vals.Get(j).Number(); n < 0 || n >= 1024 {
					dense = false
				}
			}
			if dense {
				for j := range vals.Len() {
					v := vals.Get(j)
					for int(v.Number()) >= len(f.enum) {
						f.enum = append(f.enum, "")
					}
					if f.enum[v.Number()] == "" {
						f.enum[v.Number()] = string(v.Name())
					}
				}
			} else {
				f.enumMap = map[int32]string{}
				for j := range vals.Len() {
					v := vals.Get(j)
					if _, ok := f.enumMap[int32(v.Number())]; !ok {
						f.enumMap[int32(v.Number())] = string(v.Name())
					}
				}
			}
			f.enum0 = "0"
			if v := vals.ByNumber(0); v != nil {
				f.enum0 = string(v.Name())
			}
		}
		if md := fd.Message(); md != nil && !f.group {
			f.msg = c.msg(md)
		}
		f.col = pcol(&f, fd)
		f.direct = !f.list && !f.isMap && !f.group && f.kind != protoreflect.MessageKind
		if m.numMap != nil {
			m.numMap[f.num] = len(m.fields)
		} else {
			m.byNum[f.num] = int16(len(m.fields))
		}
		m.fields = append(m.fields, f)
	}
	return m
}

// scalarCol is the declared type of a single value of f (not a list).
func scalarCol(f *pfield, fd protoreflect.FieldDescriptor) ctype {
	switch f.kind {
	case protoreflect.BoolKind:
		return ctype{b: tBool}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return ctype{b: tInt4}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return ctype{b: tInt8}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return decimalType(20, 0)
	case protoreflect.FloatKind:
		return ctype{b: tFloat4}
	case protoreflect.DoubleKind:
		return ctype{b: tFloat8}
	case protoreflect.StringKind:
		return ctype{b: tText}
	case protoreflect.BytesKind:
		return ctype{b: tBytea}
	case protoreflect.EnumKind:
		var labels []string
		vals := fd.Enum().Values()
		for j := range vals.Len() {
			labels = append(labels, string(vals.Get(j).Name()))
		}
		return ctype{b: tEnum, labels: labels}
	case protoreflect.MessageKind:
		switch f.msg.wkt {
		case wTimestamp:
			return ctype{b: tTimestampTz}
		case wDuration:
			return ctype{b: tInterval}
		case wWrapper:
			v := f.msg.fields[f.msg.field(1)]
			return scalarCol(&v, fd.Message().Fields().ByNumber(1))
		}
	}
	return ctype{b: tJSON}
}

func pcol(f *pfield, fd protoreflect.FieldDescriptor) ctype {
	if f.isMap || f.group {
		return ctype{b: tJSON}
	}
	t := scalarCol(f, fd)
	if f.list {
		if t.b == tJSON {
			return t
		}
		t.list = true
	}
	return t
}

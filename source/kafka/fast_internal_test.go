package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/kafka/internal/avrorow"
)

// fastType is one Avro field type of the differential test: its schema
// text and a generator of its binary values (dirty: edge and bad ones).
type fastType struct {
	schema string
	gen    func(r *rand.Rand, dirty bool, b []byte) []byte
}

func zz(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func pick[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

func genInt(lo, hi int64, edges ...int64) func(*rand.Rand, bool, []byte) []byte {
	return func(r *rand.Rand, dirty bool, b []byte) []byte {
		if dirty && r.IntN(4) == 0 {
			return zz(b, pick(r, edges...))
		}
		return zz(b, lo+r.Int64N(hi-lo+1))
	}
}

func genText(r *rand.Rand, dirty bool, b []byte) []byte {
	n := pick(r, 0, 1, 5, 20, 125, 126, 200)
	s := make([]byte, n)
	for i := range s {
		s[i] = byte(' ' + r.IntN(95))
	}
	if dirty && n > 0 && r.IntN(4) == 0 {
		s[r.IntN(n)] = pick[byte](r, 0xff, 0xc3, 0, '\n', '"', '\\', ',', '{')
	}
	if !dirty && n > 0 && r.IntN(4) == 0 {
		s = append(s[:0], "ü €😀"...)
	}
	return append(zz(b, int64(len(s))), s...)
}

func genBytes(r *rand.Rand, _ bool, b []byte) []byte {
	s := make([]byte, pick(r, 0, 1, 16, 70))
	for i := range s {
		s[i] = byte(r.IntN(256))
	}
	return append(zz(b, int64(len(s))), s...)
}

var fastTypes = []fastType{
	{`"null"`, func(_ *rand.Rand, _ bool, b []byte) []byte { return b }},
	{`"boolean"`, func(r *rand.Rand, dirty bool, b []byte) []byte {
		if dirty && r.IntN(8) == 0 {
			return append(b, 2)
		}
		return append(b, byte(r.IntN(2)))
	}},
	{`"int"`, genInt(-1000, 1000, math.MinInt32, math.MaxInt32, 0, math.MaxInt32+1, math.MinInt32-1)},
	{`"long"`, genInt(-1<<40, 1<<40, math.MinInt64, math.MaxInt64, 0, -1)},
	{`"float"`, func(r *rand.Rand, dirty bool, b []byte) []byte {
		f := float32(r.NormFloat64() * 1e3)
		if dirty {
			f = math.Float32frombits(r.Uint32())
			if r.IntN(4) == 0 {
				f = pick(r, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32)
			}
		}
		return binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}},
	{`"double"`, func(r *rand.Rand, dirty bool, b []byte) []byte {
		f := float64(r.IntN(100000)) + 0.25
		if r.IntN(2) == 0 {
			f = r.NormFloat64() * 1e6
		}
		if dirty {
			f = math.Float64frombits(r.Uint64())
			if r.IntN(4) == 0 {
				f = pick(r, math.NaN(), math.Inf(1), math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64)
			}
		}
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}},
	{`"string"`, genText},
	{`"bytes"`, genBytes},
	{`{"type":"fixed","name":"F%d","size":5}`, func(r *rand.Rand, _ bool, b []byte) []byte {
		for range 5 {
			b = append(b, byte(r.IntN(256)))
		}
		return b
	}},
	{`{"type":"enum","name":"E%d","symbols":["RED","GREEN","it_s"]}`, func(r *rand.Rand, dirty bool, b []byte) []byte {
		if dirty && r.IntN(8) == 0 {
			return zz(b, pick[int64](r, 3, -1))
		}
		return zz(b, r.Int64N(3))
	}},
	{`{"type":"int","logicalType":"date"}`, genInt(-800_000, 3_000_000, -719162, 2932896, -719163, 2932897, math.MaxInt32, math.MinInt32)},
	{`{"type":"int","logicalType":"time-millis"}`, genInt(0, 86_399_999, -1, 86_400_000, math.MaxInt32)},
	{`{"type":"long","logicalType":"time-micros"}`, genInt(0, 86_399_999_999, -1, 86_400_000_000, math.MaxInt64)},
	{`{"type":"long","logicalType":"timestamp-millis"}`, genInt(-62_135_596_800_000, 253_402_300_799_999, -62_135_596_800_001, 253_402_300_800_000, math.MaxInt64, math.MinInt64)},
	{`{"type":"long","logicalType":"timestamp-micros"}`, genInt(-62_135_596_800_000_000, 253_402_300_799_999_999, -62_135_596_800_000_001, 253_402_300_800_000_000, math.MaxInt64)},
	{`{"type":"long","logicalType":"local-timestamp-millis"}`, genInt(-1<<40, 1<<40, math.MaxInt64)},
	{`{"type":"long","logicalType":"local-timestamp-micros"}`, genInt(-1<<50, 1<<50, math.MinInt64)},
	{`{"type":"string","logicalType":"uuid"}`, func(r *rand.Rand, dirty bool, b []byte) []byte {
		u := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.IntN(1<<16), r.IntN(1<<16), r.IntN(1<<16), r.Int64N(1<<48))
		if dirty && r.IntN(3) == 0 {
			u = pick(r, strings.ToUpper(u), strings.ReplaceAll(u, "-", ""), "{"+u+"}", u[:35], "x"+u[1:])
		}
		return append(zz(b, int64(len(u))), u...)
	}},
	{`{"type":"fixed","name":"U%d","size":16,"logicalType":"uuid"}`, func(r *rand.Rand, _ bool, b []byte) []byte {
		for range 16 {
			b = append(b, byte(r.IntN(256)))
		}
		return b
	}},
	// Types only the Go path decodes: a schema with one is not fast.
	{`{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`, func(r *rand.Rand, _ bool, b []byte) []byte {
		return append(zz(b, 2), byte(r.IntN(128)), byte(r.IntN(256)))
	}},
	{`{"type":"array","items":"long"}`, func(r *rand.Rand, _ bool, b []byte) []byte {
		return zz(zz(zz(b, 1), r.Int64N(100)), 0)
	}},
}

// promoted: Avro's promotions of a field type for the evolved schema.
var promoted = map[string]string{`"int"`: `"long"`, `"float"`: `"double"`}

type fastField struct {
	name    string
	t       int // fastTypes index
	typText string
	null    int // 0: not nullable; 1: ["null",T]; 2: [T,"null"]
}

func (f fastField) json(i int) string {
	t := f.typText
	if strings.Contains(t, "%d") {
		t = fmt.Sprintf(t, i)
	}
	switch f.null {
	case 1:
		t = `["null",` + t + `]`
	case 2:
		t = `[` + t + `,"null"]`
	}
	return fmt.Sprintf(`{"name":%q,"type":%s}`, f.name, t)
}

type fastSchema struct {
	fields   []fastField
	nullable int // root: 0 a record; 1 ["null",R]; 2 [R,"null"]
}

func (s fastSchema) text(gen int) string {
	var fs []string
	for i, f := range s.fields {
		fs = append(fs, f.json(gen*100+i))
	}
	rec := fmt.Sprintf(`{"type":"record","name":"R","fields":[%s]}`, strings.Join(fs, ","))
	switch s.nullable {
	case 1:
		return `["null",` + rec + `]`
	case 2:
		return `[` + rec + `,"null"]`
	}
	return rec
}

// value returns a binary value of s.
func (s fastSchema) value(r *rand.Rand, dirty bool) []byte {
	var b []byte
	if s.nullable != 0 {
		if r.IntN(10) == 0 {
			return zz(b, int64(s.nullable-1))
		}
		b = zz(b, int64(2-s.nullable))
	}
	for _, f := range s.fields {
		if f.null != 0 {
			if r.IntN(4) == 0 {
				b = zz(b, int64(f.null-1))
				continue
			}
			b = zz(b, int64(2-f.null))
		}
		b = fastTypes[f.t].gen(r, dirty, b)
	}
	if dirty {
		switch r.IntN(10) {
		case 0:
			b = b[:r.IntN(len(b)+1)]
		case 1:
			b = append(b, 0)
		case 2:
			if len(b) > 0 {
				b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
			}
		}
	}
	return b
}

func randSchema(r *rand.Rand, fast bool) fastSchema {
	var s fastSchema
	if r.IntN(4) == 0 {
		s.nullable = 1 + r.IntN(2)
	}
	nt := len(fastTypes) - 2
	if !fast {
		nt = len(fastTypes)
	}
	for i := range 1 + r.IntN(7) {
		f := fastField{name: fmt.Sprintf("c%d", i), t: r.IntN(nt), null: pick(r, 0, 0, 1, 2)}
		if fastTypes[f.t].schema == `"null"` {
			f.null = 0
		}
		if r.IntN(12) == 0 {
			f.name = fmt.Sprintf("_openetl_x%d", i) // a reserved field: skipped
		}
		f.typText = fastTypes[f.t].schema
		s.fields = append(s.fields, f)
	}
	return s
}

// evolve returns s with promotions and a new nullable field.
func evolve(r *rand.Rand, s fastSchema) fastSchema {
	e := fastSchema{nullable: s.nullable, fields: append([]fastField(nil), s.fields...)}
	for i, f := range e.fields {
		if p, ok := promoted[f.typText]; ok && r.IntN(2) == 0 {
			e.fields[i].typText = p
			for j, t := range fastTypes {
				if t.schema == p {
					e.fields[i].t = j
				}
			}
		}
	}
	t := r.IntN(len(fastTypes) - 2)
	if fastTypes[t].schema != `"null"` {
		e.fields = append(e.fields, fastField{name: "added", t: t, typText: fastTypes[t].schema, null: 1})
	}
	return e
}

type diffStats struct{ fast, fellBack, goOnly, direct, rows, quarantined int }

// TestFastPathMatchesGoPath: the engine's Avro fast path gives the same
// Arrow batches, quarantine lists and quarantined records as the Go
// decoder's rows, for random flat schemas (and evolved ones: promotions,
// an added field, decoded into the joined columns), random values,
// edge values (ranges, NaN, invalid UTF-8, odd uuids) and corrupted
// messages, with Kafka metadata columns after the Avro ones.
func TestFastPathMatchesGoPath(t *testing.T) {
	if _, err := engine.New(engine.Config{}); errors.Is(err, engine.ErrUnavailable) {
		t.Skip(err)
	}
	r := rand.New(rand.NewPCG(23, 1))
	var st diffStats
	for iter := range 300 {
		fast := iter%5 != 0
		s1 := randSchema(r, fast)
		s2 := evolve(r, s1)
		dirty := iter%2 == 1
		diffOne(t, r, iter, s1, s2, dirty, &st)
	}
	t.Logf("%+v", st)
	if st.fast < 50 || st.fellBack < 50 || st.goOnly < 10 || st.direct < 20 || st.quarantined < 50 {
		t.Fatalf("the test did not exercise every path: %+v", st)
	}
}

func diffOne(t *testing.T, r *rand.Rand, iter int, s1, s2 fastSchema, dirty bool, st *diffStats) {
	t.Helper()
	texts := []string{s1.text(1), s2.text(2)}
	var schs []*avrorow.Schema
	var cols []avrorow.Col
	for _, txt := range texts {
		s, err := avrorow.Parse(txt, nil, false)
		if err != nil {
			t.Fatalf("%d: %s: %v", iter, txt, err)
		}
		schs = append(schs, s)
		cols = avrorow.Join(cols, s.Cols())
	}
	meta := iter%3 == 0 // metadata columns after the Avro ones
	var ecols []engine.Column
	for _, c := range cols {
		ecols = append(ecols, engine.Column{Name: c.Name, Type: c.Type(), Nullable: true})
	}
	if meta {
		ecols = append(ecols, engine.Column{Name: "_kafka_partition", Type: "int4", Nullable: true},
			engine.Column{Name: "_kafka_topic", Type: "text", Nullable: true})
	}
	lanes := 1 + 2*(iter%2)
	newEng := func() engine.Engine {
		e, err := engine.New(engine.Config{Lanes: lanes, Streams: []engine.StreamSpec{{Name: "t", Declared: true, Types: source.TypesPostgres, Columns: ecols}}})
		if err != nil {
			t.Fatalf("%d: %v", iter, err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	goEng, fastEng := newEng(), newEng()
	var goB, fastB engine.RawBatch
	goB.Stream, fastB.Stream = "t", "t"
	var regs []uint64
	var decs []*avrorow.Decoder
	anyFast := false
	for i, s := range schs {
		d, err := avrorow.NewDecoder(s, cols)
		if err != nil {
			t.Fatal(err)
		}
		decs = append(decs, d)
		reg, ok := fastPath(s, cols, d, 1000+i)
		if !ok {
			reg = math.MaxUint64
		}
		anyFast = anyFast || ok
		regs = append(regs, reg)
	}
	gens := []fastSchema{s1, s2}
	marked := 0
	one := iter%4 >= 2 // one writer schema: the direct path when lanes == 1 and !meta
	if one && lanes == 1 && !meta && regs[0] != math.MaxUint64 {
		st.direct++
	}
	for i := range 40 {
		v := i % 2
		if one {
			v = 0
		}
		body := gens[v].value(r, dirty)
		key := fmt.Appendf(nil, "k%d", r.IntN(1000))
		var raw []byte
		if r.IntN(5) == 0 {
			raw = append([]byte{0, 0, 0, 0, 9}, key...) // a framed key, decoded to key
		}
		metaRow := func(b []byte) []byte {
			if !meta {
				return b
			}
			return source.AppendRowValue(source.AppendRowValue(b, []byte("3")), []byte("topic"))
		}
		// The Go path, as regDecoder.decode writes it.
		gkey, grow := key, []byte(nil)
		row, err := decs[v].Row(nil, body)
		if err != nil {
			grow = appendBad(nil, fmt.Sprintf("schema id %d: %v", 1000+v, err))
			if raw != nil {
				gkey = raw
			}
		} else {
			grow = metaRow(row)
		}
		goB.Append(uint8(source.OpInsert), int64(i), gkey, grow)
		if regs[v] == math.MaxUint64 {
			fastB.Append(uint8(source.OpInsert), int64(i), gkey, grow)
			continue
		}
		marked++
		fastB.Append(uint8(source.OpInsert), int64(i), key, metaRow(engine.AppendAvroRow(nil, regs[v], raw, body)))
	}
	at := time.UnixMicro(1_700_000_000_000_000)
	gout, err := goEng.Push(&goB, at)
	if err != nil {
		t.Fatalf("%d: go path: %v", iter, err)
	}
	fout, err := fastEng.Push(&fastB, at)
	if err != nil {
		t.Fatalf("%d: fast path: %v", iter, err)
	}
	defer func() {
		for _, o := range []engine.Output{gout, fout} {
			if o.Record != nil {
				o.Record.Release()
			}
		}
	}()
	stillMarked := 0
	for i := range fastB.Len() {
		if _, _, _, p := fastB.Row(i); len(p) >= 10 && bytes.Equal(p[:10], bytes.Repeat([]byte{0xff}, 10)) {
			stillMarked++
		}
	}
	switch {
	case !anyFast:
		st.goOnly++
	case stillMarked == marked && marked > 0:
		st.fast++
	case stillMarked == 0:
		st.fellBack++
	default:
		t.Fatalf("%d: %d of %d rows still marked", iter, stillMarked, marked)
	}
	st.rows += goB.Len()
	st.quarantined += len(gout.Quarantined)
	ctx := fmt.Sprintf("%d (%s | %s, dirty %v)", iter, texts[0], texts[1], dirty)
	if fmt.Sprint(gout.Quarantined) != fmt.Sprint(fout.Quarantined) {
		t.Fatalf("%s: quarantined\n go   %v\n fast %v", ctx, gout.Quarantined, fout.Quarantined)
	}
	for _, q := range gout.Quarantined {
		_, _, gk, gp := goB.Row(q.Row)
		_, _, fk, fp := fastB.Row(q.Row)
		if !bytes.Equal(gk, fk) || !bytes.Equal(gp, fp) {
			t.Fatalf("%s: quarantined record %d: go %q %q, fast %q %q", ctx, q.Row, gk, gp, fk, fp)
		}
	}
	if fmt.Sprint(gout.Held) != fmt.Sprint(fout.Held) || fmt.Sprint(gout.LaneOffsets) != fmt.Sprint(fout.LaneOffsets) {
		t.Fatalf("%s: held %v / %v, lanes %v / %v", ctx, gout.Held, fout.Held, gout.LaneOffsets, fout.LaneOffsets)
	}
	if (gout.Record == nil) != (fout.Record == nil) {
		t.Fatalf("%s: record %v / %v", ctx, gout.Record, fout.Record)
	}
	if gout.Record == nil {
		return
	}
	if !gout.Record.Schema().Equal(fout.Record.Schema()) {
		t.Fatalf("%s: schema\n go   %v\n fast %v", ctx, gout.Record.Schema(), fout.Record.Schema())
	}
	for c := range int(gout.Record.NumCols()) {
		g, f := gout.Record.Column(c), fout.Record.Column(c)
		if !array.Equal(g, f) && !(sameFloats(g, f)) {
			t.Fatalf("%s: column %s\n go   %v\n fast %v", ctx, gout.Record.ColumnName(c), g, f)
		}
	}
}

// sameFloats: float columns equal bit for bit (NaNs included).
func sameFloats(a, b arrow.Array) bool {
	switch a := a.(type) {
	case *array.Float64:
		b, ok := b.(*array.Float64)
		if !ok || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if a.IsNull(i) != b.IsNull(i) || math.Float64bits(a.Value(i)) != math.Float64bits(b.Value(i)) {
				return false
			}
		}
		return true
	case *array.Float32:
		b, ok := b.(*array.Float32)
		if !ok || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if a.IsNull(i) != b.IsNull(i) || math.Float32bits(a.Value(i)) != math.Float32bits(b.Value(i)) {
				return false
			}
		}
		return true
	}
	return false
}

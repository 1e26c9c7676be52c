package runner

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// A routed table's schema is the join of its shards' schemas under the
// engine's widening rules (package engine's doc): each shard's batches
// are cast to it, and it only ever widens. It starts, at each attempt,
// from the join of what the engine knows of every shard (its state: a
// shard's schema never narrows), so it never narrows across restarts
// either, and whichever shard's rows come first, the table sees the
// same schema.

// declNum is a declared numeric type: an integer of some bytes, a float,
// or a decimal(p, s) (p 0: unbounded).
type declNum struct {
	kind  byte // 'i' integer, 'f' float, 'd' decimal
	bytes int  // integers and floats
	p, s  int  // decimals
}

var (
	declDecimal = regexp.MustCompile(`^(?:numeric|decimal)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$`)
	declWidth   = regexp.MustCompile(`\(\s*\d+\s*\)`)
)

// parseDeclNum parses a numeric declared type of either type system.
func parseDeclNum(t string) (declNum, bool) {
	switch t {
	case "int2", "smallint", "tinyint":
		if t == "tinyint" {
			return declNum{kind: 'i', bytes: 1}, true
		}
		return declNum{kind: 'i', bytes: 2}, true
	case "mediumint", "int4", "int", "integer":
		return declNum{kind: 'i', bytes: 4}, true
	case "int8", "bigint":
		return declNum{kind: 'i', bytes: 8}, true
	case "float4", "real", "float":
		return declNum{kind: 'f', bytes: 4}, true
	case "float8", "double precision", "double":
		return declNum{kind: 'f', bytes: 8}, true
	case "numeric", "decimal":
		return declNum{kind: 'd'}, true
	}
	if m := declDecimal.FindStringSubmatch(t); m != nil {
		p, _ := strconv.Atoi(m[1])
		s, _ := strconv.Atoi(m[2])
		return declNum{kind: 'd', p: p, s: s}, true
	}
	return declNum{}, false
}

// intDigits is the decimal digits of the largest integer of n bytes.
func intDigits(n int) int {
	switch n {
	case 1:
		return 3
	case 2:
		return 5
	case 4:
		return 10
	}
	return 19
}

// isDeclText reports a declared type the engine makes utf8 with no
// other meaning (enums and json stay apart).
func isDeclText(t string) bool {
	switch t {
	case "text", "varchar", "bpchar", "char", "name", "citext", "character varying", "character",
		"tinytext", "mediumtext", "longtext":
		return true
	}
	for _, p := range []string{"varchar(", "char(", "bpchar(", "character varying(", "character("} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// joinDeclared joins two declared column types of one type system as
// the engine widens their Arrow types: integers to the wider, integers
// and floats to a double, integers and decimals to a decimal holding
// both (an unbounded numeric past 38 digits), any two text types to
// text; equal types stay. false: they don't join short of making text
// of a non-text value, which Build refuses for declared columns.
func joinDeclared(types, a, b string) (string, bool) {
	na, nb := strings.ToLower(strings.TrimSpace(a)), strings.ToLower(strings.TrimSpace(b))
	if na == nb {
		return a, true
	}
	if isDeclText(na) && isDeclText(nb) {
		if types == source.TypesMySQL {
			return "longtext", true
		}
		return "text", true
	}
	if types == source.TypesMySQL {
		// Display widths (int(11)) say nothing of the type; unsigned
		// integers join only their own kind.
		na, nb = declWidth.ReplaceAllString(na, ""), declWidth.ReplaceAllString(nb, "")
		if strings.HasSuffix(na, " unsigned") != strings.HasSuffix(nb, " unsigned") {
			return "", false
		}
	}
	x, ok1 := parseDeclNum(strings.TrimSuffix(na, " unsigned"))
	y, ok2 := parseDeclNum(strings.TrimSuffix(nb, " unsigned"))
	if !ok1 || !ok2 || strings.HasSuffix(na, " unsigned") {
		if ok1 && ok2 && x.kind == 'i' && y.kind == 'i' {
			if x.bytes >= y.bytes {
				return a, true
			}
			return b, true
		}
		return "", false
	}
	if x.kind > y.kind {
		x, y = y, x
	}
	pick := func(n declNum) string {
		if n.kind == 'd' && n.p == 0 {
			return map[bool]string{true: "decimal", false: "numeric"}[types == source.TypesMySQL]
		}
		if n.kind == 'd' {
			return fmt.Sprintf("%s(%d,%d)", map[bool]string{true: "decimal", false: "numeric"}[types == source.TypesMySQL], n.p, n.s)
		}
		if n.kind == 'f' {
			return map[bool]string{true: "double", false: "float8"}[types == source.TypesMySQL]
		}
		return map[int]string{1: "tinyint", 2: "smallint", 4: "int", 8: "bigint"}[n.bytes]
	}
	switch {
	case x.kind == 'i' && y.kind == 'i':
		if x.bytes < y.bytes {
			x = y
		}
		if types != source.TypesMySQL {
			return map[int]string{2: "int2", 4: "int4", 8: "int8"}[x.bytes], true
		}
		return pick(x), true
	case x.kind == 'f' && y.kind == 'f', x.kind == 'f' && y.kind == 'i', x.kind == 'i' && y.kind == 'f':
		return pick(declNum{kind: 'f', bytes: 8}), true
	case x.kind == 'd' && y.kind == 'd', x.kind == 'd' && y.kind == 'i', x.kind == 'i' && y.kind == 'd':
		if x.kind == 'i' {
			x = declNum{kind: 'd', p: intDigits(x.bytes)}
		}
		if y.kind == 'i' {
			y = declNum{kind: 'd', p: intDigits(y.bytes)}
		}
		if x.p == 0 || y.p == 0 {
			return pick(declNum{kind: 'd'}), true
		}
		s := max(x.s, y.s)
		p := max(x.p-x.s, y.p-y.s) + s
		if p > 38 {
			return pick(declNum{kind: 'd'}), true
		}
		return pick(declNum{kind: 'd', p: p, s: s}), true
	}
	return "", false // a float meeting a decimal: only text holds both
}

// arrowIntDigits is the decimal digits of an integer type's largest value.
func arrowIntDigits(t arrow.DataType) (int, bool) {
	switch t.ID() {
	case arrow.INT8:
		return 3, true
	case arrow.INT16:
		return 5, true
	case arrow.INT32:
		return 10, true
	case arrow.INT64:
		return 19, true
	case arrow.UINT8:
		return 3, true
	case arrow.UINT16:
		return 5, true
	case arrow.UINT32:
		return 10, true
	case arrow.UINT64:
		return 20, true
	}
	return 0, false
}

func isSigned(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64:
		return true
	}
	return false
}

func isFloat(t arrow.DataType) bool { return t.ID() == arrow.FLOAT32 || t.ID() == arrow.FLOAT64 }

// joinArrow joins two Arrow column types as the engine widens: null
// meets anything, integers widen (signed and unsigned to a signed type
// holding both), integers and floats to float64, integers and decimals to
// a decimal holding both while it fits 38 digits, and any other two
// different types to utf8. false: a nested type meeting another type,
// which no cast makes one.
func joinArrow(a, b arrow.DataType) (arrow.DataType, bool) {
	switch {
	case arrow.TypeEqual(a, b):
		return a, true
	case a.ID() == arrow.NULL:
		return b, true
	case b.ID() == arrow.NULL:
		return a, true
	}
	nested := func(t arrow.DataType) bool { _, ok := t.(arrow.NestedType); return ok }
	if nested(a) || nested(b) {
		return nil, false
	}
	da, ia := arrowIntDigits(a)
	db, ib := arrowIntDigits(b)
	switch {
	case ia && ib:
		if isSigned(a) == isSigned(b) {
			if da >= db {
				return a, true
			}
			return b, true
		}
		u, s := a, b // unsigned, signed
		if isSigned(a) {
			u, s = b, a
		}
		if u.(arrow.FixedWidthDataType).BitWidth() < s.(arrow.FixedWidthDataType).BitWidth() {
			return s, true
		}
		if u.ID() != arrow.UINT64 {
			return arrow.PrimitiveTypes.Int64, true
		}
	case ia && isFloat(b), ib && isFloat(a), isFloat(a) && isFloat(b):
		return arrow.PrimitiveTypes.Float64, true
	}
	dec := func(t arrow.DataType, digits int, isInt bool) (p, s int32, ok bool) {
		if isInt {
			return int32(digits), 0, true
		}
		if d, ok := t.(*arrow.Decimal128Type); ok {
			return d.Precision, d.Scale, true
		}
		return 0, 0, false
	}
	if pa, sa, oka := dec(a, da, ia); oka {
		if pb, sb, okb := dec(b, db, ib); okb {
			s := max(sa, sb)
			if p := max(pa-sa, pb-sb) + s; p <= 38 {
				return &arrow.Decimal128Type{Precision: p, Scale: s}, true
			}
		}
	}
	return arrow.BinaryTypes.String, true
}

// routedTable is the running schema of one routed table.
type routedTable struct {
	table string        // the destination table name
	data  []arrow.Field // the shards' columns, joined, in order of first appearance
	meta  []arrow.Field // the engine's metadata columns
	sc    *arrow.Schema // data, meta, ColumnStream; nil until the first batch
	// origins holds each stream's ColumnStream column, as long as the
	// longest batch yet; batches take slices of it. Left to the garbage
	// collector with the router (Go memory: no Release needed).
	origins map[string]arrow.Array
}

// router keeps the routed tables' schemas of an attempt. Only the engine
// stage uses it.
type router struct {
	of map[string]*routedTable // by source stream
}

var streamField = arrow.Field{Name: sink.ColumnStream, Type: arrow.BinaryTypes.String}

// widen joins sc's columns into t's schema, reporting whether it changed
// and failing for a column whose types don't join.
func (t *routedTable) widen(stream string, sc *arrow.Schema) (bool, error) {
	changed := false
	var meta []arrow.Field
	for _, f := range sc.Fields() {
		if strings.HasPrefix(f.Name, sink.ReservedPrefix) {
			meta = append(meta, f)
			continue
		}
		i := -1
		for j := range t.data {
			if t.data[j].Name == f.Name {
				i = j
				break
			}
		}
		if i < 0 {
			f.Nullable = true
			t.data = append(t.data, f)
			changed = true
			continue
		}
		typ, ok := joinArrow(t.data[i].Type, f.Type)
		if !ok {
			return false, fmt.Errorf("route: table %q: column %q is %s in stream %q, and %s before: nested types join only when equal across routed streams",
				t.table, f.Name, f.Type, stream, t.data[i].Type)
		}
		if !arrow.TypeEqual(typ, t.data[i].Type) {
			t.data[i].Type, t.data[i].Metadata = typ, arrow.Metadata{}
			changed = true
		} else if !t.data[i].Metadata.Equal(f.Metadata) {
			t.data[i].Metadata = arrow.Metadata{} // an enum meeting plain text is text
			changed = true
		}
	}
	if t.meta == nil {
		t.meta, changed = meta, true
	}
	if changed || t.sc == nil {
		fields := make([]arrow.Field, 0, len(t.data)+len(t.meta)+1)
		fields = append(append(append(fields, t.data...), t.meta...), streamField)
		md := sc.Metadata()
		if _, ok := md.GetValue(engine.TableMetadataKey); ok {
			md = arrow.NewMetadata([]string{engine.TableMetadataKey}, []string{t.table})
		}
		t.sc = arrow.NewSchema(fields, &md)
	}
	return changed, nil
}

// conform returns rec (a batch of stream) under t's schema, widened by
// rec's: each column cast to the joined type, absent columns null, and
// ColumnStream set to stream. It releases rec.
func (t *routedTable) conform(stream string, rec arrow.RecordBatch) (arrow.RecordBatch, bool, error) {
	defer rec.Release()
	changed, err := t.widen(stream, rec.Schema())
	if err != nil {
		return nil, false, err
	}
	n := int(rec.NumRows())
	cols := make([]arrow.Array, 0, t.sc.NumFields())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	byName := make(map[string]int, rec.Schema().NumFields())
	for i, f := range rec.Schema().Fields() {
		byName[f.Name] = i
	}
	for _, f := range t.sc.Fields()[:len(t.data)+len(t.meta)] {
		i, ok := byName[f.Name]
		if !ok {
			cols = append(cols, array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, n))
			continue
		}
		c := rec.Column(i)
		if arrow.TypeEqual(c.DataType(), f.Type) {
			c.Retain()
			cols = append(cols, c)
			continue
		}
		cast, err := compute.CastArray(context.Background(), c, compute.SafeCastOptions(f.Type))
		if err != nil {
			return nil, false, fmt.Errorf("route: table %q: column %q of stream %q: cast %s to %s: %w", t.table, f.Name, stream, c.DataType(), f.Type, err)
		}
		cols = append(cols, cast)
	}
	cols = append(cols, t.origin(stream, n))
	return array.NewRecordBatch(t.sc, cols, int64(n)), changed, nil
}

// origin returns n rows of ColumnStream set to stream: a slice of a
// column kept per stream, grown as batches grow, so that a batch costs
// no copy of the name per row.
func (t *routedTable) origin(stream string, n int) arrow.Array {
	if t.origins == nil {
		t.origins = map[string]arrow.Array{}
	}
	a := t.origins[stream]
	if a == nil || a.Len() < n {
		if a != nil {
			a.Release()
		}
		b := array.NewStringBuilder(memory.DefaultAllocator)
		b.Reserve(n)
		b.ReserveData(n * len(stream))
		for range n {
			b.Append(stream)
		}
		a = b.NewArray()
		b.Release()
		t.origins[stream] = a
	}
	return array.NewSlice(a, 0, int64(n))
}

// newRouter makes the attempt's router, its tables' schemas seeded from
// what the engine knows of each shard: a throwaway engine made as the
// attempt's (newEngine) takes one delete per routed stream, and the
// schema of its output is the stream's whole schema as the engine has it
// (a column absent from a batch is in its output all null). The probe
// never reaches the attempt's engine, its state or the destination.
func (r *runner) newRouter(catalog source.Catalog, streams []string, caps sink.Capabilities) (*router, error) {
	if len(r.cfg.Routes) == 0 {
		return nil, nil
	}
	rt := &router{of: map[string]*routedTable{}}
	tables := map[string]*routedTable{}
	eng, err := r.newEngine(catalog, streams, caps)
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	for _, s := range streams {
		route, ok := r.cfg.routeOf(s)
		if !ok {
			continue
		}
		t := tables[route.Table]
		if t == nil {
			t = &routedTable{table: baseName(caps, route.Table)}
			for _, spec := range r.specs {
				if spec.Stream == route.Table {
					t.table = spec.Table
				}
			}
			tables[route.Table] = t
		}
		rt.of[s] = t
		var b engine.RawBatch
		b.Stream = s
		b.Append(uint8(source.OpDelete), 0, []byte("\x00openetl.route.probe"), nil)
		out, err := eng.Push(&b, time.Unix(0, 0).UTC())
		if err != nil {
			return nil, fmt.Errorf("route: engine: stream %q: %w", s, err)
		}
		if out.Record == nil {
			continue // nothing known of the stream yet
		}
		_, err = t.widen(s, out.Record.Schema())
		out.Record.Release()
		if err != nil {
			return nil, err
		}
	}
	return rt, nil
}

// table returns the routed table of stream; nil when it is not routed
// (or r is nil: no routes).
func (r *router) table(stream string) *routedTable {
	if r == nil {
		return nil
	}
	return r.of[stream]
}

// setUpRouter makes the attempt's router once its engine and specs are
// set (newRouter).
func (r *runner) setUpRouter(catalog source.Catalog, streams []string, caps sink.Capabilities) error {
	rt, err := r.newRouter(catalog, streams, caps)
	if err != nil {
		return err
	}
	r.router = rt
	// Status says where each stream goes: a routed one to its table.
	tables := map[string]string{}
	for _, spec := range r.specs {
		tables[spec.Stream] = spec.Table
	}
	r.state.update(func(st *Status) {
		for _, s := range streams {
			t := tables[s]
			if route, ok := r.cfg.routeOf(s); ok {
				t = tables[route.Table]
			}
			x := st.Streams[s]
			x.Table = t
			st.Streams[s] = x
		}
	})
	return nil
}

package avrorow

import (
	"encoding/binary"
	"math"
)

// Ops of a fast plan (engine/rust/src/avro.rs; keep both in step).
const (
	opNull byte = iota + 1
	opBool
	opIntToInt4
	opIntToInt8
	opLongToInt8
	opFloatToFloat4
	opFloatToFloat8
	opDoubleToFloat8
	opString
	opBytes
	opFixed
	opEnum
	opDate
	opTimeMillis
	opTimeMicros
	opTsMillis
	opTsMicros
	opLocalMillis
	opLocalMicros
	opUUIDString
	opUUIDFixed
)

// FastPlan returns the plan of d for the Rust engine's Avro fast path
// (engine.RegisterAvro): how each field of the writer schema is read and
// which column it fills, for the types the engine decodes itself — flat
// records (or a nullable record, or a single value) of null, boolean,
// int, long, float, double, string, bytes, fixed, enum, date,
// time-millis/-micros, timestamp-millis/-micros,
// local-timestamp-millis/-micros and uuid fields, each possibly in a
// union with null, whose columns have the type the field maps to (or its
// Avro promotion: int → long, float → double). ok is false for any other
// schema (Debezium envelopes, decimals, arrays, maps, nested records,
// unions of several types, columns widened to text, ...), whose values
// only the Go decoder writes.
func (d *Decoder) FastPlan() (plan []byte, ok bool) {
	s := d.s
	if s.env != nil {
		return nil, false
	}
	flags := byte(0)
	if s.nullable {
		if len(s.root.branches) != 2 {
			return nil, false
		}
		flags = 1
		if s.root.branches[1].k == kNull {
			flags |= 2
		}
	}
	if d.ncols > math.MaxInt32 || len(d.fields) > math.MaxInt32 {
		return nil, false
	}
	plan = append([]byte("AVP1"), flags)
	plan = binary.LittleEndian.AppendUint32(plan, uint32(d.ncols))
	plan = binary.LittleEndian.AppendUint32(plan, uint32(len(d.fields)))
	for i, f := range d.fields {
		t, nullAt := f.t, byte(0)
		if t.k == kUnion {
			if len(t.branches) != 2 || t.multi {
				return nil, false
			}
			switch {
			case t.branches[0].k == kNull && t.branches[1].k != kNull:
				t, nullAt = t.branches[1], 1
			case t.branches[1].k == kNull && t.branches[0].k != kNull:
				t, nullAt = t.branches[0], 2
			default:
				return nil, false
			}
		}
		slot := d.slot[i]
		op := fastOp(t, d.tgt[i], slot < 0)
		if op == 0 {
			return nil, false
		}
		plan = append(plan, op, nullAt)
		if slot < 0 {
			plan = binary.LittleEndian.AppendUint32(plan, math.MaxUint32)
		} else {
			plan = binary.LittleEndian.AppendUint32(plan, uint32(slot))
		}
		switch op {
		case opFixed, opUUIDFixed:
			plan = binary.LittleEndian.AppendUint32(plan, uint32(t.size))
		case opEnum:
			plan = binary.LittleEndian.AppendUint32(plan, uint32(len(t.symbols)))
			for _, sym := range t.symbols {
				plan = binary.LittleEndian.AppendUint32(plan, uint32(len(sym)))
				plan = append(plan, sym...)
			}
		default:
			plan = binary.LittleEndian.AppendUint32(plan, 0)
		}
	}
	return plan, true
}

// fastOp returns the fast plan's op for a value of t in a column of type
// tgt (any type when skip: the value is read and dropped), or 0.
func fastOp(t *typ, tgt ctype, skip bool) byte {
	if tgt.list {
		return 0
	}
	is := func(b base) bool { return skip || tgt.b == b }
	switch t.k {
	case kNull:
		return opNull
	case kBool:
		if t.l == lNone && is(tBool) {
			return opBool
		}
	case kInt:
		switch {
		case t.l == lNone && is(tInt4):
			return opIntToInt4
		case t.l == lNone && tgt.b == tInt8:
			return opIntToInt8
		case t.l == lDate && is(tDate):
			return opDate
		case t.l == lTimeMillis && is(tTime):
			return opTimeMillis
		}
	case kLong:
		switch {
		case t.l == lNone && is(tInt8):
			return opLongToInt8
		case t.l == lTimeMicros && is(tTime):
			return opTimeMicros
		case t.l == lTsMillis && is(tTimestampTz):
			return opTsMillis
		case t.l == lTsMicros && is(tTimestampTz):
			return opTsMicros
		case t.l == lLocalMillis && is(tTimestamp):
			return opLocalMillis
		case t.l == lLocalMicros && is(tTimestamp):
			return opLocalMicros
		}
	case kFloat:
		switch {
		case t.l == lNone && is(tFloat4):
			return opFloatToFloat4
		case t.l == lNone && tgt.b == tFloat8:
			return opFloatToFloat8
		}
	case kDouble:
		if t.l == lNone && is(tFloat8) {
			return opDoubleToFloat8
		}
	case kString:
		switch {
		case t.l == lNone && is(tText):
			return opString
		case t.l == lUUID && is(tUUID):
			return opUUIDString
		}
	case kBytes:
		if t.l == lNone && is(tBytea) {
			return opBytes
		}
	case kFixed:
		switch {
		case t.l == lNone && is(tBytea):
			return opFixed
		case t.l == lUUID && t.size == 16 && is(tUUID):
			return opUUIDFixed
		}
	case kEnum:
		if t.l == lNone && is(tEnum) && len(t.symbols) > 0 {
			return opEnum
		}
	}
	return 0
}

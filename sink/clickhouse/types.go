package clickhouse

import (
	"fmt"
	"strings"

	"github.com/openetl/etl/sink"

	"github.com/apache/arrow-go/v18/arrow"
)

// Features are what the server can do, detected from its version when the
// Destination is created (ServerFeatures) and fixed for its life.
type Features struct {
	// Version is the server's version, e.g. "18.16.1".
	Version string
	// DateTime64 (20.1+): sub-second timestamps.
	DateTime64 bool
	// Date32 (21.9+): dates from 1900 to 2299.
	Date32 bool
	// Decimal256 (20.8+): decimals up to 76 digits.
	Decimal256 bool
	// Bool (21.12+): a Bool type; before it, bool is UInt8.
	Bool bool
	// LowCardinality (19.1+, production-ready): used for declared enums and
	// _openetl_op.
	LowCardinality bool
	// UUID (18.1+, checked on 18.16): a native UUID type; before it, a
	// uuid is FixedString(16).
	UUID bool
	// ExperimentalLowCardinality (18.12 to 19.0): LowCardinality exists
	// but a table may have such a column only when it is created (or
	// altered) with allow_experimental_low_cardinality_type = 1. Used for
	// declared enums only.
	ExperimentalLowCardinality bool
	// DedupToken (22.2+): insert_deduplication_token with
	// non_replicated_deduplication_window, so a repeated apply of a block
	// is dropped by the server itself.
	DedupToken bool
	// IsDeleted (23.2+): ReplacingMergeTree(ver, is_deleted).
	IsDeleted bool
}

// ServerFeatures returns the features of a server of the given version
// (major.minor[.patch...]); an unparsable version has none.
func ServerFeatures(version string) Features {
	var major, minor int
	fmt.Sscanf(version, "%d.%d", &major, &minor)
	at := func(ma, mi int) bool { return major > ma || (major == ma && minor >= mi) }
	return Features{
		Version:                    version,
		DateTime64:                 at(20, 1),
		Date32:                     at(21, 9),
		Decimal256:                 at(20, 8),
		Bool:                       at(21, 12),
		LowCardinality:             at(19, 1),
		UUID:                       at(18, 1),
		ExperimentalLowCardinality: at(18, 12) && !at(19, 1),
		DedupToken:                 at(22, 2),
		IsDeleted:                  at(23, 2),
	}
}

// Metadata columns: the engine's, and the ones this destination adds.
const (
	colID       = sink.ColumnID
	colOp       = sink.ColumnOp
	colSeq      = sink.ColumnSeq
	colSyncedAt = sink.ColumnSyncedAt
	// colDeleted is 1 for a row deleted at the source (merge tables).
	colDeleted = sink.ColumnDeleted
	// colBatch is the staged block a row came from: what makes an apply
	// verifiable after a crash (see doc.go).
	colBatch = "_openetl_batch"
)

// Ranges of ClickHouse's date and time types, in days and seconds since
// the Unix epoch.
const (
	dateMaxDays     = 65535       // Date: 1970-01-01 .. 2149-06-06
	date32MinDays   = -25567      // Date32: 1900-01-01
	date32MaxDays   = 120529      // .. 2299-12-31
	dateTimeMaxSecs = 4294967295  // DateTime: .. 2106-02-07 06:28:15
	dt64MinSecs     = -2208988800 // DateTime64: 1900-01-01
	dt64MaxSecs     = 10413791999 // .. 2299-12-31 23:59:59
	maxDecimal128   = 38          // digits of Decimal128
	maxDecimal256   = 76          // digits of Decimal256
	nanosPerSecond  = int64(1000 * 1000 * 1000)
	microsPerSecond = int64(1000 * 1000)
)

// colType is a column's ClickHouse type and how its values are encoded.
type colType struct {
	// ch is the ClickHouse type, e.g. "Nullable(Decimal(12, 2))".
	ch string
	// kind selects the encoder.
	kind kind
	// scale: fractional digits of a decimal or DateTime64.
	scale int32
	// prec: digits of a decimal column.
	prec int32
	// nullable: the column is Nullable(...).
	nullable bool
	// elem is the element type of an Array.
	elem *colType
}

type kind uint8

const (
	kInt8 kind = iota + 1
	kInt16
	kInt32
	kInt64
	kUint8
	kUint16
	kUint32
	kUint64
	kFloat32
	kFloat64
	kBool
	kBoolU8 // bool as UInt8 (servers without Bool)
	kString
	kFixed
	kUUID // fixed_size_binary(16), big-endian: a uuid
	kDecimal
	kDate
	kDateTime   // DateTime: seconds (18.16's only timestamp)
	kDateTime64 // DateTime64(scale)
	kArray
	kJSON // a struct as its JSON text
)

// unsupportedClasses are the Arrow type classes (engine.Config.Unsupported
// names) no ClickHouse column here takes: the engine holds them back.
var unsupportedClasses = []string{"interval", "duration", "time", "null"}

// unsupportedOn returns the type classes a server with f can't take.
func unsupportedOn(f Features) []string {
	out := append([]string(nil), unsupportedClasses...)
	if !f.DateTime64 {
		// DateTime holds whole seconds only: timestamps are held back
		// until the server has DateTime64 rather than truncated.
		out = append(out, "timestamp", "timestamptz")
	}
	return out
}

// mapType returns the ClickHouse type of an Arrow field. key columns (the
// sort key of a merge table) are never Nullable: ClickHouse can't sort by
// one, so a null key is quarantined instead.
func mapType(f Features, field arrow.Field, key bool) (colType, error) {
	dt := field.Type
	if declaredEnum(field) && arrow.IsBaseBinary(dt.ID()) {
		// Text of a declared enum: taken as the dictionary it is.
		dt = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: dt}
	}
	t, err := baseType(f, field.Name, dt)
	if err != nil {
		return colType{}, err
	}
	if field.Nullable && !key && t.kind != kArray {
		t.nullable = true
		if inner, ok := strings.CutPrefix(t.ch, "LowCardinality("); ok {
			t.ch = "LowCardinality(Nullable(" + inner + ")" // LowCardinality goes outside
		} else {
			t.ch = "Nullable(" + t.ch + ")"
		}
	}
	return t, nil
}

// logicalTypeKey and logicalTypeEnum are the Arrow field metadata by
// which the engine marks an enum column (engine.LogicalTypeKey and
// engine.LogicalTypeEnum: a declared enum('a',...) of Postgres or
// MySQL, utf8 holding the label). Such a field is mapped like a
// dictionary: LowCardinality(String).
const (
	logicalTypeKey  = sink.LogicalTypeKey
	logicalTypeEnum = sink.LogicalTypeEnum
)

// declaredEnum reports whether field's metadata marks it an enum.
func declaredEnum(field arrow.Field) bool {
	v, ok := field.Metadata.GetValue(logicalTypeKey)
	return ok && v == logicalTypeEnum
}

func baseType(f Features, name string, dt arrow.DataType) (colType, error) {
	switch dt := dt.(type) {
	case *arrow.Int8Type:
		return colType{ch: "Int8", kind: kInt8}, nil
	case *arrow.Int16Type:
		return colType{ch: "Int16", kind: kInt16}, nil
	case *arrow.Int32Type:
		return colType{ch: "Int32", kind: kInt32}, nil
	case *arrow.Int64Type:
		return colType{ch: "Int64", kind: kInt64}, nil
	case *arrow.Uint8Type:
		return colType{ch: "UInt8", kind: kUint8}, nil
	case *arrow.Uint16Type:
		return colType{ch: "UInt16", kind: kUint16}, nil
	case *arrow.Uint32Type:
		return colType{ch: "UInt32", kind: kUint32}, nil
	case *arrow.Uint64Type:
		return colType{ch: "UInt64", kind: kUint64}, nil
	case *arrow.Float32Type:
		return colType{ch: "Float32", kind: kFloat32}, nil
	case *arrow.Float64Type:
		return colType{ch: "Float64", kind: kFloat64}, nil
	case *arrow.BooleanType:
		if f.Bool {
			return colType{ch: "Bool", kind: kBool}, nil
		}
		return colType{ch: "UInt8", kind: kBoolU8}, nil
	case *arrow.StringType, *arrow.LargeStringType, *arrow.BinaryType, *arrow.LargeBinaryType:
		if name == colOp && f.LowCardinality {
			return colType{ch: "LowCardinality(String)", kind: kString}, nil
		}
		return colType{ch: "String", kind: kString}, nil
	case *arrow.DictionaryType:
		// A declared enum: its values as strings.
		if !arrow.IsBaseBinary(dt.ValueType.ID()) {
			return colType{}, fmt.Errorf("column %q: dictionary of %s is not supported", name, dt.ValueType)
		}
		if f.LowCardinality || f.ExperimentalLowCardinality {
			return colType{ch: "LowCardinality(String)", kind: kString}, nil
		}
		return colType{ch: "String", kind: kString}, nil
	case *arrow.FixedSizeBinaryType:
		// The engine gives fixed_size_binary(16) to uuids only (Postgres
		// uuid, big-endian: the byte order of the text form).
		if dt.ByteWidth == 16 && f.UUID {
			return colType{ch: "UUID", kind: kUUID}, nil
		}
		return colType{ch: fmt.Sprintf("FixedString(%d)", dt.ByteWidth), kind: kFixed}, nil
	case *arrow.Decimal128Type:
		return decimalType(f, dt.Precision, dt.Scale), nil
	case *arrow.Decimal256Type:
		return decimalType(f, dt.Precision, dt.Scale), nil
	case *arrow.Date32Type, *arrow.Date64Type:
		if f.Date32 {
			return colType{ch: "Date32", kind: kDate}, nil
		}
		return colType{ch: "Date", kind: kDate}, nil
	case *arrow.TimestampType:
		if !f.DateTime64 {
			return colType{ch: "DateTime('UTC')", kind: kDateTime}, nil
		}
		scale := int32(dt.Unit) * 3 // s, ms, us, ns → 0, 3, 6, 9
		return colType{ch: fmt.Sprintf("DateTime64(%d, 'UTC')", scale), kind: kDateTime64, scale: scale}, nil
	case *arrow.StructType:
		// Tuples with names need 20.x and clickhouse-go takes them only
		// as values per row: a struct is kept as its JSON text.
		return colType{ch: "String", kind: kJSON}, nil
	case *arrow.ListType:
		return arrayType(f, name, dt.ElemField())
	case *arrow.LargeListType:
		return arrayType(f, name, dt.ElemField())
	}
	return colType{}, fmt.Errorf("column %q: Arrow type %s has no ClickHouse column here (the engine holds such columns back when Capabilities lists them)", name, dt)
}

func arrayType(f Features, name string, elem arrow.Field) (colType, error) {
	if _, ok := elem.Type.(*arrow.ListType); ok {
		return colType{}, fmt.Errorf("column %q: nested lists are not supported", name)
	}
	et, err := mapType(f, elem, false)
	if err != nil {
		return colType{}, err
	}
	return colType{ch: "Array(" + et.ch + ")", kind: kArray, elem: &et}, nil
}

// decimalType maps decimal(p,s): ClickHouse picks the width (Decimal32,
// 64, 128, 256) from the precision. Past what the server holds the column
// is Decimal(38 or 76, s) and wider values are quarantined.
func decimalType(f Features, p, s int32) colType {
	limit := int32(maxDecimal128)
	if f.Decimal256 {
		limit = maxDecimal256
	}
	if p > limit {
		p = limit
	}
	if s > p {
		s = p
	}
	return colType{ch: fmt.Sprintf("Decimal(%d, %d)", p, s), kind: kDecimal, prec: p, scale: s}
}

// quoteIdent quotes a ClickHouse identifier with backquotes.
func quoteIdent(s string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(s) + "`"
}

// quoteString quotes a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer("\\", "\\\\", "'", "\\'").Replace(s) + "'"
}

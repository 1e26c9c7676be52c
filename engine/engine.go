// Package engine turns raw batches of source records into Arrow record
// batches. The work is done by a Rust crate (engine/rust) reached through
// cgo; this file is the Go-facing contract, and the cgo layer lives in
// cgo.go (linux/amd64 with cgo) with a stub for other builds (nocgo.go),
// whose New returns ErrUnavailable.
//
// # Documents
//
// Each payload must be one JSON object; anything else is quarantined with
// ReasonParse. Its top-level fields become columns, typed by inference
// that only ever widens, per stream and across pushes:
//
//	value                          column type
//	null                           null (until another value arrives)
//	true / false                   bool
//	integer within int64           int64
//	other number float64 holds     float64 (its text is a float64's
//	                               shortest form, or has an exponent)
//	integer beyond int64, or a     decimal128(38, s), s its fraction
//	number float64 can't hold      digits, when it has at most 38
//	(no exponent)                  digits; else utf8, the exact text
//	string                         utf8
//	RFC 3339 string                timestamp[us, UTC], only with
//	                               StreamSpec.Timestamps (else utf8)
//	object                         struct (fields ordered by name)
//	array                          list (elements joined)
//
//	widening (join)                result
//	null ⊔ T                       T
//	int64 ⊔ float64                float64
//	decimal(s1) ⊔ decimal(s2)      decimal(max s), while the largest
//	                               integer part and scale fit 38 digits;
//	                               else utf8
//	int64 ⊔ decimal(s)             decimal(s) if s ≤ 19, else utf8
//	struct ⊔ struct                struct with the union of fields, each
//	                               field joined
//	list ⊔ list                    list of the joined elements
//	any other two different types  utf8 (a bool meeting a number, a
//	                               timestamp meeting a plain string, an
//	                               object meeting an array or a scalar)
//
// An object with two field names equal but for case is JSON text where
// it is nested (readers of Parquet and Iceberg fold case, and nested
// fields are not renamed); at the top level such fields are columns with
// distinct names (see NamingRules).
//
// A utf8 column keeps each value's text: strings as they are, other
// values as their JSON text, numbers exactly as the document writes them
// (1e400 stays "1e400", at the top level and nested alike). Inside
// structs and lists the same tables apply to each child; nesting deeper
// than 8 levels below the column is JSON text, and so is every nested
// value of a stream with StreamSpec.NestedAsText. No number is rounded: a
// float64 column meeting a decimal becomes utf8 (exact text), and inside
// structs and lists a number float64 can't hold is utf8 (decimals are
// inferred for top-level fields only). The integer -0 is -0.0 in a
// float64 column and 0 in a decimal one. New columns are nullable and
// appended after the existing ones; a column absent from a batch is still
// in its output, all null. Payloads over MaxDocumentBytes are quarantined
// ReasonTooLarge, nesting over 64 levels ReasonTooDeep, and a document
// with a duplicate field, a field named with the reserved prefix
// "_openetl_" in any case (readers of Parquet and Iceberg may fold case),
// a field name holding a NUL byte (no Arrow field can be named so) or an
// empty nested field name (Iceberg has none, and nested fields are not
// renamed; under NestedAsText nested names are only text, and fine)
// ReasonParse. A
// delete with an empty payload is taken, with all source columns null.
//
// An empty object has no struct type of its own (a struct needs a field,
// and Parquet writes none without one): a part of a column's shape that
// has only seen empty objects is left out of its Arrow type — a struct
// field there is absent, a column with nothing else is held (see
// Config.Unsupported) — until an object there has a field. So are parts
// of a type the destination can't take (Config.Unsupported): a struct
// field that was only ever null, for a destination without the null type,
// is absent until it has a value. A row whose value has more than the
// column's Arrow type can hold (an empty object, or a list, where the
// type has nothing) keeps the column's whole value in Output.Held too, so
// nothing is lost.
//
// # Declared rows
//
// A declared stream (StreamSpec.Declared, from a source.FormatRow stream
// of the source's catalog) has a declared schema: each payload is one
// row, the concatenation of one entry per declared column in order
// (written by source.AppendRow):
//
//	uvarint(0)              null
//	uvarint(1)              unchanged: not sent by the source (a Postgres
//	                        unchanged TOAST value); the row is quarantined
//	                        ReasonUnchanged until a later version fills it
//	uvarint(len+2) ‖ bytes  the value in the source's text form
//
// A declared column name that is empty, holds a NUL byte or starts with
// "_openetl_" in any case makes New fail with ErrInvalidInput. Fewer or
// more entries than columns, or a malformed entry, is ReasonParse; a delete with an empty payload is taken with all columns
// null. Each value is coerced to its column's exact type; a value that
// does not parse as its type is ReasonTypeConflict, one that parses but
// does not fit (overflow, more fractional digits than the scale, more than
// 6 fractional digits of seconds, infinity, a zero date, NaN in a decimal)
// is ReasonOutOfRange: nothing is rounded or truncated, and it costs only
// its cell, which is held (Output.Held, with the reason) while the row
// lands with a null there. The row's output
// columns are the declared columns, all nullable (Column.Nullable is not
// enforced), then the metadata columns.
//
//	Postgres                         Arrow
//	int2 / int4 / int8               int16 / int32 / int64
//	float4 / float8 (NaN, ±Infinity) float32 / float64
//	numeric(p,s), p ≤ 38             decimal128(p,s)
//	numeric, numeric(p>38)           utf8: the exact text (no fixed scale
//	                                 holds every value; never float)
//	bool                             bool
//	text, varchar, char, bpchar,     utf8
//	name, citext
//	bytea (hex form \x..)            binary
//	date (BC dates allowed)          date32
//	time                             time64[us]
//	timetz                           utf8: the validated text; a time of day
//	                                 with an offset has no Arrow type, and
//	                                 moving it to UTC changes the time of day
//	timestamp                        timestamp[us]
//	timestamptz                      timestamp[us, UTC], converted from the
//	                                 value's offset
//	interval (default output style)  interval[month_day_nano]
//	uuid                             fixed_size_binary[16], big-endian
//	json, jsonb                      utf8: the JSON text (validated)
//	_T, T[] (one-dimensional)        list<T>; multidimensional arrays and
//	                                 explicit bounds are ReasonTypeConflict
//	enum('a','b',...) (how the       utf8, marked an enum (below)
//	Postgres source declares enums)
//	any other type (a user type      utf8: the source's text form
//	declared by name, inet, ...)
//
//	MySQL                            Arrow
//	tinyint / smallint / mediumint,  int8 / int16 / int32 / int64, or the
//	int / bigint [unsigned]          unsigned type of that width (bigint
//	                                 unsigned is uint64: max is max, not -1)
//	decimal(p,s) [unsigned]          decimal128(p,s) (p > 38: utf8 text)
//	float / double                   float32 / float64
//	bit(n)                           uint64 (the value as a decimal number)
//	bool, boolean                    bool
//	date / datetime / timestamp      date32 / timestamp[us] /
//	                                 timestamp[us, UTC] (the value in UTC)
//	time                             duration[us] (a span to ±838:59:59)
//	year                             int16
//	char, varchar, *text             utf8
//	binary, varbinary, *blob         binary (the bytes as sent)
//	json                             utf8
//	enum('a','b',...)                utf8, marked an enum (below)
//	set, any other type              utf8 (the text form, e.g. "a,b")
//
// An enum column (a declared type enum(...), in either type system) is
// utf8 whose Arrow field has the metadata LogicalTypeKey
// ("openetl.logical_type") = LogicalTypeEnum ("enum"); no other field of
// any stream has field metadata. The mark names no labels: a declaration
// that gains labels (ALTER TYPE ... ADD VALUE, seen at the source's next
// discovery) gives the same Arrow schema, and any valid UTF-8 value is
// taken, listed label or not (a label added while streaming arrives
// before any declaration lists it).
//
// # Schema policy
//
// Each stream has a policy (StreamSpec.Policy): PolicyEvolve (default)
// adds and widens; PolicyFreeze quarantines ReasonTypeConflict any
// document with a new field or a value that would change a column's type
// or shape; PolicyDiscard drops new fields. Output.SchemaChanges reports
// what a push did: added, widened, blocked, discarded. Policies, options
// and declared schemas are part of the exported State.
//
// # Policies
//
// A stream's Rules and Filter (StreamSpec) run on every push's output,
// before the metadata columns are added, columnar and per batch. They
// are configuration only: nothing of them is in State (a HashKey least
// of all), so they must be given to every New.
//
// The Filter is evaluated first, on the source's values under their
// source names (before any rule), with SQL's three-valued logic: a null,
// a missing column or a value its literal can't be compared with is
// unknown, and only a true row passes. Numbers compare by value across
// integer, float and decimal columns; strings by their UTF-8 bytes; bool
// with bool. Deletes always pass. A row that fails is dropped and counted
// in Output.Filtered, unless the stream is Merge: then an insert or
// update that fails becomes a delete (its op "delete", every column but
// Key null), so the destination holds exactly the rows that match. On a
// Merge document stream whose Filter names a column the stream has
// never had, a row that fails is quarantined ReasonFilterColumn instead:
// a misspelt column would otherwise delete every key the stream
// updates. Once a document carries the column, failing rows are deletes.
//
// Then the rules, by source column name: RuleExclude and RuleInclude
// leave columns out (a column left out and not read by the filter is not
// even built, nor held); RuleRename names a column from its new name
// (naming rules apply to that, and NamesFromState lists it under the new
// name); RuleNull nulls every value; RuleHash writes the HMAC-SHA-256 of
// each value under Key as 64 lowercase hex digits (text as its bytes,
// binary as its bytes, an integer as its decimal text); RuleMask keeps
// the last N characters and writes '*' for each other one;
// RuleTruncateChars keeps the first N characters, RuleTruncateBytes at
// most N bytes (text cut at a character boundary). Nulls stay null.
//
// New checks rules against a Declared stream's columns: a column it
// doesn't have, a type its rule can't take (hash: text, binary, uuid,
// integers; mask and truncate_chars: text; truncate_bytes: text and
// binary), a filter literal its column can't be compared with, two rules
// on one column, a rename to another column's name, and for Merge
// streams a Key column excluded, nulled, masked or truncated or not
// included: each an error wrapping ErrInvalidInput. On a JSON stream a
// rule applies whenever its column appears; a column under a hash, mask
// or truncation is utf8 from its first value (one already typed
// otherwise widens to utf8), so every value takes it; a field with the
// name a rename gives another column is left out.
//
// _openetl_id never depends on a value a rule removed or altered, so a
// reader can't confirm a guess at one by hashing it with the ID function
// below. It is computed from the raw key, seq and payload as below when
// no rule changes what they give away: for a record with a key, no Key
// column under a rule other than RuleRename; for one without, no rule
// at all (a Filter alone changes nothing). Otherwise the key or payload
// part is replaced:
//
//	0x03 ‖ HMAC-SHA-256(k, key)                    Key columns hashed (k: the first hashed Key column's Key), none otherwise changed
//	0x04 ‖ u32le(len(row)) ‖ row                   any other change: the row as delivered
//
// where row is, per column of the output with a non-null value, in
// order of the output names' bytes, u32le(len(name)) ‖ name ‖ value:
// text 0x01 ‖ u32le(len) ‖ UTF-8, binary 0x02 ‖ u32le(len) ‖ bytes, bool
// 0x03 ‖ 0 or 1, other scalars 0x04 ‖ u32le(width) ‖ little-endian
// value, structs 0x05 ‖ their non-null fields as above ‖ 0xff, lists
// 0x06 ‖ u32le(n) ‖ each element (0xfe when null). So the ID is a
// function of what the destination gets (the HMAC-ed key joins as the
// column does), deterministic across replays; two records of one seq
// that differ only in what the rules removed get one ID, as they are
// one row at the destination. Adding, removing or changing such a rule
// (or the hash key) changes the stream's IDs from then on, and so does,
// for the row form, a JSON column widening between two reads of a
// record (its values encode by their Arrow type).
//
// # Metadata columns
//
// After the stream's columns every row has
//
//	_openetl_id        utf8, the record version's ID (below)
//	_openetl_op        utf8, "insert", "update" or "delete" (op codes 1, 2, 3;
//	                   other codes are quarantined ReasonParse)
//	_openetl_seq       int64, the record's seq
//	_openetl_synced_at timestamp[us, UTC], the syncedAt given to Push
//
// _openetl_id is fixed forever: the 32 lowercase hex digits of the
// big-endian XXH3-128 (seed 0) of
//
//	u32le(len(stream)) ‖ stream ‖ 0x01 ‖ u32le(len(key)) ‖ key ‖ i64le(seq)      when key is non-empty
//	u32le(len(stream)) ‖ stream ‖ 0x02 ‖ u32le(len(payload)) ‖ payload ‖ i64le(seq)  when key is empty
//
// Test vectors (stream, key, payload, seq → ID), also in
// testdata/openetl_id_vectors.json, which the Go and Rust tests check (it
// adds one for a declared row payload):
//
//	"orders", "42", `{"id":42}`, 7  → 79f31045bf5ab5655cdd3b5607862643
//	"orders", "",   `{"id":42}`, 7  → 0a203a32206444d5c896477c05649d92
//	"orders", "42", `{"id":42,"note":"other payload, same key"}`, 7
//	                                → 79f31045bf5ab5655cdd3b5607862643
//	"orders", "42", `{"id":42}`, 8  → 612569515ae994aa12ef4bd465665389
//	"", "", "", 0                   → 0a92a762d88e9a8dd845fcbc05d3a4b7
//	"événements", "k", "", -1       → d449e4e163ce8019a82a6595809c16af
//
// # Lanes
//
// A row's lane is xxh3_64(key) % Lanes, or xxh3_64(payload) % Lanes when
// the key is empty. Output rows are grouped by lane, keeping input order
// within a lane (Output.LaneOffsets).
package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// Field metadata of the output record's declared columns (see Declared
// rows).
const (
	// LogicalTypeKey is the Arrow field metadata key marking a column's
	// logical type where its Arrow type does not say it. Only enum columns
	// have it.
	LogicalTypeKey = "openetl.logical_type"
	// LogicalTypeEnum is LogicalTypeKey's value on an enum column (utf8
	// holding the label): destinations may store it as a dictionary
	// (ClickHouse LowCardinality(String)).
	LogicalTypeEnum = "enum"
)

// Config configures an Engine.
type Config struct {
	// Lanes is the number of writer lanes rows are routed to by key group
	// (a hash of the primary key, or of the payload for unkeyed streams).
	// Default 1.
	Lanes int
	// MaxDocumentBytes is the largest payload accepted; larger ones are
	// quarantined with ReasonTooLarge. Default 16 MiB.
	MaxDocumentBytes int
	// State is an engine state exported by State, from the checkpoint the
	// attempt resumes from; nil for a new pipeline.
	State []byte
	// Streams configures streams: the declared columns of FormatRow
	// streams (required for them: without a spec a stream is JSON) and
	// schema policies. A spec overrides what State says about the
	// stream's policy and declared columns; inferred columns are kept.
	Streams []StreamSpec
	// Unsupported lists the Arrow type classes the destination can't
	// take: int, uint, float32, float64, decimal, bool, utf8, binary,
	// fixed_size_binary, date, time, duration, timestamp (no zone),
	// timestamptz, interval, list, struct, null. Columns of these types,
	// or of lists of them, are left out of Output.Record and their values
	// returned in Output.Held; inside a document's nested column only the
	// part of that type is left out (see Documents). Default none.
	Unsupported []string
	// Naming is the destination's naming rules; nil passes names through
	// unchanged. Names once given never change (they are in State), even
	// under other rules later.
	Naming *NamingRules
	// Tables lists streams given their destination names by New, in this
	// order, before any push: the table name (with Naming) and, for a
	// FormatRow stream of Streams, its columns' names. Their names then
	// do not depend on which stream's rows come first, and can be read
	// from State (NamesFromState) before the first push. Names a stream
	// already has in State are kept. Default none: names are given at
	// each stream's first push.
	Tables []string
}

// Case is how NamingRules fold letters.
type Case string

// The case foldings.
const (
	CaseKeep  Case = ""
	CaseLower Case = "lower"
	CaseUpper Case = "upper"
)

// NamingRules describe the names a destination accepts. Table names are
// given from stream names and column names from source column names: the
// case is folded, characters outside [A-Za-z0-9_] become '_' and a leading
// digit gets a '_' in front (Simple), a reserved word gets a '_' appended,
// the name is cut to MaxLength bytes, and a name already given (compared
// case-insensitively: to another stream's table, or another column of the
// stream, or a metadata column) gets the first free suffix of _2, _3, ...
// Names are given in a deterministic order (columns in schema order,
// tables in first-push order). Metadata columns keep their names; nested
// struct fields are not renamed.
//
// Without rules (Config.Naming nil) tables keep their stream names and
// columns their source names, except that a column name equal to an
// earlier one but for case gets the suffix too (Name, name, NAME are
// written Name, name_2, NAME_3: readers of Parquet and Iceberg fold
// case), and an empty name is "_". These names are given once and kept
// in State like any others.
type NamingRules struct {
	// MaxLength is the longest name in bytes (sink.Capabilities'
	// MaxIdentifier); 0 for no limit, else at least 8.
	MaxLength int
	// Case folds letters; default CaseKeep.
	Case Case
	// Simple allows only ASCII letters, digits and '_', not leading with
	// a digit.
	Simple bool
	// Reserved lists words the destination reserves (case-insensitive).
	Reserved []string
}

// StreamNames is the destination names given to one stream.
type StreamNames struct {
	// Table is the destination table name.
	Table string
	// Columns maps source column names to destination column names.
	Columns map[string]string
}

// NamesFromState returns the destination names recorded in an engine
// state (from Engine.State), by stream name; streams that were never
// given names (no NamingRules) are absent.
func NamesFromState(state []byte) (map[string]StreamNames, error) {
	var st struct {
		Streams []struct {
			Name  string `json:"name"`
			Names *struct {
				Table   *string     `json:"table"`
				Columns [][2]string `json:"columns"`
			} `json:"names"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrState, err)
	}
	out := map[string]StreamNames{}
	for _, s := range st.Streams {
		if s.Names == nil {
			continue
		}
		n := StreamNames{Columns: make(map[string]string, len(s.Names.Columns))}
		if s.Names.Table != nil {
			n.Table = *s.Names.Table
		}
		for _, c := range s.Names.Columns {
			n.Columns[c[0]] = c[1]
		}
		out[s.Name] = n
	}
	return out, nil
}

// Policy is a stream's schema policy: what a record that would change the
// schema does.
type Policy string

// The schema policies.
const (
	// PolicyEvolve adds new columns and widens types (the default).
	PolicyEvolve Policy = "evolve"
	// PolicyFreeze keeps the schema: a document with a new field or a
	// value that would widen a column is quarantined ReasonTypeConflict,
	// reported as a ChangeBlocked.
	PolicyFreeze Policy = "freeze"
	// PolicyDiscard drops new fields from documents (ChangeDiscarded);
	// existing columns still widen.
	PolicyDiscard Policy = "discard"
)

// StreamSpec configures one stream.
type StreamSpec struct {
	Name string
	// Declared says the stream's payloads are rows of Columns (a
	// source.FormatRow stream, encoded by source.AppendRow); false: JSON
	// documents. Default false.
	Declared bool
	// Types is the type system of Columns: "postgres" (default) or
	// "mysql" (source.TypesPostgres, source.TypesMySQL).
	Types string
	// Columns is the declared schema of a Declared stream, in payload
	// order.
	Columns []Column
	// Policy is the schema policy; default PolicyEvolve.
	Policy Policy
	// NestedAsText keeps a JSON stream's nested objects and arrays as
	// JSON text (utf8) instead of structs and lists. Default false.
	NestedAsText bool
	// Timestamps types a JSON stream's RFC 3339 strings as
	// timestamp[us, UTC]. Default false.
	Timestamps bool
	// Keyed says the stream has a primary key: a record without a key is
	// quarantined ReasonMissingKey. Default false.
	Keyed bool
	// Key names the primary key's columns. In a Keyed stream a row
	// whose key column is null, or a document without a non-null value
	// for each Key field, is quarantined ReasonMissingKey (a delete
	// without a document excepted): it can't be merged or deleted by
	// key. For a Declared stream a value of a key column that its type
	// can't hold quarantines its row (ReasonOutOfRange) instead of being
	// held; for any stream with Rules or a Filter, Key names the columns
	// Merge keeps. Default none.
	Key []string
	// Rules are the stream's column policies (see Policies in the
	// package doc), applied in the engine to every push's output. They
	// are configuration only: never in State.
	Rules []Rule
	// Filter keeps only the rows for which it is true (see Policies);
	// nil keeps every row.
	Filter *Cond
	// Merge says the stream is merged by key at the destination: an
	// insert or update failing Filter becomes a delete of its key (its
	// columns but Key null) instead of being dropped, and Rules may not
	// exclude, null, mask or truncate a Key column.
	Merge bool
}

// RuleKind is what a Rule does.
type RuleKind string

// The column policies.
const (
	RuleExclude       RuleKind = "exclude"        // leave Column out
	RuleInclude       RuleKind = "include"        // keep only Columns (and what other rules name)
	RuleRename        RuleKind = "rename"         // name Column To at the destination
	RuleNull          RuleKind = "null"           // every value of Column null
	RuleHash          RuleKind = "hash"           // HMAC-SHA-256 of each value under Key, as 64 hex digits
	RuleMask          RuleKind = "mask"           // keep the last N characters, each other one '*'
	RuleTruncateChars RuleKind = "truncate_chars" // keep the first N characters
	RuleTruncateBytes RuleKind = "truncate_bytes" // keep at most N bytes (text cut at a character boundary)
)

// Rule is one column policy of a stream. Columns are named as at the
// source (before any rename).
type Rule struct {
	Kind    RuleKind
	Column  string   // every kind but RuleInclude
	Columns []string // RuleInclude
	To      string   // RuleRename
	N       int      // RuleMask, RuleTruncateChars, RuleTruncateBytes
	Key     HashKey  // RuleHash
}

// HashKey is the secret key of a RuleHash. It prints as
// "HashKey(redacted)" in every fmt verb, and the engine keeps it out of
// its State and its messages.
type HashKey []byte

// String implements fmt.Stringer without showing the key.
func (HashKey) String() string { return "HashKey(redacted)" }

// GoString implements fmt.GoStringer without showing the key.
func (HashKey) GoString() string { return "HashKey(redacted)" }

// Format implements fmt.Formatter without showing the key.
func (HashKey) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte("HashKey(redacted)")) }

// CondOp is a Cond's operator.
type CondOp string

// The operators of a row filter.
const (
	OpEq      CondOp = "eq"
	OpNe      CondOp = "ne"
	OpLt      CondOp = "lt"
	OpLe      CondOp = "le"
	OpGt      CondOp = "gt"
	OpGe      CondOp = "ge"
	OpIsNull  CondOp = "is_null"
	OpNotNull CondOp = "not_null"
	OpIn      CondOp = "in"
	OpAnd     CondOp = "and"
	OpOr      CondOp = "or"
	OpNot     CondOp = "not"
)

// Cond is a row condition: a comparison of Column with Value (int64,
// float64, string or bool), IS NULL, IN Values, or AND/OR/NOT of Args.
// Its logic is SQL's: a null, a missing column or a value of a type the
// literal can't be compared with is unknown, and a row passes only when
// its condition is true.
type Cond struct {
	Op     CondOp
	Column string
	Value  any
	Values []any
	Args   []Cond
}

// Column is one declared column of a Declared stream: a source.Column
// (Column(c) converts one).
type Column struct {
	// Name is the column's name at the source.
	Name string
	// Type is the source's type name with modifiers ("numeric(10,2)",
	// "bigint unsigned"), mapped to Arrow as the package doc says.
	Type string
	// Nullable is not enforced: every declared output column is
	// nullable.
	Nullable bool
}

// ChangeKind is the kind of a SchemaChange.
type ChangeKind string

// The schema outcomes a push reports.
const (
	ChangeAdded     ChangeKind = "added"     // a new column (To is its type)
	ChangeWidened   ChangeKind = "widened"   // a column's type widened From → To
	ChangeBlocked   ChangeKind = "blocked"   // PolicyFreeze refused a new column or widening
	ChangeDiscarded ChangeKind = "discarded" // PolicyDiscard dropped a new field
)

// SchemaChange is one schema outcome of a push, for the runner's
// schema.changed (added, widened) and schema.blocked (blocked, discarded)
// events. Types are the engine's inferred type names: null, bool, int64,
// float64, utf8.
type SchemaChange struct {
	Stream string     `json:"stream"`
	Column string     `json:"column"`
	Kind   ChangeKind `json:"kind"`
	From   string     `json:"from"`
	To     string     `json:"to"`
}

// Reason is why a record was quarantined. The set is fixed and documented;
// its string values are written in quarantine files.
type Reason string

// The reasons a record is quarantined.
const (
	ReasonParse        Reason = "parse_error"   // not a JSON object, a malformed row payload, an unknown op
	ReasonTypeConflict Reason = "type_conflict" // a declared value that isn't its type; a change a frozen schema refuses
	ReasonOutOfRange   Reason = "out_of_range"  // a declared value its type can't hold (overflow, scale, infinity)
	ReasonMissingKey   Reason = "missing_key"   // a record without a key, or with a null Key column, in a StreamSpec.Keyed stream
	ReasonTooLarge     Reason = "too_large"     // payload over MaxDocumentBytes
	ReasonTooDeep      Reason = "too_deep"      // nesting over the limit
	// ReasonUnchanged: a declared row with a value the source did not
	// send (a Postgres unchanged TOAST value, source.AppendRowUnchanged);
	// a later version fills it from the previous row version.
	ReasonUnchanged Reason = "unchanged_value"
	// ReasonFilterColumn: a row of a Merge stream that fails a Filter
	// naming a column the stream has never had (a misspelt name, or a
	// field no document has carried yet), set aside instead of becoming
	// a delete of its key.
	ReasonFilterColumn Reason = "filter_column"
)

// Quarantined describes one record the engine set aside.
type Quarantined struct {
	Row    int    // index of the record in the RawBatch
	Reason Reason // why
	Detail string // a human-readable explanation, without row data
}

// Output is the result of one Push.
type Output struct {
	// Record holds the rows taken, with the stream's columns followed by
	// the metadata columns, ordered by lane; nil when every row was
	// quarantined. The caller owns it and must Release it.
	Record arrow.RecordBatch
	// LaneOffsets has Lanes+1 entries: the rows of lane i are
	// Record rows [LaneOffsets[i], LaneOffsets[i+1]).
	LaneOffsets []int
	// Quarantined lists the rows set aside, in row order.
	Quarantined []Quarantined
	// SchemaChanges lists the push's schema outcomes; nil when none.
	SchemaChanges []SchemaChange
	// Held lists the values held back, by input row and then column, for
	// the runner to keep under _held/ with the row's key; nil when none:
	// the values of columns the destination can't take
	// (Config.Unsupported), and the cells of declared rows whose value
	// its column's Arrow type can't hold (Held.Reason ReasonOutOfRange:
	// Postgres time 24:00:00, a timestamp past Arrow's microsecond range,
	// infinity, a MySQL zero date), which cost only the cell: the row is
	// in Record with a null there. A row with a value that is not of its
	// type (held column or not) is quarantined like any other.
	Held []Held
	// Filtered is the number of rows the stream's Filter dropped: the
	// batch's rows are Record's, Quarantined's and these.
	Filtered int
	// Table is the stream's destination table name under NamingRules
	// (also in the record schema's metadata under TableMetadataKey); the
	// stream name when there are none.
	Table string
}

// Held is one value held back: the destination can't take its column's
// type, or its column's Arrow type can't hold it (Reason).
type Held struct {
	Row    int    // index of the record in the RawBatch (its key is there)
	Column string // the column's destination name
	// Value is the value's text: the source's text form for declared
	// rows; for documents a string's content or another value's JSON text.
	Value []byte
	// Reason is empty for a value of a column the destination can't take
	// (Config.Unsupported), and ReasonOutOfRange for a cell held on its
	// own; Detail then says why, without row data.
	Reason Reason
	Detail string
}

// Releaser is implemented by engines (the Rust engine's) that can turn
// held values back into Arrow once the destination takes their type.
type Releaser interface {
	// Release types held values of one column of a stream (by its
	// destination name), in order, as the column's current type. A value
	// the type can't take is an error wrapping ErrInvalidInput. The caller
	// releases the array.
	Release(stream, column string, values [][]byte) (arrow.Array, error)
}

// TableMetadataKey is the Arrow schema metadata key of an output record's
// destination table name, set when NamingRules are in force.
const TableMetadataKey = "openetl.table"

// Engine normalizes raw batches. An Engine is not safe for concurrent use:
// the runner keeps one per engine lane. Close must be called.
type Engine interface {
	// Push turns one raw batch into Arrow, widening the stream's schema as
	// needed. Every row of b is either in Output.Record or in
	// Output.Quarantined, never both. b is not retained.
	Push(b *RawBatch, syncedAt time.Time) (Output, error)
	// State exports what must survive an attempt (each stream's schema),
	// for the checkpoint record.
	State() ([]byte, error)
	// Close frees the engine. Further calls fail with ErrClosed.
	Close() error
}

// RawBatch is a columnar buffer of one stream's records, reused across
// batches with Reset so that appending a record does not allocate in
// steady state.
type RawBatch struct {
	Stream  string
	ops     []uint8
	seqs    []int64
	keyOffs []int32 // len = rows+1
	keys    []byte
	payOffs []int32 // len = rows+1
	payload []byte
}

// Append adds one record, copying key and payload. op is the record's
// operation, a source.Op's value (1 insert, 2 update, 3 delete; another
// value is quarantined ReasonParse).
func (b *RawBatch) Append(op uint8, seq int64, key, payload []byte) {
	if len(b.keyOffs) == 0 {
		b.keyOffs = append(b.keyOffs, 0)
		b.payOffs = append(b.payOffs, 0)
	}
	b.ops = append(b.ops, op)
	b.seqs = append(b.seqs, seq)
	b.keys = append(b.keys, key...)
	b.keyOffs = append(b.keyOffs, int32(len(b.keys)))
	b.payload = append(b.payload, payload...)
	b.payOffs = append(b.payOffs, int32(len(b.payload)))
}

// Grow makes room for rows more records holding keyBytes of keys and
// payloadBytes of payloads, so that appending them does not reallocate. A
// batch that starts empty and doubles its way up to a full batch copies
// its bytes about twice over; sizing it once avoids that.
func (b *RawBatch) Grow(rows, keyBytes, payloadBytes int) {
	if rows <= 0 && keyBytes <= 0 && payloadBytes <= 0 {
		return
	}
	rows = max(rows, 0)
	b.ops = slices.Grow(b.ops, rows)
	b.seqs = slices.Grow(b.seqs, rows)
	b.keyOffs = slices.Grow(b.keyOffs, rows+1)
	b.payOffs = slices.Grow(b.payOffs, rows+1)
	b.keys = slices.Grow(b.keys, max(keyBytes, 0))
	b.payload = slices.Grow(b.payload, max(payloadBytes, 0))
}

// KeyBytes returns the bytes of keys held.
func (b *RawBatch) KeyBytes() int { return len(b.keys) }

// Len returns the number of records.
func (b *RawBatch) Len() int { return len(b.ops) }

// Bytes returns the bytes of keys and payloads held.
func (b *RawBatch) Bytes() int { return len(b.keys) + len(b.payload) }

// Row returns record i's fields. The slices alias the batch's memory.
func (b *RawBatch) Row(i int) (op uint8, seq int64, key, payload []byte) {
	return b.ops[i], b.seqs[i], b.keys[b.keyOffs[i]:b.keyOffs[i+1]], b.payload[b.payOffs[i]:b.payOffs[i+1]]
}

// Reset empties the batch, keeping its memory.
func (b *RawBatch) Reset() {
	b.ops, b.seqs, b.keys, b.payload = b.ops[:0], b.seqs[:0], b.keys[:0], b.payload[:0]
	b.keyOffs, b.payOffs = b.keyOffs[:0], b.payOffs[:0]
}

// abiVersion is the engine library ABI the cgo layer is written against
// (OPENETL_ENGINE_ABI_VERSION in include/openetl_engine.h): its call to
// openetl_engine_abi_v1 makes a library of another ABI a link error, and
// header_test.go checks that the versions agree.
const abiVersion = 1

// Errors returned by engines. Rust status codes map onto these in one
// table (cgo.go).
var (
	// ErrUnavailable is returned by New when the binary was built without
	// cgo or for a platform without a prebuilt engine library.
	ErrUnavailable = errors.New("engine: not available in this build: the Rust engine needs CGO_ENABLED=1 on linux/amd64 (or a library built with make engine)")
	// ErrClosed is returned by calls on a closed engine.
	ErrClosed = errors.New("engine: closed")
	// ErrInvalidInput is wrapped when a batch or config is malformed.
	ErrInvalidInput = errors.New("engine: invalid input")
	// ErrState is wrapped when a saved state cannot be loaded.
	ErrState = errors.New("engine: invalid saved state")
	// ErrPanic is wrapped when the Rust side panicked; the engine is
	// unusable afterwards and must be closed.
	ErrPanic = errors.New("engine: internal panic")
	// ErrInternal is wrapped for any other engine failure.
	ErrInternal = errors.New("engine: internal error")
)

package etl

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/openetl/etl/engine"
)

// ColumnRule is a declarative column policy of a stream, run inside the
// engine on every batch before any Go code sees the rows
// (Builder.Columns). Make one with Exclude, Include, Rename, SetNull,
// HashHMAC, Mask, TruncateChars or TruncateBytes. Rules name columns as
// the source does (before any Rename); a column takes at most one of
// Exclude, SetNull, HashHMAC, Mask and the truncations.
//
// The record ID (_openetl_id) never depends on a value a rule removed
// or altered: a reader who can guess an excluded, masked or hashed value
// can't confirm the guess against _openetl_id. A record with a key
// whose key columns no rule changes (Rename aside) keeps the ID of the
// raw key and seq, the same with or without policies. When key columns
// are hashed, the ID hashes the raw key's HMAC under the hash key
// instead; when a key column is otherwise changed (append streams), and
// for every record without a key on a stream with a column rule, it
// hashes the row as delivered (package
// engine has the definition). Either is deterministic, so replays get
// the same IDs, but adding or changing such a rule (or the hash key)
// changes the stream's IDs from then on: a destination that skips rows
// by ID takes records read again across that change as new. Two records
// of a keyless stream with one seq that differ only in what the rules
// removed get one ID. The quarantine (_quarantine/) and held values
// (_held/) keep the source's raw rows, before any policy.
type ColumnRule struct {
	rules []engine.Rule
	err   error
}

// Exclude leaves the columns out of what the stream delivers.
func Exclude(columns ...string) ColumnRule {
	var r ColumnRule
	for _, c := range columns {
		r.rules = append(r.rules, engine.Rule{Kind: engine.RuleExclude, Column: c})
	}
	return r
}

// Include delivers only the columns listed (by several Include rules:
// any of them). On a JSON stream a field not listed is left out whenever
// it appears.
func Include(columns ...string) ColumnRule {
	return ColumnRule{rules: []engine.Rule{{Kind: engine.RuleInclude, Columns: slices.Clone(columns)}}}
}

// Rename delivers column under the name to: the destination's naming
// rules apply to to, and the stream's key and declared columns
// (sink.StreamSpec) carry the new name. A declared stream with a column
// named to already is a Build error; a JSON stream's own field named to
// is left out.
func Rename(column, to string) ColumnRule {
	return ColumnRule{rules: []engine.Rule{{Kind: engine.RuleRename, Column: column, To: to}}}
}

// SetNull delivers every value of column as null (the column keeps its
// type).
func SetNull(column string) ColumnRule {
	return ColumnRule{rules: []engine.Rule{{Kind: engine.RuleNull, Column: column}}}
}

// HashHMAC replaces each value of column with its HMAC-SHA-256 under key,
// as 64 lowercase hex digits (a utf8 column): equal values hash equal, so
// the column still joins and groups, and without the key no value can be
// recovered or confirmed. Text is hashed as its UTF-8 bytes, binary as
// its bytes, an integer as its decimal text (so 42 and "42" hash alike);
// on a JSON stream the column is text (every value's JSON text, numbers
// as written). Nulls stay null. A declared column of another type (float,
// decimal, date, ...) is a Build error. key must not be empty; it is
// never saved in a checkpoint, logged or shown (engine.HashKey).
func HashHMAC(column string, key []byte) ColumnRule {
	r := ColumnRule{rules: []engine.Rule{{Kind: engine.RuleHash, Column: column, Key: engine.HashKey(slices.Clone(key))}}}
	if len(key) == 0 {
		r.err = fmt.Errorf("hash of column %q: empty key", column)
	}
	return r
}

// Mask keeps the last keep characters of each value of a text column and
// replaces every other character with '*' (so the length in characters is
// kept): Mask("card", 4) makes "4242424242424242" "************4242".
func Mask(column string, keep int) ColumnRule {
	return nRule(engine.RuleMask, column, keep)
}

// TruncateChars keeps the first n characters of each value of a text
// column.
func TruncateChars(column string, n int) ColumnRule {
	return nRule(engine.RuleTruncateChars, column, n)
}

// TruncateBytes keeps at most n bytes of each value of a text or binary
// column; text is cut at a character boundary, so it stays valid UTF-8.
func TruncateBytes(column string, n int) ColumnRule {
	return nRule(engine.RuleTruncateBytes, column, n)
}

func nRule(k engine.RuleKind, column string, n int) ColumnRule {
	r := ColumnRule{rules: []engine.Rule{{Kind: k, Column: column, N: n}}}
	if n < 0 {
		r.err = fmt.Errorf("%s of column %q: %d is negative", k, column, n)
	}
	return r
}

// Condition is a typed row condition for Builder.Filter, made with Eq,
// Ne, Lt, Le, Gt, Ge, In, IsNull, IsNotNull, And, Or and Not. Its logic
// is SQL's: a comparison with a null value, a column the row doesn't
// have, or a value of a type the literal can't be compared with (a
// string with a number) is unknown, NOT unknown is unknown, and a row is
// kept only when its condition is true. Numbers compare by value across
// integer, float and decimal columns; strings by their UTF-8 bytes. A
// declared column the stream doesn't have, or of a type the literal
// can't be compared with, is a Build error.
type Condition struct {
	c   engine.Cond
	err error
}

// Literal is the type of a value a Condition compares with.
type Literal interface {
	~int | ~int32 | ~int64 | ~float64 | ~string | ~bool
}

func lit[T Literal](v T) any {
	switch x := reflect.ValueOf(v); x.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		return x.Int()
	case reflect.Float64:
		return x.Float()
	case reflect.String:
		return x.String()
	default:
		return x.Bool()
	}
}

func cmpCond[T Literal](op engine.CondOp, column string, v T) Condition {
	return Condition{c: engine.Cond{Op: op, Column: column, Value: lit(v)}}
}

// Eq is column = v.
func Eq[T Literal](column string, v T) Condition { return cmpCond(engine.OpEq, column, v) }

// Ne is column != v.
func Ne[T Literal](column string, v T) Condition { return cmpCond(engine.OpNe, column, v) }

// Lt is column < v.
func Lt[T Literal](column string, v T) Condition { return cmpCond(engine.OpLt, column, v) }

// Le is column <= v.
func Le[T Literal](column string, v T) Condition { return cmpCond(engine.OpLe, column, v) }

// Gt is column > v.
func Gt[T Literal](column string, v T) Condition { return cmpCond(engine.OpGt, column, v) }

// Ge is column >= v.
func Ge[T Literal](column string, v T) Condition { return cmpCond(engine.OpGe, column, v) }

// In is column IN (vs...).
func In[T Literal](column string, vs ...T) Condition {
	c := engine.Cond{Op: engine.OpIn, Column: column, Values: make([]any, 0, len(vs))}
	for _, v := range vs {
		c.Values = append(c.Values, lit(v))
	}
	return Condition{c: c}
}

// IsNull is column IS NULL (true too for a column the row doesn't have).
func IsNull(column string) Condition {
	return Condition{c: engine.Cond{Op: engine.OpIsNull, Column: column}}
}

// IsNotNull is column IS NOT NULL.
func IsNotNull(column string) Condition {
	return Condition{c: engine.Cond{Op: engine.OpNotNull, Column: column}}
}

// And is true when every condition is (and for none).
func And(cs ...Condition) Condition { return group(engine.OpAnd, cs) }

// Or is true when any condition is (false for none).
func Or(cs ...Condition) Condition { return group(engine.OpOr, cs) }

// Not negates c (unknown stays unknown).
func Not(c Condition) Condition { return group(engine.OpNot, []Condition{c}) }

func group(op engine.CondOp, cs []Condition) Condition {
	out := Condition{c: engine.Cond{Op: op, Args: make([]engine.Cond, 0, len(cs))}}
	var errs []error
	for _, c := range cs {
		out.c.Args = append(out.c.Args, c.c)
		errs = append(errs, c.err)
	}
	out.err = errors.Join(errs...)
	return out
}

// Columns sets column policies of stream (see ColumnRule), run inside the
// engine on every batch, before any transform (Builder.Transform) and
// before the rows reach Go: an excluded, hashed or masked value never
// leaves the engine as a value, nor shapes _openetl_id (ColumnRule says
// how the ID is derived then). Several calls
// add rules. Build checks them against
// the source's catalog: a declared (SQL) stream's column must exist and
// be of a type its rule takes; on a merged stream (Mode Merge) the key
// columns can't be excluded, nulled, masked or truncated (rows would lose
// their key, or two keys become one) but can be hashed or renamed. A
// JSON stream's columns are known only as documents arrive: a rule
// applies to its column whenever it appears, and a column under
// HashHMAC, Mask or a truncation is text.
func (b *Builder) Columns(stream string, rules ...ColumnRule) *Builder {
	if stream == "" || len(rules) == 0 {
		b.errs = append(b.errs, errors.New("columns: a stream name and at least one rule are needed"))
		return b
	}
	if b.cfg.Rules == nil {
		b.cfg.Rules = map[string][]engine.Rule{}
	}
	for _, r := range rules {
		if r.err != nil {
			b.errs = append(b.errs, fmt.Errorf("columns: stream %q: %w", stream, r.err))
		}
		if len(r.rules) == 0 {
			b.errs = append(b.errs, fmt.Errorf("columns: stream %q: an empty rule (the zero ColumnRule, or Exclude of no column)", stream))
		}
		b.cfg.Rules[stream] = append(b.cfg.Rules[stream], r.rules...)
	}
	return b
}

// Filter keeps only the rows of stream for which c is true, evaluated
// inside the engine on the source's values (before column policies and
// any transform). A dropped row is counted as filtered (Result, Status,
// the openetl.rows.filtered metric), not quarantined: per stream, read =
// written + filtered + quarantined. Deletes always pass. On a stream
// merged by key (Mode Merge) an insert or update that fails c is written
// as a delete of its key instead (its other columns null), so a row that
// stops matching leaves the table; those rows are counted as written. A
// destination that keeps soft deletes (a _openetl_deleted column) keeps
// such a delete as a tombstone row even for a key it never held, so use
// hard deletes where most rows fail the filter. A column the filter names
// that a row lacks is unknown (the row fails). On an undeclared (JSON)
// merge stream Build can't check the names, so while the stream has
// never had a column the filter names (a misspelt column, or a Rename's
// new name instead of the source's), a row that fails is quarantined
// with reason "filter_column" rather than written as a delete: a typo
// sets the changes aside instead of emptying the table. Once a row
// carries the column, failing rows are deletes. One filter per stream:
// combine conditions with And and Or.
func (b *Builder) Filter(stream string, c Condition) *Builder {
	if stream == "" {
		b.errs = append(b.errs, errors.New("filter: no stream name"))
		return b
	}
	if c.c.Op == "" {
		b.errs = append(b.errs, fmt.Errorf("filter: stream %q: an empty condition (the zero Condition)", stream))
		return b
	}
	if c.err != nil {
		b.errs = append(b.errs, fmt.Errorf("filter: stream %q: %w", stream, c.err))
	}
	if b.cfg.Filters == nil {
		b.cfg.Filters = map[string]*engine.Cond{}
	}
	if b.cfg.Filters[stream] != nil {
		b.errs = append(b.errs, fmt.Errorf("filter: stream %q has one already (combine conditions with And)", stream))
		return b
	}
	cc := c.c
	b.cfg.Filters[stream] = &cc
	return b
}

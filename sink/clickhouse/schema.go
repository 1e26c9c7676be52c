package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/apache/arrow-go/v18/arrow"
)

// tableSchema is what this process knows of a table and its staging
// table: their columns' ClickHouse types by name.
type tableSchema struct {
	target map[string]string
	stage  map[string]string
	// order is the staging table's columns in the order they were
	// learned: the column list of an apply.
	order []string
}

// layout is how a batch of one Arrow schema is written: one column per
// field, then _openetl_deleted (merge tables) and _openetl_batch.
type layout struct {
	schema *arrow.Schema
	cols   []column // per field
	key    []bool   // per field: a merge key column
	merge  bool
	insert string // INSERT INTO stage (...) for PrepareBatch
}

// layoutFor maps schema to the table's columns, creating the table (a
// merge table ordered by key when key is not empty) and
// its staging table on first use and adding the schema's new columns to
// both (ALTER TABLE ... ADD COLUMN, the table first). A column whose type
// the schema changed is an error: type changes are not applied.
func (d *Destination) layoutFor(ctx context.Context, table string, key []string, schema *arrow.Schema) (*layout, error) {
	cfg := d.tables[table]
	lay := &layout{schema: schema, merge: len(key) > 0}
	keys := make(map[string]bool, len(key))
	for _, k := range key {
		keys[k] = true
	}
	for _, f := range schema.Fields() {
		t, err := mapType(d.features, f, keys[f.Name])
		if err != nil {
			return nil, fmt.Errorf("clickhouse: table %q: %w", table, err)
		}
		lay.cols = append(lay.cols, column{name: f.Name, typ: t})
		lay.key = append(lay.key, keys[f.Name])
		delete(keys, f.Name)
	}
	all := slices.Clone(lay.cols)
	if lay.merge {
		all = append(all, column{name: colDeleted, typ: colType{ch: "UInt8", kind: kUint8}})
	}
	all = append(all, column{name: colBatch, typ: colType{ch: "UInt64", kind: kUint64}})

	d.mu.Lock()
	defer d.mu.Unlock()
	ts := d.schemas[table]
	if ts == nil {
		if len(keys) > 0 && lay.merge {
			missing := make([]string, 0, len(keys))
			for k := range keys {
				missing = append(missing, k)
			}
			slices.Sort(missing)
			return nil, fmt.Errorf("clickhouse: table %q: key columns %v are not in the stream's schema", table, missing)
		}
		qs := []string{
			createTarget(d.db, table, all, key, cfg.OrderBy, d.features, d.zkPath),
			createStage(d.db, table, all, d.zkPath),
		}
		if d.cluster != "" {
			qs = append(qs, createDistributed(d.db, table, d.cluster, d.shardBy[table]))
		}
		for _, q := range qs {
			if err := d.execAll(d.ddlContext(ctx), q); err != nil {
				return nil, fmt.Errorf("clickhouse: create table %q: %w", table, err)
			}
		}
		var err error
		if ts, err = d.loadSchema(ctx, table); err != nil {
			return nil, err
		}
		d.schemas[table] = ts
	}
	for i, c := range all {
		have, ok := ts.target[c.name]
		if ok && normType(have) != normType(c.typ.ch) {
			switch {
			case normType(have) == normType("Nullable("+c.typ.ch+")"):
				// The table's column is Nullable (created from a nullable
				// field): it takes this field's values as they are.
				c.typ.nullable, c.typ.ch = true, have
				all[i] = c
				lay.cols[i] = c
			case lowCardinalityOnly(have, c.typ.ch):
				// The same strings, one side LowCardinality (an enum
				// declared after the column was made, or the other way
				// round): the table's column takes them as it is.
				c.typ.ch = have
				c.typ.nullable = strings.Contains(have, "Nullable(")
				all[i] = c
				lay.cols[i] = c
			case legacyUUID(have, c.typ):
				// A table created before uuids were UUID: keep writing
				// the 16 bytes into its FixedString(16).
				c.typ.kind, c.typ.ch = kFixed, have
				c.typ.nullable = strings.HasPrefix(have, "Nullable(")
				all[i] = c
				lay.cols[i] = c
			case i < len(lay.key) && lay.key[i]:
				return nil, fmt.Errorf("clickhouse: table %q: key column %q is %s on the server, and the stream now needs %s: ClickHouse can't change a key column's type",
					table, c.name, have, c.typ.ch)
			case widens(have, c.typ.ch):
				if err := d.modifyColumn(ctx, table, c); err != nil {
					return nil, err
				}
				ts.target[c.name], ts.stage[c.name] = c.typ.ch, c.typ.ch
				d.log.Info("clickhouse: column widened", "table", table, "column", c.name, "from", have, "to", c.typ.ch)
			default:
				return nil, fmt.Errorf("clickhouse: table %q: column %q is %s on the server, and the stream now needs %s: not a widening ClickHouse can apply in place; the stream is held back until the column is altered by hand",
					table, c.name, have, c.typ.ch)
			}
		}
		if !ok {
			if err := d.addColumn(ctx, table, c); err != nil {
				return nil, err
			}
			if err := d.alterDistributed(ctx, table, addColumn(d.db, table+distSuffix, c, d.features)); err != nil {
				return nil, err
			}
			ts.target[c.name] = c.typ.ch
			d.log.Info("clickhouse: column added", "table", table, "column", c.name, "type", c.typ.ch)
		}
		if _, ok := ts.stage[c.name]; !ok {
			if err := d.addColumn(ctx, stageName(table), c); err != nil {
				return nil, err
			}
			ts.stage[c.name] = c.typ.ch
			ts.order = append(ts.order, c.name)
		}
	}
	names := make([]string, 0, len(all)+len(stageOnly))
	for _, c := range all {
		names = append(names, c.name)
	}
	for _, c := range stageOnly {
		names = append(names, c.name)
	}
	lay.insert = "INSERT INTO " + qualified(d.db, stageName(table)) + " (" + nameList(names) + ")"
	return lay, nil
}

// ddlContext is ctx with the settings that statements creating or
// altering columns need: on servers where LowCardinality is experimental
// (18.12 to 19.0), allow_experimental_low_cardinality_type.
func (d *Destination) ddlContext(ctx context.Context) context.Context {
	if !d.features.ExperimentalLowCardinality {
		return ctx
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"allow_experimental_low_cardinality_type": 1}))
}

// addColumn adds c to table; "already exists" (another lane or process
// was first) is success.
func (d *Destination) addColumn(ctx context.Context, table string, c column) error {
	err := d.conn.Exec(d.ddlContext(ctx), addColumn(d.db, table, c, d.features))
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("clickhouse: add column %q to %q: %w", c.name, table, err)
	}
	return nil
}

func (d *Destination) loadSchema(ctx context.Context, table string) (*tableSchema, error) {
	ts := &tableSchema{}
	var err error
	if ts.target, _, err = d.columns(ctx, table); err != nil {
		return nil, err
	}
	if ts.stage, ts.order, err = d.columns(ctx, stageName(table)); err != nil {
		return nil, err
	}
	return ts, nil
}

// columns returns a table's columns' types by name, and their names in
// the server's order.
func (d *Destination) columns(ctx context.Context, table string) (map[string]string, []string, error) {
	rows, err := d.conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = "+quoteString(d.db)+" AND table = "+quoteString(table))
	if err != nil {
		return nil, nil, fmt.Errorf("clickhouse: columns of %q: %w", table, err)
	}
	defer rows.Close()
	out := make(map[string]string)
	var order []string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, nil, fmt.Errorf("clickhouse: columns of %q: %w", table, err)
		}
		out[name] = typ
		order = append(order, name)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("clickhouse: columns of %q: %w", table, err)
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("clickhouse: table %q has no columns: was it dropped?", table)
	}
	return out, order, nil
}

// applyColumns returns the column list of an apply into table: the
// staging table's columns (a subset of the table's, which gets every new
// column first).
func (d *Destination) applyColumns(ctx context.Context, table string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ts := d.schemas[table]
	if ts == nil {
		var err error
		if ts, err = d.loadSchema(ctx, table); err != nil {
			return nil, err
		}
		d.schemas[table] = ts
	}
	out := make([]string, 0, len(ts.order))
	for _, c := range ts.order {
		if c != colStagePipeline && c != colStageGen {
			out = append(out, c)
		}
	}
	return out, nil
}

// modifyColumn changes c's type in the table and its staging table
// (ALTER TABLE ... MODIFY COLUMN rewrites the column's data).
func (d *Destination) modifyColumn(ctx context.Context, table string, c column) error {
	for _, t := range []string{table, stageName(table)} {
		if err := d.conn.Exec(d.ddlContext(ctx), modifyColumn(d.db, t, c)); err != nil {
			return fmt.Errorf("clickhouse: widen column %q of %q to %s: %w", c.name, t, c.typ.ch, err)
		}
	}
	return d.alterDistributed(ctx, table, modifyColumn(d.db, table+distSuffix, c))
}

// alterDistributed runs q, an ALTER of table's Distributed table, on
// every replica when the destination makes Distributed tables (an ALTER
// of a Replicated table reaches every replica by itself; a Distributed
// table is each server's own). "Already exists" is success.
func (d *Destination) alterDistributed(ctx context.Context, table, q string) error {
	if d.cluster == "" {
		return nil
	}
	if err := d.execAll(d.ddlContext(ctx), q); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("clickhouse: alter the Distributed table of %q: %w", table, err)
	}
	return nil
}

// widens reports whether a column of type have can be altered to want
// without losing a value: the engine's widenings (integer to a wider
// integer or to Float64, Float32 to Float64, anything but an array to
// String), in the same nullability or to Nullable.
func widens(have, want string) bool {
	hb, hn := unwrapNullable(normType(have))
	wb, wn := unwrapNullable(normType(want))
	if hn && !wn {
		return false
	}
	rank := map[string]int{"Int8": 1, "Int16": 2, "Int32": 3, "Int64": 4}
	urank := map[string]int{"UInt8": 1, "UInt16": 2, "UInt32": 3, "UInt64": 4}
	switch {
	case hb == wb:
		return hn != wn
	case wb == "String":
		return !strings.HasPrefix(hb, "Array(")
	case wb == "Float64":
		return rank[hb] > 0 || urank[hb] > 0 || hb == "Float32"
	case rank[wb] > 0:
		return rank[hb] > 0 && rank[hb] < rank[wb] || urank[hb] > 0 && urank[hb] < rank[wb]
	case urank[wb] > 0:
		return urank[hb] > 0 && urank[hb] < urank[wb]
	}
	return false
}

// lowCardinalityOnly reports whether have and want differ only in
// LowCardinality (and have perhaps in being Nullable where want is not):
// a column of type have takes want's values as they are.
func lowCardinalityOnly(have, want string) bool {
	strip := func(t string) (string, bool) {
		if in, ok := strings.CutPrefix(t, "LowCardinality("); ok {
			return strings.TrimSuffix(in, ")"), true
		}
		return t, false
	}
	h, hlc := strip(normType(have))
	w, wlc := strip(normType(want))
	return (hlc || wlc) && (h == w || h == "Nullable("+w+")")
}

// legacyUUID reports whether a column of type have is a FixedString(16)
// that a uuid column of type want can be written into as it is.
func legacyUUID(have string, want colType) bool {
	hb, hn := unwrapNullable(normType(have))
	return want.kind == kUUID && hb == "FixedString(16)" && (hn || !want.nullable)
}

func unwrapNullable(t string) (string, bool) {
	if b, ok := strings.CutPrefix(t, "Nullable("); ok {
		return strings.TrimSuffix(b, ")"), true
	}
	return t, false
}

// normType makes type names comparable: the server may print them with
// other spacing.
func normType(s string) string { return strings.ReplaceAll(s, " ", "") }

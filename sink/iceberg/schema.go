package iceberg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
)

// SchemaError is returned by Write (Append and Overwrite tables) or
// PreCommit (Merge tables), and behind CheckSchema's answer, when a table's
// schema can't take a batch's: a column changed type in a way Iceberg
// can't promote (only int → long, float → double and a wider decimal
// precision are allowed), or the Arrow type has no Iceberg equivalent. The table is left as it was.
type SchemaError struct {
	// Table is the table's name.
	Table string
	// Column is the column's name (a dotted path into structs, "element"
	// for a list's); empty when the error is not about one column (an
	// Arrow type with no Iceberg equivalent).
	Column string
	// From is the column's type in the table and To the batch's, in
	// Iceberg's notation ("long", "string", "decimal(10, 2)").
	From, To string
	// Err is the underlying error, if any.
	Err error
}

func (e *SchemaError) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("iceberg: table %q: column %q can't change from %s to %s: Iceberg promotes only int → long, float → double and decimal precision",
			e.Table, e.Column, e.From, e.To)
	}
	return fmt.Sprintf("iceberg: table %q: schema change Iceberg can't make: %v", e.Table, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// toIceberg converts an Arrow schema to an Iceberg one with fresh IDs.
// The library panics on some types it can't convert; that becomes an
// error.
func toIceberg(sc *arrow.Schema) (s *ice.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return table.ArrowSchemaToIcebergWithFreshIDs(sc, false)
}

// ensureTable returns table name, created from sc when missing and
// evolved to take sc when it lacks columns of sc or has narrower types:
// new columns are added nullable, int → long, float → double and decimal
// precisions widened. Creating or evolving a table commits metadata only
// (no rows become visible), so it is not fenced.
func (d *Destination) ensureTable(ctx context.Context, pipeline, name string, sc *arrow.Schema) (*table.Table, error) {
	want, err := toIceberg(sc)
	if err != nil {
		return nil, &SchemaError{Table: name, Err: err}
	}
	ident := d.ident(name)
	var lastErr error
	for try := 0; try < d.maxTries; try++ {
		tbl, err := d.cat.LoadTable(ctx, ident)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			if err := d.ensureNamespace(ctx); err != nil {
				return nil, err
			}
			opts := []catalog.CreateTableOpt{catalog.WithProperties(d.props)}
			if pfs := d.tables[name].Partition; len(pfs) > 0 {
				spec, err := partitionSpec(want, pfs)
				if err != nil {
					return nil, fmt.Errorf("iceberg: table %q: %w", name, err)
				}
				opts = append(opts, catalog.WithPartitionSpec(&spec))
			}
			tbl, err = d.cat.CreateTable(ctx, ident, want, opts...)
			if errors.Is(err, catalog.ErrTableAlreadyExists) {
				lastErr = err
				continue // another lane created it: load it
			}
			if err != nil {
				// A catalog may answer a create that raced another
				// writer's (a shard of the same pipeline) with some other
				// error: the REST test server's JDBC catalog fails on its
				// unique key. The table is there now: load it.
				if ok, cerr := d.cat.CheckTableExists(ctx, ident); cerr == nil && ok {
					lastErr = err
					continue
				}
				return nil, fmt.Errorf("iceberg: create table %v: %w", ident, err)
			}
			d.log.Info("iceberg: table created", "table", name, "schema", want.String())
			return d.mark(ctx, pipeline, tbl)
		}
		if err != nil {
			return nil, fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		if covers(tbl.Schema(), want) {
			return d.mark(ctx, pipeline, tbl)
		}
		if bad := conflicts(name, tbl.Schema(), want); len(bad) > 0 {
			return nil, bad[0]
		}
		tx := tbl.NewTransaction()
		if err := tx.UpdateSchema(true, false).UnionByNameWith(want).Commit(); err != nil {
			return nil, &SchemaError{Table: name, Err: err}
		}
		next, err := tx.Commit(ctx)
		if err == nil {
			d.log.Info("iceberg: table schema evolved", "table", name, "schema", next.Schema().String())
			return d.mark(ctx, pipeline, next)
		}
		if !isConflict(err) {
			return nil, fmt.Errorf("iceberg: evolve table %v: %w", ident, err)
		}
		lastErr = err
		d.log.Warn("iceberg: schema change lost a race; reloading", "table", name, "err", err)
		if werr := conflictWait(ctx, try+1); werr != nil {
			return nil, fmt.Errorf("iceberg: evolve table %v: %w (after losing a race: %w)", ident, werr, err)
		}
	}
	return nil, fmt.Errorf("iceberg: table %v: schema change failed %d times: %w", ident, d.maxTries, lastErr)
}

// CheckSchema implements sink.SchemaChecker: it reports, without changing
// anything, the columns of the batch schema sc that table stream can't
// take, because their type changed in a way Iceberg can't promote (a
// conflict inside a struct or list names its top-level column), so the
// runner holds them back instead of failing the epoch. It returns none
// when the table is missing (it would be created from sc) or takes sc,
// possibly after adding columns or widening types, and a *SchemaError
// when sc has a type Iceberg can't hold at all.
func (d *Destination) CheckSchema(ctx context.Context, stream string, sc *arrow.Schema) ([]sink.RejectedColumn, error) {
	found, err := d.schemaConflicts(ctx, stream, sc)
	if err != nil {
		return nil, err
	}
	var out []sink.RejectedColumn
	for _, e := range found {
		if e.Column == "" {
			return nil, e
		}
		top, _, _ := strings.Cut(e.Column, ".")
		if len(out) > 0 && out[len(out)-1].Column == top {
			continue
		}
		out = append(out, sink.RejectedColumn{Column: top, Reason: fmt.Sprintf("%s: %s → %s, which Iceberg can't promote", e.Column, e.From, e.To)})
	}
	return out, nil
}

// schemaConflicts lists the columns of sc that table stream can't take,
// one *SchemaError each (or one without a Column when sc has a type
// Iceberg can't hold); none when the table is missing or takes sc.
func (d *Destination) schemaConflicts(ctx context.Context, stream string, sc *arrow.Schema) ([]*SchemaError, error) {
	want, err := toIceberg(sc)
	if err != nil {
		return []*SchemaError{{Table: stream, Err: err}}, nil
	}
	tbl, err := d.cat.LoadTable(ctx, d.ident(stream))
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("iceberg: load table %v: %w", d.ident(stream), err)
	}
	return conflicts(stream, tbl.Schema(), want), nil
}

// conflicts lists the columns of want that have can't take by Iceberg's
// schema evolution, in want's order.
func conflicts(table string, have, want *ice.Schema) []*SchemaError {
	var out []*SchemaError
	for _, f := range want.Fields() {
		h, ok := have.FindFieldByName(f.Name)
		if !ok {
			continue // added as a nullable column
		}
		out = appendConflicts(out, table, f.Name, h.Type, f.Type)
	}
	return out
}

// A required column meeting a nullable one is not a conflict: Iceberg
// makes it optional.
func appendConflicts(out []*SchemaError, table, path string, have, want ice.Type) []*SchemaError {
	if sameOrWider(have, want) || promotes(have, want) {
		return out
	}
	switch h := have.(type) {
	case *ice.StructType:
		if w, ok := want.(*ice.StructType); ok {
			for _, f := range w.FieldList {
				for _, g := range h.FieldList {
					if g.Name == f.Name {
						out = appendConflicts(out, table, path+"."+f.Name, g.Type, f.Type)
					}
				}
			}
			return out
		}
	case *ice.ListType:
		if w, ok := want.(*ice.ListType); ok {
			return appendConflicts(out, table, path+".element", h.Element, w.Element)
		}
	}
	return append(out, &SchemaError{Table: table, Column: path, From: have.String(), To: want.String()})
}

// promotes reports whether Iceberg's schema evolution widens a column of
// type have to v: int → long, float → double, a decimal's precision.
func promotes(have, v ice.Type) bool {
	switch h := have.(type) {
	case ice.Int32Type:
		_, ok := v.(ice.Int64Type)
		return ok
	case ice.Float32Type:
		_, ok := v.(ice.Float64Type)
		return ok
	case ice.DecimalType:
		w, ok := v.(ice.DecimalType)
		return ok && w.Scale() == h.Scale() && w.Precision() >= h.Precision()
	}
	return false
}

// covers reports whether have already takes every column of want by name
// with the same type or one want's type promotes to.
func covers(have, want *ice.Schema) bool {
	for _, f := range want.Fields() {
		h, ok := have.FindFieldByName(f.Name)
		if !ok {
			return false
		}
		if !sameOrWider(h.Type, f.Type) {
			return false
		}
		if h.Required && !f.Required {
			return false
		}
	}
	return true
}

// sameOrWider reports whether a column of type have takes values of type
// v without a schema change. Nested types are compared field by field by
// name.
func sameOrWider(have, v ice.Type) bool {
	if have.Equals(v) {
		return true
	}
	switch h := have.(type) {
	case ice.Int64Type:
		_, ok := v.(ice.Int32Type)
		return ok
	case ice.Float64Type:
		_, ok := v.(ice.Float32Type)
		return ok
	case ice.DecimalType:
		w, ok := v.(ice.DecimalType)
		return ok && w.Scale() == h.Scale() && w.Precision() <= h.Precision()
	case *ice.StructType:
		w, ok := v.(*ice.StructType)
		if !ok {
			return false
		}
		for _, f := range w.FieldList {
			found := false
			for _, g := range h.FieldList {
				if g.Name == f.Name {
					found = sameOrWider(g.Type, f.Type) && !(g.Required && !f.Required)
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	case *ice.ListType:
		w, ok := v.(*ice.ListType)
		return ok && sameOrWider(h.Element, w.Element) && !(h.ElementRequired && !w.ElementRequired)
	}
	return false
}

// isConflict reports whether err is a lost race for the table's metadata:
// the catalog's compare-and-swap failed (table.ErrCommitFailed), or a
// requirement on the table's state failed because another writer moved
// it. iceberg-go v0.7.0 returns the latter as plain errors whose text
// starts with "requirement failed" (any case): there is no type to test.
func isConflict(err error) bool {
	if errors.Is(err, table.ErrCommitFailed) {
		return true
	}
	return containsFold(err.Error(), "requirement failed")
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// mark gives tbl the pipeline's fence property, at 0, unless it has one:
// then Recover finds the table and raises its fence before any epoch of
// the pipeline was committed to it. The commit requires the property to
// be absent, so it never lowers a fence.
func (d *Destination) mark(ctx context.Context, pipeline string, tbl *table.Table) (*table.Table, error) {
	ident := tbl.Identifier()
	req := &fenceRequirement{Type: "openetl-fence", Pipeline: pipeline, Unmarked: true, Where: d.reading()}
	var lastErr, refused error
	for try := 0; try < d.maxTries; try++ {
		if _, found, err := d.markersOf(tbl.Metadata(), pipeline); err != nil {
			return nil, err
		} else if found {
			return tbl, nil
		}
		ft, err := d.fenced(ctx, ident, req)
		if err != nil {
			return nil, fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		tx := ft.NewTransaction()
		var props ice.Properties
		if d.summariesOnly() || refused != nil {
			err = markerSnapshot(ctx, ft, tx, markerProps(pipeline, markers{}))
		} else {
			props = ice.Properties{fenceKey(pipeline): "0"}
			err = tx.SetProperties(props)
		}
		if err != nil {
			return nil, err
		}
		next, err := tx.Commit(ctx)
		switch {
		case err == nil && refused != nil:
			d.useSummaries(ident, "refused", refused)
			return next, nil
		case err == nil && props != nil && d.fence == FenceAuto && !propsKept(next.Metadata(), props):
			d.useSummaries(ident, "dropped", nil)
			tbl = next
			continue // and mark it in a snapshot
		case err == nil:
			return next, nil
		case errors.Is(err, errMarked):
		case isConflict(err):
			lastErr = err
			if werr := conflictWait(ctx, try+1); werr != nil {
				return nil, fmt.Errorf("iceberg: table %v: mark as the pipeline's: %w (after losing a race: %w)", ident, werr, err)
			}
		case props != nil && d.fence == FenceAuto && d.mayRefuse(err):
			refused, lastErr = err, err // try it in a snapshot
		default:
			return nil, fmt.Errorf("iceberg: table %v: mark as the pipeline's: %w", ident, err)
		}
		if tbl, err = d.cat.LoadTable(ctx, ident); err != nil {
			return nil, fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
	}
	return nil, fmt.Errorf("iceberg: table %v: marking lost the race %d times: %w", ident, d.maxTries, lastErr)
}

// partitionSpec builds the spec of pfs over sc.
func partitionSpec(sc *ice.Schema, pfs []PartitionField) (ice.PartitionSpec, error) {
	var opts []ice.PartitionOption
	for _, pf := range pfs {
		tr, err := ice.ParseTransform(pf.Transform)
		if err != nil {
			return ice.PartitionSpec{}, err
		}
		f, ok := sc.FindFieldByName(pf.Column)
		if !ok {
			return ice.PartitionSpec{}, fmt.Errorf("partition column %q is not in the rows", pf.Column)
		}
		name := pf.Column
		if _, identity := tr.(ice.IdentityTransform); !identity {
			name = pf.Column + "_" + strings.NewReplacer("[", "", "]", "").Replace(tr.String())
		}
		opts = append(opts, ice.AddPartitionFieldBySourceID(f.ID, name, tr, sc, nil))
	}
	return ice.NewPartitionSpecOpts(opts...)
}

package postgres

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Apply casts staged text to the columns' declared types (numeric, uuid,
// jsonb, inet, arrays ...). A value whose text the type's input function
// rejects fails the statement that moves the table's rows: Apply then
// rolls back to a savepoint, sifts the staged rows (each value of each
// cast column tried on its own) and moves what is left. The rows set
// aside go to the quarantine table in the same transaction, with the
// reason the cast's SQLSTATE gives, so they become visible with the
// epoch, like the rows the lanes set aside.

// castFunc names the function sift tries values with: the SQLSTATE of
// v's cast to typ, null when the cast succeeds.
func (d *Destination) castFunc() string {
	return ident(d.cfg.StagingSchema) + "." + ident("_openetl_cast_error")
}

func (d *Destination) castFuncDDL() string {
	return `CREATE OR REPLACE FUNCTION ` + d.castFunc() + `(v anyelement, typ text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
	EXECUTE format('SELECT $1::%s', typ) USING v;
	RETURN NULL;
EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
	RETURN SQLSTATE;
END
$f$`
}

// isDataError reports whether err is a data exception (SQLSTATE class
// 22: a cast that failed, say) or a program limit (class 54): errors a
// staged value causes, which sift may find.
func isDataError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54"))
}

// reasonOf is the SQL expression of the quarantine reason of a cast's
// SQLSTATE code: ReasonInvalid but for these.
const reasonOf = `CASE code` +
	` WHEN '22003' THEN '` + ReasonRange + `'` + // numeric_value_out_of_range
	` WHEN '22008' THEN '` + ReasonRange + `'` + // datetime_field_overflow
	` WHEN '22009' THEN '` + ReasonRange + `'` + // invalid_time_zone_displacement_value
	` WHEN '22015' THEN '` + ReasonRange + `'` + // interval_field_overflow
	` WHEN '54000' THEN '` + ReasonRange + `'` + // program_limit_exceeded
	` WHEN '54001' THEN '` + ReasonRange + `'` + // statement_too_complex: nested too deep
	` WHEN '22001' THEN '` + ReasonLength + `'` + // string_data_right_truncation
	` WHEN '22P05' THEN '` + ReasonNUL + `'` + // untranslatable_character: \u0000 in jsonb
	` WHEN '22021' THEN '` + ReasonUTF8 + `'` + // character_not_in_repertoire
	` ELSE '` + ReasonInvalid + `' END`

// ensureSift makes sure the quarantine table exists before the tables
// are moved (taking the DDL lock, when locked is false, only to create
// it). Once it is seen the Destination stops asking.
func (a applier) ensureSift(ctx context.Context, tx *sql.Tx, locked bool) error {
	if a.d.sifting.Load() {
		return nil
	}
	var q bool
	if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, a.d.target(quarantineTable)).Scan(&q); err != nil {
		return err
	}
	if q {
		a.d.sifting.Store(true)
		return nil
	}
	if !locked {
		if _, err := tx.ExecContext(ctx, lockDDL); err != nil {
			return err
		}
	}
	return a.create(ctx, tx, quarantineRef())
}

// quarantineRef is the quarantine table as Apply creates it.
func quarantineRef() tableRef {
	t := tableRef{Table: quarantineTable}
	for _, f := range quarantineSchema.Fields() {
		wire, target, _ := mapType(f.Type)
		t.Cols = append(t.Cols, column{Name: f.Name, Target: target, wire: wire})
	}
	return t
}

// sift moves the rows of t's staging table that hold a value whose cast
// to its column's table type fails to the quarantine table, column by
// column in t's order, and returns how many.
func (a applier) sift(ctx context.Context, tx *sql.Tx, t tableRef) (int, error) {
	stg := a.d.staging(t.Staging)
	staged, err := columnTypes(ctx, tx, stg)
	if err != nil {
		return 0, err
	}
	// The row as JSON: the columns of t (a staging table may have more:
	// those of other batch schemas of the epoch), as staged.
	var drop []string
	for name := range staged {
		if !hasCol(t.Cols, name) {
			drop = append(drop, literal(name))
		}
	}
	sort.Strings(drop)
	row := `to_jsonb(s)`
	if len(drop) > 0 {
		row += ` - ARRAY[` + strings.Join(drop, ", ") + `]`
	}
	n := 0
	for _, c := range t.Cols {
		w, ok := staged[c.Name]
		if !ok || c.Cast != "" || w == c.Target {
			continue // staged as its type, or cast by an expression that can't fail
		}
		col := ident(c.Name)
		res, err := tx.ExecContext(ctx, `WITH e AS (SELECT ctid AS r, `+a.d.castFunc()+`(`+col+`, `+literal(c.Target)+`) AS code FROM `+stg+
			` WHERE `+col+` IS NOT NULL), bad AS (DELETE FROM `+stg+` s USING e WHERE s.ctid = e.r AND e.code IS NOT NULL RETURNING e.code, `+row+` AS j)
			INSERT INTO `+a.d.target(quarantineTable)+` (table_name, column_name, reason, row_json, _openetl_id, _openetl_seq, _openetl_op)
			SELECT `+literal(t.Table)+`, `+literal(c.Name)+`, `+reasonOf+`, j::text, j->>'_openetl_id', (j->>'_openetl_seq')::bigint, j->>'_openetl_op' FROM bad`)
		if err != nil {
			return n, err
		}
		k, err := res.RowsAffected()
		if err != nil {
			return n, err
		}
		n += int(k)
	}
	return n, nil
}

package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/ledger"
)

// applier applies staged rows (a ledger.Applier): package ledger calls
// it in the transaction that checks the fence and records the epoch.
type applier struct {
	d       *Destination
	streams []sink.StreamSpec // the attempt's, for Finish
}

var (
	_ ledger.Applier[*sql.Tx]  = applier{}
	_ ledger.Finisher[*sql.Tx] = applier{}
)

// Apply moves a lane's staged rows of an epoch into the tables: appended,
// or merged by key (the newest _openetl_seq wins), creating each table
// and adding its new columns first; then it drops their staging tables.
func (a applier) Apply(ctx context.Context, tx *sql.Tx, s ledger.Staged) error {
	var r ref
	if err := json.Unmarshal(s.Data, &r); err != nil {
		return fmt.Errorf("postgres: a committable of epoch %d: %w", s.Epoch, err)
	}
	// The staging tables' registry rows are locked before any of them is
	// read, in the order every dropper takes them (see stagingTables).
	staged := make([]string, 0, len(r.Tables))
	for _, t := range r.Tables {
		staged = append(staged, t.Staging)
	}
	have, err := a.d.lockStaging(ctx, tx, staged)
	if err != nil {
		return err
	}
	for _, t := range r.Tables {
		if t.Staging != "" && !have[t.Staging] {
			return fmt.Errorf("postgres: epoch %d: the staging table %s of %s was dropped (DropStaged) before it applied",
				s.Epoch, t.Staging, t.Table)
		}
	}
	// Tables to create or widen are found first, from the catalog, and
	// the DDL lock taken before any table is touched.
	var ddl []tableRef
	absent := map[string]bool{} // tables patches find missing: nothing to patch
	for _, t := range r.Tables {
		if t.Staging == "" {
			return fmt.Errorf("postgres: a committable of epoch %d names no staging table: written by an older version, it can't be applied", s.Epoch)
		}
		have, err := columnTypes(ctx, tx, a.d.target(t.Table))
		if err != nil {
			return err
		}
		if t.Patch && len(have) == 0 {
			absent[t.Table] = true
			continue
		}
		for _, c := range t.Cols {
			if h, ok := have[c.Name]; !ok || (h != c.Target && widens(h, c.Target)) {
				ddl = append(ddl, t)
				break
			}
		}
	}
	if len(ddl) > 0 {
		if _, err := tx.ExecContext(ctx, lockDDL); err != nil {
			return err
		}
		for _, t := range ddl {
			if err := a.create(ctx, tx, t); err != nil {
				return err
			}
		}
	}
	if err := a.ensureSift(ctx, tx, len(ddl) > 0); err != nil {
		return err
	}
	var drop []string
	for _, t := range r.Tables {
		if t.Patch && absent[t.Table] {
			drop = append(drop, t.Staging)
			continue
		}
		// A value whose cast to its table type fails (text a declared
		// type's input rejects) fails the statement: its rows are set
		// aside (sift) and the table's rows moved again, so the epoch
		// still lands.
		if _, err := tx.ExecContext(ctx, `SAVEPOINT openetl_apply`); err != nil {
			return err
		}
		err := a.move(ctx, tx, t, t.Rows)
		if err != nil && isDataError(err) {
			if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT openetl_apply`); rerr != nil {
				return errors.Join(err, rerr)
			}
			n, serr := a.sift(ctx, tx, t)
			if serr != nil {
				return fmt.Errorf("postgres: set aside rows of %s that fail their cast (%v): %w", t.Table, err, serr)
			}
			if n == 0 {
				return err
			}
			a.d.cfg.Logger.Debug("postgres: rows quarantined at apply", "pipeline", s.Pipeline, "table", t.Table, "rows", n, "epoch", s.Epoch)
			err = a.move(ctx, tx, t, t.Rows-n)
		}
		if err != nil {
			return err
		}
		if t.Mode != "overwrite" {
			drop = append(drop, t.Staging)
		}
	}
	return a.d.dropStaging(ctx, tx, drop)
}

// move moves the rows of t's staging table, of which rows are left, into
// the table: appended, merged or held for Finish.
func (a applier) move(ctx context.Context, tx *sql.Tx, t tableRef, rows int) error {
	if t.Patch {
		return a.patch(ctx, tx, t)
	}
	tgt, stg := a.d.target(t.Table), a.d.staging(t.Staging)
	names := make([]string, len(t.Cols))
	casts := make([]string, len(t.Cols))
	for i, c := range t.Cols {
		names[i] = ident(c.Name)
		casts[i] = c.selectExpr()
	}
	list := strings.Join(names, ", ")
	if t.Mode == "" {
		// Appended: the INSERT's count is the check.
		res, err := tx.ExecContext(ctx, `INSERT INTO `+tgt+` (`+list+`) SELECT `+strings.Join(casts, ", ")+` FROM `+stg)
		if err != nil {
			return fmt.Errorf("postgres: apply to %s: %w", t.Table, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(rows) {
			return fmt.Errorf("postgres: apply to %s: %d staged rows of %d are left (%v): the epoch is lost", t.Table, n, rows, err)
		}
		return nil
	}
	// A staging table holds all its rows or none: its COPYs committed
	// (DropStaged drops it; a crash empties an unlogged one), so a look
	// at one row does what a count would.
	var some bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM `+stg+`)`).Scan(&some); err != nil {
		return fmt.Errorf("postgres: apply to %s: %w", t.Table, err)
	}
	if !some && rows > 0 {
		return fmt.Errorf("postgres: apply to %s: the %d staged rows are gone: the epoch is lost", t.Table, rows)
	}
	if t.Mode == "overwrite" {
		// Held for Finish, which replaces the table's contents and must
		// not fail: every value's cast is tried here first.
		exprs := make([]string, len(t.Cols))
		for i, c := range t.Cols {
			exprs[i] = c.castExpr()
		}
		if _, err := tx.ExecContext(ctx, `SELECT count(ROW(`+strings.Join(exprs, ", ")+`)) FROM `+stg); err != nil {
			return fmt.Errorf("postgres: hold rows of %s for the refresh: %w", t.Table, err)
		}
		cols, err := json.Marshal(t.Cols)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+a.d.registry()+` SET held = true, cols = $1 WHERE staging = $2`, string(cols), t.Staging); err != nil {
			return fmt.Errorf("postgres: hold rows of %s for the refresh: %w", t.Table, err)
		}
		return nil
	}
	// The newest version of each key in the epoch, merged over an older
	// one only: a replayed older version never overwrites. The lane
	// knows when no key repeats; else the newest row of each is picked.
	keys := make([]string, len(t.Key))
	on := make([]string, len(t.Key))
	for i, k := range t.Key {
		keys[i] = ident(k)
		on[i] = `t.` + keys[i] + ` = s.` + keys[i]
	}
	klist := strings.Join(keys, ", ")
	src := `SELECT ` + strings.Join(casts, ", ") + ` FROM ` + stg
	if !t.Unique {
		src = `SELECT DISTINCT ON (` + klist + `) ` + strings.Join(casts, ", ") + ` FROM ` + stg +
			` ORDER BY ` + klist + `, ` + ident(sink.ColumnSeq) + ` DESC`
	}
	seq, op := ident(sink.ColumnSeq), ident(sink.ColumnOp)
	isDelete := op + ` = ` + literal(sink.OpDelete)
	var q string
	if a.d.merge {
		// MERGE: a join, where ON CONFLICT tries a speculative insert
		// per row (about 1.5x the server's CPU here).
		var sets, vals []string
		for _, n := range names {
			if !slices.Contains(keys, n) {
				sets = append(sets, n+` = s.`+n)
			}
			vals = append(vals, `s.`+n)
		}
		q = `MERGE INTO ` + tgt + ` AS t USING (` + src + `) AS s ON ` + strings.Join(on, " AND ")
		if t.Hard {
			q += ` WHEN MATCHED AND t.` + seq + ` < s.` + seq + ` AND s.` + isDelete + ` THEN DELETE` +
				` WHEN MATCHED AND t.` + seq + ` < s.` + seq + ` THEN UPDATE SET ` + strings.Join(sets, ", ") +
				` WHEN NOT MATCHED AND NOT s.` + isDelete + ` THEN INSERT (` + list + `) VALUES (` + strings.Join(vals, ", ") + `)`
		} else {
			del := ident(sink.ColumnDeleted)
			q += ` WHEN MATCHED AND t.` + seq + ` < s.` + seq + ` THEN UPDATE SET ` + strings.Join(sets, ", ") + `, ` + del + ` = s.` + isDelete +
				` WHEN NOT MATCHED THEN INSERT (` + list + `, ` + del + `) VALUES (` + strings.Join(vals, ", ") + `, s.` + isDelete + `)`
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("postgres: merge into %s: %w", t.Table, err)
		}
		return nil
	}
	latest := `WITH latest AS (` + src + `) `
	sets := make([]string, 0, len(names)+1)
	for _, n := range names {
		sets = append(sets, n+` = EXCLUDED.`+n)
	}
	guard := ` WHERE t.` + seq + ` < EXCLUDED.` + seq
	if t.Hard {
		q = latest + `INSERT INTO ` + tgt + ` AS t (` + list + `) SELECT ` + list + ` FROM latest WHERE NOT ` + isDelete +
			` ON CONFLICT (` + klist + `) DO UPDATE SET ` + strings.Join(sets, ", ") + guard
	} else {
		sets = append(sets, ident(sink.ColumnDeleted)+` = EXCLUDED.`+ident(sink.ColumnDeleted))
		q = latest + `INSERT INTO ` + tgt + ` AS t (` + list + `, ` + ident(sink.ColumnDeleted) + `) SELECT ` + list + `, ` + isDelete +
			` FROM latest ON CONFLICT (` + klist + `) DO UPDATE SET ` + strings.Join(sets, ", ") + guard
	}
	if _, err := tx.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("postgres: merge into %s: %w", t.Table, err)
	}
	if t.Hard {
		for i, k := range keys {
			on[i] = `t.` + k + ` = d.` + k
		}
		q = latest + `DELETE FROM ` + tgt + ` t USING latest d WHERE ` + strings.Join(on, " AND ") + ` AND d.` + isDelete +
			` AND t.` + seq + ` < d.` + seq
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("postgres: delete from %s: %w", t.Table, err)
		}
	}
	return nil
}

// patch applies t's staged patches (sink.PatchMetadataKey): for each of
// its columns, the value of each staged row that has one is set on the
// table's row with the staged _openetl_id, where that row holds a null
// there. A row that isn't there (a merge table's row replaced by a newer
// version since, or deleted) is left alone: no row is added.
func (a applier) patch(ctx context.Context, tx *sql.Tx, t tableRef) error {
	tgt, stg := a.d.target(t.Table), a.d.staging(t.Staging)
	id := ident(sink.ColumnID)
	for _, c := range t.Cols {
		if c.Name == sink.ColumnID || c.Name == sink.ColumnSeq {
			continue
		}
		col := ident(c.Name)
		res, err := tx.ExecContext(ctx, `UPDATE `+tgt+` AS t SET `+col+` = s.`+col+` FROM (SELECT `+id+`, `+c.selectExpr()+
			` FROM `+stg+` WHERE `+col+` IS NOT NULL) AS s WHERE t.`+id+` = s.`+id+` AND t.`+col+` IS NULL`)
		if err != nil {
			return fmt.Errorf("postgres: patch %s.%s: %w", t.Table, c.Name, err)
		}
		n, _ := res.RowsAffected()
		a.d.cfg.Logger.Debug("postgres: patched", "table", t.Table, "column", c.Name, "rows", n, "staged", t.Rows)
	}
	return nil
}

// create creates t's table when it does not exist and adds the columns
// it lacks, nullable.
func (a applier) create(ctx context.Context, tx *sql.Tx, t tableRef) error {
	tgt := a.d.target(t.Table)
	have, err := columnTypes(ctx, tx, tgt)
	if err != nil {
		return err
	}
	var missing, widened []column
	for _, c := range t.Cols {
		h, ok := have[c.Name]
		switch {
		case !ok:
			missing = append(missing, c)
		case h != c.Target && widens(h, c.Target):
			widened = append(widened, c)
		}
	}
	if len(missing) == 0 && len(widened) == 0 {
		return nil
	}
	var stmts []string
	if len(have) == 0 {
		defs := make([]string, 0, len(t.Cols)+2)
		for _, c := range t.Cols {
			d := ident(c.Name) + ` ` + c.Target
			if t.Mode == "merge" && isKey(t.Key, c.Name) {
				d += ` NOT NULL`
			}
			defs = append(defs, d)
		}
		if t.Mode == "merge" {
			if !t.Hard {
				defs = append(defs, ident(sink.ColumnDeleted)+` boolean NOT NULL DEFAULT false`)
			}
			keys := make([]string, len(t.Key))
			for i, k := range t.Key {
				keys[i] = ident(k)
			}
			defs = append(defs, `CONSTRAINT `+ident(keyName(t.Table))+` PRIMARY KEY (`+strings.Join(keys, ", ")+`)`)
		}
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+tgt+` (`+strings.Join(defs, ", ")+`)`)
	}
	for _, c := range missing {
		stmts = append(stmts, `ALTER TABLE `+tgt+` ADD COLUMN IF NOT EXISTS `+ident(c.Name)+` `+c.Target)
	}
	for _, c := range widened {
		stmts = append(stmts, `ALTER TABLE `+tgt+` ALTER COLUMN `+ident(c.Name)+` TYPE `+c.Target+` USING `+ident(c.Name)+`::`+c.Target)
	}
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("postgres: table %s: %w", t.Table, err)
		}
	}
	return nil
}

// keyName names the primary key of table (and its index, which shares
// the schema's namespace with the tables): table with "$pk" after it,
// cut to fit with a hash of table when it is too long. The name Postgres
// would choose, table_pkey, is a name the engine may give a later
// stream's table (Orders_PKey), whose CREATE TABLE IF NOT EXISTS would
// then find the index and skip, and its ALTER TABLE or INSERT fail; no
// name the engine gives (lower case, [a-z0-9_]) has a '$'.
func keyName(table string) string {
	const suffix = "$pk"
	if len(table)+len(suffix) <= MaxIdentifier {
		return table + suffix
	}
	h := sha256.Sum256([]byte(table))
	tail := "_" + hex.EncodeToString(h[:8]) + suffix
	cut := MaxIdentifier - len(tail)
	for cut > 0 && !utf8.RuneStart(table[cut]) {
		cut--
	}
	return table[:cut] + tail
}

// Intact reports whether every staged row of a lane's epoch is there.
func (a applier) Intact(ctx context.Context, tx *sql.Tx, s ledger.Staged) (bool, error) {
	var r ref
	if err := json.Unmarshal(s.Data, &r); err != nil {
		return false, err
	}
	// The registry rows first, as every transaction that reads or drops
	// a staging table takes them (see stagingTables): a table whose row
	// is gone was dropped, and counting one a dropper holds would wait
	// on it holding the table's lock, which the dropper needs.
	staged := make([]string, 0, len(r.Tables))
	for _, t := range r.Tables {
		if t.Staging == "" {
			return false, nil
		}
		staged = append(staged, t.Staging)
	}
	have, err := a.d.lockStaging(ctx, tx, staged)
	if err != nil {
		return false, err
	}
	for _, t := range r.Tables {
		var exists bool
		if !have[t.Staging] {
			return false, nil
		}
		if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, a.d.staging(t.Staging)).Scan(&exists); err != nil || !exists {
			return false, err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+a.d.staging(t.Staging)).Scan(&n); err != nil || n != t.Rows {
			return false, err
		}
	}
	return true, nil
}

// Discard drops the pipeline's staging tables but keep's: those of
// attempts that died or were fenced. It runs in Recover's transaction,
// which holds the pipeline's ledger row (FOR UPDATE), after the fence
// check and before the fence is raised, so a zombie's
// Recover is fenced before it looks and never drops what a newer attempt
// stages; the drops commit with the new fence.
func (a applier) Discard(ctx context.Context, tx *sql.Tx, pipeline string, keep []ledger.Staged) error {
	var kept []string
	for _, s := range keep {
		var r ref
		if err := json.Unmarshal(s.Data, &r); err != nil {
			return err
		}
		for _, t := range r.Tables {
			kept = append(kept, t.Staging)
		}
	}
	tables, err := a.d.stagingTables(ctx, tx, false, `pipeline = $1 AND NOT held`, pipeline)
	if err != nil {
		return err
	}
	tables = slices.DeleteFunc(tables, func(t string) bool { return slices.Contains(kept, t) })
	if err := a.d.dropStaging(ctx, tx, tables); err != nil {
		return err
	}
	if len(tables) > 0 {
		// The runner's staging.collected event doesn't count these (the
		// destination is no sink.Collector): this line does.
		a.d.cfg.Logger.Info("postgres: dropping the staging tables of failed attempts", "pipeline", pipeline,
			"dropped", len(tables), "kept", len(kept))
	}
	return nil
}

// Finish replaces the contents of each overwritten table of pipeline
// with the rows its epochs held (none: the table is emptied), and drops
// their staging tables.
func (a applier) Finish(ctx context.Context, tx *sql.Tx, pipeline string, epoch uint64) error {
	rs, err := tx.QueryContext(ctx, `SELECT table_name, staging, cols FROM `+a.d.registry()+` WHERE pipeline = $1 AND held ORDER BY batch, staging FOR UPDATE`, pipeline)
	if err != nil {
		return err
	}
	type held struct {
		staging string
		cols    []column
	}
	byTable := map[string][]held{}
	var drop []string
	for rs.Next() {
		var name, staging string
		var raw []byte
		if err := rs.Scan(&name, &staging, &raw); err != nil {
			rs.Close()
			return err
		}
		h := held{staging: staging}
		if err := json.Unmarshal(raw, &h.cols); err != nil {
			rs.Close()
			return err
		}
		byTable[name] = append(byTable[name], h)
		drop = append(drop, staging)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return err
	}
	for _, s := range a.streams {
		if _, ok := byTable[s.Table]; !ok && s.Mode == sink.Overwrite {
			byTable[s.Table] = nil
		}
	}
	tables := make([]string, 0, len(byTable))
	for t := range byTable {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	for _, name := range tables {
		tgt := a.d.target(name)
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, tgt).Scan(&exists); err != nil {
			return err
		}
		if exists {
			// The table was created by the epoch that held its first rows.
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+tgt); err != nil {
				return fmt.Errorf("postgres: refresh %s: %w", name, err)
			}
		}
		for _, h := range byTable[name] {
			names := make([]string, len(h.cols))
			casts := make([]string, len(h.cols))
			for i, c := range h.cols {
				names[i] = ident(c.Name)
				casts[i] = c.selectExpr()
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+tgt+` (`+strings.Join(names, ", ")+`) SELECT `+strings.Join(casts, ", ")+
				` FROM `+a.d.staging(h.staging)); err != nil {
				return fmt.Errorf("postgres: refresh %s: %w", name, err)
			}
		}
	}
	return a.d.dropStaging(ctx, tx, drop)
}

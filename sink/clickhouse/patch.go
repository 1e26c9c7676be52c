package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/openetl/etl/sink"
)

// Patches (sink.PatchMetadataKey): how held values reach rows already
// written. A lane stages a patch batch like rows, in the table's staging
// table, as a block of its own (the patch's columns, _openetl_id and
// _openetl_seq; the table's other columns take their defaults there),
// and the committable names its columns. Commit never copies a patch
// block: after the epoch's copies it runs, per column, a mutation
//
//	ALTER TABLE t UPDATE c = <the staged value of the row's _openetl_id>
//	WHERE isNull(c) AND _openetl_id IN (SELECT _openetl_id FROM stage
//	WHERE _openetl_batch = token AND isNotNull(c)) AND fence <= gen
//	AND 'openetl-patch-...' != ''
//
// waits until system.mutations reports it done, and only then records
// the epoch and drops the staging partition. Mutations rather than
// re-inserting patched rows: an append table (MergeTree) has no version
// to replace a row by, and a re-insert into a merge table would need a
// higher _openetl_seq than the row's, which the patch must keep. The
// value is looked up in the staging block by scalar subqueries (no
// join: 18.16's joinGet resolves tables in the server's default
// database when a mutation runs), through transform's hash lookup.
//
// Re-application is idempotent: a mutation only sets nulls, with the
// same values, so one run twice (a Commit retried, a zombie's and its
// successor's) changes what one run changes. The literal names the
// pipeline, generation, block and column, so that a Commit retried in
// the same generation finds its mutation in system.mutations and waits
// for it instead of queueing another.

// isPatch reports whether a batch of schema sc is a patch batch.
func isPatch(sc *arrow.Schema) bool {
	v, ok := sc.Metadata().GetValue(sink.PatchMetadataKey)
	return ok && v == sink.PatchMetadataValue
}

// blockKey is the key of a lane's open block of table: a patch batch is
// gathered apart from the table's rows.
func blockKey(table string, patch bool) string {
	if patch {
		return table + "\x00patch"
	}
	return table
}

// patchLayout is layoutFor of a patch batch of table, which must exist
// (a patch sets columns of rows already written): the table and its
// staging table get the patch's columns when they lack them. It returns
// the columns the patch sets. A column that can't tell a value never
// written from one written (neither Nullable nor an Array, whose rows
// without it are empty), and a column of the table's sorting key (which
// ClickHouse can't update), is an error.
func (d *Destination) patchLayout(ctx context.Context, table string, schema *arrow.Schema) (*layout, []string, error) {
	var cols []string
	for _, f := range schema.Fields() {
		if f.Name != colID && f.Name != colSeq {
			cols = append(cols, f.Name)
		}
	}
	if len(cols) == 0 || len(schema.FieldIndices(colID)) != 1 || len(schema.FieldIndices(colSeq)) != 1 {
		return nil, nil, fmt.Errorf("clickhouse: a patch batch of %q has fields %v: want one or more columns, %s and %s", table, fieldNames(schema), colID, colSeq)
	}
	d.mu.Lock()
	known := d.schemas[table] != nil
	d.mu.Unlock()
	if !known {
		ts, err := d.loadSchema(ctx, table)
		if err != nil {
			return nil, nil, fmt.Errorf("clickhouse: a patch batch of %q, which has no table here: %w", table, err)
		}
		d.mu.Lock()
		if d.schemas[table] == nil {
			d.schemas[table] = ts
		}
		d.mu.Unlock()
	}
	var key string
	q := "SELECT sorting_key FROM system.tables WHERE database = " + quoteString(d.db) + " AND name = " + quoteString(table)
	if err := d.conn.QueryRow(ctx, q).Scan(&key); err != nil {
		return nil, nil, fmt.Errorf("clickhouse: sorting key of %q: %w", table, err)
	}
	for _, c := range cols {
		for _, k := range strings.Split(key, ",") {
			if strings.Trim(strings.TrimSpace(k), "`") == c {
				return nil, nil, fmt.Errorf("clickhouse: held values of column %q of %q can't be released: it is in the table's sorting key (%s), which ClickHouse can't update", c, table, key)
			}
		}
	}
	// key nil: a patch block has no _openetl_deleted of its own, and
	// layoutFor creates nothing for a table it knows.
	lay, err := d.layoutFor(ctx, table, nil, schema)
	if err != nil {
		return nil, nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range cols {
		typ := d.schemas[table].target[c]
		if _, ok := patchable(typ); !ok {
			return nil, nil, fmt.Errorf("clickhouse: held values of column %q of %q can't be released: the column is %s, where a row written without a value can't be told from one with the default (make it Nullable)", c, table, typ)
		}
	}
	return lay, cols, nil
}

// patchable reports whether a column of ClickHouse type typ can take a
// patch, and whether it is an array (whose rows without a value hold an
// empty one, where other columns hold a null).
func patchable(typ string) (array, ok bool) {
	t := normType(typ)
	switch {
	case strings.HasPrefix(t, "Array("):
		return true, true
	case strings.HasPrefix(t, "Nullable("), strings.HasPrefix(t, "LowCardinality(Nullable("):
		return false, true
	}
	return false, false
}

func fieldNames(sc *arrow.Schema) []string {
	out := make([]string, 0, sc.NumFields())
	for _, f := range sc.Fields() {
		out = append(out, f.Name)
	}
	return out
}

// patchStatement is the mutation that applies the values of column col
// (an array column when array) staged in block token to table's rows
// (see above), conditional on gen not being fenced, marked by marker.
func patchStatement(db, table, col string, array bool, token uint64, pipeline string, gen uint64, marker string) string {
	c := quoteIdent(col)
	unset, set, value := "isNull("+c+")", "isNotNull("+c+")", "assumeNotNull("+c+")"
	if array {
		unset, set, value = "empty("+c+")", "notEmpty("+c+")", c
	}
	staged := fmt.Sprintf("FROM %s WHERE %s = %d AND %s", qualified(db, stageName(table)), quoteIdent(colBatch), token, set)
	// One scalar subquery gives the ids and their values in one order;
	// transform finds a row's index by a hash lookup (an id staged twice:
	// the last). No subquery in its FROM: a mutation runs without a
	// query context, which 18.16 needs for one ("There is no query").
	pairs := fmt.Sprintf("(SELECT (groupArray(%s), groupArray(%s)) %s)", quoteIdent(colID), value, staged)
	return fmt.Sprintf("ALTER TABLE %s UPDATE %s = arrayElement(tupleElement(%s, 2), transform(%s, tupleElement(%s, 1), arrayEnumerate(tupleElement(%s, 1)), 0)) "+
		"WHERE %s AND %s IN (SELECT %s %s) AND %s <= %d AND %s != ''",
		qualified(db, table), c, pairs, quoteIdent(colID), pairs, pairs,
		unset, quoteIdent(colID), quoteIdent(colID), staged, fenceExpr(db, pipeline), gen, quoteString(marker))
}

// patchMarker names the mutation of column i of patch block token in
// generation gen of the pipeline.
func (w *writer) patchMarker(gen, token uint64, i int) string {
	return fmt.Sprintf("openetl-patch-%s-%d-%016x-%d", w.pipeHash, gen, token, i)
}

// applyPatches applies table's patch blocks (Commit, after the epoch's
// copies): each must be staged whole; each column's mutation is queued
// unless this generation queued it before, and waited for.
func (w *writer) applyPatches(ctx context.Context, table string, blocks []stagedBlock, gen uint64) error {
	for _, b := range blocks {
		n, err := w.stagedRows(ctx, table, b.Token)
		if err != nil {
			return err
		}
		if n != b.Rows {
			return fmt.Errorf("clickhouse: patch block %d of %q has %d rows staged, want %d: the epoch is lost (was the staging table changed by hand?)", b.Token, table, n, b.Rows)
		}
		for i, col := range b.Patch {
			typ, err := w.d.targetType(ctx, table, col)
			if err != nil {
				return err
			}
			array, ok := patchable(typ)
			if !ok {
				return fmt.Errorf("clickhouse: patch of column %q of %q: the column is %s, neither Nullable nor an Array", col, table, typ)
			}
			marker := w.patchMarker(gen, b.Token, i)
			queued, _, err := w.mutations(ctx, table, marker)
			if err != nil {
				return err
			}
			if queued == 0 {
				q := patchStatement(w.d.db, table, col, array, b.Token, w.pipeline, gen, marker)
				err = w.retry(ctx, "patch a column", func() error { return w.d.conn.Exec(ctx, q) }, func() (bool, error) {
					n, _, err := w.mutations(ctx, table, marker)
					return n > 0, err
				})
				if err != nil {
					return fmt.Errorf("clickhouse: patch column %q of %q (block %d, %d rows): %w", col, table, b.Token, b.Rows, err)
				}
			}
			if err := w.waitMutation(ctx, table, marker); err != nil {
				return err
			}
			w.d.log.Debug("clickhouse: patched", "pipeline", w.pipeline, "table", table, "column", col, "token", b.Token, "staged", b.Rows)
		}
	}
	return nil
}

// mutations counts table's mutations marked marker, and those not done.
func (w *writer) mutations(ctx context.Context, table, marker string) (all, running uint64, err error) {
	q := fmt.Sprintf("SELECT count(), countIf(is_done = 0) FROM system.mutations WHERE database = %s AND table = %s AND position(command, %s) > 0",
		quoteString(w.d.db), quoteString(table), quoteString(marker))
	if err := w.readRow(ctx, q, &all, &running); err != nil {
		return 0, 0, fmt.Errorf("clickhouse: look up mutation %s of %q: %w", marker, table, err)
	}
	return all, running, nil
}

// waitMutation waits until table's mutations marked marker are done, for
// at most Config.ApplyWait. A mutation that fails on the server is
// retried by it, and never done: 18.16 says why only in its log.
func (w *writer) waitMutation(ctx context.Context, table, marker string) error {
	deadline := time.Now().Add(w.d.applyWait)
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		_, running, err := w.mutations(ctx, table, marker)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clickhouse: the mutation that releases held values into %q is not done after %v (system.mutations, command containing %s): is it failing (the server's log says why), or are merges stopped (SYSTEM STOP MERGES stops mutations too)?",
				table, w.d.applyWait, marker)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// targetType returns the ClickHouse type of table's column col, loading
// the table's schema again when this process doesn't know the column.
func (d *Destination) targetType(ctx context.Context, table, col string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ts := d.schemas[table]; ts != nil {
		if t, ok := ts.target[col]; ok {
			return t, nil
		}
	}
	ts, err := d.loadSchema(ctx, table)
	if err != nil {
		return "", err
	}
	d.schemas[table] = ts
	t, ok := ts.target[col]
	if !ok {
		return "", fmt.Errorf("clickhouse: table %q has no column %q to patch: was it dropped by hand?", table, col)
	}
	return t, nil
}

// splitPatches takes the patch blocks out of byTable (which keeps the
// blocks Commit copies) and returns them by table.
func splitPatches(byTable map[string][]stagedBlock) map[string][]stagedBlock {
	var out map[string][]stagedBlock
	for t, bs := range byTable {
		if !slices.ContainsFunc(bs, func(b stagedBlock) bool { return b.Patch != nil }) {
			continue
		}
		if out == nil {
			out = map[string][]stagedBlock{}
		}
		var rows []stagedBlock
		for _, b := range bs {
			if b.Patch != nil {
				out[t] = append(out[t], b)
			} else {
				rows = append(rows, b)
			}
		}
		if len(rows) == 0 {
			delete(byTable, t)
		} else {
			byTable[t] = rows
		}
	}
	return out
}

package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink"
)

// Commit applies epoch: it copies each block of the committables from its
// staging table into its table (one INSERT ... SELECT per block, one part
// each, under the fence), applies the patch blocks (patch.go: a mutation
// per column, waited for), then records the epoch in _openetl_epochs and
// drops the staging partitions. An epoch already recorded is skipped, so
// Commit is idempotent. A block that may already be in its table (staged
// by another process, or whose apply was sent before and failed) is
// counted there first and copied only if absent, so no block lands
// twice. It fails with an error wrapping sink.ErrFenced when a newer
// generation's Recover raised the fence; its copies after that point
// copy nothing.
func (w *writer) Commit(ctx context.Context, epoch uint64, committables []sink.Committable) error {
	gen := w.gen.Load()
	if err := w.checkFence(ctx, gen); err != nil {
		return err
	}
	byTable, total, err := w.decodeAll(epoch, committables)
	if err != nil {
		return err
	}
	if len(byTable) == 0 {
		return nil
	}
	applied, err := w.applied(ctx, epoch)
	if err != nil {
		return err
	}
	if applied {
		w.dropStaged(ctx, byTable)
		return nil
	}
	blocks := 0
	copies := maps.Clone(byTable)
	patches := splitPatches(copies)
	for _, t := range slices.Sorted(maps.Keys(copies)) {
		if err := w.applyTable(ctx, t, copies[t], gen); err != nil {
			return err
		}
		blocks += len(copies[t])
	}
	// Patches after the copies: they set columns of rows of earlier
	// epochs (patch.go), and the epoch is recorded once they are done.
	for _, t := range slices.Sorted(maps.Keys(patches)) {
		if err := w.applyPatches(ctx, t, patches[t], gen); err != nil {
			return err
		}
		blocks += len(patches[t])
	}
	if err := w.d.conn.Exec(ctx, markEpoch(w.d.db, w.pipeline, epoch, gen, blocks, total)); err != nil {
		return fmt.Errorf("clickhouse: record epoch %d as applied: %w", epoch, err)
	}
	// The copies and the record are conditional on the fence: if it rose
	// meanwhile, some may have been skipped, and the newer generation
	// applies the epoch.
	if err := w.checkFence(ctx, gen); err != nil {
		return err
	}
	if ok, err := w.applied(ctx, epoch); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("clickhouse: epoch %d was not recorded as applied although the fence is still generation %d", epoch, gen)
		}
		return err
	}
	w.dropStaged(ctx, byTable)
	w.d.log.Debug("clickhouse: epoch committed", "pipeline", w.pipeline, "epoch", epoch, "blocks", blocks, "rows", total)
	return nil
}

// present fails unless every block of the epoch's committables is
// staged whole or already in its table, or the epoch is recorded as
// applied: what Commit needs to apply the epoch whole.
func (w *writer) present(ctx context.Context, epoch uint64, committables []sink.Committable) error {
	byTable, _, err := w.decodeAll(epoch, committables)
	if err != nil || len(byTable) == 0 {
		return err
	}
	if applied, err := w.applied(ctx, epoch); err != nil || applied {
		return err
	}
	for _, t := range slices.Sorted(maps.Keys(byTable)) {
		for _, b := range byTable[t] {
			n, err := w.stagedRows(ctx, t, b.Token)
			if err != nil {
				return err
			}
			if n == b.Rows {
				continue
			}
			if done, err := w.landed(ctx, t, b); err != nil || done {
				return err
			}
			return fmt.Errorf("clickhouse: block %d of %q has %d rows staged and none applied, want %d: epoch %d can't be applied (staged through a replica that is down, before the others had it?)", b.Token, t, n, b.Rows, epoch)
		}
	}
	return nil
}

// applyTable copies one table's blocks.
func (w *writer) applyTable(ctx context.Context, table string, blocks []stagedBlock, gen uint64) error {
	verify := make([]bool, len(blocks))
	foreign := false
	for i, b := range blocks {
		verify[i] = w.d.mustVerify(b.Token)
		foreign = foreign || verify[i]
	}
	if foreign {
		// Another process may have added columns since this one looked.
		w.d.mu.Lock()
		delete(w.d.schemas, table)
		w.d.mu.Unlock()
		// An apply of a block may still be running on the server (sent
		// by this process before a failure, or by another): wait for it,
		// or the count below could miss it.
		if err := w.waitApplies(ctx); err != nil {
			return err
		}
	}
	cols, err := w.d.applyColumns(ctx, table)
	if err != nil {
		return err
	}
	for i, b := range blocks {
		if verify[i] {
			done, err := w.landed(ctx, table, b)
			if err != nil {
				return err
			}
			if done {
				continue // landed before
			}
		}
		// The block must still be staged, whole: a copy from a partition
		// that is gone would copy nothing, and the epoch would look
		// applied without its rows.
		n, err := w.stagedRows(ctx, table, b.Token)
		if err != nil {
			return err
		}
		if n != b.Rows {
			return fmt.Errorf("clickhouse: block %d of %q has %d rows staged and none applied, want %d: the epoch is lost (was the staging table changed by hand?)", b.Token, table, n, b.Rows)
		}
		qctx := clickhouse.Context(ctx, clickhouse.WithQueryID(w.applyQueryID(gen, b.Token)))
		q := applyBlock(w.d.db, table, cols, b.Token, b.Rows, w.pipeline, gen, w.d.features)
		// A failed copy is sent again (on a fresh connection) only after
		// the copy that failed has ended on the server and the block is
		// counted absent from the table: it may have landed all the same.
		err = w.retry(ctx, "apply a block", func() error { return w.d.conn.Exec(qctx, q) }, func() (bool, error) {
			w.d.mustVerify(b.Token)
			if err := w.waitApplies(ctx); err != nil {
				return false, err
			}
			return w.landed(ctx, table, b)
		})
		if err != nil {
			return fmt.Errorf("clickhouse: apply block %d (%d rows) to %q: %w", b.Token, b.Rows, table, err)
		}
	}
	return nil
}

// landed reports whether block b is in table: all its rows, or on a merge
// table some (ReplacingMergeTree's merges drop the versions later blocks
// replaced; one part per block, so some means all landed). Part of a
// block on an append table is an error wrapped as permanent.
func (w *writer) landed(ctx context.Context, table string, b stagedBlock) (bool, error) {
	n, err := w.count(ctx, table, b.Token)
	switch {
	case err != nil:
		return false, err
	case n == 0:
		return false, nil
	case n == b.Rows, w.isMerge(table):
		return true, nil
	}
	return false, permanent(fmt.Errorf("clickhouse: table %q holds %d rows of block %d, which has %d: was the table changed by hand?", table, n, b.Token, b.Rows))
}

// permanentError is a failure a retry can't mend.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

func permanent(err error) error { return permanentError{err} }

// retry runs op; after a failure it waits (backoff), asks landed whether
// the failed op took effect after all, and runs op again only if not, up
// to Config.Retries times. op acquires a fresh connection each time, so a
// retry moves on to the pool's next address when the failed one is gone.
// Context errors and permanent errors end it at once.
func (w *writer) retry(ctx context.Context, what string, op func() error, landed func() (bool, error)) error {
	err := op()
	backoff := retryBackoff
	for try := 1; err != nil && try <= w.d.retries; try++ {
		var perm permanentError
		if ctx.Err() != nil || errors.As(err, &perm) {
			return err
		}
		w.d.log.Warn("clickhouse: retrying", "pipeline", w.pipeline, "lane", w.lane, "op", what, "try", try, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff *= 2
		var done bool
		if done, err = landed(); err != nil {
			continue
		}
		if done {
			w.d.log.Info("clickhouse: a failed try had landed", "pipeline", w.pipeline, "lane", w.lane, "op", what, "try", try)
			return nil
		}
		err = op()
	}
	return err
}

// readRow runs a query of one row that reads only and scans it into
// dst. A failure that is not the server's answer (a connection the pool
// kept idle but that is gone: after a network fault its first use is
// "connection reset by peer") is tried again, on the pool's next
// connection, up to Config.Retries times; a server's exception and
// the context's end are returned at once.
func (w *writer) readRow(ctx context.Context, q string, dst ...any) error {
	err := w.d.conn.QueryRow(ctx, q).Scan(dst...)
	backoff := retryBackoff
	for try := 1; err != nil && try <= w.d.retries; try++ {
		var exc *proto.Exception
		if ctx.Err() != nil || errors.As(err, &exc) {
			return err
		}
		w.d.log.Warn("clickhouse: retrying", "pipeline", w.pipeline, "lane", w.lane, "op", "read", "try", try, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff *= 2
		err = w.d.conn.QueryRow(ctx, q).Scan(dst...)
	}
	return err
}

// applyQueryID names an apply in system.processes, so that Recover can
// wait for the ones still running.
func (w *writer) applyQueryID(gen, token uint64) string {
	return fmt.Sprintf("%s%d-%016x-%s", w.applyPrefix(), gen, token, w.nonce)
}

func (w *writer) applyPrefix() string { return "openetl-apply-" + w.pipeHash + "-" }

// stageQueryID names the send of block token to its staging table in
// system.processes, so that a retry can wait for a failed one.
func (w *writer) stageQueryID(token uint64) string {
	return fmt.Sprintf("openetl-stage-%s-%016x", w.pipeHash, token)
}

// waitQuery waits until the query id no longer runs on the server.
func (w *writer) waitQuery(ctx context.Context, id string) error {
	return w.waitFor(ctx, "query_id = "+quoteString(id), id)
}

// waitApplies waits until no apply of the pipeline runs on the server.
func (w *writer) waitApplies(ctx context.Context) error {
	return w.waitFor(ctx, "startsWith(query_id, "+quoteString(w.applyPrefix())+")", w.applyPrefix()+"*")
}

// waitFor waits until no query matching cond runs on the server, for at
// most Config.ApplyWait.
func (w *writer) waitFor(ctx context.Context, cond, what string) error {
	deadline := time.Now().Add(w.d.applyWait)
	q := "SELECT count() FROM system.processes WHERE " + cond
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		var n uint64
		if err := w.readRow(ctx, q, &n); err != nil {
			return fmt.Errorf("clickhouse: look for running applies: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clickhouse: %d queries of pipeline %q still run on the server after %v (see system.processes, query_id %s): is a zombie stuck?",
				n, w.pipeline, w.d.applyWait, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// count returns how many rows of block token table holds.
func (w *writer) count(ctx context.Context, table string, token uint64) (int64, error) {
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM %s WHERE %s = %d", qualified(w.d.db, table), quoteIdent(colBatch), token)
	if err := w.readRow(ctx, q, &n); err != nil {
		return 0, fmt.Errorf("clickhouse: count block %d in %q: %w", token, table, err)
	}
	return int64(n), nil
}

// staged returns how many rows of block token the staging table holds.
func (w *writer) stagedRows(ctx context.Context, table string, token uint64) (int64, error) {
	return w.count(ctx, stageName(table), token)
}

// applied reports whether epoch is recorded as applied.
func (w *writer) applied(ctx context.Context, epoch uint64) (bool, error) {
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM %s WHERE pipeline = %s AND epoch = %d", qualified(w.d.db, epochsTable), quoteString(w.pipeline), epoch)
	if err := w.readRow(ctx, q, &n); err != nil {
		return false, fmt.Errorf("clickhouse: look up epoch %d: %w", epoch, err)
	}
	return n > 0, nil
}

// decodeAll groups the committables' blocks by table, in lane order.
func (w *writer) decodeAll(epoch uint64, committables []sink.Committable) (map[string][]stagedBlock, int64, error) {
	byTable := make(map[string][]stagedBlock)
	var total int64
	for lane, raw := range committables {
		c, err := decodeCommittable(raw)
		if err != nil {
			return nil, 0, fmt.Errorf("lane %d: %w", lane, err)
		}
		if len(c.Blocks) == 0 {
			continue
		}
		if c.Epoch != epoch {
			return nil, 0, fmt.Errorf("clickhouse: lane %d's committable is for epoch %d, not %d", lane, c.Epoch, epoch)
		}
		if c.Pipeline != w.pipeline {
			return nil, 0, fmt.Errorf("clickhouse: lane %d's committable is for pipeline %q, not %q", lane, c.Pipeline, w.pipeline)
		}
		for _, b := range c.Blocks {
			if err := checkTable(b.Table); err != nil && b.Table != quarantineTable {
				return nil, 0, fmt.Errorf("clickhouse: lane %d's committable: %w", lane, err)
			}
			byTable[b.Table] = append(byTable[b.Table], b)
			total += b.Rows
		}
	}
	return byTable, total, nil
}

// dropStaged drops the staging partitions of applied blocks (best effort:
// a leftover partition is never read again).
func (w *writer) dropStaged(ctx context.Context, byTable map[string][]stagedBlock) {
	for t, bs := range byTable {
		for _, b := range bs {
			if err := w.d.conn.Exec(ctx, dropStagePartition(w.d.db, t, b.Token)); err != nil {
				w.d.log.Warn("clickhouse: could not drop an applied block's staging partition; it is harmless but takes space",
					"table", t, "token", b.Token, "err", err)
			}
			w.d.forget(b.Token)
		}
	}
}

// fence returns the pipeline's fence: the highest generation that
// recovered, 0 if none.
func (w *writer) fence(ctx context.Context) (uint64, error) {
	var g uint64
	if err := w.readRow(ctx, "SELECT "+fenceExpr(w.d.db, w.pipeline), &g); err != nil {
		return 0, fmt.Errorf("clickhouse: read the fence of %q: %w", w.pipeline, err)
	}
	return g, nil
}

func (w *writer) checkFence(ctx context.Context, gen uint64) error {
	f, err := w.fence(ctx)
	if err != nil {
		return err
	}
	if f > gen {
		return fmt.Errorf("clickhouse: pipeline %q: generation %d is fenced by generation %d: %w", w.pipeline, gen, f, sink.ErrFenced)
	}
	return nil
}

// Recover raises the pipeline's fence to gen (a row in _openetl_fence;
// the fence is the highest), waits until no apply of an older generation
// runs on the server any more, and reports what became of head's epoch:
// Applied when it is recorded in _openetl_epochs (or had no rows, or head
// is nil), Recoverable when each of its blocks is still staged or already
// in its table, Lost otherwise. It fails with an error wrapping
// sink.ErrFenced when a newer generation has recovered, and, before it
// raises the fence, with a *sink.AheadError when _openetl_epochs records
// an epoch of the pipeline after head's (any, when head is nil): the
// checkpoint log was lost or replaced.
func (w *writer) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	if gen == 0 {
		return 0, errors.New("clickhouse: Recover with generation 0")
	}
	g := uint64(gen)
	if err := w.checkFence(ctx, g); err != nil {
		return 0, err
	}
	if err := w.checkAhead(ctx, gen, head); err != nil {
		return 0, err
	}
	if err := w.d.conn.Exec(ctx, raiseFence(w.d.db, w.pipeline, g)); err != nil {
		return 0, fmt.Errorf("clickhouse: raise the fence of %q to %d: %w", w.pipeline, g, err)
	}
	if err := w.checkFence(ctx, g); err != nil {
		return 0, err
	}
	w.gen.Store(g)
	w.d.setGen(w.pipeline, g)
	// From here on an older generation's apply copies nothing (it reads
	// the fence when it starts); one that started before still runs.
	if err := w.waitApplies(ctx); err != nil {
		return 0, err
	}
	out, err := w.outcome(ctx, head)
	if err != nil {
		return 0, err
	}
	var epoch uint64
	if head != nil {
		epoch = head.Epoch
	}
	w.d.log.Info("clickhouse: recovered", "pipeline", w.pipeline, "generation", g, "epoch", epoch, "outcome", out.String())
	return out, nil
}

// checkAhead fails with a *sink.AheadError when the pipeline's last
// applied epoch is after head's.
func (w *writer) checkAhead(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) error {
	var epoch, applied uint64
	q := fmt.Sprintf("SELECT epoch, generation FROM %s WHERE pipeline = %s ORDER BY epoch DESC LIMIT 1",
		qualified(w.d.db, epochsTable), quoteString(w.pipeline))
	rows, err := w.d.conn.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("clickhouse: look up the last applied epoch of %q: %w", w.pipeline, err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&epoch, &applied); err != nil {
			return fmt.Errorf("clickhouse: look up the last applied epoch of %q: %w", w.pipeline, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: look up the last applied epoch of %q: %w", w.pipeline, err)
	}
	return sink.CheckAhead(w.pipeline, "table "+qualified(w.d.db, epochsTable), epoch, checkpoint.Generation(applied), gen, head)
}

func (w *writer) outcome(ctx context.Context, head *checkpoint.Record) (sink.Outcome, error) {
	if head == nil {
		return sink.Applied, nil
	}
	if head.Pipeline != "" && head.Pipeline != w.pipeline {
		return 0, fmt.Errorf("clickhouse: Recover of pipeline %q given a record of pipeline %q", w.pipeline, head.Pipeline)
	}
	cs := make([]sink.Committable, len(head.Committables))
	for i, c := range head.Committables {
		cs[i] = c
	}
	byTable, _, err := w.decodeAll(head.Epoch, cs)
	if err != nil {
		return 0, err
	}
	if len(byTable) == 0 {
		return sink.Applied, nil
	}
	applied, err := w.applied(ctx, head.Epoch)
	if err != nil {
		return 0, err
	}
	if applied {
		w.dropStaged(ctx, byTable)
		return sink.Applied, nil
	}
	for _, t := range slices.Sorted(maps.Keys(byTable)) {
		for _, b := range byTable[t] {
			n, err := w.stagedRows(ctx, t, b.Token)
			if err != nil {
				return 0, err
			}
			if n == b.Rows {
				continue
			}
			if n, err = w.count(ctx, t, b.Token); err != nil {
				return 0, err
			}
			if n != b.Rows {
				w.d.log.Warn("clickhouse: a block of the head epoch is neither staged nor applied", "pipeline", w.pipeline,
					"epoch", head.Epoch, "table", t, "token", b.Token)
				if w.d.replicated() {
					return w.acrossReplicas(ctx, head.Epoch, byTable)
				}
				return sink.Lost, nil
			}
		}
	}
	return sink.Recoverable, nil
}

var _ sink.Collector = (*Destination)(nil)

// Collect implements sink.Collector: it drops the staging partitions
// (one per staged block) that older generations of req.Pipeline left
// behind — blocks of epochs that never reached a checkpoint record, or
// whose writer died before Close — except req.Head's blocks, which
// Commit may still need. Only blocks stamped with a generation below
// req.Generation are listed, so a newer attempt's are never touched;
// and none is dropped unless req.Held, asked after the listing, says
// the generation still holds the pipeline. Removed counts the
// partitions dropped, Kept those of Head's blocks found.
func (d *Destination) Collect(ctx context.Context, req sink.CollectRequest) (sink.Collected, error) {
	if d.shards != nil {
		return d.collectCluster(ctx, req)
	}
	keep := make(map[uint64]bool)
	if req.Head != nil {
		for _, raw := range req.Head.Committables {
			c, err := decodeCommittable(raw)
			if err != nil {
				return sink.Collected{}, err
			}
			for _, b := range c.Blocks {
				keep[b.Token] = true
			}
		}
	}
	type part struct {
		stage string
		token uint64
	}
	out, err := sink.CollectStaged(ctx, req,
		func(ctx context.Context) ([]sink.Staged, error) {
			stages, err := d.stagingTables(ctx)
			if err != nil {
				return nil, err
			}
			var found []sink.Staged
			for _, st := range stages {
				tokens, err := d.leftovers(ctx, st, req.Pipeline, uint64(req.Generation))
				if err != nil {
					return nil, err
				}
				for _, t := range tokens {
					found = append(found, sink.Staged{Name: fmt.Sprintf("%s/%d", st, t)})
				}
			}
			return found, nil
		},
		func(s sink.Staged) bool {
			_, tok, _ := strings.Cut(s.Name, "/")
			t, _ := strconv.ParseUint(tok, 10, 64)
			return keep[t]
		},
		func(ctx context.Context, s sink.Staged) error {
			st, tok, _ := strings.Cut(s.Name, "/")
			q := fmt.Sprintf("ALTER TABLE %s DROP PARTITION %s", qualified(d.db, st), tok)
			if err := d.conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("clickhouse: drop a leftover block of %q: %w", st, err)
			}
			return nil
		})
	if out.Removed > 0 {
		d.log.Info("clickhouse: dropped blocks older attempts left staged", "pipeline", req.Pipeline,
			"blocks", out.Removed, "kept", out.Kept)
	}
	return out, err
}

// stagingTables lists the staging tables of the database.
func (d *Destination) stagingTables(ctx context.Context) ([]string, error) {
	rows, err := d.conn.Query(ctx, "SELECT name FROM system.tables WHERE database = "+quoteString(d.db)+" AND startsWith(name, "+quoteString(stagePrefix)+")")
	if err != nil {
		return nil, fmt.Errorf("clickhouse: list staging tables: %w", err)
	}
	defer rows.Close()
	var stages []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("clickhouse: list staging tables: %w", err)
		}
		stages = append(stages, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: list staging tables: %w", err)
	}
	return stages, nil
}

// leftovers lists the tokens of pipeline's blocks in stage staged by
// generations below gen.
func (d *Destination) leftovers(ctx context.Context, stage, pipeline string, gen uint64) ([]uint64, error) {
	rows, err := d.conn.Query(ctx, leftoverBlocks(d.db, stage, pipeline, gen))
	if err != nil {
		return nil, fmt.Errorf("clickhouse: list leftover blocks of %q: %w", stage, err)
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var t uint64
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

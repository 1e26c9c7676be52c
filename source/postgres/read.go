package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/openetl/etl/source"
)

// split reads every opened table through the slot: a snapshot first
// (when there is no resume state), then the change stream.
type split struct {
	src    *Source
	id     source.SplitID
	tables []*table
	resume *state

	rels map[uint32]*relation // from the stream's relation messages
	buf  []byte
	key  []byte
}

// relation maps a pgoutput relation ID to an opened table; table is nil
// for a published table that was not opened.
type relation struct {
	table *table
}

func (sp *split) ID() source.SplitID { return sp.id }

// pollInterval is how often a bounded Read asks the server for a
// keepalive while it waits to pass its end position.
const pollInterval = 100 * time.Millisecond

// Read emits the snapshot (unless resuming) and then the changes after
// it. Bounded, it stops once it has passed the server's WAL insert
// position as of the end of the snapshot (resuming: the start of Read).
func (sp *split) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := sp.src
	repl, err := pgconn.ConnectConfig(ctx, s.replConfig())
	if err != nil {
		return fmt.Errorf("postgres: replication connect: %w", err)
	}
	defer repl.Close(context.WithoutCancel(ctx))

	var start state
	var confirmed pglogrepl.LSN
	if sp.resume == nil {
		if start, err = sp.snapshot(ctx, repl, e); err != nil {
			return err
		}
		confirmed = start.lsn
	} else {
		start = *sp.resume
		if confirmed, err = s.checkSlot(ctx, start.lsn); err != nil {
			return err
		}
	}
	// A bounded read ends at the server's WAL insert position when the
	// snapshot is done (or, resuming, at the start): it includes what
	// was committed while the snapshot was read. The insert position, not
	// pg_current_wal_lsn (the write position, which lags behind commits
	// under synchronous_commit=off).
	var end pglogrepl.LSN
	if bounded {
		if end, err = sp.currentLSN(ctx); err != nil {
			return err
		}
	}
	if bounded && start.lsn >= end {
		return e.ResumePoint(start.encode())
	}
	return sp.stream(ctx, repl, e, start, confirmed, bounded, end)
}

func (sp *split) currentLSN(ctx context.Context) (pglogrepl.LSN, error) {
	s := sp.src
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.queryConn(ctx)
	if err != nil {
		return 0, err
	}
	rows, err := queryText(ctx, c, `SELECT pg_current_wal_insert_lsn()`)
	if err != nil {
		return 0, fmt.Errorf("postgres: current WAL position: %w", err)
	}
	return pglogrepl.ParseLSN(string(rows[0][0]))
}

// snapshot (re)creates the slot with an exported snapshot, reads every
// opened table under it as inserts with seq = the slot's consistent
// point, and emits the first resume point.
func (sp *split) snapshot(ctx context.Context, repl *pgconn.PgConn, e source.Emitter) (state, error) {
	s := sp.src
	// No resume state: nothing read from an earlier slot of this name was
	// committed, so it is dropped (WAIT: an earlier Read's walsender may
	// still be exiting) and made again — unless another process is
	// streaming from it right now: then it is not ours to drop.
	if err := checkSlotIdle(ctx, repl, s.cfg.Slot); err != nil {
		return state{}, err
	}
	if err := pglogrepl.DropReplicationSlot(ctx, repl, s.cfg.Slot, pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42704" { // undefined_object: no such slot
			return state{}, fmt.Errorf("postgres: drop old slot %q: %w", s.cfg.Slot, err)
		}
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, s.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return state{}, fmt.Errorf("postgres: create slot %q: %w", s.cfg.Slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return state{}, err
	}
	s.log.InfoContext(ctx, "created slot", "lsn", lsn.String(), "snapshot", res.SnapshotName)

	// The exported snapshot lives until the next command on repl: import
	// it on a separate connection before START_REPLICATION.
	c, err := pgconn.ConnectConfig(ctx, s.conn)
	if err != nil {
		return state{}, fmt.Errorf("postgres: connect: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := queryText(ctx, c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT "+
		quoteLiteral(res.SnapshotName)); err != nil {
		return state{}, fmt.Errorf("postgres: import snapshot %s: %w", res.SnapshotName, err)
	}
	seq := int64(lsn)
	for _, t := range sp.tables {
		if err := sp.readTable(ctx, c, e, t, seq); err != nil {
			return state{}, err
		}
	}
	if _, err := queryText(ctx, c, "COMMIT"); err != nil {
		return state{}, err
	}
	st := state{lsn: lsn, snapshot: lsn}
	return st, e.ResumePoint(st.encode())
}

func (sp *split) readTable(ctx context.Context, c *pgconn.PgConn, e source.Emitter, t *table, seq int64) error {
	sql := "SELECT "
	for i, col := range t.stream.Columns {
		if i > 0 {
			sql += ", "
		}
		sql += quoteIdent(col.Name)
	}
	sql += " FROM ONLY " + t.ident()
	rr := c.ExecParams(ctx, sql, nil, nil, nil, nil)
	for rr.NextRow() {
		vals := rr.Values()
		sp.key = sp.key[:0]
		for _, k := range t.key {
			sp.key = source.AppendRowValue(sp.key, vals[k])
		}
		sp.buf = sp.buf[:0]
		for _, v := range vals {
			if v == nil {
				sp.buf = source.AppendRowNull(sp.buf)
			} else {
				sp.buf = source.AppendRowValue(sp.buf, v)
			}
		}
		if err := e.Record(t.stream.Name, source.OpInsert, seq, sp.key, sp.buf); err != nil {
			rr.Close()
			return err
		}
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("postgres: snapshot of %s: %w", t.stream.Name, err)
	}
	return nil
}

// stream runs START_REPLICATION from start and emits changes, with a
// resume point after every transaction that touched an opened table.
func (sp *split) stream(ctx context.Context, repl *pgconn.PgConn, e source.Emitter, start state,
	confirmed pglogrepl.LSN, bounded bool, end pglogrepl.LSN) error {
	s := sp.src
	err := pglogrepl.StartReplication(ctx, repl, s.cfg.Slot, start.lsn, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names " + quoteLiteral(s.cfg.Publication)},
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42704" {
			return &SlotError{Slot: s.cfg.Slot, Want: start.lsn, Err: ErrSlotMissing}
		}
		return fmt.Errorf("postgres: start replication on slot %q at %s: %w", s.cfg.Slot, start.lsn, err)
	}
	s.reading.Store(true)
	defer s.reading.Store(false)

	pos := start.lsn      // resume position: after the last whole transaction
	received := start.lsn // highest WAL position seen
	inTxn, touched := false, false
	sendStatus := func(reply bool) error {
		flush := max(confirmed, pglogrepl.LSN(s.acked.Load()))
		// The flush position is always set explicitly: a zero one would
		// make the server take the write position as flushed.
		return pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: max(received, flush), WALFlushPosition: flush, WALApplyPosition: flush,
			ClientTime: time.Now(), ReplyRequested: reply,
		})
	}
	interval := s.cfg.StatusInterval
	if bounded {
		interval = pollInterval
	}
	next := time.Now().Add(interval)
	if bounded {
		next = time.Now()
	}
	for {
		if time.Now().After(next) {
			if err := sendStatus(bounded); err != nil {
				return fmt.Errorf("postgres: status update: %w", err)
			}
			next = time.Now().Add(interval)
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		msg, err := repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("postgres: receive on slot %q: %w", s.cfg.Slot, err)
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("postgres: replication on slot %q: %w", s.cfg.Slot, pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("postgres: keepalive: %w", err)
				}
				received = max(received, ka.ServerWALEnd)
				if ka.ReplyRequested {
					next = time.Now()
				}
				// Every transaction that committed before the server's
				// sent position has been delivered: past the end and
				// between transactions, a bounded read is done.
				if bounded && !inTxn && ka.ServerWALEnd >= end {
					st := state{lsn: max(pos, ka.ServerWALEnd), snapshot: start.snapshot}
					return e.ResumePoint(st.encode())
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("postgres: xlogdata: %w", err)
				}
				received = max(received, xld.WALStart)
				m, err := pglogrepl.Parse(xld.WALData)
				if err != nil {
					return fmt.Errorf("postgres: pgoutput message: %w", err)
				}
				// A transaction in progress when the slot was created can
				// have changes before the snapshot's position: keep seqs
				// above the snapshot rows' (see the package doc).
				seq := int64(max(xld.WALStart, start.snapshot+1))
				switch m := m.(type) {
				case *pglogrepl.BeginMessage:
					inTxn, touched = true, false
				case *pglogrepl.CommitMessage:
					inTxn = false
					pos = max(pos, m.TransactionEndLSN)
					if touched {
						if err := e.ResumePoint(state{lsn: pos, snapshot: start.snapshot}.encode()); err != nil {
							return err
						}
					}
					if bounded && m.TransactionEndLSN >= end {
						if !touched {
							return e.ResumePoint(state{lsn: pos, snapshot: start.snapshot}.encode())
						}
						return nil
					}
				case *pglogrepl.RelationMessage:
					sp.rels[m.RelationID] = &relation{table: sp.lookup(m)}
				case *pglogrepl.InsertMessage:
					if t := sp.rel(m.RelationID); t != nil {
						touched = true
						if err := sp.emitTuple(e, t, source.OpInsert, seq, m.Tuple); err != nil {
							return err
						}
					}
				case *pglogrepl.UpdateMessage:
					if t := sp.rel(m.RelationID); t != nil {
						touched = true
						if m.OldTupleType == 'K' || m.OldTupleType == 'O' {
							// The key changed (or REPLICA IDENTITY FULL): when
							// it differs, the old key's row is gone.
							old := append([]byte(nil), sp.tupleKey(t, m.OldTuple)...)
							if string(old) != string(sp.tupleKey(t, m.NewTuple)) {
								if err := e.Record(t.stream.Name, source.OpDelete, seq, old, nil); err != nil {
									return err
								}
							}
						}
						if err := sp.emitTuple(e, t, source.OpUpdate, seq, m.NewTuple); err != nil {
							return err
						}
					}
				case *pglogrepl.DeleteMessage:
					if t := sp.rel(m.RelationID); t != nil {
						touched = true
						// Under REPLICA IDENTITY DEFAULT the old tuple holds the
						// key columns and nulls: the delete row carries the key.
						key := append([]byte(nil), sp.tupleKey(t, m.OldTuple)...)
						payload := sp.row(t, m.OldTuple)
						if err := e.Record(t.stream.Name, source.OpDelete, seq, key, payload); err != nil {
							return err
						}
					}
				case *pglogrepl.TruncateMessage:
					// Not carried in this version: see the package doc.
					s.log.WarnContext(ctx, "truncate not replicated", "relations", m.RelationNum)
				}
			}
		}
	}
}

func (sp *split) lookup(m *pglogrepl.RelationMessage) *table {
	for _, t := range sp.tables {
		if t.schema == m.Namespace && t.name == m.RelationName {
			return t
		}
	}
	return nil
}

func (sp *split) rel(id uint32) *table {
	if r := sp.rels[id]; r != nil {
		return r.table
	}
	return nil
}

func (sp *split) emitTuple(e source.Emitter, t *table, op source.Op, seq int64, tup *pglogrepl.TupleData) error {
	return e.Record(t.stream.Name, op, seq, sp.tupleKey(t, tup), sp.row(t, tup))
}

// row encodes a tuple as a declared-row payload in sp.buf.
func (sp *split) row(t *table, tup *pglogrepl.TupleData) []byte {
	sp.buf = sp.buf[:0]
	if tup == nil {
		return sp.buf
	}
	for _, col := range tup.Columns {
		switch col.DataType {
		case pglogrepl.TupleDataTypeNull:
			sp.buf = source.AppendRowNull(sp.buf)
		case pglogrepl.TupleDataTypeToast:
			// Unchanged TOAST value: not sent, and never written as null.
			sp.buf = source.AppendRowUnchanged(sp.buf)
		default:
			sp.buf = source.AppendRowValue(sp.buf, col.Data)
		}
	}
	return sp.buf
}

// tupleKey encodes the tuple's primary-key values the way the snapshot
// does, in sp.key.
func (sp *split) tupleKey(t *table, tup *pglogrepl.TupleData) []byte {
	sp.key = sp.key[:0]
	if tup == nil {
		return sp.key
	}
	for _, k := range t.key {
		if k < len(tup.Columns) {
			sp.key = source.AppendRowValue(sp.key, tup.Columns[k].Data)
		}
	}
	return sp.key
}

// checkSlotIdle fails with ErrSlotInUse when a process streams from slot.
// The name is validated (lowercase letters, digits, '_'), so it can sit in
// the query as a literal.
func checkSlotIdle(ctx context.Context, repl *pgconn.PgConn, slot string) error {
	res, err := repl.Exec(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '"+slot+"' AND active").ReadAll()
	if err != nil {
		return fmt.Errorf("postgres: look up slot %q: %w", slot, err)
	}
	if len(res) == 1 && len(res[0].Rows) > 0 {
		return fmt.Errorf("%w: slot %q is streaming to process %s: another pipeline (or tool) uses it; give this pipeline a slot of its own",
			ErrSlotInUse, slot, res[0].Rows[0][0])
	}
	return nil
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/openetl/etl/source"
)

// resetNotice is the source.reset notice of a start over from a new
// slot and snapshot after err (Config.OnPositionLost).
func resetNotice(err error) source.Notice {
	return source.Notice{Kind: source.NoticeReset, Err: err,
		Detail: "the replication slot's position was lost: started over from a new slot and a new snapshot of every table " +
			"(Config.OnPositionLost); rows deleted meanwhile stay at the destination, and an append destination gets every row again"}
}

// split streams the slot's changes to every opened table, from start.
type split struct {
	src    *Source
	id     source.SplitID
	tables []*table
	start  state
	// handed are the snapshot splits whose rest this split reads, by
	// ID (handOver), told when their job ends.
	handed map[string]*snapSplit

	rels map[uint32]*relation // from the stream's relation messages
	// published holds every table of the publication when the attempt
	// read the catalog, at position discovered: a relation message of
	// another table, in a transaction committed after that, is a table
	// added to the publication since.
	published  map[[2]string]bool
	discovered pglogrepl.LSN
	// parts holds, per opened partitioned table, its leaf partitions
	// (schema and name) and their attachments (part.gen) when the attempt
	// read the catalog; nil without partitioned tables.
	parts map[*table]map[[2]string]string
	// reset is why Open started over with a new slot and snapshot
	// (Config.OnPositionLost), reported at the start of Read; nil
	// otherwise.
	reset error
	// rs reads tables again on request (see resnapshot.go).
	rs resnap
	// signal is the index of the stream column of Config.SignalTable,
	// signalName its schema and name; -1 without one.
	signal     int
	signalName [2]string
	buf        []byte
	key        []byte

	// For Lag, read from other goroutines: the server's WAL end at the
	// last keepalive and the position read up to.
	serverEnd, readTo atomic.Uint64
}

// Lag reports how many bytes of WAL the split is behind the server's
// position at its last keepalive (see source.LagReporter); the age of
// the oldest unread change is unknown.
func (sp *split) Lag() (behind int64, unit string, age time.Duration, ok bool) {
	end, at := sp.serverEnd.Load(), sp.readTo.Load()
	if end == 0 {
		return 0, "byte", -1, false
	}
	return int64(end - min(at, end)), "byte", -1, true
}

// relation maps a pgoutput relation ID to an opened table (nil for a
// published table that was not opened) and its columns, as the stream
// sends them, to the table's declared ones.
type relation struct {
	table *table
	src   []int // per declared column: the index in the stream's tuples, or -1 (added since: null)
	// signal is, for Config.SignalTable, the index of its stream column
	// in the stream's tuples; -1 for other tables.
	signal int
}

func (sp *split) ID() source.SplitID { return sp.id }

// pollInterval is how often a bounded Read asks the server for a
// keepalive while it waits to pass its end position.
const pollInterval = 100 * time.Millisecond

// stopWindow: keepalives asking for a reply within stopWindow of the
// answer to the one before, twice in a row, say the server is shutting
// down. A stopping walsender waits for its client to confirm the end of
// WAL and asks again right after each answer; otherwise a walsender asks
// only after wal_sender_timeout/2 without a message from the client (a
// server with wal_sender_timeout under 2 s would look like stopping).
const stopWindow = time.Second

// isShutdown reports whether the server terminated the connection
// because it is stopping: admin_shutdown (fast or immediate stop),
// crash_shutdown, cannot_connect_now.
func isShutdown(err *pgconn.PgError) bool {
	return err.Code == "57P01" || err.Code == "57P02" || err.Code == "57P03"
}

// Read streams the changes after its start position. Bounded, it stops
// once it has passed the server's WAL insert position as of the start of
// Read.
func (sp *split) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	err := sp.read(ctx, e, bounded)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// Cancelled mid-query or mid-connect: pgconn says the connection
		// closed; the caller asked for it, and must see its own cause.
		return fmt.Errorf("postgres: change stream: %w (%w)", ctx.Err(), err)
	}
	return err
}

func (sp *split) read(ctx context.Context, e source.Emitter, bounded bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := sp.src
	start := sp.start
	confirmed, err := s.checkSlot(ctx, start.lsn)
	if err != nil {
		var se *SlotError
		if errors.As(err, &se) && s.cfg.OnPositionLost == source.PositionLostResnapshot {
			return lostWhileReading{se}
		}
		return err
	}
	if r, ok := e.(source.Reporter); ok && sp.reset != nil {
		r.Report(resetNotice(sp.reset))
	}
	// Where this split starts is a place to resume from (the first
	// checkpoint of a fresh start needs it before any change arrives).
	if err := e.ResumePoint(start.encode()); err != nil {
		return err
	}
	if beforeStart != nil {
		beforeStart()
	}
	repl, err := s.connect(ctx, true)
	if err != nil {
		return err
	}
	defer sp.closeRepl(ctx, repl)
	// A bounded read ends at the server's WAL position as of now (see
	// walPosition): it includes everything committed before the sync
	// started, on a standby everything it had replayed.
	var end pglogrepl.LSN
	if bounded {
		// A start past a fork of the server's timeline can lie past its
		// end too: the check comes first (stream makes it again, for
		// every connection).
		if _, err := sp.timeline(ctx, repl, start); err != nil {
			return err
		}
		if end, err = sp.currentLSN(ctx); err != nil {
			return err
		}
		if start.lsn >= end && !sp.rs.active() {
			return nil
		}
	}
	if err := sp.streamOn(ctx, repl, e, start, confirmed, bounded, end); err != nil || !bounded {
		return err
	}
	// A partition attached before the end read no row through the
	// stream: a new attempt reads it.
	return sp.partitionsChanged(ctx, end)
}

func (sp *split) currentLSN(ctx context.Context) (pglogrepl.LSN, error) {
	s := sp.src
	s.mu.Lock()
	defer s.mu.Unlock()
	var lsn pglogrepl.LSN
	err := s.withQuery(ctx, func(c *pgconn.PgConn) (err error) {
		lsn, _, err = walPosition(ctx, c)
		return err
	})
	return lsn, err
}

// beforeStart, when set (by tests), runs between the check of the slot
// and START_REPLICATION: at Read's start and when a broken stream is
// taken up again.
var beforeStart func()

// checkHeld checks the slot again once repl streams from it. Read
// checked it before START_REPLICATION, but another process (a second
// copy of the pipeline starting fresh) may have dropped it and created
// it again in between: the new slot's confirmed position is its own
// consistent point, past start, and the server silently streams from
// there, skipping the changes in between. Now that repl holds the slot
// nobody can drop it, and its confirmed position only moves with this
// stream's acknowledgements, so one look settles it: a slot confirmed
// past start fails Read with a *SlotError wrapping ErrSlotAdvanced (under
// PositionLostResnapshot, a new snapshot, as at Read's start).
func (sp *split) checkHeld(ctx context.Context, repl *pgconn.PgConn, start pglogrepl.LSN) error {
	s := sp.src
	confirmed, err := s.checkSlot(ctx, start)
	if err != nil {
		var se *SlotError
		if errors.As(err, &se) && s.cfg.OnPositionLost == source.PositionLostResnapshot {
			return lostWhileReading{se}
		}
		return err
	}
	s.log.DebugContext(ctx, "streaming", "slot", s.cfg.Slot, "pid", repl.PID(), "confirmed", confirmed.String())
	return nil
}

// slotReleaseWait bounds how long closeRepl waits for the server to let
// go of the slot.
const slotReleaseWait = 10 * time.Second

// closeRepl closes the replication connection and waits until its server
// process has released the slot: closing the socket returns before the
// walsender exits, and a Read or Open right after (a retry, a restart in
// the same process) would find the slot still active and fail with
// ErrSlotInUse. The wait ends early when the server can't be asked; an
// error here changes nothing that Read returns.
func (sp *split) closeRepl(ctx context.Context, repl *pgconn.PgConn) {
	ctx = context.WithoutCancel(ctx)
	pid := repl.PID()
	repl.Close(ctx)
	s := sp.src
	ctx, cancel := context.WithTimeout(ctx, slotReleaseWait)
	defer cancel()
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		s.mu.Lock()
		held, err := s.slotHeldBy(ctx, pid)
		s.mu.Unlock()
		if err != nil || !held {
			return
		}
		select {
		case <-ctx.Done():
			s.log.Warn("the replication connection is closed but its server process still holds the slot", "pid", pid)
			return
		case <-time.After(delay):
		}
	}
}

// slotHeldBy reports whether server process pid streams from the slot.
// The caller holds s.mu.
func (s *Source) slotHeldBy(ctx context.Context, pid uint32) (bool, error) {
	var rows [][][]byte
	err := s.withQuery(ctx, func(c *pgconn.PgConn) (err error) {
		rows, err = queryText(ctx, c, fmt.Sprintf(`SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active_pid = %d`,
			quoteLiteral(s.cfg.Slot), pid))
		return err
	})
	return len(rows) > 0, err
}

// stream runs START_REPLICATION from start and emits changes, with a
// resume point after every transaction that touched an opened table and
// at keepalives between transactions.
func (sp *split) stream(ctx context.Context, repl *pgconn.PgConn, e source.Emitter, start state,
	confirmed pglogrepl.LSN, bounded bool, end pglogrepl.LSN) error {
	s := sp.src
	proto, err := s.protocol(repl)
	if err != nil {
		return err
	}
	args := []string{"proto_version '" + strconv.Itoa(proto) + "'", "publication_names " + quoteLiteral(s.cfg.Publication)}
	if proto >= 2 {
		args = append(args, "streaming 'on'")
	}
	if serverMajor(repl) >= 14 {
		// Logical decoding messages: re-snapshot requests and watermarks.
		args = append(args, "messages 'true'")
	}
	tli, err := sp.timeline(ctx, repl, start)
	if err != nil {
		return err
	}
	err = pglogrepl.StartReplication(ctx, repl, s.cfg.Slot, start.lsn, pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		if isUndefinedObject(err) {
			return &SlotError{Slot: s.cfg.Slot, Want: start.lsn, Err: ErrSlotMissing}
		}
		return fmt.Errorf("postgres: start replication on slot %q at %s: %w", s.cfg.Slot, start.lsn, err)
	}
	if err := sp.checkHeld(ctx, repl, start.lsn); err != nil {
		return err
	}
	s.reading.Store(true)
	defer s.reading.Store(false)
	// Changes pass through dedupe, which drops a key's row from a
	// re-snapshot chunk in flight when its snapshot missed the change.
	d := &dedupe{Emitter: e, sp: sp}
	e = d
	defer sp.rs.close(ctx)

	pos := start.lsn      // resume position: after the last whole transaction
	emitted := start.lsn  // the last resume point's position
	received := start.lsn // highest WAL position seen
	inTxn, touched := false, false
	pending := false // records emitted since the last resume point
	// Protocol 2: large transactions streamed while in progress, buffered
	// by xid until their stream commit.
	inStream := false
	var streamed map[uint32]*txnBuffer
	var cur *txnBuffer // the transaction of the open stream block
	defer func() {
		for _, b := range streamed {
			b.close()
		}
	}()
	var txnStart, txnCommit pglogrepl.LSN
	byName := make(map[string]*table, len(sp.tables))
	for _, t := range sp.tables {
		byName[t.stream.Name] = t
	}
	resume := func(at pglogrepl.LSN) error {
		emitted, pending = at, false
		sp.readTo.Store(uint64(at))
		return e.ResumePoint(state{lsn: at, snapshot: start.snapshot, tli: tli, tail: sp.rs.encoded}.encode())
	}
	// place emits the resume point a committed transaction earned. A
	// transaction streamed in progress that is still open there is safe:
	// restarted from a position before its commit, the server decodes it
	// again from its start (the slot's restart_lsn stays before every
	// open transaction) and sends it whole, and the part this session
	// buffered is dropped with the process.
	place := func() error {
		if !pending {
			return nil
		}
		return resume(pos)
	}
	sendStatus := func() error {
		flush := max(confirmed, pglogrepl.LSN(s.acked.Load()))
		// The flush position is always set explicitly: a zero one would
		// make the server take the write position as flushed. A reply is
		// asked for: its keepalive carries the server's position.
		return pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: max(received, flush), WALFlushPosition: flush, WALApplyPosition: flush,
			ClientTime: time.Now(), ReplyRequested: true,
		})
	}
	interval := s.cfg.StatusInterval
	if bounded {
		interval = pollInterval
	}
	next := time.Now()
	// Keepalives asking for a reply: when the last one was answered, and
	// how many in a row came within stopWindow of the answer before.
	var answered time.Time
	asked, quickAsks := false, 0
	var beat time.Time
	if s.cfg.HeartbeatInterval > 0 {
		beat = time.Now().Add(s.cfg.HeartbeatInterval)
	}
	tick := interval
	if s.cfg.HeartbeatInterval > 0 {
		tick = min(tick, s.cfg.HeartbeatInterval)
	}
	// Partitions attached while the stream runs are looked for between
	// transactions, at most every StatusInterval, and at relation messages
	// of partitioned tables (see partitionsChanged).
	partCheck := partitionCheck{next: time.Now().Add(s.cfg.StatusInterval), interval: s.cfg.StatusInterval}
	conn := repl.Conn()
	stopWaker := make(chan struct{})
	defer close(stopWaker)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-stopWaker:
				return
			case <-ctx.Done():
				conn.SetReadDeadline(time.Unix(1, 0))
				return
			case <-t.C:
				conn.SetReadDeadline(time.Unix(1, 0))
			}
		}
	}()
	// stopAt reports whether a bounded Read ends at lsn: past its end,
	// with no table being read again.
	stopAt := func(lsn pglogrepl.LSN) bool { return bounded && lsn >= end && !sp.rs.active() }
	for {
		// Between transactions, a table being read again gets its next
		// chunk once the last one's watermark came by.
		for sp.rs.active() && sp.rs.chunk == nil && !inTxn && !inStream {
			j := sp.rs.x.Jobs[0]
			if j.After == nil && j.Rows == 0 && j.Split == "" && sp.rs.stream.Load() == nil {
				if r, ok := e.(source.Reporter); ok {
					r.Report(source.Notice{Kind: source.NoticeResnapshotStarted, Stream: j.Stream,
						Detail: "the table is read again in chunks while the stream goes on"})
				}
			}
			ch, err := sp.readChunk(ctx)
			if err != nil {
				return err
			}
			if ch == nil {
				sp.finishJob(ctx, e)
				if err := resume(pos); err != nil {
					return err
				}
				continue
			}
			sp.rs.chunk = ch
		}
		now := time.Now()
		if !beat.IsZero() && now.After(beat) {
			if err := sp.heartbeat(ctx); err != nil {
				return err
			}
			beat = now.Add(s.cfg.HeartbeatInterval)
		}
		if now.After(next) {
			if err := sendStatus(); err != nil {
				return lostLink{fmt.Errorf("postgres: status update: %w", err)}
			}
			if asked {
				answered, asked = time.Now(), false
			}
			next = now.Add(interval)
		}
		if len(sp.parts) > 0 && !inTxn && !inStream && partCheck.due(now) {
			if err := sp.partitionsChanged(ctx, pos); err != nil {
				return err
			}
		}
		// Receive without a context: pgconn watches a context per call,
		// which cost about 40% of the loop's CPU. The waker interrupts
		// the read instead, with a read deadline in the past, at each
		// tick and when ctx is done; a timeout is a wake-up.
		msg, err := repl.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				conn.SetReadDeadline(time.Time{})
				// The waker sets a deadline after ctx is done: if that
				// came before the reset above, ctx says so now.
				if ctx.Err() != nil {
					return ctx.Err()
				}
				continue
			}
			return lostLink{fmt.Errorf("postgres: receive on slot %q: %w", s.cfg.Slot, err)}
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			pgErr := pgconn.ErrorResponseToPgError(msg)
			if isShutdown(pgErr) {
				return lostLink{fmt.Errorf("postgres: replication on slot %q: %w: %w", s.cfg.Slot, ErrServerStopping, pgErr)}
			}
			return fmt.Errorf("postgres: replication on slot %q: %w", s.cfg.Slot, pgErr)
		case *pgproto3.CopyDone:
			// The walsender ends the stream only when it stops.
			return lostLink{fmt.Errorf("postgres: replication on slot %q ended by the server: %w", s.cfg.Slot, ErrServerStopping)}
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
				sp.serverEnd.Store(max(sp.serverEnd.Load(), uint64(ka.ServerWALEnd)))
				if ka.ReplyRequested {
					// A stopping walsender waits until the client confirms
					// its end of WAL, which the destination may not have
					// committed yet; it asks again right after each answer.
					// Confirming more would lose changes: let go of it
					// instead, so the server's stop takes its own time.
					if !answered.IsZero() && time.Since(answered) < stopWindow {
						quickAsks++
					} else {
						quickAsks = 0
					}
					if quickAsks >= 2 {
						return lostLink{fmt.Errorf("postgres: replication on slot %q: the server asks for positions up to %s, the destination has committed %s: %w",
							s.cfg.Slot, ka.ServerWALEnd, max(confirmed, pglogrepl.LSN(s.acked.Load())), ErrServerStopping)}
					}
					asked, next = true, time.Now()
				}
				// Not inside a transaction the server is sending: its
				// position can be past the commit of the transaction
				// being sent, and a restart from there would skip the rest
				// of it.
				if inTxn {
					continue
				}
				// Every transaction that committed before the server's
				// sent position has been delivered: between transactions,
				// that position is a place to resume from. So quiet tables
				// still move the slot along with the rest of the WAL.
				pos = max(pos, ka.ServerWALEnd)
				if stopAt(ka.ServerWALEnd) {
					return resume(pos)
				}
				if pos > emitted {
					if err := resume(pos); err != nil {
						return err
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return fmt.Errorf("postgres: xlogdata: %w", err)
				}
				received = max(received, xld.WALStart)
				sp.serverEnd.Store(max(sp.serverEnd.Load(), uint64(xld.ServerWALEnd)))
				var m pglogrepl.Message
				if proto >= 2 {
					m, err = pglogrepl.ParseV2(xld.WALData, inStream)
				} else {
					m, err = pglogrepl.Parse(xld.WALData)
				}
				if err != nil {
					return fmt.Errorf("postgres: pgoutput message: %w", err)
				}
				// Changes go to the runner, or, inside a stream block, to
				// the streamed transaction's buffer (tagged with their
				// subtransaction).
				var out source.Emitter = e
				rels := sp.rels
				if inStream {
					out, rels = cur, cur.rels
				}
				switch v := m.(type) {
				case *pglogrepl.InsertMessageV2:
					m = &v.InsertMessage
					if cur != nil {
						cur.sub = v.Xid
					}
				case *pglogrepl.UpdateMessageV2:
					m = &v.UpdateMessage
					if cur != nil {
						cur.sub = v.Xid
					}
				case *pglogrepl.DeleteMessageV2:
					m = &v.DeleteMessage
					if cur != nil {
						cur.sub = v.Xid
					}
				case *pglogrepl.TruncateMessageV2:
					m = &v.TruncateMessage
				case *pglogrepl.RelationMessageV2:
					m = &v.RelationMessage
				case *pglogrepl.LogicalDecodingMessageV2:
					m = &v.LogicalDecodingMessage
				}
				lookup := func(id uint32) (*relation, error) {
					if r := rels[id]; r != nil {
						return r, nil
					}
					if r := sp.rels[id]; r != nil {
						return r, nil
					}
					// pgoutput sends a relation message before a table's
					// first change in a session: a change without one is a
					// protocol error here, never a change to skip.
					return nil, fmt.Errorf("postgres: change for relation %d at %s before its relation message", id, pglogrepl.LSN(xld.WALStart))
				}
				// A transaction in progress when the slot was created can
				// have changes before the snapshot's position: keep seqs
				// above the snapshot rows' (see the package doc).
				seq := int64(max(xld.WALStart, start.snapshot+1))
				switch m := m.(type) {
				case *pglogrepl.StreamStartMessageV2:
					inStream = true
					if streamed == nil {
						streamed = map[uint32]*txnBuffer{}
					}
					if cur = streamed[m.Xid]; cur == nil {
						cur = newTxnBuffer(s.cfg.StreamedTxnMemory)
						streamed[m.Xid] = cur
					}
				case *pglogrepl.StreamStopMessageV2:
					inStream, cur = false, nil
				case *pglogrepl.StreamAbortMessageV2:
					if b := streamed[m.Xid]; b != nil {
						if m.SubXid == m.Xid {
							b.close()
							delete(streamed, m.Xid)
							if err := place(); err != nil {
								return err
							}
						} else {
							b.aborted[m.SubXid] = true
						}
					}
				case *pglogrepl.StreamCommitMessageV2:
					if b := streamed[m.Xid]; b != nil {
						d.xid = m.Xid
						sp.rs.received(m.Xid)
						n, err := b.replay(e, func(stream string, seq int64) int64 {
							if t := byName[stream]; t != nil {
								return seqFor(t, seq, m.CommitLSN, false)
							}
							return seq
						})
						b.close()
						delete(streamed, m.Xid)
						if err != nil {
							return err
						}
						// The server counts relation messages sent inside a
						// streamed transaction as sent once it commits (and
						// sends them again after an abort): later changes to
						// those tables come without one.
						for id, r := range b.rels {
							sp.rels[id] = r
						}
						pending = pending || n > 0
					}
					pos = max(pos, m.TransactionEndLSN)
					if err := place(); err != nil {
						return err
					}
					if stopAt(m.TransactionEndLSN) {
						if pos > emitted {
							return resume(pos)
						}
						return nil
					}
				case *pglogrepl.BeginMessage:
					inTxn, touched, txnStart, txnCommit = true, false, xld.WALStart, m.FinalLSN
					d.xid = m.Xid
					sp.rs.received(m.Xid)
				case *pglogrepl.CommitMessage:
					inTxn = false
					pos = max(pos, m.TransactionEndLSN)
					pending = pending || touched
					if ch := sp.rs.chunk; ch != nil && ch.high {
						// The chunk's watermark: every change its snapshot
						// missed that commits before it has come by.
						if err := sp.emitChunk(e); err != nil {
							return err
						}
						pending = true
					}
					if err := place(); err != nil {
						return err
					}
					if stopAt(m.TransactionEndLSN) {
						if pos > emitted {
							return resume(pos)
						}
						return nil
					}
				case *pglogrepl.RelationMessage:
					// Relation messages carry no position of their own: the
					// transaction's commit orders them against discovery.
					// In a stream block the commit is not known yet: the
					// server's position orders the message instead.
					at := txnCommit
					if inStream {
						at = received
					}
					r, err := sp.relation(m, at)
					if err != nil {
						return err
					}
					if r.table != nil && r.table.partitioned && at > sp.discovered {
						// pgoutput sends the root's relation message (then
						// the partition's own) before each partition's first
						// change in a session: also before the first change
						// of a partition attached since.
						if err := sp.partitionsChanged(ctx, at); err != nil {
							return err
						}
					}
					rels[m.RelationID] = r
				case *pglogrepl.InsertMessage:
					r, err := lookup(m.RelationID)
					if err != nil {
						return err
					}
					if r.signal >= 0 && r.signal < len(m.Tuple.Columns) {
						// A request in SQL (Config.SignalTable). The server
						// sends a transaction once it committed, except one
						// it streams in progress, which may still abort: a
						// request there is logged, not acted on.
						v := m.Tuple.Columns[r.signal]
						switch {
						case inStream:
							s.log.WarnContext(ctx, "re-snapshot requested in a large transaction the server streamed in progress: ignored; insert it in a transaction of its own",
								"stream", string(v.Data))
						case v.DataType == pglogrepl.TupleDataTypeText && sp.queue(ctx, string(v.Data)):
							touched = true
						}
					}
					if r.table != nil {
						touched = touched || !inStream
						seq := seqFor(r.table, seq, txnCommit, inStream)
						if err := out.Record(r.table.stream.Name, source.OpInsert, seq, sp.tupleKey(r, m.Tuple, nil), sp.row(r, m.Tuple, nil)); err != nil {
							return err
						}
					}
				case *pglogrepl.UpdateMessage:
					r, err := lookup(m.RelationID)
					if err != nil {
						return err
					}
					if r.table != nil {
						touched = touched || !inStream
						t := r.table
						seq := seqFor(t, seq, txnCommit, inStream)
						// The old row comes when the replica identity's
						// columns changed (or hold a TOASTed value): its
						// key columns ('K'), or the whole old row under
						// REPLICA IDENTITY FULL ('O').
						var old *pglogrepl.TupleData
						if m.OldTupleType == pglogrepl.UpdateMessageTupleTypeKey || m.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld {
							old = m.OldTuple
						}
						if old != nil {
							// When the key differs, the old key's row is gone:
							// its delete carries what the old tuple has (the key
							// columns, or the whole old row), like a delete.
							oldKey := append([]byte(nil), sp.tupleKey(r, old, nil)...)
							if string(oldKey) != string(sp.tupleKey(r, m.NewTuple, old)) {
								if err := out.Record(t.stream.Name, source.OpDelete, seq, oldKey, sp.row(r, old, nil)); err != nil {
									return err
								}
							}
						}
						if err := out.Record(t.stream.Name, source.OpUpdate, seq, sp.tupleKey(r, m.NewTuple, old), sp.row(r, m.NewTuple, old)); err != nil {
							return err
						}
					}
				case *pglogrepl.DeleteMessage:
					r, err := lookup(m.RelationID)
					if err != nil {
						return err
					}
					if r.table != nil {
						touched = touched || !inStream
						seq := seqFor(r.table, seq, txnCommit, inStream)
						// Under REPLICA IDENTITY DEFAULT the old tuple holds the
						// key columns and nulls: the delete row carries the key.
						key := append([]byte(nil), sp.tupleKey(r, m.OldTuple, nil)...)
						if err := out.Record(r.table.stream.Name, source.OpDelete, seq, key, sp.row(r, m.OldTuple, nil)); err != nil {
							return err
						}
					}
				case *pglogrepl.LogicalDecodingMessage:
					switch m.Prefix {
					case requestPrefix:
						if sp.request(ctx, m.Content) {
							// Recorded in the next resume point.
							touched, pending = touched || inTxn, pending || !inTxn
						}
					case highPrefix:
						if ch := sp.rs.chunk; ch != nil && string(m.Content) == ch.idJSON() {
							ch.high, ch.lsn = true, txnCommit
						}
					}
				case *pglogrepl.TruncateMessage:
					var names []string
					for _, id := range m.RelationIDs {
						r, err := lookup(id)
						if err != nil {
							return err
						}
						if r.table != nil {
							names = append(names, r.table.stream.Name)
						}
					}
					if len(names) == 0 {
						continue
					}
					if s.cfg.Truncates == TruncateIgnore {
						s.log.WarnContext(ctx, "truncate not replicated (Config.Truncates is TruncateIgnore)", "streams", names)
						continue
					}
					return &TruncateError{Streams: names, LSN: txnStart}
				}
			}
		}
	}
}

// seqFor is the seq of a change of t at seq (its position, kept above the
// slot's snapshot) in a transaction that commits at commit. A change
// written before t's snapshot position but committed after it (in a
// transaction in progress when a re-snapshot of t began) is not in that
// snapshot: it gets a seq just above the snapshot rows'. Inside a
// streamed transaction the commit is not known yet: its changes are
// raised when it commits (txnBuffer.replay).
func seqFor(t *table, seq int64, commit pglogrepl.LSN, inStream bool) int64 {
	if !inStream && commit > t.snapSeq && seq <= int64(t.snapSeq) {
		return int64(t.snapSeq) + 1
	}
	return seq
}

// heartbeat writes a non-transactional logical message into the WAL.
func (sp *split) heartbeat(ctx context.Context) error {
	s := sp.src
	s.mu.Lock()
	defer s.mu.Unlock()
	// A second heartbeat, when the first one's connection was lost after
	// writing it, is one more message nobody reads.
	if err := s.withQuery(ctx, func(c *pgconn.PgConn) error {
		_, err := queryText(ctx, c, `SELECT pg_logical_emit_message(false, 'openetl.heartbeat', '')`)
		return err
	}); err != nil {
		return fmt.Errorf("postgres: heartbeat (Config.HeartbeatInterval): %w", err)
	}
	return nil
}

// relation maps a relation message's columns to its table's declared
// ones, by name. A column the declaration lacks, one whose type
// differs, or a declared column the message lacks, is a schema change
// when it comes in a transaction that committed after the attempt read
// the catalog (a *SchemaChangeError); before, the catalog is newer than
// the stream (a column since dropped is skipped, one since added reads
// null, a changed type's values are read as the declared type).
func (sp *split) relation(m *pglogrepl.RelationMessage, at pglogrepl.LSN) (*relation, error) {
	t := sp.lookup(m)
	if t == nil {
		if !sp.published[[2]string{m.Namespace, m.RelationName}] && at > sp.discovered {
			return nil, &SchemaChangeError{Stream: m.Namespace + "." + m.RelationName, Detail: "table added to the publication", LSN: at}
		}
		r := &relation{signal: -1}
		if sp.signal >= 0 && sp.signalName == [2]string{m.Namespace, m.RelationName} {
			r.signal = slices.IndexFunc(m.Columns, func(c *pglogrepl.RelationMessageColumn) bool { return c.Name == "stream" })
		}
		return r, nil
	}
	r := &relation{table: t, src: make([]int, len(t.stream.Columns)), signal: -1}
	for j := range r.src {
		r.src[j] = -1
	}
	for i, c := range m.Columns {
		j := slices.IndexFunc(t.stream.Columns, func(col source.Column) bool { return col.Name == c.Name })
		var detail string
		switch {
		case j < 0:
			detail = fmt.Sprintf("new column %q", c.Name)
		case c.DataType != t.oids[j] || (t.stream.Columns[j].Type != "" && strings.HasPrefix(t.stream.Columns[j].Type, "numeric(") && c.TypeModifier != t.typmods[j]):
			detail = fmt.Sprintf("column %q changed type (oid %d, modifier %d; declared %s)", c.Name, c.DataType, c.TypeModifier, t.stream.Columns[j].Type)
		}
		if detail != "" && at > t.discovered {
			return nil, &SchemaChangeError{Stream: t.stream.Name, Detail: detail, LSN: at}
		}
		if j >= 0 {
			r.src[j] = i
		}
	}
	// A declared column the stream doesn't send would read as null, a
	// value nobody read: dropped since the catalog was read, or left out
	// of the publication (a column list, publish_generated_columns). A
	// new attempt declares what the stream sends. Before the catalog
	// read, the column is one added since: null is what the row had.
	for j, i := range r.src {
		if i < 0 && at > t.discovered {
			return nil, &SchemaChangeError{Stream: t.stream.Name, LSN: at,
				Detail: fmt.Sprintf("column %q is not in the change stream (dropped, or left out of the publication)", t.stream.Columns[j].Name)}
		}
	}
	return r, nil
}

func (sp *split) lookup(m *pglogrepl.RelationMessage) *table {
	for _, t := range sp.tables {
		if t.schema == m.Namespace && t.name == m.RelationName {
			return t
		}
	}
	return nil
}

// row encodes a tuple as a declared-row payload in sp.buf. An unchanged
// TOAST value ('u': an update that left it alone) is taken from old, the
// update's old tuple, when that has it (REPLICA IDENTITY FULL sends the
// whole old row, detoasted; a key tuple has the identity's columns), and
// is otherwise marked unchanged, never written as null.
func (sp *split) row(r *relation, tup, old *pglogrepl.TupleData) []byte {
	sp.buf = sp.buf[:0]
	if tup == nil {
		return sp.buf
	}
	for _, i := range r.src {
		if i < 0 || i >= len(tup.Columns) {
			sp.buf = source.AppendRowNull(sp.buf)
			continue
		}
		col := tup.Columns[i]
		if col.DataType == pglogrepl.TupleDataTypeToast {
			col = fromOld(col, old, i)
		}
		switch col.DataType {
		case pglogrepl.TupleDataTypeNull:
			sp.buf = source.AppendRowNull(sp.buf)
		case pglogrepl.TupleDataTypeToast:
			sp.buf = source.AppendRowUnchanged(sp.buf)
		default:
			sp.buf = source.AppendRowValue(sp.buf, col.Data)
		}
	}
	return sp.buf
}

// fromOld returns old's column i in place of col, an unchanged TOAST
// value, when old carries its value. A null there is no value: a key
// tuple has nulls for the columns outside the replica identity.
func fromOld(col *pglogrepl.TupleDataColumn, old *pglogrepl.TupleData, i int) *pglogrepl.TupleDataColumn {
	if old == nil || i >= len(old.Columns) {
		return col
	}
	if o := old.Columns[i]; o.DataType == pglogrepl.TupleDataTypeText || o.DataType == pglogrepl.TupleDataTypeBinary {
		return o
	}
	return col
}

// tupleKey encodes the tuple's primary-key values the way the snapshot
// does, in sp.key. A key column the tuple leaves unchanged (a TOASTed
// value: the update's old tuple then has it) is taken from old.
func (sp *split) tupleKey(r *relation, tup, old *pglogrepl.TupleData) []byte {
	sp.key = sp.key[:0]
	if tup == nil {
		return sp.key
	}
	for _, k := range r.table.key {
		if i := r.src[k]; i >= 0 && i < len(tup.Columns) {
			col := tup.Columns[i]
			if col.DataType == pglogrepl.TupleDataTypeToast {
				col = fromOld(col, old, i)
			}
			sp.key = source.AppendRowValue(sp.key, col.Data)
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

// protocol returns the pgoutput protocol version to use on repl: the
// configured one, or by default 2 on Postgres 14+ (streaming of
// transactions in progress) and 1 before.
func (s *Source) protocol(repl *pgconn.PgConn) (int, error) {
	version, major := repl.ParameterStatus("server_version"), serverMajor(repl)
	switch {
	case s.cfg.Protocol == 0 && major >= 14:
		return 2, nil
	case s.cfg.Protocol == 0:
		return 1, nil
	case s.cfg.Protocol == 2 && major < 14:
		return 0, fmt.Errorf("%w: Config.Protocol 2 needs Postgres 14 or later; the server is %q", ErrUnsupported, version)
	}
	return s.cfg.Protocol, nil
}

// serverMajor returns the major version of c's server (15 for
// "15.18 (Debian 15.18-1)"), 0 when it can't tell.
func serverMajor(c *pgconn.PgConn) int {
	v := c.ParameterStatus("server_version")
	major, _ := strconv.Atoi(v[:digits(v)])
	return major
}

// digits returns the length of v's leading run of decimal digits.
func digits(v string) int {
	n := 0
	for n < len(v) && v[n] >= '0' && v[n] <= '9' {
		n++
	}
	return n
}

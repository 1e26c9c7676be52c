package mysql

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/openetl/etl/source"
)

// idleResumeEvery is how often a stream whose transactions touch no
// opened table still places a resume point, so a restart does not read
// them all again.
const idleResumeEvery = time.Second

// errDone ends a bounded read that placed its last resume point.
var errDone = errors.New("mysql: bounded read done")

// reader is one Read's pass over the binlog.
type reader struct {
	sp      *split
	e       source.Emitter
	flavor  string
	bounded bool
	end     position // bounded: stop at the first transaction end at or past it

	cur      position // how far the binlog has been read
	last     state    // the resume state: after the last whole transaction
	gtid     *gtidTracker
	inTxn    bool // between a transaction's GTID (or BEGIN) and its end
	begun    bool // the transaction has a BEGIN: statements in it don't end it
	emitted  bool // records emitted since the last resume point
	lastMark time.Time

	maps map[uint64]*tableMap // by table ID, from table map events

	// undo, for a snapshot split's scan (undo.go), takes the rows' changes
	// instead of the Emitter.
	undo *undoLog

	// the event being read: rows get seqs evStart, evStart+1, ...
	evIdx, evStart, evSize, evOff uint32

	// Re-snapshots (resnapshot.go): the connection chunks are read and
	// watermarks written on, this reader's mark prefix, the chunks it
	// read, and the chunk in flight.
	conn  *client.Conn
	nonce string
	n     int
	chunk *chunk
	rr    rowReader

	before, after, raw rowBuf
}

// rowBuf is one encoded row image: payload and key.
type rowBuf struct {
	payload, key []byte
	offs         []int
}

// tableMap is how an opened table's binlog columns map to its declared
// columns, from a table map event (nil t: a table not opened).
type tableMap struct {
	t         *table
	ev        *replication.TableMapEvent
	conv      []binConv // per binlog column
	declToBin []int     // per declared column: its binlog column, or -1
	binToDecl []int     // per binlog column: its declared column, or -1
	identity  bool      // the binlog columns are the declared ones, in order
	fast      bool      // decode.go reads every column
	marks     bool      // the watermark table (resnapshot.go)
}

func (sp *split) stream(ctx context.Context, e source.Emitter, start state, bounded bool, end position) error {
	s := sp.src
	host, port, err := hostPort(s.addr)
	if err != nil {
		return err
	}
	serverID := s.cfg.ServerID
	if serverID == 0 || sp.undo != nil {
		serverID = randomServerID()
	}
	// Credentials for this syncer's connection: it never reconnects by
	// itself (DisableRetrySync), so each connection is a new stream call.
	user, password, err := s.login(ctx)
	if err != nil {
		return err
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: serverID, Flavor: s.info.flavor,
		Host: host, Port: port, User: user, Password: password, TLSConfig: s.cfg.TLS,
		// TIMESTAMP values in UTC (go-mysql's default is the machine's
		// zone); DECIMAL, DATE, TIME and DATETIME as text.
		TimestampStringLocation: time.UTC,
		HeartbeatPeriod:         s.cfg.Heartbeat,
		// A broken connection ends the stream, never resumed from the
		// middle of a transaction: Read takes it up again from its last
		// resume point when nothing followed it (reconnect.go), else the
		// runner restarts from the last checkpoint.
		DisableRetrySync: true,
		DiscardGTIDSet:   true,
		// Rows are decoded by the reader, for opened tables only (decode.go).
		RowsEventDecodeFunc: deferRows,
		FillZeroLogPos:      s.info.fillLogPos,
		EventCacheCount:     1024, // events read ahead
		Logger:              s.log.With("component", "binlog"),
		Option: func(c *client.Conn) error {
			// The server may wait on a reader held back by the pipeline.
			_, err := c.Execute("SET SESSION net_write_timeout = 86400")
			return err
		},
	})
	defer syncer.Close()
	var streamer *replication.BinlogStreamer
	if start.at.gtid != "" && sp.gtidMode {
		g, err := parseGTID(s.info.flavor, start.at.gtid)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadState, err)
		}
		streamer, err = syncer.StartSyncGTID(g)
		if err != nil {
			return s.refused(fmt.Errorf("mysql: start binlog replication at GTID %s: %w", start.at.gtid, err), "binlog connect", user)
		}
	} else {
		streamer, err = syncer.StartSync(gomysql.Position{Name: start.at.file, Pos: start.at.pos})
		if err != nil {
			return s.refused(fmt.Errorf("mysql: start binlog replication at %s:%d: %w", start.at.file, start.at.pos, err), "binlog connect", user)
		}
	}
	gt, err := newGTIDTracker(s.info.flavor, start.at.gtid)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadState, err)
	}
	r := &reader{sp: sp, e: markEmitter{e, &sp.streamed}, flavor: s.info.flavor, bounded: bounded, end: end, cur: start.at, last: start,
		gtid: gt, maps: map[uint64]*tableMap{}, lastMark: time.Now(), undo: sp.undo}
	r.last.skip = maps.Clone(start.skip)
	r.e = dedupe{r.e, r}
	sp.readAt.Store(start.at.seq())
	if sp.undo == nil {
		pollCtx, stopPoll := context.WithCancel(ctx)
		defer stopPoll()
		go sp.pollLag(pollCtx)
	}
	if sp.scratch == nil {
		sp.scratch = make([]byte, 0, 64)
	}
	defer func() {
		if r.conn != nil {
			r.conn.Close()
		}
		if r.undo == nil {
			sp.copyName.Store(nil)
		}
	}()
	for {
		if r.wantChunk() {
			if err := r.nextChunk(ctx); err != nil {
				return err
			}
			if err := r.checkEnd(); err != nil {
				if errors.Is(err, errDone) {
					return nil
				}
				return err
			}
			continue
		}
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.streamError(err, start)
		}
		if err := r.event(ev, nil); err != nil {
			if errors.Is(err, errDone) {
				return nil
			}
			return err
		}
	}
}

// streamError maps the server's "the binlog you ask for is gone" (error
// 1236, ER_MASTER_FATAL_ERROR_READING_BINLOG, about purged files or
// GTIDs) to a *PurgedError.
func (r *reader) streamError(err error, start state) error {
	var me *gomysql.MyError
	if errors.As(err, &me) && me.Code == gomysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		// MariaDB: "Could not find first log file name in binary log index
		// file", "Could not find GTID state requested by slave in any
		// binlog files"; MySQL: "... purged binary logs containing GTIDs
		// that the replica requires".
		msg := strings.ToLower(me.Message)
		if strings.Contains(msg, "could not find") || strings.Contains(msg, "purged") {
			return &PurgedError{File: start.at.file, Pos: start.at.pos, GTID: start.at.gtid, Err: err}
		}
	}
	err = fmt.Errorf("mysql: binlog stream at %s:%d: %w", r.cur.file, r.cur.pos, err)
	if connectionLost(err) {
		return lostLink{err}
	}
	return err
}

// advance moves the read position to the end of an event (never back:
// artificial events and the fake rotate at the start carry none).
func (r *reader) advance(h *replication.EventHeader) {
	if h.LogPos == 0 || h.Flags&replication.LOG_EVENT_ARTIFICIAL_F != 0 {
		return
	}
	if h.LogPos > r.cur.pos {
		r.cur.pos = h.LogPos
	}
}

// event handles one binlog event; outer is the header of the
// transaction payload event an inner event came in (MySQL's binlog
// transaction compression), whose position the inner events share.
func (r *reader) event(ev *replication.BinlogEvent, outer *replication.EventHeader) error {
	h := ev.Header
	if outer != nil {
		h = outer
	} else {
		r.evIdx, r.evStart, r.evSize, r.evOff = r.cur.idx, h.LogPos-min(h.EventSize, h.LogPos), h.EventSize, 0
	}
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		name := string(e.NextLogName)
		idx, err := fileIndex(name)
		if err != nil {
			return err
		}
		if idx > r.cur.idx {
			r.cur = position{file: name, idx: idx, pos: uint32(e.Position)}
		} else if idx == r.cur.idx && uint32(e.Position) > r.cur.pos {
			r.cur.pos = uint32(e.Position)
		}
		return r.checkEnd()
	case *replication.MariadbGTIDEvent:
		r.advance(h)
		r.gtid.beginMariaDB(e.GTID)
		r.inTxn, r.begun = true, false
		return nil
	case *replication.GTIDEvent:
		r.advance(h)
		if err := r.gtid.beginMySQL(e.SID, e.Tag, e.GNO); err != nil {
			return err
		}
		r.inTxn, r.begun = true, false
		return nil
	case *replication.GtidTaggedLogEvent:
		r.advance(h)
		if err := r.gtid.beginMySQL(e.SID, e.Tag, e.GNO); err != nil {
			return err
		}
		r.inTxn, r.begun = true, false
		return nil
	case *replication.QueryEvent:
		r.advance(h)
		q := strings.TrimSpace(string(e.Query))
		switch {
		case strings.EqualFold(q, "BEGIN"):
			r.inTxn, r.begun = true, true
			return nil
		case strings.EqualFold(q, "COMMIT"), strings.EqualFold(q, "ROLLBACK"), hasPrefixFold(q, "XA COMMIT"), hasPrefixFold(q, "XA ROLLBACK"):
			return r.commit()
		}
		if err := r.statementRows(q); err != nil {
			return err
		}
		if r.begun {
			return nil // SAVEPOINT and the like, inside a transaction
		}
		// A statement of its own (DDL): its own transaction.
		r.statement(string(e.Schema), q)
		return r.commit()
	case *replication.XIDEvent:
		r.advance(h)
		return r.commit()
	case *replication.TableMapEvent:
		r.advance(h)
		return r.tableMap(e)
	case *replication.RowsEvent:
		r.advance(h)
		return r.rows(e, ev.Header.EventType)
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			if err := r.event(inner, h); err != nil {
				return err
			}
		}
		r.advance(h)
		return r.checkEnd()
	default:
		if h.EventType == replication.XA_PREPARE_LOG_EVENT {
			// XA PREPARE ends the prepared transaction's events; see the
			// package doc (an XA ROLLBACK after it is not undone).
			r.advance(h)
			return r.commit()
		}
		// Heartbeats carry the server's position, perhaps in a file not
		// rotated to yet: they move nothing.
		if h.EventType != replication.HEARTBEAT_EVENT && h.EventType != replication.HEARTBEAT_LOG_EVENT_V2 {
			r.advance(h)
		}
		return r.checkEnd()
	}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// statementRows fails on a data change logged as a statement
// (binlog_format STATEMENT or MIXED, for the server or a session) that
// names an opened table: its rows are not in the binlog.
func (r *reader) statementRows(q string) error {
	word, _, _ := strings.Cut(strings.TrimLeft(q, "( \t\r\n"), " ")
	switch strings.ToUpper(word) {
	case "INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD":
	default:
		return nil
	}
	lower := strings.ToLower(q)
	for _, t := range r.sp.tables {
		if strings.Contains(lower, strings.ToLower(t.name)) {
			return &SettingsError{Variable: "binlog_format", Value: "STATEMENT or MIXED", Want: "ROW",
				Hint: fmt.Sprintf("the binlog at %s:%d has a change of table %s logged as a statement (a session with binlog_format other than ROW?): its rows are not in the binlog",
					r.cur.file, r.cur.pos, t.name)}
		}
	}
	return nil
}

// statement logs a statement of its own that touches an opened table
// and is not replicated (TRUNCATE, DROP: see the package doc).
func (r *reader) statement(schema, q string) {
	upper := strings.ToUpper(q)
	if !strings.HasPrefix(upper, "TRUNCATE") && !strings.HasPrefix(upper, "DROP") && !strings.HasPrefix(upper, "RENAME") {
		return
	}
	for _, t := range r.sp.tables {
		if strings.Contains(q, t.name) {
			r.sp.src.log.Warn("statement not replicated", "schema", schema, "table", t.name, "statement", strings.Fields(upper)[0])
		}
	}
}

// commit ends a transaction: the GTID position moves past it, and a
// resume point follows when it emitted records (or, without records,
// once a second).
func (r *reader) commit() error {
	if err := r.gtid.commit(); err != nil {
		return err
	}
	r.inTxn, r.begun = false, false
	if r.chunk != nil && r.chunk.shut {
		if err := r.emitChunk(); err != nil {
			return err
		}
	}
	r.last.at = position{file: r.cur.file, idx: r.cur.idx, pos: r.cur.pos, gtid: r.gtid.str}
	for name, p := range r.last.skip {
		if !r.last.at.before(p) {
			delete(r.last.skip, name) // the stream is past the table's copy
		}
	}
	r.sp.readAt.Store(r.cur.seq())
	if r.emitted || time.Since(r.lastMark) >= idleResumeEvery {
		r.emitted = false
		r.lastMark = time.Now()
		if err := r.e.ResumePoint(r.last.encode()); err != nil {
			return err
		}
	}
	return r.checkEnd()
}

// checkEnd ends a bounded read between transactions once it reached its
// end position.
func (r *reader) checkEnd() error {
	if !r.bounded || r.inTxn || r.cur.before(r.end) || len(r.last.jobs) > 0 && r.undo == nil {
		return nil
	}
	if err := r.e.ResumePoint(r.last.encode()); err != nil {
		return err
	}
	return errDone
}

// tableMap notes how a table map event's columns map to an opened
// table's declared columns. A table whose columns changed after the
// catalog was read (a column added, a type changed) ends the Read: see
// schemaChanged.
func (r *reader) tableMap(e *replication.TableMapEvent) error {
	sp := r.sp
	if old := r.maps[e.TableID]; old != nil && sameTableMap(old.ev, e) {
		old.ev = e
		return nil
	}
	var t *table
	if string(e.Schema) == sp.src.cfg.Database {
		t = sp.byName[string(e.Table)]
	}
	if t == nil {
		r.maps[e.TableID] = &tableMap{ev: e, marks: string(e.Schema) == sp.src.cfg.Database && string(e.Table) == watermarkTable}
		return nil
	}
	if len(e.ColumnName) != int(e.ColumnCount) {
		return &SettingsError{Variable: "binlog_row_metadata", Value: "MINIMAL or NO_LOG", Want: "FULL",
			Hint: fmt.Sprintf("the binlog at %s:%d has events of table %s without column names, written before the setting changed: start from a new snapshot",
				r.cur.file, r.cur.pos, t.name)}
	}
	// Events before the catalog was read may have columns since dropped
	// (ignored) or lack columns since added (null); after it, a column
	// the catalog lacks or a changed type means the table changed while
	// streaming.
	afterCatalog := !r.cur.before(sp.discovered)
	unsigned := e.UnsignedMap()
	collations := e.CollationMap()
	enumSet := e.EnumSetCollationMap()
	enums, sets := e.EnumStrValueMap(), e.SetStrValueMap()
	m := &tableMap{t: t, ev: e, conv: make([]binConv, e.ColumnCount), declToBin: make([]int, len(t.stream.Columns)),
		binToDecl: make([]int, e.ColumnCount)}
	for d := range m.declToBin {
		m.declToBin[d] = -1
	}
	for i := range int(e.ColumnCount) {
		name := string(e.ColumnName[i])
		d, ok := t.byName[name]
		if !ok {
			for n, k := range t.byName {
				if strings.EqualFold(n, name) {
					d, ok = k, true
				}
			}
		}
		m.binToDecl[i] = -1
		if !ok {
			if afterCatalog {
				return r.schemaChanged(t, fmt.Sprintf("column %s added", name))
			}
			continue
		}
		if sig := binlogSig(e, i, unsigned[i]); afterCatalog && sig != t.sigs[d] {
			return r.schemaChanged(t, fmt.Sprintf("column %s is %s in the binlog, %s in the catalog", name, orOther(sig), orOther(t.sigs[d])))
		}
		coll := collations[i]
		if c, ok := enumSet[i]; ok {
			coll = c
		}
		members := enums[i]
		if members == nil {
			members = sets[i]
		}
		conv, err := newBinConv(e, i, unsigned[i], coll, members, sp.src.info.charsets)
		if err != nil {
			return fmt.Errorf("mysql: column %s.%s: %w", t.name, name, err)
		}
		m.conv[i] = conv
		m.binToDecl[i] = d
		m.declToBin[d] = i
	}
	m.identity = len(m.declToBin) == len(m.binToDecl)
	for d, i := range m.declToBin {
		m.identity = m.identity && d == i
	}
	m.fast = fastTable(e)
	r.maps[e.TableID] = m
	return nil
}

func orOther(sig string) string {
	if sig == "" {
		return "a non-numeric type"
	}
	return sig
}

// schemaChanged ends the Read at a table that changed: a bounded Read
// with nothing emitted since its last resume point ends there cleanly
// (the next sync reads on with the new columns); otherwise the Read
// fails with a *SchemaChangeError and the next attempt reads on from
// the last checkpoint.
func (r *reader) schemaChanged(t *table, detail string) error {
	r.sp.src.log.Info("table changed while streaming", "table", t.name, "change", detail, "file", r.cur.file, "pos", r.cur.pos)
	if r.bounded && !r.emitted && r.undo == nil {
		if err := r.e.ResumePoint(r.last.encode()); err != nil {
			return err
		}
		return errDone
	}
	return &SchemaChangeError{Table: t.name, Detail: detail}
}

// sameTableMap reports whether two table map events describe the same
// columns (a table's map is written again in every transaction).
func sameTableMap(a, b *replication.TableMapEvent) bool {
	return bytes.Equal(a.Schema, b.Schema) && bytes.Equal(a.Table, b.Table) && bytes.Equal(a.ColumnType, b.ColumnType) &&
		slices.Equal(a.ColumnMeta, b.ColumnMeta) && bytes.Equal(a.SignednessBitmap, b.SignednessBitmap) &&
		slices.EqualFunc(a.ColumnName, b.ColumnName, bytes.Equal) &&
		slices.Equal(a.DefaultCharset, b.DefaultCharset) && slices.Equal(a.ColumnCharset, b.ColumnCharset) &&
		slices.Equal(a.EnumSetDefaultCharset, b.EnumSetDefaultCharset) && slices.Equal(a.EnumSetColumnCharset, b.EnumSetColumnCharset) &&
		slices.EqualFunc(a.EnumStrValue, b.EnumStrValue, func(x, y [][]byte) bool { return slices.EqualFunc(x, y, bytes.Equal) }) &&
		slices.EqualFunc(a.SetStrValue, b.SetStrValue, func(x, y [][]byte) bool { return slices.EqualFunc(x, y, bytes.Equal) })
}

// rows emits a rows event's rows of an opened table. Row k of the event
// gets seq evStart+k (an update's delete of its old key and the update
// two of them): a row takes at least a byte of the event, so the seqs
// stay inside it, below the next event's.
func (r *reader) rows(e *replication.RowsEvent, typ replication.EventType) error {
	m := r.maps[e.TableID]
	if m != nil && m.marks && r.undo == nil {
		d, ok := deferred(e)
		return r.marks(e, d, ok)
	}
	if m == nil || m.t == nil {
		return nil
	}
	if len(r.last.skip) > 0 {
		if p, ok := r.last.skip[m.t.name]; ok && seqAt(r.evIdx, r.evStart) < p.seq() {
			return nil // in the table's copy already (copyPending)
		}
	}
	if d, ok := deferred(e); ok {
		if m.fast && fastEvent(typ) && !r.sp.src.standardDecode {
			return r.fastRows(e, m, d)
		}
		e.Rows = nil
		if err := e.DecodeData(d.pos, d.data); err != nil {
			return fmt.Errorf("mysql: rows event of %s at %s:%d: %w", m.t.name, r.cur.file, r.evStart, err)
		}
	}
	t := m.t
	name := t.stream.Name
	next := func() (int64, error) {
		if r.evOff >= r.evSize {
			return 0, fmt.Errorf("mysql: rows event at %s:%d has more rows than bytes (compressed?): seqs would collide", r.cur.file, r.evStart)
		}
		seq := seqAt(r.evIdx, r.evStart+r.evOff)
		r.evOff++
		return seq, nil
	}
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert, replication.EnumRowsEventTypeDelete:
		op := source.OpInsert
		if e.Type() == replication.EnumRowsEventTypeDelete {
			op = source.OpDelete
		}
		for k, row := range e.Rows {
			if err := r.encode(&r.after, m, row, e.SkippedColumns[k]); err != nil {
				return err
			}
			if r.undo != nil {
				r.undoRow(op, &r.after)
				continue
			}
			seq, err := next()
			if err != nil {
				return err
			}
			r.emitted = true
			if err := r.e.Record(name, op, seq, r.after.key, r.after.payload); err != nil {
				return err
			}
		}
	case replication.EnumRowsEventTypeUpdate:
		for k := 0; k+1 < len(e.Rows); k += 2 {
			if err := r.encode(&r.before, m, e.Rows[k], e.SkippedColumns[k]); err != nil {
				return err
			}
			if err := r.encode(&r.after, m, e.Rows[k+1], e.SkippedColumns[k+1]); err != nil {
				return err
			}
			if r.undo != nil {
				r.undoUpdate()
				continue
			}
			del, err := next()
			if err != nil {
				return err
			}
			upd, err := next()
			if err != nil {
				return err
			}
			r.emitted = true
			// The key changed: the old key's row is gone.
			if !bytes.Equal(r.before.key, r.after.key) {
				if err := r.e.Record(name, source.OpDelete, del, r.before.key, r.before.payload); err != nil {
					return err
				}
			}
			if err := r.e.Record(name, source.OpUpdate, upd, r.after.key, r.after.payload); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("mysql: rows event of unknown type %v", e.Type())
	}
	return nil
}

// undoRow notes an insert's or a delete's row for a snapshot split's
// scan (undo.go): an insert's key had no row before it, a delete's had
// the image.
func (r *reader) undoRow(op source.Op, b *rowBuf) {
	if op == source.OpDelete {
		r.undo.had(b.key, b.payload)
	} else {
		r.undo.hadNone(b.key)
	}
}

// undoUpdate notes an update (r.before, r.after) for a snapshot split's
// scan: the old key had the before-image; a new key had no row.
func (r *reader) undoUpdate() {
	r.undo.had(r.before.key, r.before.payload)
	if !bytes.Equal(r.before.key, r.after.key) {
		r.undo.hadNone(r.after.key)
	}
}

// encode writes a row image as the table's declared row and its key.
// A declared column the image lacks is null (added since the event was
// written); a column left out of the image (binlog_row_image other than
// FULL) is "unchanged".
func (r *reader) encode(b *rowBuf, m *tableMap, row []any, skipped []int) error {
	t := m.t
	b.payload, b.offs = b.payload[:0], b.offs[:0]
	var err error
	for d, i := range m.declToBin {
		b.offs = append(b.offs, len(b.payload))
		switch {
		case i < 0:
			b.payload = source.AppendRowNull(b.payload)
		case len(skipped) > 0 && slices.Contains(skipped, i):
			b.payload = source.AppendRowUnchanged(b.payload)
		default:
			b.payload, err = m.conv[i].appendValue(b.payload, row[i], r.sp.scratch)
			if err != nil {
				return fmt.Errorf("mysql: %s.%s at %s:%d: %w", t.name, t.stream.Columns[d].Name, r.cur.file, r.evStart, err)
			}
		}
	}
	b.offs = append(b.offs, len(b.payload))
	b.key = b.key[:0]
	for _, k := range t.key {
		b.key = append(b.key, b.payload[b.offs[k]:b.offs[k+1]]...)
	}
	return nil
}

// fastRows emits a rows event's rows, decoded by decode.go: the same
// records rows emits from go-mysql's decoding.
func (r *reader) fastRows(e *replication.RowsEvent, m *tableMap, d deferredRows) error {
	name := m.t.stream.Name
	data, pos := d.data, d.pos
	fail := func(err error) error {
		return fmt.Errorf("mysql: rows event of %s at %s:%d: %w", m.t.name, r.cur.file, r.evStart, err)
	}
	next := func() (int64, error) {
		if r.evOff >= r.evSize {
			return 0, fmt.Errorf("mysql: rows event at %s:%d has more rows than bytes (compressed?): seqs would collide", r.cur.file, r.evStart)
		}
		seq := seqAt(r.evIdx, r.evStart+r.evOff)
		r.evOff++
		return seq, nil
	}
	typ := e.Type()
	for pos < len(data) {
		n, err := r.decodeImage(&r.after, m, data[pos:], e.ColumnBitmap1)
		if err != nil {
			return fail(err)
		}
		pos += n
		switch typ {
		case replication.EnumRowsEventTypeInsert, replication.EnumRowsEventTypeDelete:
			op := source.OpInsert
			if typ == replication.EnumRowsEventTypeDelete {
				op = source.OpDelete
			}
			if r.undo != nil {
				r.undoRow(op, &r.after)
				continue
			}
			seq, err := next()
			if err != nil {
				return err
			}
			r.emitted = true
			if err := r.e.Record(name, op, seq, r.after.key, r.after.payload); err != nil {
				return err
			}
		case replication.EnumRowsEventTypeUpdate:
			r.before, r.after = r.after, r.before
			n, err := r.decodeImage(&r.after, m, data[pos:], e.ColumnBitmap2)
			if err != nil {
				return fail(err)
			}
			pos += n
			if r.undo != nil {
				r.undoUpdate()
				continue
			}
			del, err := next()
			if err != nil {
				return err
			}
			upd, err := next()
			if err != nil {
				return err
			}
			r.emitted = true
			if !bytes.Equal(r.before.key, r.after.key) {
				if err := r.e.Record(name, source.OpDelete, del, r.before.key, r.before.payload); err != nil {
					return err
				}
			}
			if err := r.e.Record(name, source.OpUpdate, upd, r.after.key, r.after.payload); err != nil {
				return err
			}
		default:
			return fmt.Errorf("mysql: rows event of unknown type %v", typ)
		}
	}
	return nil
}

// decodeImage decodes one row image as the table's declared row and its
// key, and returns the bytes read.
func (r *reader) decodeImage(b *rowBuf, m *tableMap, data, bitmap []byte) (int, error) {
	if len(bitmap)*8 < len(m.conv) {
		return 0, fmt.Errorf("column bitmap of %d bytes for %d columns", len(bitmap), len(m.conv))
	}
	var n int
	var err error
	if m.identity {
		n, err = m.image(b, data, bitmap, r.sp.scratch)
	} else {
		// In binlog order into raw, then the declared columns from it.
		if n, err = m.image(&r.raw, data, bitmap, r.sp.scratch); err == nil {
			b.payload, b.offs = b.payload[:0], b.offs[:0]
			for _, i := range m.declToBin {
				b.offs = append(b.offs, len(b.payload))
				if i < 0 {
					b.payload = source.AppendRowNull(b.payload)
				} else {
					b.payload = append(b.payload, r.raw.payload[r.raw.offs[i]:r.raw.offs[i+1]]...)
				}
			}
			b.offs = append(b.offs, len(b.payload))
		}
	}
	if err != nil {
		return 0, err
	}
	b.key = b.key[:0]
	for _, k := range m.t.key {
		b.key = append(b.key, b.payload[b.offs[k]:b.offs[k+1]]...)
	}
	return n, nil
}

// markEmitter notes that the stream emitted something.
type markEmitter struct {
	source.Emitter
	used *bool
}

func (m markEmitter) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	*m.used = true
	return m.Emitter.Record(stream, op, seq, key, payload)
}

func (m markEmitter) ResumePoint(state []byte) error {
	*m.used = true
	return m.Emitter.ResumePoint(state)
}

// Report forwards n to the runner's Emitter (see source.Reporter).
func (m markEmitter) Report(n source.Notice) {
	if r, ok := m.Emitter.(source.Reporter); ok {
		r.Report(n)
	}
}

// lagPollEvery is how often a streaming Read polls the server's binlog
// sizes for Lag.
const lagPollEvery = 2 * time.Second

// pollLag updates the split's lag from SHOW BINARY LOGS until ctx ends:
// the bytes of the binlog files after the position read, and of the
// current file past it.
func (sp *split) pollLag(ctx context.Context) {
	s := sp.src
	t := time.NewTicker(lagPollEvery)
	defer t.Stop()
	for {
		s.mu.Lock()
		c, err := s.queryConn(ctx)
		var rs [][]string
		if err == nil {
			var r *gomysql.Result
			if r, err = exec(ctx, c, "SHOW BINARY LOGS"); err == nil {
				rs = rows(r)
			}
		}
		s.mu.Unlock()
		if err == nil {
			at := sp.readAt.Load()
			idx, pos := uint32(at>>32), int64(uint32(at))
			var behind int64
			for _, row := range rs {
				fi, err1 := fileIndex(row[0])
				size, err2 := strconv.ParseInt(row[1], 10, 64)
				switch {
				case err1 != nil || err2 != nil:
				case fi > idx:
					behind += size
				case fi == idx:
					behind += max(0, size-pos)
				}
			}
			sp.behind.Store(behind)
			sp.lagKnown.Store(true)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

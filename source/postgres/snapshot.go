package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"

	"github.com/openetl/etl/internal/obs"
	"github.com/openetl/etl/source"
)

// snapshotIDPrefix starts the ID of a table's snapshot split.
const snapshotIDPrefix = "snapshot:"

// snapState is a snapshot split's resume state (JSON). Seq is the slot's
// snapshot LSN, the seq of every row the split emits, whatever snapshot
// it reads them under (see the package doc), unless Again is set: the
// WAL position of a re-snapshot (see reconcile), its rows' seq. After holds the text form of the last emitted row's primary key
// (keyed tables); Page the first heap page not read yet (tables without a
// key). Done says the table is read. Cols are the columns the rows were
// read with, and Attnum the highest attribute number among them: a
// column added or renamed since is one the destination's rows lack
// (states written before Cols existed have none: nothing is compared).
// Gen names the attachment of a partition the split reads (see part).
type snapState struct {
	V      int      `json:"v"`
	Seq    uint64   `json:"seq"`
	After  []string `json:"after,omitempty"`
	Page   uint64   `json:"page,omitempty"`
	Done   bool     `json:"done,omitempty"`
	Rows   int64    `json:"rows,omitempty"` // rows emitted up to this state
	Cols   []string `json:"cols,omitempty"`
	Attnum int      `json:"attnum,omitempty"`
	Again  uint64   `json:"again,omitempty"`
	Gen    string   `json:"gen,omitempty"`
}

// rowSeq is the seq of the split's rows.
func (st snapState) rowSeq() uint64 {
	if st.Again != 0 {
		return st.Again
	}
	return st.Seq
}

const snapStateVersion = 1

func decodeSnapState(b []byte) (snapState, error) {
	var st snapState
	if err := json.Unmarshal(b, &st); err != nil {
		return snapState{}, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if st.V != snapStateVersion || st.Seq == 0 {
		return snapState{}, fmt.Errorf("%w: snapshot state version %d, seq %d", ErrBadState, st.V, st.Seq)
	}
	return st, nil
}

// exporter is the replication connection that created the slot with an
// exported snapshot. The snapshot lives until the connection's next
// command, so the connection stays idle until every snapshot split of
// the attempt has imported it (or given up), then closes.
type exporter struct {
	mu      sync.Mutex
	conn    *pgconn.PgConn
	name    string // the exported snapshot's name
	waiting int    // snapshot splits that have not imported it yet
}

// importInto makes c's open transaction use the exported snapshot. It
// returns false when the snapshot is gone (the exporter closed), and the
// caller reads under a snapshot of its own.
func (x *exporter) importInto(ctx context.Context, c *pgconn.PgConn) (bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.conn == nil {
		return false, nil
	}
	if _, err := queryText(ctx, c, "SET TRANSACTION SNAPSHOT "+quoteLiteral(x.name)); err != nil {
		return false, fmt.Errorf("postgres: import snapshot %s: %w", x.name, err)
	}
	return true, nil
}

// release records that one split no longer needs the snapshot; the last
// one closes the connection.
func (x *exporter) release() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.waiting--
	if x.waiting <= 0 {
		x.closeLocked()
	}
}

func (x *exporter) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closeLocked()
}

func (x *exporter) closeLocked() {
	if x.conn != nil {
		x.conn.Close(context.Background())
		x.conn = nil
	}
}

// snapSplit reads one table's rows, in primary-key order (ctid order
// without a key), a chunk per query, with a resume point after each
// chunk.
type snapSplit struct {
	src   *Source
	id    source.SplitID
	t     *table
	part  *part // the leaf partition read, for a partitioned table
	st    snapState
	exp   *exporter // the slot's exported snapshot, on a fresh start
	chunk int

	buf, key []byte
	last     [][]byte // the last row's key values

	// notice is what reconcile or handOver found, reported at the start
	// of Read.
	notice *source.Notice
	// handed: the change stream reads the rest of the table (handOver),
	// and the split emits nothing.
	handed bool
	// For a handed split's SnapshotProgress: the stream's re-snapshots
	// (which job runs), and whether its job finished in this attempt.
	rs      *resnap
	jobDone atomic.Bool

	// For SnapshotProgress, read from other goroutines.
	copying   atomic.Bool
	copied    atomic.Int64
	estimated atomic.Int64
}

// SnapshotProgress reports the rows copied over all attempts and the
// table's estimated row count (pg_class.reltuples) while the split copies
// its table (see source.SnapshotReporter).
//
// A split handed over to the change stream (handOver) reports its
// table's snapshot as in progress, with the rows it read, while its job
// waits in the stream's queue: once the job runs, the stream's split
// reports it (source.SnapshotReporter sums the splits of a stream), and
// once it is done, nothing.
func (sp *snapSplit) SnapshotProgress() (stream string, done, estimated int64, ok bool) {
	if sp.handed {
		if sp.jobDone.Load() {
			return sp.t.stream.Name, 0, 0, false
		}
		if p := sp.rs.split.Load(); p != nil && *p == string(sp.id) {
			return sp.t.stream.Name, 0, 0, false
		}
		return sp.t.stream.Name, sp.copied.Load(), 0, true
	}
	return sp.t.stream.Name, sp.copied.Load(), sp.estimated.Load(), sp.copying.Load()
}

func (sp *snapSplit) ID() source.SplitID { return sp.id }

// Read emits the table's rows not read yet. Bounded, it returns once the
// table is done; unbounded, it then waits for ctx (an unbounded Read runs
// until it is cancelled).
func (sp *snapSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if err := sp.read(ctx, e); err != nil || bounded {
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			// Cancelled mid-query: pgconn says the connection closed;
			// the caller asked for it, and must see its own cause.
			return fmt.Errorf("postgres: snapshot of %s: %w (%w)", sp.t.stream.Name, ctx.Err(), err)
		}
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

func (sp *snapSplit) read(ctx context.Context, e source.Emitter) (err error) {
	if sp.notice != nil {
		if r, ok := e.(source.Reporter); ok {
			r.Report(*sp.notice)
		}
		sp.notice = nil
	}
	released := false
	release := func() {
		if sp.exp != nil && !released {
			released = true
			sp.exp.release()
		}
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return err
	}
	if sp.st.Done || sp.handed {
		return e.ResumePoint(sp.encode())
	}
	s := sp.src
	if err := s.snapshots.acquire(ctx); err != nil {
		return err
	}
	defer s.snapshots.release()
	c, err := s.connect(ctx, false)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := queryText(ctx, c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return fmt.Errorf("postgres: snapshot of %s: %w", sp.t.stream.Name, err)
	}
	if sp.exp != nil {
		if _, err := sp.exp.importInto(ctx, c); err != nil {
			return err
		}
	}
	release()
	// to_regclass: a relation dropped meanwhile is no error here, which
	// would end the transaction; the read below says what happened.
	if rows, err := queryText(ctx, c, `SELECT GREATEST(reltuples, 0)::int8 FROM pg_class WHERE oid = to_regclass(`+
		quoteLiteral(sp.ident())+`)`); err == nil && len(rows) == 1 {
		n, _ := strconv.ParseInt(string(rows[0][0]), 10, 64)
		sp.estimated.Store(n)
	}
	sp.copied.Store(sp.st.Rows)
	sp.copying.Store(true)
	defer sp.copying.Store(false)
	// A span for the copy (a child of the runner's sync span, when the
	// host traces), with the rows it read.
	attrs := []attribute.KeyValue{attribute.String("openetl.stream", sp.t.stream.Name),
		attribute.Bool("openetl.resumed", sp.st.After != nil || sp.st.Page > 0)}
	if sp.part != nil {
		attrs = append(attrs, attribute.String("openetl.partition", streamName(sp.part.schema, sp.part.name)))
	}
	ctx, span := obs.Start(ctx, "openetl.postgres.snapshot", attrs...)
	from := sp.st.Rows
	defer func() {
		span.SetAttributes(attribute.Int64("openetl.rows.read", sp.st.Rows-from))
		obs.End(span, err)
	}()
	if len(sp.t.key) > 0 {
		err = sp.readKeyed(ctx, c, e)
	} else {
		err = sp.readPages(ctx, c, e)
	}
	if err != nil {
		if sp.part != nil && isUndefinedTable(err) {
			// Dropped since Open read the catalog: a new attempt no
			// longer reads it (its rows read so far stay, as a detached
			// partition's do).
			return &SchemaChangeError{Stream: sp.t.stream.Name,
				Detail: fmt.Sprintf("partition %s was dropped while its snapshot was read", streamName(sp.part.schema, sp.part.name))}
		}
		return err
	}
	_, err = queryText(ctx, c, "COMMIT")
	return err
}

// shape returns the table's column names and highest attribute number,
// for a snapshot state.
func (t *table) shape() ([]string, int) {
	cols := make([]string, len(t.stream.Columns))
	most := 0
	for i, c := range t.stream.Columns {
		cols[i] = c.Name
		most = max(most, t.attnums[i])
	}
	return cols, most
}

// reconcile compares the columns the split's rows were read with to the
// table's now. A column added since, with a default (or an identity, or
// generated) that the rows existing then read, or a column renamed since,
// has values those rows never carried to the destination, since no
// change reports them. A keyed table is then read again: a new snapshot
// whose seq is the WAL insert position now (*now, read once per Open),
// above every version the destination has and below every change the
// stream emits after it (changes committed after it that were written
// before it are raised above it: see split.seq), so the latest version
// of each key is the table's row again. A table without a key can't be
// merged, so it is not read again: the notice says its rows were not
// backfilled. Either way the split reports a schema.changed notice, and
// the state takes the new columns.
func (sp *snapSplit) reconcile(ctx context.Context, now *pglogrepl.LSN) error {
	t := sp.t
	cols, most := t.shape()
	if sp.st.Cols == nil {
		sp.st.Cols, sp.st.Attnum = cols, most
		return nil
	}
	var col, change, detail string
	for i, c := range t.stream.Columns {
		switch {
		case slices.Contains(sp.st.Cols, c.Name):
			continue
		case t.attnums[i] <= sp.st.Attnum:
			change = "renamed"
		case t.filled[i]:
			change = "added"
		default:
			continue // added without a default: the rows read null, as the destination has them
		}
		col = c.Name
		what := "the value it gets"
		if d := t.defaults[i]; d != "" {
			what = "its default " + d
		}
		if change == "renamed" {
			detail = fmt.Sprintf("column %q was renamed after the table's rows were read", c.Name)
		} else {
			detail = fmt.Sprintf("column %q was added with %s after the table's rows were read", c.Name, what)
		}
		break
	}
	if sp.st.Cols, sp.st.Attnum = cols, most; col == "" {
		return nil
	}
	n := &source.Notice{Kind: source.NoticeSchemaChanged, Stream: t.stream.Name, Column: col, Change: change}
	if len(t.key) == 0 {
		n.Detail = detail + ": rows not changed since were not backfilled (the destination has null there); " +
			"a table without a key is not read again, since it can't be merged"
		sp.notice = n
		return nil
	}
	if err := sp.src.walInsertLSN(ctx, now); err != nil {
		return err
	}
	n.Detail = detail + ": the table is read again (a new snapshot), so that rows not changed since reach the destination with it"
	sp.notice = n
	sp.st = snapState{V: snapStateVersion, Seq: sp.st.Seq, Cols: cols, Attnum: most, Again: uint64(*now)}
	return nil
}

// walInsertLSN sets *now to the WAL position (see walPosition), unless
// it is set.
func (s *Source) walInsertLSN(ctx context.Context, now *pglogrepl.LSN) error {
	if *now != 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.withQuery(ctx, func(c *pgconn.PgConn) (err error) {
		*now, _, err = walPosition(ctx, c)
		return err
	})
}

// ident is the relation the split reads: its table, or its partition.
func (sp *snapSplit) ident() string {
	if sp.part != nil {
		return sp.part.ident()
	}
	return sp.t.ident()
}

func (sp *snapSplit) encode() []byte {
	b, _ := json.Marshal(sp.st)
	return b
}

func (sp *snapSplit) selectList() string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, col := range sp.t.stream.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(col.Name))
	}
	b.WriteString(" FROM ONLY ")
	b.WriteString(sp.ident())
	return b.String()
}

// readKeyed reads chunks of sp.chunk rows in key order after sp.st.After.
func (sp *snapSplit) readKeyed(ctx context.Context, c *pgconn.PgConn, e source.Emitter) error {
	t := sp.t
	var keys, params []string
	for i, k := range t.key {
		keys = append(keys, quoteIdent(t.stream.Columns[k].Name))
		params = append(params, "$"+strconv.Itoa(i+1))
	}
	tail := " ORDER BY " + strings.Join(keys, ", ") + " LIMIT " + strconv.Itoa(sp.chunk)
	first := sp.selectList() + tail
	next := sp.selectList() + " WHERE (" + strings.Join(keys, ", ") + ") > (" + strings.Join(params, ", ") + ")" + tail
	sp.last = make([][]byte, len(t.key))
	args := make([][]byte, len(t.key))
	seq := int64(sp.st.rowSeq())
	for {
		var rr *pgconn.ResultReader
		if sp.st.After == nil {
			rr = c.ExecParams(ctx, first, nil, nil, nil, nil)
		} else {
			if len(sp.st.After) != len(t.key) {
				return fmt.Errorf("%w: snapshot of %s resumes after a key of %d columns, the table's has %d",
					ErrBadState, t.stream.Name, len(sp.st.After), len(t.key))
			}
			for i, v := range sp.st.After {
				args[i] = []byte(v)
			}
			rr = c.ExecParams(ctx, next, args, nil, nil, nil)
		}
		n, err := sp.emitRows(rr, e, seq, true)
		if err != nil {
			return err
		}
		if n > 0 {
			sp.st.After = sp.st.After[:0]
			for _, v := range sp.last {
				sp.st.After = append(sp.st.After, string(v))
			}
		}
		sp.st.Done = n < sp.chunk
		if err := e.ResumePoint(sp.encode()); err != nil {
			return err
		}
		if sp.st.Done {
			return nil
		}
	}
}

// readPages reads a keyless table in ranges of heap pages (ctid ranges:
// a TID range scan on Postgres 14 and later).
func (sp *snapSplit) readPages(ctx context.Context, c *pgconn.PgConn, e source.Emitter) error {
	t := sp.t
	rows, err := queryText(ctx, c, `SELECT pg_relation_size(`+quoteLiteral(sp.ident())+`::regclass) / current_setting('block_size')::int8,
       GREATEST(c.reltuples, 0)::int8, GREATEST(c.relpages, 0)::int8
FROM pg_class c WHERE c.oid = `+quoteLiteral(sp.ident())+`::regclass`)
	if err != nil {
		return fmt.Errorf("postgres: size of %s: %w", t.stream.Name, err)
	}
	pages, _ := strconv.ParseUint(string(rows[0][0]), 10, 64)
	tuples, _ := strconv.ParseUint(string(rows[0][1]), 10, 64)
	relpages, _ := strconv.ParseUint(string(rows[0][2]), 10, 64)
	step := uint64(1000)
	if tuples > 0 && relpages > 0 {
		step = max(1, uint64(sp.chunk)*relpages/tuples)
	}
	seq := int64(sp.st.rowSeq())
	for sp.st.Page < pages {
		end := sp.st.Page + step
		sql := fmt.Sprintf("%s WHERE ctid >= '(%d,0)'::tid AND ctid < '(%d,0)'::tid", sp.selectList(), sp.st.Page, end)
		if _, err := sp.emitRows(c.ExecParams(ctx, sql, nil, nil, nil, nil), e, seq, false); err != nil {
			return err
		}
		sp.st.Page = end
		if err := e.ResumePoint(sp.encode()); err != nil {
			return err
		}
	}
	sp.st.Done = true
	return e.ResumePoint(sp.encode())
}

// emitRows emits a query's rows as inserts and returns how many.
func (sp *snapSplit) emitRows(rr *pgconn.ResultReader, e source.Emitter, seq int64, keepKey bool) (int, error) {
	t := sp.t
	n := 0
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
			return n, err
		}
		n++
		sp.st.Rows++
		sp.copied.Add(1)
		if keepKey {
			for i, k := range t.key {
				sp.last[i] = append(sp.last[i][:0], vals[k]...)
			}
		}
	}
	if _, err := rr.Close(); err != nil {
		return n, fmt.Errorf("postgres: snapshot of %s: %w", t.stream.Name, err)
	}
	return n, nil
}

// semaphore bounds the snapshot splits reading at once.
type semaphore chan struct{}

func (s semaphore) acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s semaphore) release() { <-s }

// createSlot drops an idle slot of the configured name (nothing read from
// it was committed) and creates it again with an exported snapshot, on a
// replication connection it returns as an exporter, with the state at
// the slot's consistent point. It refuses with ErrSlotInUse while
// another process streams from the slot.
func (s *Source) createSlot(ctx context.Context, splits int) (*exporter, state, error) {
	repl, err := s.connect(ctx, true)
	if err != nil {
		return nil, state{}, err
	}
	ok := false
	defer func() {
		if !ok {
			repl.Close(context.WithoutCancel(ctx))
		}
	}()
	if err := checkSlotIdle(ctx, repl, s.cfg.Slot); err != nil {
		return nil, state{}, err
	}
	// WAIT: an earlier Read's walsender may still be exiting.
	if err := pglogrepl.DropReplicationSlot(ctx, repl, s.cfg.Slot, pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
		if !isUndefinedObject(err) {
			return nil, state{}, fmt.Errorf("postgres: drop old slot %q: %w", s.cfg.Slot, err)
		}
	}
	// The server's timeline, for the states read from the slot's start
	// (see checkFork). Asked first: any command after the slot's
	// creation would end its exported snapshot.
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return nil, state{}, fmt.Errorf("postgres: identify system: %w", err)
	}
	res, err := s.createSlotOn(ctx, repl)
	if err != nil {
		return nil, state{}, fmt.Errorf("postgres: create slot %q: %w", s.cfg.Slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, state{}, err
	}
	s.log.InfoContext(ctx, "created slot", "lsn", lsn.String(), "snapshot", res.SnapshotName)
	ok = true
	return &exporter{conn: repl, name: res.SnapshotName, waiting: splits}, state{lsn: lsn, snapshot: lsn, tli: uint32(sys.Timeline)}, nil
}

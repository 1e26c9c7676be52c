package mysql

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/openetl/etl/source"
)

// snapshotIDPrefix starts the ID of a table's snapshot split; the
// database and table names follow ("snapshot:app.orders").
const snapshotIDPrefix = "snapshot:"

// litKind says how a key column's value is written as an SQL literal in
// a keyset query.
type litKind uint8

const (
	litNone   litKind = iota // not pageable: the table is read in one piece
	litNumber                // integers, DECIMAL, YEAR: the digits
	litQuoted                // DATE, DATETIME, TIMESTAMP, TIME: '...'
	litText                  // CHAR, VARCHAR: a utf8mb4 literal, compared in the column's collation
	litBinary                // BINARY, VARBINARY: X'...', compared byte by byte
)

// literalKind returns how a key column of information_schema's DATA_TYPE
// is paged. Types whose ORDER BY and comparison with a literal of the
// value's text disagree are not pageable: FLOAT and DOUBLE (the text is
// the shortest of the value, not the value), ENUM and SET (sorted by
// member number, compared by name), BIT; nor are TEXT, BLOB, JSON and
// spatial types (prefix keys).
func literalKind(dataType string) litKind {
	switch dataType {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "year":
		return litNumber
	case "date", "datetime", "timestamp", "time":
		return litQuoted
	case "char", "varchar":
		return litText
	case "binary", "varbinary":
		return litBinary
	}
	return litNone
}

// appendLiteral appends the SQL literal of a key value of kind k, as the
// snapshot read it (the text protocol's bytes).
func appendLiteral(b []byte, k litKind, v []byte) ([]byte, error) {
	switch k {
	case litNumber:
		if len(v) == 0 {
			return nil, fmt.Errorf("empty number")
		}
		for i, c := range v {
			if !(c >= '0' && c <= '9' || c == '.' || c == '-' && i == 0) {
				return nil, fmt.Errorf("number %q", v)
			}
		}
		return append(b, v...), nil
	case litQuoted:
		for _, c := range v {
			if !(c >= '0' && c <= '9' || c == '-' || c == ':' || c == ' ' || c == '.') {
				return nil, fmt.Errorf("date or time %q", v)
			}
		}
		b = append(b, '\'')
		b = append(b, v...)
		return append(b, '\''), nil
	case litText:
		// A literal is coercible: the comparison takes the column's
		// collation, the same ORDER BY sorts by.
		if len(v) == 0 {
			return append(b, "_utf8mb4''"...), nil
		}
		b = append(b, "_utf8mb4 X'"...)
		b = hex.AppendEncode(b, v)
		return append(b, '\''), nil
	case litBinary:
		if len(v) == 0 {
			return append(b, "_binary''"...), nil
		}
		b = append(b, "X'"...)
		b = hex.AppendEncode(b, v)
		return append(b, '\''), nil
	}
	return nil, fmt.Errorf("key type not pageable")
}

// rowReader turns the rows of a snapshot query into records. After read,
// buf and offs hold the last row.
type rowReader struct {
	buf, scratch, key []byte
	offs              []int
}

// read runs a SELECT of t's declared columns (selectList) and emits each
// row as an insert of seq; counted, when set, is raised per row. It
// returns the rows emitted.
func (r *rowReader) read(c *client.Conn, e source.Emitter, t *table, sql string, seq int64, counted *atomic.Int64) (int, error) {
	if r.scratch == nil {
		r.scratch = make([]byte, 0, 64)
	}
	var emitErr error
	var res gomysql.Result
	n, rowsRead := len(t.stream.Columns), 0
	err := c.ExecuteSelectStreaming(sql, &res, func(row []gomysql.FieldValue) error {
		if len(row) != n {
			return fmt.Errorf("mysql: snapshot of %s: %d values for %d columns", t.name, len(row), n)
		}
		r.buf = r.buf[:0]
		r.offs = r.offs[:0]
		for i := range row {
			r.offs = append(r.offs, len(r.buf))
			r.buf = appendSnapshotValue(r.buf, t.kinds[i], &row[i], r.scratch)
		}
		r.offs = append(r.offs, len(r.buf))
		r.key = r.key[:0]
		for _, k := range t.key {
			r.key = append(r.key, r.buf[r.offs[k]:r.offs[k+1]]...)
		}
		if err := e.Record(t.stream.Name, source.OpInsert, seq, r.key, r.buf); err != nil {
			emitErr = err
			return errEmit{err}
		}
		rowsRead++
		if counted != nil {
			counted.Add(1)
		}
		return nil
	}, nil)
	if emitErr != nil {
		return rowsRead, emitErr
	}
	if err != nil {
		return rowsRead, fmt.Errorf("mysql: snapshot of %s: %w", t.name, err)
	}
	return rowsRead, nil
}

// selectList is the snapshot's SELECT of t's declared columns.
func (s *Source) selectList(t *table) string {
	var sb strings.Builder
	sb.WriteString("SELECT ")
	for i, col := range t.stream.Columns {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(selectExpr(col.Name, t.kinds[i]))
	}
	sb.WriteString(" FROM " + quoteIdent(s.cfg.Database) + "." + quoteIdent(t.name))
	return sb.String()
}

// snapSplit reads one keyed table in chunks of Config.SnapshotChunkRows
// rows in key order (keyset pagination), a query per chunk, with a
// resume point after each. Every row is an insert whose seq is the
// split's origin, a binlog position at or before the snapshot each chunk
// reads under (see the package doc).
type snapSplit struct {
	src   *Source
	id    source.SplitID
	t     *table
	st    snapState
	chunk int

	discovered position // the binlog position before the catalog was read
	gtidMode   bool     // the server has GTIDs (as of Open)
	undo       *undoLog // the changes since the origin, read so far

	r rowReader

	// notice is what reconcile found, reported at the start of Read.
	notice *source.Notice

	// For SnapshotProgress, read from other goroutines.
	copying   atomic.Bool
	copied    atomic.Int64
	estimated atomic.Int64
}

func (sp *snapSplit) ID() source.SplitID { return sp.id }

// SnapshotProgress reports the rows copied over all attempts and the
// table's estimated row count (information_schema.TABLES.TABLE_ROWS,
// InnoDB's estimate) while the split copies its table (see
// source.SnapshotReporter). Safe for concurrent use.
func (sp *snapSplit) SnapshotProgress() (stream string, done, estimated int64, ok bool) {
	return sp.t.stream.Name, sp.copied.Load(), sp.estimated.Load(), sp.copying.Load()
}

// Read emits the table's rows not read yet. Bounded, it returns once the
// table is done; unbounded, it then waits for ctx (an unbounded Read runs
// until it is cancelled).
func (sp *snapSplit) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if err := sp.read(ctx, e); err != nil || bounded {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

func (sp *snapSplit) read(ctx context.Context, e source.Emitter) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if sp.notice != nil {
		if r, ok := e.(source.Reporter); ok {
			r.Report(*sp.notice)
		}
		sp.notice = nil
	}
	if sp.st.done {
		return e.ResumePoint(sp.st.encode())
	}
	s, t := sp.src, sp.t
	if err := s.snapshots.acquire(ctx); err != nil {
		return err
	}
	defer s.snapshots.release()
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { abort(c) })
	defer stop()
	fail := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	// The pipeline may hold the reader back (backpressure) longer than
	// the server waits on a blocked client by default (60 s).
	if _, err := c.Execute("SET SESSION net_write_timeout = 86400"); err != nil {
		return fail(fmt.Errorf("mysql: snapshot of %s: session: %w", t.name, err))
	}
	if r, err := c.Execute("SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		s.cfg.Database, t.name); err == nil {
		if rs := rows(r); len(rs) == 1 {
			n, _ := strconv.ParseInt(rs[0][0], 10, 64)
			sp.estimated.Store(n)
		}
	}
	sp.copied.Store(sp.st.rows)
	sp.copying.Store(true)
	defer sp.copying.Store(false)
	seq := sp.st.origin.seq()
	base := s.selectList(t)
	if sp.undo == nil {
		sp.undo = newUndoLog(sp.st.origin)
	}
	ue := undoEmitter{Emitter: e, u: sp.undo}
	// chunk reads one query's rows as of the origin: under a consistent
	// snapshot at C, with the changes between the origin and C taken out
	// (undo.go).
	chunk := func(sql string) (int, error) {
		at, err := s.consistentSnapshot(ctx, c, sp.gtidMode)
		if err != nil {
			return 0, err
		}
		if err := sp.catchUp(ctx, at); err != nil {
			return 0, err
		}
		n, err := sp.r.read(c, ue, t, sql, seq, &sp.copied)
		if err != nil {
			return n, fail(err)
		}
		if _, err := c.Execute("COMMIT"); err != nil {
			return n, fail(fmt.Errorf("mysql: snapshot of %s: commit: %w", t.name, err))
		}
		return n, nil
	}
	if t.keyLits == nil {
		// A key that can't be paged: one query, one resume point.
		n, err := chunk(base)
		if err != nil {
			return err
		}
		if err := sp.emitGone(ctx, c, e, nil, nil, seq); err != nil {
			return fail(err)
		}
		sp.st.rows += int64(n)
		sp.st.done = true
		return e.ResumePoint(sp.st.encode())
	}
	var order strings.Builder
	order.WriteString(" ORDER BY ")
	for i, k := range t.key {
		if i > 0 {
			order.WriteString(", ")
		}
		order.WriteString(quoteIdent(t.stream.Columns[k].Name))
	}
	order.WriteString(" LIMIT " + strconv.Itoa(sp.chunk))
	var sql []byte
	var vals []source.RowValue
	for {
		sql = append(sql[:0], base...)
		if sp.st.after != nil {
			if sql, err = sp.where(sql); err != nil {
				return err
			}
		}
		sql = append(sql, order.String()...)
		n, err := chunk(string(sql))
		if err != nil {
			return err
		}
		sp.st.rows += int64(n)
		lo := sp.st.after
		if n > 0 {
			// The chunk's last row: the next chunk starts after its key.
			if vals, err = source.DecodeRow(vals[:0], sp.r.buf); err != nil {
				return err
			}
			after := make([][]byte, len(t.key))
			for i, k := range t.key {
				after[i] = append([]byte{}, vals[k].Text...)
			}
			sp.st.after = after
		}
		sp.st.done = n < sp.chunk
		hi := sp.st.after
		if sp.st.done {
			hi = nil
		}
		if err := sp.emitGone(ctx, c, e, lo, hi, seq); err != nil {
			return fail(err)
		}
		if err := e.ResumePoint(sp.st.encode()); err != nil {
			return err
		}
		if sp.st.done {
			return nil
		}
	}
}

// where appends the keyset condition: the key after sp.st.after, as
// (k1 > v1) OR (k1 = v1 AND k2 > v2) OR ..., which the range optimizer
// reads from the primary key (a row constructor comparison it may not).
func (sp *snapSplit) where(b []byte) ([]byte, error) {
	t := sp.t
	if len(sp.st.after) != len(t.key) {
		return nil, fmt.Errorf("%w: snapshot of %s resumes after a key of %d columns, the table's has %d",
			ErrBadState, t.name, len(sp.st.after), len(t.key))
	}
	b = append(b, " WHERE "...)
	col := func(b []byte, j int) ([]byte, error) {
		return append(b, quoteIdent(t.stream.Columns[t.key[j]].Name)...), nil
	}
	lit := func(b []byte, j int) ([]byte, error) {
		b, err := appendLiteral(b, t.keyLits[j], sp.st.after[j])
		if err != nil {
			return nil, fmt.Errorf("%w: snapshot of %s resumes after key column %s: %v", ErrBadState, t.name,
				t.stream.Columns[t.key[j]].Name, err)
		}
		return b, nil
	}
	return appendKeyAfter(b, len(t.key), col, lit)
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

// consistentSnapshot starts a transaction WITH CONSISTENT SNAPSHOT on c
// and returns the binlog position it sees: every transaction before it
// is in the snapshot, none after it. On MariaDB the server reports that
// position (binlog_snapshot_file and _position, and BINLOG_GTID_POS), with
// no lock; on MySQL, FLUSH TABLES WITH READ LOCK holds writes off while
// the transaction starts and the position is read.
func (s *Source) consistentSnapshot(ctx context.Context, c *client.Conn, gtidMode bool) (position, error) {
	fail := func(what string, err error) (position, error) {
		if ctx.Err() != nil {
			return position{}, ctx.Err()
		}
		return position{}, fmt.Errorf("mysql: snapshot: %s: %w", what, err)
	}
	for _, sql := range []string{"SET SESSION net_write_timeout = 86400", "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"} {
		if _, err := c.Execute(sql); err != nil {
			return fail("session", err)
		}
	}
	var at position
	switch s.info.flavor {
	case FlavorMariaDB:
		if _, err := c.Execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
			return fail("start transaction", err)
		}
		r, err := c.Execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
		if err != nil {
			return fail("binlog_snapshot_file", err)
		}
		vals := map[string]string{}
		for _, row := range rows(r) {
			vals[strings.ToLower(row[0])] = row[1]
		}
		if at, err = parsePosition(vals["binlog_snapshot_file"], vals["binlog_snapshot_position"]); err != nil {
			return fail("binlog_snapshot_position", err)
		}
		r, err = c.Execute("SELECT BINLOG_GTID_POS(?, ?)", at.file, at.pos)
		if err != nil {
			return fail("BINLOG_GTID_POS", err)
		}
		if rs := rows(r); len(rs) == 1 {
			at.gtid = rs[0][0]
		}
	default:
		if _, err := c.Execute("FLUSH TABLES WITH READ LOCK"); err != nil {
			return fail("FLUSH TABLES WITH READ LOCK (needs the RELOAD privilege)", err)
		}
		if _, err := c.Execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
			return fail("start transaction", err)
		}
		p, err := s.masterStatus(ctx, c)
		if err != nil {
			return fail("binlog position", err)
		}
		at = p
		if !gtidMode {
			at.gtid = ""
		}
		if _, err := c.Execute("UNLOCK TABLES"); err != nil {
			return fail("UNLOCK TABLES", err)
		}
	}
	if at.gtid != "" {
		g, err := parseGTID(s.info.flavor, at.gtid)
		if err != nil {
			return fail("GTID position", err)
		}
		at.gtid = g.String()
	}
	return at, nil
}

// anchor finds the origin of a first snapshot: the binlog position of a
// consistent snapshot started now. Every later read sees every
// transaction before it (InnoDB's visibility only grows), so a chunk
// read at any later time holds each row as of that position or later.
// (The binlog position alone, without a snapshot, would not do: a
// transaction can be in the binlog before it is visible in InnoDB.)
func (s *Source) anchor(ctx context.Context, gtidMode bool) (position, error) {
	c, err := s.connect(ctx)
	if err != nil {
		return position{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { abort(c) })
	defer stop()
	at, err := s.consistentSnapshot(ctx, c, gtidMode)
	if err != nil {
		return position{}, err
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		return position{}, fmt.Errorf("mysql: snapshot: commit: %w", err)
	}
	return at, nil
}

package mysql

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/openetl/etl/source"
)

const splitIDPrefix = "binlog:"

// split reads every opened table: a snapshot first (when there is no
// resume state), then the binlog.
type split struct {
	src        *Source
	id         source.SplitID
	tables     []*table
	byName     map[string]*table
	discovered position // the binlog position before the catalog was read
	gtidMode   bool     // the server has GTIDs (as of Open)
	resume     *state
	streamed   bool // the stream emitted something

	buf, scratch []byte
	offs         []int
}

func (sp *split) ID() source.SplitID { return sp.id }

// Open returns the source's one split, reading the named streams. With a
// resume state it checks the state's flavor and that its binlog is
// still on the server (a *PurgedError otherwise, unless
// Config.Resnapshot).
func (s *Source) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	tables, before, err := s.tables(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	gtidMode := s.info.gtidMode
	s.mu.Unlock()
	sp := &split{src: s, id: source.SplitID(splitIDPrefix + s.cfg.Database), byName: map[string]*table{}, discovered: before,
		gtidMode: gtidMode}
	for _, name := range streams {
		i := slices.IndexFunc(tables, func(t *table) bool { return t.stream.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("mysql: stream %q is not a table of database %q", name, s.cfg.Database)
		}
		if sp.byName[name] == nil {
			sp.tables = append(sp.tables, tables[i])
			sp.byName[name] = tables[i]
		}
	}
	if b, ok := resume[sp.id]; ok {
		st, err := decodeState(b)
		if err != nil {
			return nil, err
		}
		if st.flavor != s.info.flavor {
			return nil, fmt.Errorf("%w: the resume state was written reading %s, the server is %s %s", ErrFlavor, st.flavor, s.info.flavor, s.info.version)
		}
		if err := s.checkPurged(ctx, st); err != nil {
			var pe *PurgedError
			if !errors.As(err, &pe) || !s.cfg.Resnapshot {
				return nil, err
			}
			s.log.WarnContext(ctx, "binlog purged: reading a new snapshot (Config.Resnapshot)", "err", err)
		} else {
			sp.resume = &st
		}
	}
	return []source.Split{sp}, nil
}

// checkPurged returns a *PurgedError when the state's binlog file is no
// longer on the server (and, on MySQL with GTIDs, when the server purged
// GTIDs the state lacks).
func (s *Source) checkPurged(ctx context.Context, st state) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.queryConn(ctx)
	if err != nil {
		return err
	}
	r, err := exec(ctx, c, "SHOW BINARY LOGS")
	if err != nil {
		return fmt.Errorf("mysql: list binlogs: %w", err)
	}
	var files []string
	for _, row := range rows(r) {
		files = append(files, row[0])
	}
	if !slices.Contains(files, st.at.file) {
		pe := &PurgedError{File: st.at.file, Pos: st.at.pos, GTID: st.at.gtid}
		if len(files) > 0 {
			pe.Oldest = files[0]
		}
		return pe
	}
	if st.flavor == FlavorMySQL && st.at.gtid != "" && s.info.gtidMode {
		r, err := exec(ctx, c, "SELECT GTID_SUBSET(@@GLOBAL.gtid_purged, ?)", st.at.gtid)
		if err != nil {
			return fmt.Errorf("mysql: compare gtid_purged: %w", err)
		}
		if rs := rows(r); len(rs) == 1 && rs[0][0] == "0" {
			return &PurgedError{File: st.at.file, Pos: st.at.pos, GTID: st.at.gtid, Err: errors.New("gtid_purged has GTIDs the state lacks")}
		}
	}
	return nil
}

// Read emits the snapshot (unless resuming) and then the changes after
// it. Bounded, it stops at the first transaction end at or past the
// binlog position as of the end of the snapshot (resuming: the start of
// Read).
func (sp *split) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := sp.src
	var start state
	if sp.resume != nil {
		start = *sp.resume
		if err := s.checkPurged(ctx, start); err != nil {
			var pe *PurgedError
			if !errors.As(err, &pe) || !s.cfg.Resnapshot {
				return err
			}
			s.log.WarnContext(ctx, "binlog purged: reading a new snapshot (Config.Resnapshot)", "err", err)
			sp.resume = nil
		}
	}
	if sp.resume == nil {
		st, err := sp.snapshot(ctx, e)
		if err != nil {
			return err
		}
		start = st
	}
	var end position
	if bounded {
		s.mu.Lock()
		c, err := s.queryConn(ctx)
		if err == nil {
			end, err = s.masterStatus(ctx, c)
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if !start.at.before(end) {
			return e.ResumePoint(start.encode())
		}
	}
	err := sp.stream(ctx, e, start, bounded, end)
	var pe *PurgedError
	if errors.As(err, &pe) && pe.Err != nil && sp.resume != nil && s.cfg.Resnapshot && !sp.streamed {
		// The server refused the resume state's GTIDs before anything was
		// read: a new snapshot, as Config.Resnapshot allows.
		s.log.WarnContext(ctx, "binlog purged: reading a new snapshot (Config.Resnapshot)", "err", err)
		sp.resume = nil
		return sp.Read(ctx, e, bounded)
	}
	return err
}

// snapshot reads every opened table in one transaction WITH CONSISTENT
// SNAPSHOT, as inserts whose seq is the binlog position the snapshot
// sees, and emits the first resume point: that position.
func (sp *split) snapshot(ctx context.Context, e source.Emitter) (state, error) {
	s := sp.src
	c, err := s.connect(ctx)
	if err != nil {
		return state{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { abort(c) })
	defer stop()
	fail := func(what string, err error) (state, error) {
		if ctx.Err() != nil {
			return state{}, ctx.Err()
		}
		return state{}, fmt.Errorf("mysql: snapshot: %s: %w", what, err)
	}
	// The pipeline may hold the reader back (backpressure) longer than
	// the server waits on a blocked client by default (60 s).
	for _, sql := range []string{"SET SESSION net_write_timeout = 86400", "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"} {
		if _, err := c.Execute(sql); err != nil {
			return fail("session", err)
		}
	}
	var at position
	switch s.info.flavor {
	case FlavorMariaDB:
		// MariaDB reports the binlog position of the consistent snapshot
		// itself: no lock needed.
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
		// MySQL has no binlog position of a snapshot: hold writes off
		// while the snapshot starts and the position is read.
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
		if !sp.gtidMode {
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
	s.log.InfoContext(ctx, "snapshot", "file", at.file, "pos", at.pos, "gtid", at.gtid, "tables", len(sp.tables))
	for _, t := range sp.tables {
		if err := sp.readTable(ctx, c, e, t, at.seq()); err != nil {
			if ctx.Err() != nil {
				return state{}, ctx.Err()
			}
			return state{}, err
		}
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		return fail("commit", err)
	}
	st := state{flavor: s.info.flavor, at: at}
	return st, e.ResumePoint(st.encode())
}

// errEmit carries an Emitter error out of go-mysql's row callback.
type errEmit struct{ err error }

func (e errEmit) Error() string { return e.err.Error() }

func (sp *split) readTable(ctx context.Context, c *client.Conn, e source.Emitter, t *table, seq int64) error {
	var sb strings.Builder
	sb.WriteString("SELECT ")
	for i, col := range t.stream.Columns {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(selectExpr(col.Name, t.kinds[i]))
	}
	sb.WriteString(" FROM " + quoteIdent(sp.src.cfg.Database) + "." + quoteIdent(t.name))
	if sp.scratch == nil {
		sp.scratch = make([]byte, 0, 64)
	}
	var key []byte
	var emitErr error
	var res gomysql.Result
	n := len(t.stream.Columns)
	err := c.ExecuteSelectStreaming(sb.String(), &res, func(row []gomysql.FieldValue) error {
		if len(row) != n {
			return fmt.Errorf("mysql: snapshot of %s: %d values for %d columns", t.name, len(row), n)
		}
		sp.buf = sp.buf[:0]
		sp.offs = sp.offs[:0]
		for i := range row {
			sp.offs = append(sp.offs, len(sp.buf))
			sp.buf = appendSnapshotValue(sp.buf, t.kinds[i], &row[i], sp.scratch)
		}
		sp.offs = append(sp.offs, len(sp.buf))
		key = key[:0]
		for _, k := range t.key {
			key = append(key, sp.buf[sp.offs[k]:sp.offs[k+1]]...)
		}
		if err := e.Record(t.stream.Name, source.OpInsert, seq, key, sp.buf); err != nil {
			emitErr = err
			return errEmit{err}
		}
		return nil
	}, nil)
	if emitErr != nil {
		return emitErr
	}
	if err != nil {
		return fmt.Errorf("mysql: snapshot of %s: %w", t.name, err)
	}
	return nil
}

package mysql

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/openetl/etl/source"
)

// watermarkTable is the table the source writes re-snapshot requests
// and watermarks to (see Resnapshot). It is no stream.
const watermarkTable = "_openetl_watermark"

// Resnapshot asks the pipeline reading this database's binlog to read
// stream's table again, in chunks of Config.SnapshotChunkRows rows in
// primary-key order, while it goes on streaming (see the package doc,
// "Reading a table again"). It writes the request as a row of the table
// _openetl_watermark in the database (creating it the first time;
// the user needs CREATE and INSERT there) and returns: the binlog split
// picks it up in order, in this attempt or the next, so a request made
// while the pipeline is down is not lost. Every pipeline reading the
// stream from this database acts on it. A stream already queued is not
// queued again.
//
// It fails with an error wrapping source.ErrUnknownStream when stream
// is not a table of the database, and source.ErrNoKey when the table
// has no primary key, or one whose types can't be paged (it is read in
// one piece).
func (s *Source) Resnapshot(ctx context.Context, stream string) error {
	tables, _, err := s.tables(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(tables, func(t *table) bool { return t.stream.Name == stream })
	if i < 0 {
		return fmt.Errorf("mysql: re-snapshot of %q: %w: not a table the source reads in database %q", stream, source.ErrUnknownStream, s.cfg.Database)
	}
	if tables[i].keyLits == nil {
		return fmt.Errorf("mysql: re-snapshot of %q: %w: without a primary key that can be paged its rows can't be matched to the changes streamed meanwhile",
			stream, source.ErrNoKey)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.queryConn(ctx)
	if err != nil {
		return err
	}
	if err := s.ensureWatermark(ctx, c); err != nil {
		return err
	}
	if _, err := exec(ctx, c, "INSERT INTO "+quoteIdent(s.cfg.Database)+"."+quoteIdent(watermarkTable)+" (mark) VALUES (?)",
		"request:"+stream); err != nil {
		return fmt.Errorf("mysql: re-snapshot of %q: write the request: %w", stream, err)
	}
	s.log.InfoContext(ctx, "re-snapshot requested", "stream", stream)
	return nil
}

// ensureWatermark creates the watermark table if it is missing.
func (s *Source) ensureWatermark(ctx context.Context, c *client.Conn) error {
	if _, err := exec(ctx, c, "CREATE TABLE IF NOT EXISTS "+quoteIdent(s.cfg.Database)+"."+quoteIdent(watermarkTable)+
		" (id BIGINT AUTO_INCREMENT PRIMARY KEY, mark VARCHAR(255) NOT NULL) ENGINE=InnoDB"); err != nil {
		return fmt.Errorf("mysql: create the watermark table %s: %w", watermarkTable, err)
	}
	return nil
}

// job is one stream's re-snapshot in the binlog split's state: the last
// key read (text form of each column) and the rows emitted.
type job struct {
	Stream string   `json:"stream"`
	After  [][]byte `json:"after,omitempty"`
	Rows   int64    `json:"rows,omitempty"`
}

// chunk is a chunk read and waiting for its watermarks: its rows by key
// in key order. Its low mark opens the window in which changes of its
// keys drop their rows; its high mark closes it, and the rows left are
// emitted at the high mark's transaction end.
type chunk struct {
	t          *table
	low, high  string // the marks' text
	keys       []string
	rows       map[string][]byte
	last       [][]byte // the last key read
	total      int
	open, shut bool  // the low mark, the high mark seen
	seq        int64 // the high mark's seq
}

// collector keeps a chunk's rows (rowReader.read emits them).
type collector struct {
	source.Emitter
	c    *chunk
	last []byte // the last row's payload
}

func (c *collector) Record(_ string, _ source.Op, _ int64, key, payload []byte) error {
	k := string(key)
	c.c.keys = append(c.c.keys, k)
	c.c.rows[k] = slices.Clone(payload)
	c.last = append(c.last[:0], payload...)
	c.c.total++
	return nil
}

// wantChunk reports whether the reader should read the next chunk now:
// a job is queued, none is in flight, and it is between transactions.
func (r *reader) wantChunk() bool {
	return r.undo == nil && len(r.last.jobs) > 0 && r.chunk == nil && !r.inTxn
}

// nextChunk reads the first job's next chunk between a low and a high
// watermark, or ends the job when the table has no rows left. With
// ordered commits (MySQL's binlog_order_commits, MariaDB's group
// commit), transactions become visible in binlog order, so the chunk's
// query, run after the low mark committed, sees every transaction
// before it in the binlog; the changes between the marks are those it
// may have missed, and they drop their keys' rows.
func (r *reader) nextChunk(ctx context.Context) error {
	sp, s := r.sp, r.sp.src
	j := r.last.jobs[0]
	t := sp.byName[j.Stream]
	if r.conn == nil {
		c, err := s.connect(ctx)
		if err != nil {
			return err
		}
		r.conn = c
		if err := s.ensureWatermark(ctx, c); err != nil {
			return err
		}
		var b [8]byte
		rand.Read(b[:])
		r.nonce = hex.EncodeToString(b[:])
	}
	if p := sp.copyName.Load(); p == nil || *p != j.Stream {
		name := j.Stream
		sp.copied.Store(j.Rows)
		sp.estimated.Store(0)
		if res, err := exec(ctx, r.conn, "SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
			s.cfg.Database, t.name); err == nil {
			if rs := rows(res); len(rs) == 1 {
				n, _ := strconv.ParseInt(rs[0][0], 10, 64)
				sp.estimated.Store(n)
			}
		}
		sp.copyName.Store(&name)
		if len(j.After) == 0 && j.Rows == 0 {
			if rep, ok := r.e.(source.Reporter); ok {
				rep.Report(source.Notice{Kind: source.NoticeResnapshotStarted, Stream: j.Stream,
					Detail: "the table is read again in chunks while the binlog goes on"})
			}
		}
	}
	r.n++
	ch := &chunk{t: t, rows: map[string][]byte{}, low: fmt.Sprintf("low:%s:%d", r.nonce, r.n), high: fmt.Sprintf("high:%s:%d", r.nonce, r.n)}
	mark := "INSERT INTO " + quoteIdent(s.cfg.Database) + "." + quoteIdent(watermarkTable) + " (mark) VALUES (?)"
	if _, err := exec(ctx, r.conn, mark, ch.low); err != nil {
		return fmt.Errorf("mysql: re-snapshot of %s: write the low watermark: %w", t.name, err)
	}
	sql := []byte(s.selectList(t))
	if len(j.After) > 0 {
		if len(j.After) != len(t.key) {
			s.log.WarnContext(ctx, "re-snapshot: the table's key changed; reading it again from its start", "stream", j.Stream)
			j.After = nil
		} else {
			sql = append(sql, " WHERE "...)
			var err error
			col := func(b []byte, i int) ([]byte, error) {
				return append(b, quoteIdent(t.stream.Columns[t.key[i]].Name)...), nil
			}
			lit := func(b []byte, i int) ([]byte, error) { return appendLiteral(b, t.keyLits[i], j.After[i]) }
			if sql, err = appendKeyAfter(sql, len(t.key), col, lit); err != nil {
				return fmt.Errorf("%w: re-snapshot of %s: %v", ErrBadState, t.name, err)
			}
		}
	}
	sql = append(sql, " ORDER BY "...)
	for i, k := range t.key {
		if i > 0 {
			sql = append(sql, ", "...)
		}
		sql = append(sql, quoteIdent(t.stream.Columns[k].Name)...)
	}
	sql = append(sql, " LIMIT "+strconv.Itoa(s.cfg.SnapshotChunkRows)...)
	col := &collector{c: ch}
	if _, err := r.rr.read(r.conn, col, t, string(sql), 0, nil); err != nil {
		return err
	}
	if ch.total == 0 {
		r.finishJob()
		return r.e.ResumePoint(r.last.encode())
	}
	vals, err := source.DecodeRow(nil, col.last)
	if err != nil {
		return err
	}
	for _, k := range t.key {
		ch.last = append(ch.last, slices.Clone(vals[k].Text))
	}
	if _, err := exec(ctx, r.conn, mark, ch.high); err != nil {
		return fmt.Errorf("mysql: re-snapshot of %s: write the high watermark: %w", t.name, err)
	}
	r.chunk = ch
	return nil
}

// marks handles the rows of the watermark table: requests, and the
// marks of the chunk in flight (those of other readers are passed by).
func (r *reader) marks(e *replication.RowsEvent, d deferredRows, isDeferred bool) error {
	if e.Type() != replication.EnumRowsEventTypeInsert {
		return nil
	}
	if isDeferred {
		e.Rows = nil
		if err := e.DecodeData(d.pos, d.data); err != nil {
			return fmt.Errorf("mysql: rows event of %s at %s:%d: %w", watermarkTable, r.cur.file, r.evStart, err)
		}
	}
	for _, row := range e.Rows {
		if len(row) < 2 {
			continue
		}
		var mark string
		switch v := row[1].(type) {
		case string:
			mark = v
		case []byte:
			mark = string(v)
		}
		switch ch := r.chunk; {
		case strings.HasPrefix(mark, "request:"):
			r.queue(strings.TrimPrefix(mark, "request:"))
		case ch != nil && mark == ch.low:
			ch.open = true
		case ch != nil && mark == ch.high && ch.open:
			ch.shut, ch.seq = true, seqAt(r.evIdx, r.evStart)
		}
	}
	return nil
}

// queue adds a job for stream, unless the reader doesn't read it, it
// can't be paged, or it is queued already.
func (r *reader) queue(stream string) {
	log := r.sp.src.log
	t := r.sp.byName[stream]
	switch {
	case t == nil:
		log.Warn("re-snapshot requested of a stream this pipeline doesn't read: ignored", "stream", stream)
		return
	case t.keyLits == nil:
		log.Warn("re-snapshot requested of a table without a key that can be paged: ignored", "stream", stream)
		return
	case slices.ContainsFunc(r.last.jobs, func(j job) bool { return j.Stream == stream }):
		log.Info("re-snapshot requested of a stream already being read again: ignored", "stream", stream)
		return
	}
	r.last.jobs = append(slices.Clone(r.last.jobs), job{Stream: stream})
	r.emitted = true // a resume point records it
	log.Info("re-snapshot queued", "stream", stream)
}

// changed drops key's row from the chunk in flight when the change
// comes between its marks.
func (r *reader) changed(stream string, key []byte) {
	if ch := r.chunk; ch != nil && ch.open && !ch.shut && ch.t.stream.Name == stream {
		delete(ch.rows, string(key))
	}
}

// dedupe is the Emitter the reader emits changes through: a change
// between a chunk's marks drops its key's row from the chunk.
type dedupe struct {
	source.Emitter
	r *reader
}

func (d dedupe) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	d.r.changed(stream, key)
	return d.Emitter.Record(stream, op, seq, key, payload)
}

// Report forwards n to the runner's Emitter (see source.Reporter).
func (d dedupe) Report(n source.Notice) {
	if r, ok := d.Emitter.(source.Reporter); ok {
		r.Report(n)
	}
}

// emitChunk emits the rows the changes between the marks left, with
// the high mark's seq, and moves the job on.
func (r *reader) emitChunk() error {
	ch := r.chunk
	r.chunk = nil
	name := ch.t.stream.Name
	jobs := slices.Clone(r.last.jobs)
	j := &jobs[0]
	for _, k := range ch.keys {
		row, ok := ch.rows[k]
		if !ok {
			continue
		}
		if err := r.e.Record(name, source.OpInsert, ch.seq, []byte(k), row); err != nil {
			return err
		}
		j.Rows++
		r.sp.copied.Add(1)
	}
	j.After = ch.last
	r.last.jobs = jobs
	r.emitted = true
	r.sp.src.log.Debug("re-snapshot chunk emitted", "stream", name, "rows", ch.total, "kept", len(ch.rows))
	return nil
}

// finishJob ends the first job (its table is read) and reports it.
func (r *reader) finishJob() {
	j := r.last.jobs[0]
	r.last.jobs = slices.Clone(r.last.jobs[1:])
	r.sp.copyName.Store(nil)
	r.sp.src.log.Info("re-snapshot done", "stream", j.Stream, "rows", j.Rows)
	if rep, ok := r.e.(source.Reporter); ok {
		rep.Report(source.Notice{Kind: source.NoticeResnapshotDone, Stream: j.Stream,
			Detail: fmt.Sprintf("the table was read again: %d rows", j.Rows)})
	}
	if r.conn != nil && len(r.last.jobs) == 0 {
		// The marks of this reader are spent.
		exec(context.Background(), r.conn, "DELETE FROM "+quoteIdent(r.sp.src.cfg.Database)+"."+quoteIdent(watermarkTable)+
			" WHERE mark LIKE ?", "%:"+r.nonce+":%")
	}
}

package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl/source"
)

// The prefixes of the logical decoding messages a re-snapshot writes
// into the WAL: a request (from Resnapshot), and the high watermark
// after each chunk's query.
const (
	requestPrefix = "openetl.resnapshot"
	highPrefix    = "openetl.resnapshot.high"
)

// Resnapshot asks the pipeline that streams through this source's slot
// to read stream's table again, in chunks of Config.SnapshotChunkRows
// rows in primary-key order, while it goes on streaming (see the
// package doc, "Reading a table again"). It writes the request into the
// WAL (a transactional logical decoding message naming the slot and the
// stream) and returns: the change stream picks it up in order, in this
// attempt or, if none runs, in the next Sync or Run, so a request made
// while the pipeline is down, or during a restart, is not lost. A
// stream already being read again is not read a second time at once;
// the request is queued behind it.
//
// It fails with an error wrapping source.ErrUnknownStream when stream
// is not a table of the publication, and source.ErrNoKey when the table
// has no primary key (or replica identity index): its rows can't be
// matched to the changes the stream carries meanwhile. The role needs
// EXECUTE on pg_logical_emit_message, and the server must be Postgres
// 14 or later (pgoutput sends logical messages from 14 on).
func (s *Source) Resnapshot(ctx context.Context, stream string) error {
	tables, err := s.tables(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(tables, func(t *table) bool { return t.stream.Name == stream })
	if i < 0 {
		return fmt.Errorf("postgres: re-snapshot of %q: %w: not a table of publication %q", stream, source.ErrUnknownStream, s.cfg.Publication)
	}
	if len(tables[i].key) == 0 {
		return fmt.Errorf("postgres: re-snapshot of %q: %w: without a primary key its rows can't be matched to the changes streamed meanwhile",
			stream, source.ErrNoKey)
	}
	content, _ := json.Marshal(request{Slot: s.cfg.Slot, Stream: stream})
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.queryConn(ctx)
	if err != nil {
		return err
	}
	if major := serverMajor(c); major < 14 {
		return fmt.Errorf("postgres: re-snapshot of %q needs Postgres 14 or later (pgoutput sends logical messages from 14 on); the server is %q",
			stream, c.ParameterStatus("server_version"))
	}
	if _, err := queryText(ctx, c, `SELECT pg_logical_emit_message(true, `+quoteLiteral(requestPrefix)+`, `+
		quoteLiteral(string(content))+`)`); err != nil {
		return fmt.Errorf("postgres: re-snapshot of %q: write the request: %w", stream, err)
	}
	s.log.InfoContext(ctx, "re-snapshot requested", "stream", stream)
	return nil
}

// signalTables returns Config.SignalTable in a list, empty without one.
func (s *Source) signalTables() []string {
	if s.cfg.SignalTable == "" {
		return nil
	}
	return []string{s.cfg.SignalTable}
}

// signalStream is the stream name a table named name ("name" or
// "schema.name") would have.
func signalStream(name string) string {
	if schema, n, ok := strings.Cut(name, "."); ok {
		return streamName(schema, n)
	}
	return name
}

// request is the content of a request message.
type request struct {
	Slot   string `json:"slot"`
	Stream string `json:"stream"`
}

// job is one stream's re-snapshot, in the change stream's resume state:
// After is the text form of the last key read (none before the first
// chunk), Rows the rows emitted so far. Split names the snapshot split
// whose rest of the first snapshot the job reads, handed over by it
// (see handOver): its After and Rows start where the split's left off,
// and Part is the leaf partition (schema, name) that split reads, if
// any; the job reads that relation only.
type job struct {
	Stream string   `json:"stream"`
	After  []string `json:"after,omitempty"`
	Rows   int64    `json:"rows,omitempty"`
	Split  string   `json:"split,omitempty"`
	Part   []string `json:"part,omitempty"`
}

// extra is the part of the change stream's resume state that only
// re-snapshots need: the jobs, the first one being read, and per stream
// the seq of its last chunk (Raise), which changes committed after it
// but written before it are raised above (see seqFor), on replay too.
// Snapped lists the snapshot splits whose rest a job finished: they are
// done.
type extra struct {
	Jobs    []job             `json:"jobs,omitempty"`
	Raise   map[string]uint64 `json:"raise,omitempty"`
	Snapped []string          `json:"snapped,omitempty"`
}

// resnap is the change stream's re-snapshot machinery: the jobs, the
// chunk in flight, and the connection chunks are read on.
type resnap struct {
	x       extra
	encoded []byte // x as JSON, nil when empty: the state's tail

	conn  *pgconn.PgConn
	chunk *chunk
	spare *chunk // the last chunk emitted: its buffers serve the next
	n     uint64 // chunks read in this Read, to tell their watermarks apart

	// recent holds the xids of the last transactions received, to catch
	// one whose commit the stream sent before the chunk's snapshot saw
	// it (see readChunk).
	recent [256]uint32
	next   int

	// For SnapshotProgress, read from other goroutines; split is the
	// snapshot split whose rest the running job reads (handOver), if any.
	stream    atomic.Pointer[string]
	split     atomic.Pointer[string]
	copied    atomic.Int64
	estimated atomic.Int64
}

// chunk is a chunk read and waiting for its high watermark: its rows,
// in key order, and the snapshot they were read under.
type chunk struct {
	t  *table
	id string
	// buf holds the rows' keys and payloads one after another, rows
	// (in key order) where each is: one buffer a chunk, no allocation a
	// row, reused by the next chunk.
	buf  []byte
	rows []chunkRow
	// dropped holds the keys a change no snapshot saw came for: their
	// rows are not emitted.
	dropped map[string]struct{}
	last    []string // the last key read, text form
	xmax    uint32
	xip     map[uint32]bool
	high    bool          // its watermark was seen in the current transaction
	start   time.Time     // when the query ran
	lsn     pglogrepl.LSN // the watermark transaction's commit, once seen
}

// chunkRow is a row of a chunk: its key is buf[key:payload], its
// payload buf[payload:end].
type chunkRow struct{ key, payload, end int }

// drop keeps the row of key, if the chunk holds one, from being emitted.
func (c *chunk) drop(key []byte) {
	if c.dropped == nil {
		c.dropped = map[string]struct{}{}
	}
	c.dropped[string(key)] = struct{}{}
}

// kept reports whether row r is to be emitted.
func (c *chunk) kept(r chunkRow) bool {
	if len(c.dropped) == 0 {
		return true
	}
	_, gone := c.dropped[string(c.buf[r.key:r.payload])]
	return !gone
}

// idJSON is the content of the chunk's watermark message.
func (c *chunk) idJSON() string {
	b, _ := json.Marshal(c.id)
	return string(b)
}

// invisible reports whether the chunk's snapshot did not see transaction
// xid (top-level): in progress when it was taken, or started after.
func (c *chunk) invisible(xid uint32) bool {
	return c.xip[xid] || int32(xid-c.xmax) >= 0
}

func (r *resnap) setEncoded() {
	if len(r.x.Jobs) == 0 && len(r.x.Raise) == 0 && len(r.x.Snapped) == 0 {
		r.encoded = nil
		return
	}
	r.encoded, _ = json.Marshal(r.x)
}

func (r *resnap) active() bool { return len(r.x.Jobs) > 0 }

// received records a transaction the stream received.
func (r *resnap) received(xid uint32) {
	r.recent[r.next] = xid
	r.next = (r.next + 1) % len(r.recent)
}

// close closes the chunk connection.
func (r *resnap) close(ctx context.Context) {
	if r.conn != nil {
		r.conn.Close(context.WithoutCancel(ctx))
		r.conn = nil
	}
	r.chunk = nil
	r.stream.Store(nil)
	r.split.Store(nil)
}

// SnapshotProgress reports a re-snapshot while one runs (see
// source.SnapshotReporter): the stream, its rows emitted over all
// attempts and the table's estimated row count.
func (sp *split) SnapshotProgress() (stream string, done, estimated int64, ok bool) {
	p := sp.rs.stream.Load()
	if p == nil {
		return "", 0, 0, false
	}
	return *p, sp.rs.copied.Load(), sp.rs.estimated.Load(), true
}

// request queues a re-snapshot of stream from a request message and
// reports whether it did. A stream the attempt doesn't read, or one
// without a key, is not queued (logged at Warn); one already queued
// isn't queued again.
func (sp *split) request(ctx context.Context, content []byte) bool {
	var req request
	if err := json.Unmarshal(content, &req); err != nil || req.Slot != sp.src.cfg.Slot {
		return false // another pipeline's
	}
	return sp.queue(ctx, req.Stream)
}

func (sp *split) queue(ctx context.Context, stream string) bool {
	log := sp.src.log
	t := sp.table(stream)
	switch {
	case t == nil:
		log.WarnContext(ctx, "re-snapshot requested of a stream this pipeline doesn't read: ignored", "stream", stream)
		return false
	case len(t.key) == 0:
		log.WarnContext(ctx, "re-snapshot requested of a table without a key: ignored", "stream", stream)
		return false
	case slices.ContainsFunc(sp.rs.x.Jobs, func(j job) bool { return j.Stream == stream && j.Split == "" }):
		// (Behind a job that reads the rest of the first snapshot, a
		// request reads the whole table again.)
		log.InfoContext(ctx, "re-snapshot requested of a stream already being read again: ignored", "stream", stream)
		return false
	}
	sp.rs.x.Jobs = append(sp.rs.x.Jobs, job{Stream: stream})
	sp.rs.setEncoded()
	log.InfoContext(ctx, "re-snapshot queued", "stream", stream, "queued", len(sp.rs.x.Jobs))
	return true
}

// table returns the opened table of stream, or nil.
func (sp *split) table(stream string) *table {
	for _, t := range sp.tables {
		if t.stream.Name == stream {
			return t
		}
	}
	return nil
}

// readChunk reads the next chunk of the first job's table, under a
// snapshot of its own, and writes its high watermark: a transactional
// logical message, whose commit's position is the seq of the chunk's
// rows. The snapshot's xmax and in-progress list say which transactions
// its rows reflect, so no low watermark is needed: a change the stream
// carries from a transaction the snapshot did not see drops the key's
// row from the chunk, whether it committed before the chunk's query or
// after. A transaction the stream already sent that the snapshot still
// saw in progress (its commit record was flushed, its end not yet
// visible) would be missed, so the chunk is read again then. A chunk
// with no rows ends the job: it returns nil.
func (sp *split) readChunk(ctx context.Context) (*chunk, error) {
	rs := &sp.rs
	j := &rs.x.Jobs[0]
	t := sp.table(j.Stream)
	if p := rs.stream.Load(); p == nil || *p != j.Stream {
		name := j.Stream
		rs.copied.Store(j.Rows)
		rs.estimated.Store(0)
		var rows [][][]byte
		err := sp.withChunkConn(ctx, func(c *pgconn.PgConn) (err error) {
			rows, err = queryText(ctx, c, `SELECT GREATEST(reltuples, 0)::int8 FROM pg_class WHERE oid = to_regclass(`+
				quoteLiteral(t.ident())+`)`)
			return err
		})
		if err == nil && len(rows) == 1 {
			n, _ := strconv.ParseInt(string(rows[0][0]), 10, 64)
			rs.estimated.Store(n)
		}
		rs.stream.Store(&name)
		if j.Split != "" {
			id := j.Split
			rs.split.Store(&id)
		}
	}
	if len(j.After) > 0 && len(j.After) != len(t.key) {
		// The table's key changed since the last chunk: read it from the
		// start, under the new key.
		sp.src.log.WarnContext(ctx, "re-snapshot: the table's key changed; reading it again from its start", "stream", j.Stream)
		j.After = nil
	}
	for try := 0; ; try++ {
		var ch *chunk
		err := sp.withChunkConn(ctx, func(c *pgconn.PgConn) (err error) {
			ch, err = sp.queryChunk(ctx, c, t, j)
			return err
		})
		if err != nil {
			return nil, err
		}
		seen := false
		for _, x := range rs.recent {
			if x != 0 && ch.xip[x] {
				seen = true
				break
			}
		}
		if !seen || try == 20 {
			if seen {
				return nil, fmt.Errorf("postgres: re-snapshot of %s: a transaction the stream sent stays in progress in the server's snapshots", j.Stream)
			}
			if len(ch.rows) == 0 {
				return nil, nil
			}
			rs.n++
			ch.id = fmt.Sprintf("%s:%d:%d", sp.src.cfg.Slot, time.Now().UnixNano(), rs.n)
			// Written twice (the first write committed, its answer
			// lost with the connection), the second watermark comes
			// after the chunk was emitted at the first and matches no
			// chunk then.
			if err := sp.withChunkConn(ctx, func(c *pgconn.PgConn) error {
				_, err := queryText(ctx, c, `SELECT pg_logical_emit_message(true, `+quoteLiteral(highPrefix)+`, `+
					quoteLiteral(ch.idJSON())+`)`)
				return err
			}); err != nil {
				return nil, fmt.Errorf("postgres: re-snapshot of %s: write the watermark: %w", j.Stream, err)
			}
			return ch, nil
		}
		time.Sleep(time.Millisecond)
	}
}

// withChunkConn runs fn on the re-snapshot's connection, connecting
// when there is none or it was lost (see onLive: a lost connection,
// ended while it sat idle between chunks most likely, costs no attempt).
// fn must be safe to repeat.
func (sp *split) withChunkConn(ctx context.Context, fn func(c *pgconn.PgConn) error) error {
	rs := &sp.rs
	return sp.src.onLive(ctx, func() (*pgconn.PgConn, error) {
		if rs.conn == nil || rs.conn.IsClosed() {
			c, err := sp.src.connect(ctx, false)
			if err != nil {
				return nil, err
			}
			rs.conn = c
		}
		return rs.conn, nil
	}, fn)
}

// queryChunk reads the rows after j.After under a REPEATABLE READ
// snapshot on c, and that snapshot's xmax and in-progress transactions.
// It writes nothing: a repeat reads the chunk again.
func (sp *split) queryChunk(ctx context.Context, c *pgconn.PgConn, t *table, j *job) (*chunk, error) {
	fail := func(err error) (*chunk, error) {
		queryText(context.WithoutCancel(ctx), c, "ROLLBACK")
		return nil, fmt.Errorf("postgres: re-snapshot of %s: %w", t.stream.Name, err)
	}
	if _, err := queryText(ctx, c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return fail(err)
	}
	// The first statement takes the transaction's snapshot.
	rows, err := queryText(ctx, c, "SELECT pg_current_snapshot()")
	if err != nil {
		return fail(err)
	}
	ch := &chunk{t: t, xip: map[uint32]bool{}, start: time.Now()}
	if sp.rs.spare != nil { // the last chunk's buffers
		ch.buf, ch.rows = sp.rs.spare.buf[:0], sp.rs.spare.rows[:0]
		sp.rs.spare = nil
	}
	if err := parseSnapshot(string(rows[0][0]), ch); err != nil {
		return fail(err)
	}
	if len(j.Part) == 2 {
		// A leaf partition is read by its own name: under this chunk's
		// snapshot it must still be one of the root's (at any depth), or
		// its rows are no longer the table's (detached, or dropped and its
		// name taken): the job ends there.
		leaf := part{schema: j.Part[0], name: j.Part[1]}.ident()
		rows, err := queryText(ctx, c, `WITH RECURSIVE up(rel) AS (SELECT to_regclass(`+quoteLiteral(leaf)+`)::oid
  UNION SELECT i.inhparent FROM pg_inherits i JOIN up ON i.inhrelid = up.rel)
SELECT count(*) FROM up WHERE rel = to_regclass(`+quoteLiteral(t.ident())+`)::oid`)
		if err != nil {
			return fail(err)
		}
		if string(rows[0][0]) == "0" {
			sp.src.log.WarnContext(ctx, "re-snapshot: the partition is no longer the table's; its rest is not read",
				"stream", t.stream.Name, "partition", streamName(j.Part[0], j.Part[1]))
			if _, err := queryText(ctx, c, "COMMIT"); err != nil {
				return fail(err)
			}
			return ch, nil // no rows: the job ends
		}
	}
	var keys, params []string
	for i, k := range t.key {
		keys = append(keys, quoteIdent(t.stream.Columns[k].Name))
		params = append(params, "$"+strconv.Itoa(i+1))
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, col := range t.stream.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(col.Name))
	}
	b.WriteString(" FROM ")
	switch {
	case len(j.Part) == 2:
		b.WriteString(part{schema: j.Part[0], name: j.Part[1]}.ident()) // a leaf partition
	case !t.partitioned:
		b.WriteString("ONLY ") // not a child of an inheritance tree
		b.WriteString(t.ident())
	default:
		b.WriteString(t.ident())
	}
	var args [][]byte
	if len(j.After) > 0 {
		b.WriteString(" WHERE (" + strings.Join(keys, ", ") + ") > (" + strings.Join(params, ", ") + ")")
		for _, v := range j.After {
			args = append(args, []byte(v))
		}
	}
	b.WriteString(" ORDER BY " + strings.Join(keys, ", ") + " LIMIT " + strconv.Itoa(sp.src.cfg.SnapshotChunkRows))
	rr := c.ExecParams(ctx, b.String(), args, nil, nil, nil)
	for rr.NextRow() {
		vals := rr.Values()
		r := chunkRow{key: len(ch.buf)}
		for _, k := range t.key {
			ch.buf = source.AppendRowValue(ch.buf, vals[k])
		}
		r.payload = len(ch.buf)
		for _, v := range vals {
			if v == nil {
				ch.buf = source.AppendRowNull(ch.buf)
			} else {
				ch.buf = source.AppendRowValue(ch.buf, v)
			}
		}
		r.end = len(ch.buf)
		ch.rows = append(ch.rows, r)
	}
	if _, err := rr.Close(); err != nil {
		return fail(err)
	}
	if n := len(ch.rows); n > 0 {
		// The last key read, where the next chunk starts: its values'
		// text, as the query returned them (a key's values are never
		// null).
		vals, err := source.DecodeRow(nil, ch.buf[ch.rows[n-1].key:ch.rows[n-1].payload])
		if err != nil {
			return fail(err)
		}
		for _, v := range vals {
			ch.last = append(ch.last, string(v.Text))
		}
	}
	if _, err := queryText(ctx, c, "COMMIT"); err != nil {
		return fail(err)
	}
	return ch, nil
}

// parseSnapshot reads pg_current_snapshot()'s text, xmin:xmax:xip,...,
// into ch: the low 32 bits of each xid, as pgoutput sends them.
func parseSnapshot(s string, ch *chunk) error {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return fmt.Errorf("snapshot %q", s)
	}
	xmax, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return fmt.Errorf("snapshot %q: %w", s, err)
	}
	ch.xmax = uint32(xmax)
	if parts[2] == "" {
		return nil
	}
	for _, x := range strings.Split(parts[2], ",") {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return fmt.Errorf("snapshot %q: %w", s, err)
		}
		ch.xip[uint32(v)] = true
	}
	return nil
}

// emitChunk emits the rows of the chunk in flight that no change the
// snapshot missed replaced, all with seq = the watermark's commit, and
// moves the job on: a resume point placed next records it.
func (sp *split) emitChunk(e source.Emitter) error {
	rs := &sp.rs
	ch := rs.chunk
	rs.chunk = nil
	seq := int64(ch.lsn)
	name := ch.t.stream.Name
	kept := 0
	for _, r := range ch.rows {
		if !ch.kept(r) {
			continue
		}
		if err := e.Record(name, source.OpInsert, seq, ch.buf[r.key:r.payload], ch.buf[r.payload:r.end]); err != nil {
			return err
		}
		kept++
		rs.x.Jobs[0].Rows++
		rs.copied.Add(1)
	}
	ch.t.snapSeq = max(ch.t.snapSeq, ch.lsn)
	if rs.x.Raise == nil {
		rs.x.Raise = map[string]uint64{}
	}
	rs.x.Raise[name] = uint64(ch.lsn)
	rs.x.Jobs[0].After = slices.Clone(ch.last)
	rs.setEncoded()
	sp.src.log.Debug("re-snapshot chunk emitted", "stream", name, "rows", len(ch.rows), "kept", kept,
		"seq", ch.lsn.String(), "took", time.Since(ch.start))
	rs.spare = ch
	return nil
}

// finishJob ends the first job (its table is read) and reports it.
func (sp *split) finishJob(ctx context.Context, e source.Emitter) {
	rs := &sp.rs
	j := rs.x.Jobs[0]
	rs.x.Jobs = rs.x.Jobs[1:]
	detail := fmt.Sprintf("the table was read again: %d rows", j.Rows)
	if j.Split != "" {
		// In the same state as the job's end: the snapshot split is done.
		if !slices.Contains(rs.x.Snapped, j.Split) {
			rs.x.Snapped = append(rs.x.Snapped, j.Split)
		}
		detail = fmt.Sprintf("the rest of the table's snapshot was read in chunks: %d rows in all", j.Rows)
	}
	rs.setEncoded()
	rs.stream.Store(nil)
	rs.split.Store(nil)
	if ss := sp.handed[j.Split]; ss != nil {
		ss.jobDone.Store(true)
	}
	sp.src.log.InfoContext(ctx, "re-snapshot done", "stream", j.Stream, "rows", j.Rows, "split", j.Split)
	if r, ok := e.(source.Reporter); ok {
		r.Report(source.Notice{Kind: source.NoticeResnapshotDone, Stream: j.Stream, Detail: detail})
	}
}

// dedupe is the Emitter the change stream emits changes through while
// a chunk is in flight: a change of the chunk's table from a
// transaction its snapshot did not see drops the key's row from it.
type dedupe struct {
	source.Emitter
	sp  *split
	xid uint32 // the transaction whose changes are emitted
}

func (d *dedupe) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	if ch := d.sp.rs.chunk; ch != nil && ch.t.stream.Name == stream && ch.invisible(d.xid) {
		ch.drop(key)
	}
	return d.Emitter.Record(stream, op, seq, key, payload)
}

// Report forwards to the runner's Reporter.
func (d *dedupe) Report(n source.Notice) {
	if r, ok := d.Emitter.(source.Reporter); ok {
		r.Report(n)
	}
}

// restore sets the jobs from a state's tail (nil: none). The chunk in
// flight, if any, is dropped: its job reads it again.
func (r *resnap) restore(tail []byte) error {
	r.chunk = nil
	r.x = extra{}
	if len(tail) > 0 {
		x, err := decodeExtra(tail)
		if err != nil {
			return err
		}
		r.x = x
	}
	r.setEncoded()
	return nil
}

// decodeExtra reads the state's tail.
func decodeExtra(b []byte) (extra, error) {
	var x extra
	if err := json.Unmarshal(b, &x); err != nil {
		return extra{}, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	for _, j := range x.Jobs {
		if j.Stream == "" {
			return extra{}, fmt.Errorf("%w: a re-snapshot without a stream", ErrBadState)
		}
	}
	return x, nil
}

// handOver makes the change stream read the rest of a keyed table's
// first snapshot whenever the snapshot split would otherwise read it
// under a snapshot of its own: in any attempt but the one that made the
// slot (whose exported snapshot died with its connection). That covers
// a split resumed from its state, one with no state yet (the attempt
// ended before its first chunk was checkpointed, or before it started),
// and the split of a table opened after the slot was made (added to the
// publication or to the pipeline's streams since). The stream reads it
// as a re-snapshot job from the split's last key, if any (of the
// split's leaf partition, for a partitioned table), in chunks consistent
// with the stream by watermarks, so the rows read now carry the seq of
// the WAL position they are the table's state at, not the slot's
// snapshot (which they postdate). The split then emits nothing
// (handed); it is done once a later Open finds the job finished
// (extra.Snapped). The job and the split's state need not commit
// together: until the stream's state holds the job, each Open hands the
// split over again from its own state; a job whose split has no state
// starts over (Open drops it). Jobs of splits this Open has no
// split to hand over for (a partition dropped since) are dropped.
// Nothing is handed over unless writable: Postgres 14+ (logical
// messages) and not a standby (which can't write the watermarks). A
// partition attached since the slot was made that can't be handed over
// (not writable, or without a key) is read by its split, with the WAL
// insert position of the Open as seq (snapState.Again).
//
// A split a finished job read the rest of is done whatever it is now
// (its table may have lost its key since); once a checkpoint has it done,
// its entry leaves Snapped.
func (sp *split) handOver(ctx context.Context, snaps []*snapSplit, writable bool) {
	handable := map[string]*snapSplit{}
	done := map[string]bool{}
	for _, ss := range snaps {
		id := string(ss.id)
		switch {
		case ss.st.Done:
			done[id] = true
		case ss.st.Again == 0 && slices.Contains(sp.rs.x.Snapped, id):
			ss.st.Done = true
		case writable && ss.exp == nil && len(ss.t.key) > 0 && ss.st.Again == 0:
			handable[id] = ss
		}
	}
	sp.rs.x.Snapped = slices.DeleteFunc(sp.rs.x.Snapped, func(id string) bool { return done[id] })
	sp.rs.x.Jobs = slices.DeleteFunc(sp.rs.x.Jobs, func(j job) bool {
		if j.Split != "" && handable[j.Split] == nil {
			sp.src.log.WarnContext(ctx, "the rest of a snapshot whose split this attempt doesn't resume: dropped", "stream", j.Stream, "split", j.Split)
			return true
		}
		return false
	})
	for _, ss := range snaps {
		id := string(ss.id)
		if handable[id] == nil {
			continue
		}
		name := ss.t.stream.Name
		ss.handed, ss.rs = true, &sp.rs
		ss.copied.Store(ss.st.Rows)
		if sp.handed == nil {
			sp.handed = map[string]*snapSplit{}
		}
		sp.handed[id] = ss
		if slices.ContainsFunc(sp.rs.x.Jobs, func(j job) bool { return j.Split == id }) {
			continue // handed over before: the job is under way
		}
		j := job{Stream: name, After: slices.Clone(ss.st.After), Rows: ss.st.Rows, Split: id}
		if ss.part != nil {
			j.Part = []string{ss.part.schema, ss.part.name}
		}
		sp.rs.x.Jobs = append(sp.rs.x.Jobs, j)
		what := "the rest of the table's snapshot"
		if ss.st.After == nil {
			what = "the table's snapshot"
		}
		sp.src.log.InfoContext(ctx, what+" is read by the change stream, in chunks under watermarks",
			"stream", name, "split", id, "rows_read", ss.st.Rows)
		ss.notice = &source.Notice{Kind: source.NoticeResnapshotStarted, Stream: name,
			Detail: what + " is read in chunks while the stream goes on (the slot's snapshot is gone)"}
	}
	sp.rs.setEncoded()
}

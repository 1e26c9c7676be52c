package mysql

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/openetl/etl/source"
)

const splitIDPrefix = "binlog:"

// split is the binlog split: it copies the opened tables without a
// primary key (when it has not yet), then streams the binlog.
type split struct {
	src        *Source
	id         source.SplitID
	tables     []*table
	byName     map[string]*table
	discovered position // the binlog position before the catalog was read
	gtidMode   bool     // the server has GTIDs (as of Open)
	start      state    // where Read streams from
	streamed   bool     // the stream emitted something
	// reset is why Open started over with a new snapshot
	// (Config.OnPositionLost), reported at the start of Read; nil
	// otherwise.
	reset error
	// undo is set on a snapshot split's scan of the binlog (undo.go): it
	// takes the changes, nothing is emitted.
	undo *undoLog

	r       rowReader // copies
	scratch []byte

	// For Lag and SnapshotProgress, read from other goroutines.
	readAt    atomic.Int64 // seq of the position read (at the last transaction end)
	behind    atomic.Int64 // bytes of binlog after readAt, at the last poll
	lagKnown  atomic.Bool
	copyName  atomic.Pointer[string] // the table being copied
	copied    atomic.Int64
	estimated atomic.Int64
}

func (sp *split) ID() source.SplitID { return sp.id }

// Open returns the binlog split ("binlog:" and the database name) and
// one snapshot split per opened table with a primary key ("snapshot:",
// the database, a dot and the table). Without saved states it starts a
// snapshot: the binlog position of a consistent snapshot taken now is
// the origin of every snapshot split and where the binlog split starts.
// With saved states, each split resumes where it was; a snapshot split
// without one (a table opened for the first time) copies its table with
// the binlog split's position as origin. A binlog split without a state
// whose snapshot splits have some starts at their origin. It checks the
// states' flavor and that the binlog they need is still on the server
// (a *PurgedError otherwise, unless Config.OnPositionLost says
// source.PositionLostResnapshot: then it starts over as without states).
func (s *Source) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	tables, before, err := s.tables(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	gtidMode, flavor, version := s.info.gtidMode, s.info.flavor, s.info.version
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
	wrongFlavor := func(f string) error {
		return fmt.Errorf("%w: the resume state was written reading %s, the server is %s %s", ErrFlavor, f, flavor, version)
	}
	var snaps []*snapSplit
	has := map[*snapSplit]bool{}
	origins := map[position]bool{}
	for _, t := range sp.tables {
		if len(t.key) == 0 {
			continue // copied by the binlog split
		}
		ss := &snapSplit{src: s, id: source.SplitID(snapshotIDPrefix + s.cfg.Database + "." + t.name), t: t, chunk: s.cfg.SnapshotChunkRows,
			discovered: before, gtidMode: gtidMode}
		if b, ok := resume[ss.id]; ok {
			st, err := decodeSnapState(b)
			if err != nil {
				return nil, err
			}
			if st.flavor != flavor {
				return nil, wrongFlavor(st.flavor)
			}
			ss.st, has[ss] = st, true
			origins[st.origin] = true
		}
		snaps = append(snaps, ss)
	}
	var start *state
	if b, ok := resume[sp.id]; ok {
		st, err := decodeState(b)
		if err != nil {
			return nil, err
		}
		if st.flavor != flavor {
			return nil, wrongFlavor(st.flavor)
		}
		start = &st
	} else if len(origins) == 1 {
		// Snapshot states but none for the binlog: nothing it read was
		// committed yet. Stream from the snapshots' origin.
		for o := range origins {
			start = &state{flavor: flavor, at: o}
		}
	} else if len(origins) > 1 {
		s.log.WarnContext(ctx, "snapshot states of different origins and no binlog state: starting over")
	}
	legacy := false
	if start != nil {
		if err := s.checkPurged(ctx, *start); err != nil {
			var pe *PurgedError
			if !errors.As(err, &pe) || s.cfg.OnPositionLost != source.PositionLostResnapshot {
				return nil, err
			}
			s.log.WarnContext(ctx, "binlog position lost: reading a new snapshot (Config.OnPositionLost)", "err", err)
			start, sp.reset = nil, err
		}
	}
	if start == nil {
		at, err := s.anchor(ctx, gtidMode)
		if err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "snapshot", "file", at.file, "pos", at.pos, "gtid", at.gtid, "tables", len(sp.tables))
		start = &state{flavor: flavor, at: at}
		clear(has)
	}
	if start.legacy {
		legacy = true
		// A state written before snapshots were split: every table opened
		// then was read whole. Tables opened since start from here,
		// without a copy, as they did.
		start.legacy = false
		for _, t := range sp.tables {
			if len(t.key) == 0 {
				start.copied = append(start.copied, t.name)
			}
		}
		slices.Sort(start.copied)
	}
	out := []source.Split{sp}
	start.origins = maps.Clone(start.origins)
	for _, ss := range snaps {
		if has[ss] {
			ss.reconcile(before)
		} else if o, ok := start.origins[ss.t.name]; ok {
			// The binlog split streamed the table, from o on, in an
			// earlier attempt that ended before the snapshot split
			// committed a state: the snapshot is still of the table at o.
			// (Taking start.at would emit again, at start.at's seq, the
			// rows the binlog split emitted between o and start.at.)
			ss.st = snapState{flavor: flavor, origin: o, cols: ss.t.colNames()}
		} else {
			// A table opened for the first time: the binlog split has
			// emitted none of its changes.
			ss.st = snapState{flavor: flavor, origin: start.at, done: legacy, cols: ss.t.colNames()}
		}
		if start.origins == nil {
			start.origins = map[string]position{}
		}
		start.origins[ss.t.name] = ss.st.origin
		out = append(out, ss)
	}
	sp.start = *start
	return out, nil
}

// reconcile compares the columns the split's rows were read with to the
// table's now (read at binlog position now). A column added since with a
// default, NOT NULL (an implicit default), generated or auto_increment
// has values the rows existing then never carried to the destination,
// since no row event reports them; so has a column renamed since (which
// the catalog can't tell from one dropped and one added: a column gone
// and one new count as a rename). The table is then read again, with
// origin now: at or after the change, so its rows' seq is above every
// version the destination has, and below every row event after it. The
// split reports a schema.changed notice, and the state takes the new
// columns.
func (ss *snapSplit) reconcile(now position) {
	t := ss.t
	cols := t.colNames()
	if ss.st.cols == nil {
		ss.st.cols = cols
		return
	}
	gone := slices.ContainsFunc(ss.st.cols, func(c string) bool { _, ok := t.byName[c]; return !ok })
	var n *source.Notice
	for i, c := range cols {
		if slices.Contains(ss.st.cols, c) || !t.filled[i] && !gone {
			continue
		}
		n = &source.Notice{Kind: source.NoticeSchemaChanged, Stream: t.stream.Name, Column: c, Change: "added"}
		what := "the value it gets"
		if t.defaults[i] != "" {
			what = "its default " + t.defaults[i]
		}
		n.Detail = fmt.Sprintf("column %q was added with %s (or renamed) after the table's rows were read: "+
			"the table is read again (a new snapshot), so that rows not changed since reach the destination with it", c, what)
		break
	}
	if n == nil {
		ss.st.cols = cols
		return
	}
	ss.notice = n
	ss.st = snapState{flavor: ss.st.flavor, origin: now, cols: cols}
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

// Read copies the opened tables without a key that it has not copied
// yet, then emits the changes after its start. Bounded, it stops at the
// first transaction end at or past the binlog position as of the start
// of streaming.
func (sp *split) Read(ctx context.Context, e source.Emitter, bounded bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := sp.src
	start := sp.start
	// Re-snapshots of streams this attempt doesn't read are dropped.
	start.jobs = slices.DeleteFunc(slices.Clone(start.jobs), func(j job) bool {
		if t := sp.byName[j.Stream]; t == nil || t.keyLits == nil {
			s.log.WarnContext(ctx, "re-snapshot of a stream this attempt doesn't read: dropped", "stream", j.Stream)
			return true
		}
		return false
	})
	if sp.reset != nil {
		reportReset(e, sp.reset)
	}
	var err error
	if err = s.checkPurged(ctx, start); err != nil {
		var pe *PurgedError
		if !errors.As(err, &pe) || s.cfg.OnPositionLost != source.PositionLostResnapshot {
			return err
		}
		s.log.WarnContext(ctx, "binlog position lost: reading a new snapshot (Config.OnPositionLost)", "err", err)
		reportReset(e, err)
		if start, err = sp.copyAll(ctx, e); err != nil {
			return err
		}
	} else if pending := sp.pending(start); len(pending) > 0 {
		if start, err = sp.copyPending(ctx, e, start, pending); err != nil {
			return err
		}
	}
	if err := e.ResumePoint(start.encode()); err != nil {
		return err
	}
	te := &trackEmitter{Emitter: e, last: start.encode(), progress: true}
	for {
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
			if !start.at.before(end) && len(start.jobs) == 0 {
				return nil
			}
		}
		err := sp.stream(ctx, te, start, bounded, end)
		if next, ok := sp.takeUp(ctx, te, err); ok {
			start = next
			continue
		}
		var pe *PurgedError
		if errors.As(err, &pe) && pe.Err != nil && s.cfg.OnPositionLost == source.PositionLostResnapshot && !sp.streamed {
			// The server refused the start's GTIDs before anything was
			// read: a new snapshot, as Config.OnPositionLost allows.
			s.log.WarnContext(ctx, "binlog position lost: reading a new snapshot (Config.OnPositionLost)", "err", err)
			reportReset(e, err)
			// Through te, which must know the new start.
			if start, err = sp.copyAll(ctx, te); err != nil {
				return err
			}
			if err := te.ResumePoint(start.encode()); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// reportReset tells the runner, when e is its Emitter, that the split
// starts over from a new snapshot because of err.
func reportReset(e source.Emitter, err error) {
	if r, ok := e.(source.Reporter); ok {
		r.Report(source.Notice{Kind: source.NoticeReset, Err: err,
			Detail: "the binlog position was lost: started over from a new snapshot of every table " +
				"(Config.OnPositionLost); rows deleted meanwhile stay at the destination, and an append destination gets every row again"})
	}
}

// pending returns the opened tables without a key that st has not
// copied.
func (sp *split) pending(st state) []*table {
	var out []*table
	for _, t := range sp.tables {
		if len(t.key) == 0 {
			if _, found := slices.BinarySearch(st.copied, t.name); !found {
				out = append(out, t)
			}
		}
	}
	return out
}

// copyPending copies tables without a key, whole, in one transaction WITH
// CONSISTENT SNAPSHOT, as inserts whose seq is the snapshot's binlog
// position. Such a table can't be paged or merged by key, so its copy
// must be exactly at a binlog position: the stream, which starts before
// it, skips the table's row events before that position (the state's
// skip list). Nothing is a resume point until the copy is done: a Read
// killed during it copies again.
func (sp *split) copyPending(ctx context.Context, e source.Emitter, start state, tables []*table) (state, error) {
	at, err := sp.copy(ctx, e, tables)
	if err != nil {
		return state{}, err
	}
	st := start
	st.copied = slices.Clone(st.copied)
	st.skip = maps.Clone(st.skip)
	for _, t := range tables {
		st.copied = append(st.copied, t.name)
		if start.at.before(at) {
			if st.skip == nil {
				st.skip = map[string]position{}
			}
			st.skip[t.name] = position{file: at.file, pos: at.pos, idx: at.idx}
		}
	}
	slices.Sort(st.copied)
	return st, nil
}

// copyAll copies every opened table in one transaction WITH CONSISTENT
// SNAPSHOT and returns the state at its position: a re-snapshot after
// purged binlogs (Config.OnPositionLost). Its rows have higher seqs than the
// snapshot splits' (their origin is older), so the copy's version of a
// row wins, and the stream re-applies every later change.
func (sp *split) copyAll(ctx context.Context, e source.Emitter) (state, error) {
	at, err := sp.copy(ctx, e, sp.tables)
	if err != nil {
		return state{}, err
	}
	st := state{flavor: sp.src.info.flavor, at: at, origins: sp.start.origins}
	for _, t := range sp.tables {
		if len(t.key) == 0 {
			st.copied = append(st.copied, t.name)
		}
	}
	slices.Sort(st.copied)
	return st, nil
}

// copy reads tables in one transaction WITH CONSISTENT SNAPSHOT, as
// inserts whose seq is the snapshot's binlog position, and returns that
// position.
func (sp *split) copy(ctx context.Context, e source.Emitter, tables []*table) (position, error) {
	s := sp.src
	c, err := s.connect(ctx)
	if err != nil {
		return position{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { abort(c) })
	defer stop()
	at, err := s.consistentSnapshot(ctx, c, sp.gtidMode)
	if err != nil {
		return position{}, err
	}
	s.log.InfoContext(ctx, "copying tables", "file", at.file, "pos", at.pos, "gtid", at.gtid, "tables", len(tables))
	defer sp.copyName.Store(nil)
	for _, t := range tables {
		sp.copied.Store(0)
		sp.estimated.Store(0)
		sp.copyName.Store(&t.stream.Name)
		if _, err := sp.r.read(c, e, t, s.selectList(t), at.seq(), &sp.copied); err != nil {
			if ctx.Err() != nil {
				return position{}, ctx.Err()
			}
			return position{}, err
		}
	}
	if _, err := c.Execute("COMMIT"); err != nil {
		if ctx.Err() != nil {
			return position{}, ctx.Err()
		}
		return position{}, fmt.Errorf("mysql: snapshot: commit: %w", err)
	}
	return at, nil
}

// SnapshotProgress reports, while the binlog split copies a table
// without a key (or every table, re-snapshotting), the table and the rows
// copied (see source.SnapshotReporter). Safe for concurrent use.
func (sp *split) SnapshotProgress() (stream string, done, estimated int64, ok bool) {
	name := sp.copyName.Load()
	if name == nil {
		return "", 0, 0, false
	}
	return *name, sp.copied.Load(), sp.estimated.Load(), true
}

// Lag reports the bytes of binlog after the position the split has read
// up to (the last transaction end), as of the last poll of the server's
// binlog sizes (every lagPollEvery while streaming; see
// source.LagReporter). The age is unknown (-1): binlog events carry
// their time, but the oldest one not yet read is not known without
// reading it. Safe for concurrent use.
func (sp *split) Lag() (behind int64, unit string, age time.Duration, ok bool) {
	return sp.behind.Load(), "byte", -1, sp.lagKnown.Load()
}

// errEmit carries an Emitter error out of go-mysql's row callback.
type errEmit struct{ err error }

func (e errEmit) Error() string { return e.err.Error() }

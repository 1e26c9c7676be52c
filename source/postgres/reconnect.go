package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl/source"
)

// A replication stream that breaks (the connection drops, the walsender
// is terminated, the server restarts) is taken up again within the same
// Read when that is exact: no record was emitted since the split's last
// resume point, so streaming again from that point repeats nothing and
// skips nothing — the same as a new attempt resuming from a checkpoint
// there, without the new attempt. Otherwise, or when the server doesn't
// take the stream back within reconnectPauses, Read returns the error
// and the runner's next attempt resumes from the last checkpoint.

// reconnectPauses are the waits before each try to take a broken stream
// up again: about 1.3 s in all, so that a stopping server (which refuses
// connections) is let go of soon and the runner's retries take over.
var reconnectPauses = []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond}

// lostLink marks an error that ended the stream because the connection
// to the walsender was lost or ended by the server: streaming again may
// work. Its message is its error's.
type lostLink struct{ error }

func (l lostLink) Unwrap() error { return l.error }

func isLostLink(err error) bool {
	var l lostLink
	return errors.As(err, &l)
}

// trackEmitter passes records and resume points on, and remembers the
// last resume point and whether records followed it.
type trackEmitter struct {
	source.Emitter
	last  []byte // the last resume point's state
	dirty bool   // a record was emitted after it
}

func (t *trackEmitter) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	t.dirty = true
	return t.Emitter.Record(stream, op, seq, key, payload)
}

// Report forwards to the runner's Reporter.
func (t *trackEmitter) Report(n source.Notice) {
	if r, ok := t.Emitter.(source.Reporter); ok {
		r.Report(n)
	}
}

func (t *trackEmitter) ResumePoint(st []byte) error {
	if err := t.Emitter.ResumePoint(st); err != nil {
		return err
	}
	t.last, t.dirty = append(t.last[:0], st...), false
	return nil
}

// streamOn runs the stream from start and takes it up again after a
// break where that is exact (see above); start was emitted as a resume
// point already.
func (sp *split) streamOn(ctx context.Context, repl *pgconn.PgConn, e source.Emitter, start state,
	confirmed pglogrepl.LSN, bounded bool, end pglogrepl.LSN) error {
	te := &trackEmitter{Emitter: e, last: start.encode()}
	progressed := true // since the last reconnect
	for {
		err := sp.stream(ctx, repl, te, start, confirmed, bounded, end)
		sp.closeRepl(ctx, repl)
		if err == nil || ctx.Err() != nil || !isLostLink(err) || te.dirty || !progressed {
			return err
		}
		at, derr := decodeState(te.last)
		if derr != nil {
			return err
		}
		next, conf, rerr := sp.reconnect(ctx, at)
		if rerr != nil {
			sp.src.log.WarnContext(ctx, "replication stream lost; could not take it up again", "err", err, "reconnect_err", rerr)
			return err
		}
		sp.src.log.WarnContext(ctx, "replication stream lost; taken up again", "at", at.lsn.String(), "err", err)
		// A new session sends every relation message again, and the
		// re-snapshots go on from the state at.
		sp.rels = map[uint32]*relation{}
		if err := sp.rs.restore(at.tail); err != nil {
			return err
		}
		repl, start, confirmed = next, at, conf
		progressed = false
		// Progress is a resume point past at: a second break before one
		// goes back to the runner, which decides what to do with it.
		te.Emitter = &progressEmitter{Emitter: e, at: at.lsn, seen: &progressed}
	}
}

// progressEmitter sets *seen once a resume point past at is emitted.
type progressEmitter struct {
	source.Emitter
	at   pglogrepl.LSN
	seen *bool
}

// Report forwards to the runner's Reporter.
func (p *progressEmitter) Report(n source.Notice) {
	if r, ok := p.Emitter.(source.Reporter); ok {
		r.Report(n)
	}
}

func (p *progressEmitter) ResumePoint(st []byte) error {
	if err := p.Emitter.ResumePoint(st); err != nil {
		return err
	}
	if s, err := decodeState(st); err == nil && s.lsn > p.at {
		*p.seen = true
	}
	return nil
}

// reconnect checks the slot and opens a new replication connection to
// stream from at, trying again after each of reconnectPauses while the
// server is away or the slot is still held by the walsender of the
// broken stream.
func (sp *split) reconnect(ctx context.Context, at state) (*pgconn.PgConn, pglogrepl.LSN, error) {
	s := sp.src
	var last error
	for _, d := range reconnectPauses {
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, 0, ctx.Err()
			case <-t.C:
			}
		}
		confirmed, err := s.checkSlot(ctx, at.lsn)
		if err != nil {
			var se *SlotError
			if errors.As(err, &se) {
				return nil, 0, err
			}
			last = err
			continue
		}
		if pid, err := s.slotHolder(ctx); err != nil || pid != "" {
			last = err
			if pid != "" {
				last = fmt.Errorf("slot %q still held by process %s", s.cfg.Slot, pid)
			}
			continue
		}
		if beforeStart != nil {
			beforeStart()
		}
		repl, err := s.connect(ctx, true)
		if err != nil {
			last = err
			continue
		}
		return repl, confirmed, nil
	}
	return nil, 0, last
}

// slotHolder returns the process streaming from the slot, "" when none.
func (s *Source) slotHolder(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows [][][]byte
	if err := s.withQuery(ctx, func(c *pgconn.PgConn) (err error) {
		rows, err = queryText(ctx, c, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = `+quoteLiteral(s.cfg.Slot)+` AND active`)
		return err
	}); err != nil {
		return "", err
	}
	if len(rows) > 0 {
		return string(rows[0][0]), nil
	}
	return "", nil
}

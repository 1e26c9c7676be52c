package mysql

import (
	"context"
	"errors"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/openetl/etl/source"
)

// A binlog stream that breaks (the connection drops, the server kills
// the dump thread or restarts) is taken up again within the same Read
// when that is exact: no record was emitted since the split's last
// resume point, so streaming again from that point repeats nothing and
// skips nothing — what a new attempt resuming from a checkpoint there
// would do, without the new attempt. Otherwise, or when the server
// doesn't answer within reconnectPauses, Read returns the error and the
// runner's next attempt resumes from the last checkpoint.

// reconnectPauses are the waits before each try to reach the server
// again after a break: about 1.3 s in all, then the runner's retries
// take over.
var reconnectPauses = []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 900 * time.Millisecond}

// lostLink marks an error that ended the stream because the connection
// to the server was lost: streaming again may work. Its message is its
// error's.
type lostLink struct{ error }

func (l lostLink) Unwrap() error { return l.error }

func isLostLink(err error) bool {
	var l lostLink
	return errors.As(err, &l)
}

// connectionLost reports whether err, from reading the binlog stream,
// is the connection's end rather than the server's answer: anything
// but an error packet, or an error packet saying the server is shutting
// down or killed the connection.
func connectionLost(err error) bool {
	var me *gomysql.MyError
	if !errors.As(err, &me) {
		return true
	}
	switch me.Code {
	case gomysql.ER_SERVER_SHUTDOWN, gomysql.ER_QUERY_INTERRUPTED, 1927: // 1927: ER_CONNECTION_KILLED (MariaDB)
		return true
	}
	return false
}

// trackEmitter passes records and resume points on, and remembers the
// last resume point and whether records followed it; since is set once
// a resume point other than the one it started from is emitted.
type trackEmitter struct {
	source.Emitter
	last     []byte // the last resume point's state
	dirty    bool   // a record was emitted after it
	progress bool   // a resume point was emitted since the last reset
}

func (t *trackEmitter) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	t.dirty = true
	return t.Emitter.Record(stream, op, seq, key, payload)
}

func (t *trackEmitter) ResumePoint(st []byte) error {
	if err := t.Emitter.ResumePoint(st); err != nil {
		return err
	}
	t.last, t.dirty, t.progress = append(t.last[:0], st...), false, true
	return nil
}

// Report forwards n to the runner's Emitter (see source.Reporter).
func (t *trackEmitter) Report(n source.Notice) {
	if r, ok := t.Emitter.(source.Reporter); ok {
		r.Report(n)
	}
}

// takeUp decides whether the stream that ended with err can go on from
// te's last resume point, waits for the server to answer, and returns
// the state to stream from; ok false when Read should return err.
func (sp *split) takeUp(ctx context.Context, te *trackEmitter, err error) (state, bool) {
	if err == nil || ctx.Err() != nil || !isLostLink(err) || te.dirty || !te.progress {
		return state{}, false
	}
	at, derr := decodeState(te.last)
	if derr != nil {
		return state{}, false
	}
	s := sp.src
	var last error
	for _, d := range reconnectPauses {
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return state{}, false
			case <-t.C:
			}
		}
		s.mu.Lock()
		_, last = s.queryConn(ctx)
		s.mu.Unlock()
		if last == nil {
			s.log.WarnContext(ctx, "binlog stream lost; taking it up again", "file", at.at.file, "pos", at.at.pos, "err", err)
			// Progress is a resume point after this one: a second break
			// before one goes back to the runner.
			te.progress = false
			return at, true
		}
	}
	s.log.WarnContext(ctx, "binlog stream lost; could not take it up again", "err", err, "reconnect_err", last)
	return state{}, false
}

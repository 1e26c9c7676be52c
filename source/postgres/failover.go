package postgres

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/openetl/etl/source"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// failoverMajor is the first Postgres with failover slots.
const failoverMajor = 17

// checkFailover fails with ErrUnsupported when Config.Failover is set
// and the server is older than Postgres 17.
func (s *Source) checkFailover(ctx context.Context) error {
	if !s.cfg.Failover {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.queryConn(ctx)
	if err != nil {
		return err
	}
	if major := serverMajor(c); major < failoverMajor {
		return fmt.Errorf("%w: Config.Failover needs Postgres %d or later (failover slots); the server is %q",
			ErrUnsupported, failoverMajor, c.ParameterStatus("server_version"))
	}
	return nil
}

// createSlotOn creates the slot on repl with an exported snapshot: a
// failover slot when Config.Failover asks (Postgres 17+, which
// checkFailover checked), in the option-list syntax of Postgres 15+.
func (s *Source) createSlotOn(ctx context.Context, repl *pgconn.PgConn) (pglogrepl.CreateReplicationSlotResult, error) {
	if s.cfg.Failover {
		return pglogrepl.ParseCreateReplicationSlot(repl.Exec(ctx,
			"CREATE_REPLICATION_SLOT "+s.cfg.Slot+" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)"))
	}
	return pglogrepl.CreateReplicationSlot(ctx, repl, s.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
}

// ensureFailover turns the slot into a failover slot when Config.Failover
// is set and the slot, created before the option was, is not one yet.
// Open calls it when it resumes from the slot, before any Read holds it
// (ALTER_REPLICATION_SLOT needs the slot idle).
func (s *Source) ensureFailover(ctx context.Context) error {
	if !s.cfg.Failover {
		return nil
	}
	s.mu.Lock()
	c, err := s.queryConn(ctx)
	var rows [][][]byte
	if err == nil {
		rows, err = queryText(ctx, c, `SELECT 1 FROM pg_replication_slots WHERE slot_name = `+quoteLiteral(s.cfg.Slot)+` AND NOT failover`)
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("postgres: look up slot %q: %w", s.cfg.Slot, err)
	}
	if len(rows) == 0 {
		return nil
	}
	repl, err := s.connect(ctx, true)
	if err != nil {
		return err
	}
	defer repl.Close(context.WithoutCancel(ctx))
	if _, err := repl.Exec(ctx, "ALTER_REPLICATION_SLOT "+s.cfg.Slot+" (FAILOVER true)").ReadAll(); err != nil {
		return fmt.Errorf("postgres: make slot %q a failover slot (Config.Failover): %w", s.cfg.Slot, err)
	}
	s.log.InfoContext(ctx, "made the slot a failover slot (Config.Failover)")
	return nil
}

// timeline returns the timeline of repl's server (IDENTIFY_SYSTEM),
// after checkFork has checked start against it.
func (sp *split) timeline(ctx context.Context, repl *pgconn.PgConn, start state) (uint32, error) {
	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return 0, fmt.Errorf("postgres: identify system: %w", err)
	}
	tli := uint32(sys.Timeline)
	return tli, sp.checkFork(ctx, repl, start, tli)
}

// checkFork fails when start was read on another timeline than tli, the
// server's, and that timeline ended in this server's history before
// start: the server is a standby promoted since, and the pipeline read
// WAL of the old primary that it never received (a failover without
// synchronized_standby_slots). Reading on from start would skip this
// server's changes between the fork and start. The error is a
// *SlotError wrapping ErrForked; under PositionLostResnapshot the
// split's error starts a new attempt, which starts over.
func (sp *split) checkFork(ctx context.Context, repl *pgconn.PgConn, start state, tli uint32) error {
	if start.tli == 0 || start.tli == tli {
		return nil
	}
	s := sp.src
	ended, found := pglogrepl.LSN(0), false
	if tli > 1 {
		h, err := pglogrepl.TimelineHistory(ctx, repl, int32(tli))
		if err != nil {
			return fmt.Errorf("postgres: history of timeline %d: %w", tli, err)
		}
		ended, found, err = timelineEnd(h.Content, start.tli)
		if err != nil {
			return fmt.Errorf("postgres: history of timeline %d: %w", tli, err)
		}
	}
	var cause error
	switch {
	case !found:
		cause = fmt.Errorf("%w: the resume position %s was read on timeline %d, which is not in the history of this server's timeline %d",
			ErrForked, start.lsn, start.tli, tli)
	case start.lsn > ended:
		cause = fmt.Errorf("%w: the resume position %s was read on timeline %d, which this server (timeline %d) left at %s: "+
			"the pipeline read changes this server never received; was synchronized_standby_slots set on the old primary?",
			ErrForked, start.lsn, start.tli, tli, ended)
	default:
		return nil
	}
	se := &SlotError{Slot: s.cfg.Slot, Want: start.lsn, Err: cause}
	s.forked.Store(se)
	if s.cfg.OnPositionLost == source.PositionLostResnapshot {
		return lostWhileReading{se}
	}
	return se
}

// timelineEnd returns where timeline tli ended, from the content of a
// timeline history file (lines "tli<TAB>switch LSN<TAB>reason"), and
// whether the file names it.
func timelineEnd(content []byte, tli uint32) (pglogrepl.LSN, bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(content))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil || uint32(n) != tli {
			continue
		}
		lsn, err := pglogrepl.ParseLSN(fields[1])
		if err != nil {
			return 0, false, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		return lsn, true, nil
	}
	return 0, false, sc.Err()
}

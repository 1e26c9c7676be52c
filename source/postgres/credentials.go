package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Credentials are what one connection logs in with: what
// Config.Credentials returns.
type Credentials struct {
	// User replaces the configured user (ConnConfig's or the DSN's);
	// empty keeps it.
	User string
	// Password replaces the configured password, for every host of the
	// configuration (its fallbacks included). An RDS or Aurora IAM auth
	// token goes here.
	Password string
}

// connect opens a connection: a replication connection
// (replication=database) when repl is set, a plain one otherwise. With
// Config.Credentials set it asks for credentials first, for this
// connection. A failure of the hook, and a server refusing the
// credentials (SQLSTATE class 28), wrap ErrCredentials.
func (s *Source) connect(ctx context.Context, repl bool) (*pgconn.PgConn, error) {
	what := "connect"
	cfg := s.conn
	if repl {
		what, cfg = "replication connect", s.replConfig()
	}
	if s.cfg.Credentials != nil {
		cr, err := s.cfg.Credentials(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: Config.Credentials: %w", ErrCredentials, what, err)
		}
		if !repl {
			cfg = cfg.Copy()
		}
		if cr.User != "" {
			cfg.User = cr.User
		}
		cfg.Password = cr.Password
	}
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err == nil {
		return c, nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && len(pe.Code) == 5 && pe.Code[:2] == "28" {
		hint := "the server refused them: a rotated password, an expired token? Config.Credentials supplies fresh ones for each connection"
		if s.cfg.Credentials != nil {
			hint = "the server refused those Config.Credentials returned; the next attempt asks it again"
		}
		return nil, fmt.Errorf("%w: %s as %q (%s): %w", ErrCredentials, what, cfg.User, hint, err)
	}
	return nil, fmt.Errorf("postgres: %s: %w", what, err)
}

// permanentMark reports whether an error in err's chain has a method
// Permanent() bool returning true: a Config.Credentials error that says
// no retry fixes it. The runner marks the attempt's error permanent on
// the source's word even when it joins the cancellation of the splits
// the failure stopped (etl.IsPermanent alone would see the cancellation).
func permanentMark(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

package mysql

import (
	"context"
	"errors"
	"fmt"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// Credentials are what one connection logs in with: what
// Config.Credentials returns.
type Credentials struct {
	// User replaces the configured user (Config.User or the DSN's);
	// empty keeps it.
	User string
	// Password replaces the configured password. An RDS or Aurora IAM
	// auth token goes here (with Config.TLS set: the server takes a
	// token only over TLS).
	Password string
}

// login returns the user and password of the next connection: the
// configured ones, or those Config.Credentials returns (an error
// wrapping ErrCredentials when it fails).
func (s *Source) login(ctx context.Context) (user, password string, err error) {
	if s.cfg.Credentials == nil {
		return s.cfg.User, s.cfg.Password, nil
	}
	cr, err := s.cfg.Credentials(ctx)
	if err != nil {
		return "", "", fmt.Errorf("%w: Config.Credentials: %w", ErrCredentials, err)
	}
	user = s.cfg.User
	if cr.User != "" {
		user = cr.User
	}
	return user, cr.Password, nil
}

// refused wraps err, from a connection's login as user, with
// ErrCredentials when the server refused the credentials (1045
// ER_ACCESS_DENIED_ERROR, 1698 ER_ACCESS_DENIED_NO_PASSWORD_ERROR); it
// returns any other error as it is.
func (s *Source) refused(err error, what, user string) error {
	var me *gomysql.MyError
	if !errors.As(err, &me) || me.Code != gomysql.ER_ACCESS_DENIED_ERROR && me.Code != gomysql.ER_ACCESS_DENIED_NO_PASSWORD_ERROR {
		return err
	}
	hint := "the server refused them: a rotated password, an expired token? Config.Credentials supplies fresh ones for each connection"
	if s.cfg.Credentials != nil {
		hint = "the server refused those Config.Credentials returned; the next attempt asks it again"
	}
	return fmt.Errorf("%w: %s as %q (%s): %w", ErrCredentials, what, user, hint, err)
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

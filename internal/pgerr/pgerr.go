// Package pgerr tells the PostgreSQL server errors that no retry fixes,
// for the Postgres source and destination's Permanent methods.
package pgerr

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Permanent reports whether err carries a server error no retry fixes:
// the credentials were refused (SQLSTATE class 28), the database does
// not exist (3D000), or the user lacks a privilege (42501: a missing
// REPLICATION attribute or table grant). A connection refused, a server
// shutting down or a statement timeout are not.
func Permanent(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch {
	case len(pe.Code) == 5 && pe.Code[:2] == "28":
		return true
	case pe.Code == "3D000", pe.Code == "42501":
		return true
	}
	return false
}

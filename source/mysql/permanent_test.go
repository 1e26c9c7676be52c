package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/openetl/etl"
	"github.com/openetl/etl/source/mysql"
)

// A database that does not exist (no streams), or a password the server
// refuses (1045), is a configuration error: the attempt's error is marked permanent
// (Source.Permanent), so Run returns it instead of retrying it for its
// budget; a refused connection is an outage, not permanent.
func TestPermanentErrors(t *testing.T) {
	d := dsn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := syncOnce(ctx, newSource(t, d, "openetl_no_such_database", mysql.Config{}), t.TempDir())
	if !etl.IsPermanent(err) {
		t.Fatalf("a Sync of a missing database: %v, want a permanent error", err)
	}
	var me *gomysql.MyError
	db := database(t, d)
	user, rest, _ := strings.Cut(d, "@")
	login, _, _ := strings.Cut(user, ":")
	_, err = syncOnce(ctx, newSource(t, login+":not-the-password@"+rest, db, mysql.Config{}), t.TempDir())
	if !errors.As(err, &me) || me.Code != 1045 || !etl.IsPermanent(err) {
		t.Fatalf("a Sync with a wrong password: %v (permanent %v), want MySQL error 1045, permanent", err, etl.IsPermanent(err))
	}
	src := newSource(t, d, db, mysql.Config{})
	if src.Permanent(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")) || src.Permanent(&gomysql.MyError{Code: 1205}) {
		t.Error("Permanent: a refused connection or a lock wait timeout (1205) is not permanent")
	}
}

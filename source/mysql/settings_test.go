package mysql_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// setGlobal sets a server variable for the test and restores it after.
func setGlobal(t *testing.T, d, name, value string) {
	t.Helper()
	old := queryRows(t, d, "SELECT @@GLOBAL."+name)[0][0]
	execSQL(t, d, fmt.Sprintf("SET GLOBAL %s = '%s'", name, value))
	t.Cleanup(func() { execSQL(t, d, fmt.Sprintf("SET GLOBAL %s = '%s'", name, old)) })
}

// TestSettingsChecked: a server without binlog_row_metadata=FULL (or
// without row format) is refused at Discover with a *SettingsError that
// names the setting; binlog events written while it was off fail a
// stream the same way.
func TestSettingsChecked(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY, v bigint unsigned)", db))
	state, _ := readOnce(t, newSource(t, d, db, mysql.Config{}), nil, nil)

	for _, c := range []struct{ name, value string }{{"binlog_row_metadata", "MINIMAL"}, {"binlog_format", "MIXED"}, {"binlog_row_image", "MINIMAL"}} {
		t.Run(c.name, func(t *testing.T) {
			setGlobal(t, d, c.name, c.value)
			_, err := newSource(t, d, db, mysql.Config{}).Discover(t.Context())
			var se *mysql.SettingsError
			if !errors.As(err, &se) || !errors.Is(err, mysql.ErrSettings) || se.Variable != c.name ||
				!strings.Contains(err.Error(), c.name+"=FULL") && !strings.Contains(err.Error(), c.name+"=ROW") {
				t.Fatalf("Discover with %s=%s: %v, want a *SettingsError naming it", c.name, c.value, err)
			}
			t.Log(err)
		})
	}

	// Events without column names (written under MINIMAL) in the stream.
	execSQL(t, d, "SET GLOBAL binlog_row_metadata = 'MINIMAL'", fmt.Sprintf("INSERT INTO %s.t VALUES (1, 18446744073709551615)", db),
		"SET GLOBAL binlog_row_metadata = 'FULL'")
	src := newSource(t, d, db, mysql.Config{})
	splits, err := src.Open(t.Context(), []string{"t"}, map[source.SplitID][]byte{source.SplitID("binlog:" + db): state.last()})
	if err != nil {
		t.Fatal(err)
	}
	err = splits[0].Read(t.Context(), &recorder{}, true)
	var se *mysql.SettingsError
	if !errors.As(err, &se) || se.Variable != "binlog_row_metadata" {
		t.Fatalf("streaming events written under MINIMAL: %v, want a *SettingsError naming binlog_row_metadata", err)
	}
	t.Log(err)
}

// TestStatementBasedChange: a change of an opened table logged as a
// statement (a session's binlog_format=STATEMENT) fails the stream with a
// *SettingsError naming binlog_format, instead of losing its rows.
func TestStatementBasedChange(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY)", db))
	src := newSource(t, d, db, mysql.Config{})
	first, id := readOnce(t, src, nil, nil)
	execSQL(t, d, "SET SESSION binlog_format = 'STATEMENT'", fmt.Sprintf("INSERT INTO %s.t VALUES (1)", db))
	splits, err := src.Open(t.Context(), []string{"t"}, map[source.SplitID][]byte{id: first.last()})
	if err != nil {
		t.Fatal(err)
	}
	err = splits[0].Read(t.Context(), &recorder{}, true)
	var se *mysql.SettingsError
	if !errors.As(err, &se) || se.Variable != "binlog_format" {
		t.Fatalf("streaming a statement-based insert: %v, want a *SettingsError naming binlog_format", err)
	}
	t.Log(err)
}

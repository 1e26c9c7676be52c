package mysql_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// dsn returns the test server's DSN (scripts/servers.sh start mariadb).
// Without one the test fails, unless OPENETL_SKIP_SERVERS=1.
func dsn(t testing.TB) string {
	t.Helper()
	d := os.Getenv("OPENETL_TEST_MARIADB_DSN")
	if d == "" {
		if os.Getenv("OPENETL_SKIP_SERVERS") == "1" {
			t.Skip("OPENETL_TEST_MARIADB_DSN is not set (skipping: OPENETL_SKIP_SERVERS=1)")
		}
		t.Fatal("OPENETL_TEST_MARIADB_DSN is not set: start MariaDB with scripts/servers.sh start mariadb, or set OPENETL_SKIP_SERVERS=1")
	}
	return d
}

var unique atomic.Int64

// name returns a fresh lowercase name with prefix, unique in this run.
func name(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, unique.Add(1))
}

// conn connects to the test server as the DSN's user.
func conn(t testing.TB, d string) *client.Conn {
	t.Helper()
	user, rest, _ := strings.Cut(d, "@")
	u, p, _ := strings.Cut(user, ":")
	addr, _, _ := strings.Cut(rest, "/")
	c, err := client.Connect(addr, u, p, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// execSQL runs SQL statements on a connection of its own.
func execSQL(t testing.TB, d string, sqls ...string) {
	t.Helper()
	c := conn(t, d)
	defer c.Close()
	for _, sql := range sqls {
		if _, err := c.Execute(sql); err != nil {
			t.Fatalf("%s: %v", strings.SplitN(sql, "\n", 2)[0], err)
		}
	}
}

// queryRows returns a query's rows as strings (NULL as "NULL").
func queryRows(t testing.TB, d, sql string) [][]string {
	t.Helper()
	c := conn(t, d)
	defer c.Close()
	r, err := c.Execute(sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	var out [][]string
	for i := range r.Values {
		var row []string
		for j := range r.Values[i] {
			v := r.Values[i][j]
			if v.Value() == nil {
				row = append(row, "NULL")
			} else {
				s, _ := r.GetString(i, j)
				row = append(row, s)
			}
		}
		out = append(out, row)
	}
	return out
}

// database creates a fresh database, dropped at cleanup.
func database(t testing.TB, d string) string {
	t.Helper()
	db := name("db")
	execSQL(t, d, "CREATE DATABASE "+db)
	t.Cleanup(func() { execSQL(t, d, "DROP DATABASE IF EXISTS "+db) })
	return db
}

// newSource returns a source of database db, closed at cleanup.
func newSource(t testing.TB, d, db string, cfg mysql.Config) *mysql.Source {
	t.Helper()
	cfg.DSN = d
	cfg.Database = db
	src, err := mysql.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(context.Background()) })
	return src
}

// rec is one record a recorder saw.
type rec struct {
	Stream  string
	Op      source.Op
	Seq     int64
	Key     []byte
	Payload []byte
}

// recorder is an Emitter (and a source.Reporter) that keeps everything.
type recorder struct {
	recs    []rec
	states  [][]byte
	notices []source.Notice
}

func (r *recorder) Report(n source.Notice) { r.notices = append(r.notices, n) }

func (r *recorder) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	r.recs = append(r.recs, rec{stream, op, seq, slices.Clone(key), slices.Clone(payload)})
	return nil
}

func (r *recorder) ResumePoint(st []byte) error {
	r.states = append(r.states, slices.Clone(st))
	return nil
}

func (r *recorder) last() []byte { return r.states[len(r.states)-1] }

// readOnce opens the source's splits, with resume state st for the
// binlog split (nil: none; every snapshot split then counts as done) and
// reads them bounded: the snapshot splits first, then the binlog split.
// The recorder has every split's records in that order, and the binlog
// split's resume states.
func readOnce(t testing.TB, src *mysql.Source, streams []string, st []byte) (*recorder, source.SplitID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cat, err := src.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if streams == nil {
		for _, s := range cat.Streams {
			streams = append(streams, s.Name)
		}
	}
	splits, err := src.Open(ctx, streams, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st != nil {
		resume := map[source.SplitID][]byte{splits[0].ID(): st}
		for _, sp := range splits[1:] {
			resume[sp.ID()] = doneSnapshot(t, st)
		}
		if splits, err = src.Open(ctx, streams, resume); err != nil {
			t.Fatal(err)
		}
	}
	r := &recorder{}
	if err := readAll(ctx, splits, r); err != nil {
		t.Fatal(err)
	}
	return r, splits[0].ID()
}

// readAll reads splits bounded into r: the snapshot splits (splits[1:])
// first, then the binlog split, whose resume states r keeps.
func readAll(ctx context.Context, splits []source.Split, r *recorder) error {
	for _, sp := range splits[1:] {
		sr := &recorder{}
		if err := sp.Read(ctx, sr, true); err != nil {
			return err
		}
		r.recs = append(r.recs, sr.recs...)
	}
	return splits[0].Read(ctx, r, true)
}

// doneSnapshot is the state of a finished snapshot split whose origin is
// the binlog state st's position.
func doneSnapshot(t testing.TB, st []byte) []byte {
	t.Helper()
	var b struct {
		Flavor, File, GTID string
		Pos                uint32
	}
	if err := json.Unmarshal(st, &b); err != nil {
		t.Fatal(err)
	}
	out := map[string]any{"v": 1, "flavor": b.Flavor, "file": b.File, "pos": b.Pos, "done": true}
	if b.GTID != "" {
		out["gtid"] = b.GTID
	}
	j, _ := json.Marshal(out)
	return j
}

// values decodes a row payload into strings ("NULL" for null).
func values(t testing.TB, payload []byte) []string {
	t.Helper()
	vals, err := source.DecodeRow(nil, payload)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vals {
		switch {
		case v.Null:
			out = append(out, "NULL")
		case v.Unchanged:
			out = append(out, "UNCHANGED")
		default:
			out = append(out, string(v.Text))
		}
	}
	return out
}

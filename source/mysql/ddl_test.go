package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// TestDDLBetweenSyncs: columns added and a type widened between two
// syncs reach Parquet: rows written before ADD COLUMN read it as null,
// the widened column takes values the old type could not.
func TestDDLBetweenSyncs(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY, a int)", db), fmt.Sprintf("INSERT INTO %s.t VALUES (1, 1)", db))
	dir := t.TempDir()
	sync(t, newSource(t, d, db, mysql.Config{}), dir)
	execSQL(t, d,
		fmt.Sprintf("INSERT INTO %s.t VALUES (2, 2)", db),
		fmt.Sprintf("ALTER TABLE %s.t ADD COLUMN b varchar(10)", db),
		fmt.Sprintf("INSERT INTO %s.t VALUES (3, 3, 'three')", db),
		fmt.Sprintf("ALTER TABLE %s.t MODIFY a bigint", db),
		fmt.Sprintf("INSERT INTO %s.t VALUES (4, 1099511627776, 'four')", db))
	res := sync(t, newSource(t, d, db, mysql.Config{}), dir)
	if c := res.Streams["t"]; c.Read != 3 || c.Written != 3 {
		t.Fatalf("counts %+v, want 3 read and written", c)
	}
	var got []string
	for _, r := range readRows(t, dir, "t") {
		got = append(got, fmt.Sprintf("%v %v %v", r["id"], r["a"], r["b"]))
	}
	want := []string{"1 1 <nil>", "2 2 <nil>", "3 3 three", "4 1099511627776 four"}
	if !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
	if lastTypes["a"] != "int64" || lastTypes["b"] != "string" {
		t.Errorf("types %v", lastTypes)
	}
}

// TestDDLWhileStreaming: a column added after the catalog was read ends
// a bounded Read cleanly before the change (the next one reads on with
// the new column), and fails an unbounded one with a
// *SchemaChangeError after the records before it.
func TestDDLWhileStreaming(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY, a int)", db))
	src := newSource(t, d, db, mysql.Config{})
	first, id := readOnce(t, src, nil, nil)
	ctx := t.Context()

	// Bounded.
	splits, err := src.Open(ctx, []string{"t"}, map[source.SplitID][]byte{id: first.last()})
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s.t VALUES (1, 1)", db), fmt.Sprintf("ALTER TABLE %s.t ADD COLUMN b int", db),
		fmt.Sprintf("INSERT INTO %s.t VALUES (2, 2, 2)", db))
	r := &recorder{}
	if err := splits[0].Read(ctx, r, true); err != nil {
		t.Fatalf("bounded read over the change: %v", err)
	}
	if len(r.recs) != 1 || strings.Join(values(t, r.recs[0].Payload), ",") != "1,1" {
		t.Fatalf("bounded read before the change: %v", r.recs)
	}
	again, _ := readOnce(t, src, nil, r.last())
	if len(again.recs) != 1 || strings.Join(values(t, again.recs[0].Payload), ",") != "2,2,2" {
		t.Fatalf("the next read: %v", again.recs)
	}

	// Unbounded.
	splits, err = src.Open(ctx, []string{"t"}, map[source.SplitID][]byte{id: again.last()})
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s.t VALUES (3, 3, 3)", db), fmt.Sprintf("ALTER TABLE %s.t ADD COLUMN c int", db),
		fmt.Sprintf("INSERT INTO %s.t VALUES (4, 4, 4, 4)", db))
	r = &recorder{}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = splits[0].Read(rctx, r, false)
	var sc *mysql.SchemaChangeError
	if !errors.As(err, &sc) || !errors.Is(err, mysql.ErrSchemaChanged) || !errors.Is(err, source.ErrReopen) || sc.Table != "t" {
		t.Fatalf("unbounded read over the change: %v, want a *SchemaChangeError", err)
	}
	t.Log(err)
	if len(r.recs) != 1 || strings.Join(values(t, r.recs[0].Payload), ",") != "3,3,3" {
		t.Fatalf("unbounded read before the change: %v", r.recs)
	}
}

package mysql_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/openetl/etl/source/mysql"
)

// TestKeyChangeDeletesOldKey: an UPDATE that changes a row's primary key
// reaches the destination as a delete of the old key, carrying the old
// row, then the new row; applied by key in seq order the destination
// equals the table.
func TestKeyChangeDeletesOldKey(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.kc (id int PRIMARY KEY, v varchar(10))", db),
		fmt.Sprintf("INSERT INTO %s.kc VALUES (1, 'a'), (2, 'b')", db))
	dir := t.TempDir()
	sync(t, newSource(t, d, db, mysql.Config{}), dir)
	execSQL(t, d, fmt.Sprintf("UPDATE %s.kc SET id = 10 WHERE id = 1", db),
		fmt.Sprintf("UPDATE %s.kc SET id = 20, v = 'c' WHERE id = 2", db))
	res := sync(t, newSource(t, d, db, mysql.Config{}), dir)
	if c := res.Streams["kc"]; c.Read != 4 || c.Written != 4 {
		t.Fatalf("counts %+v, want 4 read and written", c)
	}
	var got []string
	live := map[string]string{}
	for _, r := range readRows(t, dir, "kc") {
		got = append(got, fmt.Sprintf("%v %v %v", r["_openetl_op"], r["id"], r["v"]))
		if k := fmt.Sprint(r["id"]); r["_openetl_op"] == "delete" {
			delete(live, k)
		} else {
			live[k] = fmt.Sprint(r["v"])
		}
	}
	want := []string{"insert 1 a", "insert 2 b", "delete 1 a", "update 10 a", "delete 2 b", "update 20 c"}
	if !slices.Equal(got, want) {
		t.Errorf("rows\n%q\nwant\n%q", got, want)
	}
	if want := map[string]string{"10": "a", "20": "c"}; fmt.Sprint(live) != fmt.Sprint(want) {
		t.Errorf("applied by key: %v, want the table %v", live, want)
	}
}

package mysql_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// TestPipeline syncs a table into sink/parquet: first its snapshot, then
// inserts, updates (one changing the key) and deletes streamed from the
// binlog, and checks with pyarrow that every change landed exactly once,
// with its op and its values.
func TestPipeline(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.items (id int PRIMARY KEY, note varchar(50), amount decimal(12,2))", db),
		fmt.Sprintf("INSERT INTO %[1]s.items SELECT seq, concat('note ', seq), seq + 0.25 FROM %[1]s.seq_1_to_50", db),
		fmt.Sprintf("INSERT INTO %s.items (id) VALUES (51)", db))
	dir := t.TempDir()
	res := sync(t, newSource(t, d, db, mysql.Config{}), dir)
	if c := res.Streams["items"]; c.Read != 51 || c.Written != 51 || c.Quarantined != 0 {
		t.Fatalf("snapshot sync counts %+v, want 51 read and written", c)
	}
	st := testutil.ReadParquetTables(t, dir+"/tables")["items"]
	if st == nil || st.Rows != 51 || st.DistinctIDs != 51 {
		t.Fatalf("after the snapshot: %+v, want 51 rows and ids", st)
	}

	execSQL(t, d,
		fmt.Sprintf("INSERT INTO %s.items (id, note) VALUES (100, 'new'), (101, 'newer')", db),
		"BEGIN",
		fmt.Sprintf("UPDATE %s.items SET note = 'changed', amount = -1.5 WHERE id IN (1, 100)", db),
		fmt.Sprintf("DELETE FROM %s.items WHERE id = 2", db),
		"COMMIT",
		fmt.Sprintf("UPDATE %s.items SET note = 'twice' WHERE id = 1", db),
		fmt.Sprintf("UPDATE %s.items SET id = 200 WHERE id = 3", db))
	res = sync(t, newSource(t, d, db, mysql.Config{}), dir)
	if c := res.Streams["items"]; c.Read != 8 || c.Written != 8 {
		t.Fatalf("change sync counts %+v, want 8 read and written", c)
	}
	var got []string
	for _, r := range readRows(t, dir, "items")[51:] {
		got = append(got, fmt.Sprintf("%v %v %v %v", r["_openetl_op"], r["id"], r["note"], r["amount"]))
	}
	want := []string{"insert 100 new <nil>", "insert 101 newer <nil>", "update 1 changed -1.50", "update 100 changed -1.50",
		"delete 2 note 2 2.25", "update 1 twice -1.50", "delete 3 note 3 3.25", "update 200 note 3 3.25"}
	if !slices.Equal(got, want) {
		t.Errorf("changes read back as\n%q\nwant\n%q", got, want)
	}
	// Nothing new: a third sync reads nothing.
	if c := sync(t, newSource(t, d, db, mysql.Config{}), dir).Streams["items"]; c.Read != 0 {
		t.Errorf("idle sync read %+v", c)
	}
}

// TestResumeByPosition: a resume state without a GTID position resumes
// by binlog file and offset, and reads what a GTID resume reads.
func TestResumeByPosition(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY, v int)", db), fmt.Sprintf("INSERT INTO %s.t VALUES (1, 1)", db))
	src := newSource(t, d, db, mysql.Config{})
	first, _ := readOnce(t, src, nil, nil)
	for i := range 3 {
		execSQL(t, d, fmt.Sprintf("INSERT INTO %s.t VALUES (%d, 0)", db, i+10), fmt.Sprintf("UPDATE %s.t SET v = v + 1 WHERE id = 1", db))
	}
	st := first.last()
	if !strings.Contains(string(st), `"gtid":"0-1-`) {
		t.Fatalf("state %s has no MariaDB GTID position", st)
	}
	byGTID, _ := readOnce(t, src, nil, st)
	noGTID := []byte(strings.Split(string(st), `,"gtid"`)[0] + "}") // the snapshot origins go too
	byPos, _ := readOnce(t, src, nil, noGTID)
	if len(byGTID.recs) != 6 || !slices.EqualFunc(byGTID.recs, byPos.recs, func(a, b rec) bool {
		return a.Op == b.Op && a.Seq == b.Seq && string(a.Key) == string(b.Key) && string(a.Payload) == string(b.Payload)
	}) {
		t.Fatalf("by GTID %d records, by position %d: %v vs %v", len(byGTID.recs), len(byPos.recs), byGTID.recs, byPos.recs)
	}
	// The snapshot origins (last) are the snapshot states' (readOnce
	// makes them from the state given, with or without its GTID).
	withoutOrigins := func(st []byte) string { return strings.Split(string(st), `,"origins"`)[0] }
	if withoutOrigins(byGTID.last()) != withoutOrigins(byPos.last()) {
		t.Errorf("end states differ: %s vs %s", byGTID.last(), byPos.last())
	}
	t.Logf("resumed from %s to %s", st, byPos.last())
}

// TestFlavorMismatch: Config.Flavor "mysql" against MariaDB fails with
// ErrFlavor instead of streaming without GTIDs.
func TestFlavorMismatch(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.t (id int PRIMARY KEY)", db))
	_, err := newSource(t, d, db, mysql.Config{Flavor: mysql.FlavorMySQL}).Discover(t.Context())
	if !errors.Is(err, mysql.ErrFlavor) {
		t.Fatalf("Discover with Flavor mysql on MariaDB: %v, want ErrFlavor", err)
	}
	// A MySQL state is refused too.
	src := newSource(t, d, db, mysql.Config{Flavor: mysql.FlavorMariaDB})
	_, err = src.Open(t.Context(), []string{"t"}, map[source.SplitID][]byte{
		source.SplitID("binlog:" + db): []byte(`{"v":1,"flavor":"mysql","file":"bin.000001","pos":4}`)})
	if !errors.Is(err, mysql.ErrFlavor) {
		t.Fatalf("Open with a MySQL state on MariaDB: %v, want ErrFlavor", err)
	}
}

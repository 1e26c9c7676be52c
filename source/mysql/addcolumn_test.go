package mysql_test

import (
	"fmt"
	"slices"
	gosync "sync"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source/mysql"
)

// TestAddColumnDefault: a column added with a default between syncs
// reaches the destination for rows not changed since: the next sync
// reads the table again (a new snapshot at the binlog position of its
// Open, after the change) and says so in a schema.changed event; applied
// by key in seq order, the destination equals the table. A nullable
// column added without a default reads nothing again.
func TestAddColumnDefault(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.ac (id int PRIMARY KEY, a varchar(10))", db),
		fmt.Sprintf("INSERT INTO %s.ac VALUES (1, 'x'), (2, 'y')", db))
	var mu gosync.Mutex
	var events []etl.Event
	ended := make(chan struct{}, 8)
	onEvent := func(e etl.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		if e.Kind == etl.EventSyncSucceeded || e.Kind == etl.EventSyncFailed {
			ended <- struct{}{}
		}
	}
	dir := t.TempDir()
	syncOne := func() (etl.Result, []etl.Event) {
		t.Helper()
		res, err := syncEvents(t.Context(), newSource(t, d, db, mysql.Config{}), dir, onEvent)
		if err != nil {
			t.Fatal(err)
		}
		testutil.Recv(t, "the event that ends the sync", ended)
		mu.Lock()
		defer mu.Unlock()
		out := events
		events = nil
		return res, out
	}
	live := func() []string {
		m := map[string]string{}
		for _, r := range readRows(t, dir, "ac") {
			if r["_openetl_op"] == "delete" {
				delete(m, fmt.Sprint(r["id"]))
			} else {
				m[fmt.Sprint(r["id"])] = fmt.Sprintf("%v %v %v %v", r["id"], r["a"], r["b"], r["c"])
			}
		}
		var out []string
		for _, v := range m {
			out = append(out, v)
		}
		slices.Sort(out)
		return out
	}
	syncOne()
	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s.ac ADD COLUMN b int DEFAULT 5", db),
		fmt.Sprintf("UPDATE %s.ac SET a = 'z' WHERE id = 2", db),
		fmt.Sprintf("INSERT INTO %s.ac (id, a) VALUES (3, 'w')", db))
	res, evs := syncOne()
	if c := res.Streams["ac"]; c.Read != 5 || c.Written != 5 {
		t.Errorf("counts %+v, want 5 read and written (3 snapshot rows, 2 changes)", c)
	}
	var changed []string
	for _, e := range evs {
		if e.Kind == etl.EventSchemaChanged {
			changed = append(changed, e.Stream+"."+e.Column+" "+e.Change+": "+e.Detail)
		}
	}
	if len(changed) != 1 || !slices.ContainsFunc(changed, func(s string) bool {
		return len(s) > 0 && s[:len("ac.b added")] == "ac.b added"
	}) {
		t.Errorf("schema.changed events %q, want one for ac.b", changed)
	}
	if got, want := live(), []string{"1 x 5 <nil>", "2 z 5 <nil>", "3 w 5 <nil>"}; !slices.Equal(got, want) {
		t.Errorf("applied by key: %q, want the table %q", got, want)
	}

	execSQL(t, d, fmt.Sprintf("ALTER TABLE %s.ac ADD COLUMN c varchar(10)", db), fmt.Sprintf("UPDATE %s.ac SET c = 'u' WHERE id = 3", db))
	res, evs = syncOne()
	if c := res.Streams["ac"]; c.Read != 1 {
		t.Errorf("after ADD COLUMN without a default: counts %+v, want only the update read", c)
	}
	for _, e := range evs {
		if e.Kind == etl.EventSchemaChanged {
			t.Errorf("after ADD COLUMN without a default: %+v", e)
		}
	}
	if got, want := live(), []string{"1 x 5 <nil>", "2 z 5 <nil>", "3 w 5 u"}; !slices.Equal(got, want) {
		t.Errorf("applied by key: %q, want the table %q", got, want)
	}
	if res, _ = syncOne(); res.Streams["ac"].Read != 0 {
		t.Errorf("idle sync read %+v", res.Streams["ac"])
	}
}

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

// TestTimeHeld: sink/parquet can't write TIME columns (Arrow durations):
// their values are held under _held/, the rows land, and a
// schema.blocked event (change "held") names the column.
func TestTimeHeld(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.tm (id int PRIMARY KEY, t time, note varchar(10))", db),
		fmt.Sprintf("INSERT INTO %s.tm VALUES (1, '838:59:59', 'a'), (2, '-00:00:01', 'b'), (3, NULL, 'c')", db))
	var mu gosync.Mutex
	var events []etl.Event
	ended := make(chan struct{}, 1)
	onEvent := func(e etl.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		if e.Kind == etl.EventSyncSucceeded || e.Kind == etl.EventSyncFailed {
			ended <- struct{}{}
		}
	}
	dir := t.TempDir()
	res, err := syncEvents(t.Context(), newSource(t, d, db, mysql.Config{}), dir, onEvent)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Streams["tm"]; c.Read != 3 || c.Written != 3 || c.Held != 2 {
		t.Fatalf("counts %+v, want 3 read and written, 2 values held", c)
	}
	testutil.Recv(t, "the event that ends the sync", ended)
	mu.Lock()
	var blocked []string
	for _, e := range events {
		if e.Kind == etl.EventSchemaBlocked {
			blocked = append(blocked, e.Stream+"."+e.Column+" "+e.Change)
		}
	}
	mu.Unlock()
	if !slices.Equal(blocked, []string{"tm.t held"}) {
		t.Errorf("schema.blocked events %q, want one for tm.t, change held", blocked)
	}
	var held []string
	for _, l := range heldLines(t, dir, "tm") {
		held = append(held, fmt.Sprint(l["column"], "=", l["value"]))
	}
	slices.Sort(held)
	if want := []string{"t=-00:00:01", "t=838:59:59"}; !slices.Equal(held, want) {
		t.Errorf("held %q, want %q", held, want)
	}
	var notes []string
	for _, r := range readRows(t, dir, "tm") {
		notes = append(notes, fmt.Sprint(r["id"], r["note"]))
	}
	if want := []string{"1a", "2b", "3c"}; !slices.Equal(notes, want) {
		t.Errorf("rows %q, want %q", notes, want)
	}
}

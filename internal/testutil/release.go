package testutil

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source/faker"
)

// ReleasePipeline is the pipeline name SyncRelease syncs under.
const ReleasePipeline = "release"

// ReleaseRun is one Sync of SyncRelease and the events it sent.
type ReleaseRun struct {
	Res    etl.Result
	Err    error
	Events []etl.Event
}

// SyncRelease syncs rows records a stream of the fake orders and
// customers (seed 9; streams, or both when none are named) into dst on
// two lanes, with checkpoints in dir, the customers merged on their key
// when merge is set; the destinations' tests of held-value release
// (sink.Capabilities.Patches) run it with a destination that can't take
// a type first, then with one that can. It returns once the attempt's
// last event was delivered.
func SyncRelease(t *testing.T, dir string, dst sink.Destination, rows int64, merge bool, streams ...string) ReleaseRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if len(streams) == 0 {
		streams = []string{faker.Orders, faker.Customers}
	}
	src, err := faker.New(faker.Config{Seed: 9, Rows: rows, Streams: streams})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	var mu sync.Mutex
	var run ReleaseRun
	done := make(chan struct{})
	b := etl.NewPipeline(ReleasePipeline).From(src).To(dst).Checkpoints(store)
	if merge && slices.Contains(streams, faker.Customers) {
		b = b.Mode(delivery.Merge, faker.Customers)
	}
	p, err := b.Lanes(2).OnEvent(func(e etl.Event) {
		mu.Lock()
		defer mu.Unlock()
		run.Events = append(run.Events, e)
		if e.Kind == etl.EventSyncSucceeded || e.Kind == etl.EventSyncFailed {
			close(done)
		}
	}, 0).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	res, err := p.Sync(ctx)
	Recv(t, "the attempt's last event", done)
	mu.Lock()
	defer mu.Unlock()
	run.Res, run.Err = res, err
	return run
}

// Released returns the run's held.released events as "stream.column
// rows", sorted.
func (r ReleaseRun) Released() []string {
	var out []string
	for _, e := range r.Events {
		if e.Kind == etl.EventHeldReleased {
			out = append(out, e.Stream+"."+e.Column+" "+strconv.FormatInt(e.Rows, 10))
		}
	}
	slices.Sort(out)
	return out
}

// HeldValues reads the published held lines of stream's column from
// SyncRelease's checkpoints in dir: the value by the row's _openetl_id.
// A line without an id, or a second one for a row, fails the test.
func HeldValues(t *testing.T, dir, stream, column string) map[string]string {
	t.Helper()
	store, err := checkpoint.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	names, err := store.(checkpoint.FileLister).ListFiles(t.Context(), ReleasePipeline, "_held/"+stream+"/")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range names {
		b, err := store.ReadFile(t.Context(), ReleasePipeline, name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l struct{ Column, Value, ID string }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			if l.Column != column {
				continue
			}
			if l.ID == "" {
				t.Fatalf("held line of %s without the row's id: %s", column, sc.Bytes())
			}
			if _, ok := out[l.ID]; ok {
				t.Fatalf("a second held line of %s for row %q", column, l.ID)
			}
			out[l.ID] = l.Value
		}
	}
	return out
}

// ReleasedRow is one row of a destination as an independent reader
// gave it: its _openetl_id and the released column's value in the
// reader's text form.
type ReleasedRow struct{ ID, Value string }

// CheckReleased checks rows against the held values by _openetl_id: a
// row with one has it (the same text, number or JSON value: SameValue),
// a row without one the reader's null, or the value keep gives for its
// id. It returns the rows checked and how many had a held value, and
// reports at most five wrong rows one by one.
func CheckReleased(t *testing.T, what string, rows []ReleasedRow, held, keep map[string]string, null string) (n, matched int) {
	t.Helper()
	bad := 0
	for _, r := range rows {
		want, ok := held[r.ID]
		if ok {
			matched++
		}
		if k, kept := keep[r.ID]; kept {
			want, ok = k, true
		}
		if !ok {
			want = null
		}
		if !SameValue(r.Value, want) {
			if bad++; bad <= 5 {
				t.Errorf("%s row %s: %s, want %s", what, r.ID, r.Value, want)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d rows with a wrong value", what, bad)
	}
	return len(rows), matched
}

// SameValue reports whether a reader's text a is the value b: the same
// text, the same number (a may be quoted: pyiceberg gives doubles in
// their str() form) or the same JSON value, numbers compared as float64.
func SameValue(a, b string) bool {
	if a == b {
		return true
	}
	if u, err := strconv.Unquote(a); err == nil {
		if x, err1 := strconv.ParseFloat(u, 64); err1 == nil {
			y, err2 := strconv.ParseFloat(b, 64)
			return err2 == nil && x == y
		}
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

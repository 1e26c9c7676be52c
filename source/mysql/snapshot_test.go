package mysql_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openetl/etl/internal/testutil"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/mysql"
)

// snapshotSplit returns the split of splits with ID id.
func snapshotSplit(t testing.TB, splits []source.Split, id string) source.Split {
	t.Helper()
	for _, sp := range splits {
		if string(sp.ID()) == id {
			return sp
		}
	}
	var ids []string
	for _, sp := range splits {
		ids = append(ids, string(sp.ID()))
	}
	t.Fatalf("no split %s among %v", id, ids)
	return nil
}

// rowSet returns a stream's records as sorted "key|payload values" lines.
func rowSet(t testing.TB, recs []rec, stream string) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		if r.Stream == stream {
			out = append(out, strings.Join(values(t, r.Payload), "|"))
		}
	}
	slices.Sort(out)
	return out
}

// tableSet returns a table's rows the way rowSet prints records (the
// table's columns must print as the snapshot does).
func tableSet(t testing.TB, d, sql string) []string {
	t.Helper()
	var out []string
	for _, r := range queryRows(t, d, sql) {
		out = append(out, strings.Join(r, "|"))
	}
	slices.Sort(out)
	return out
}

// TestSnapshotChunks reads a table with a four-column key (integer,
// latin1 text compared in its collation, DATETIME, VARBINARY, with empty
// and non-ASCII values) in chunks of 7 rows, and checks that every row
// comes exactly once with the origin's seq, that every chunk ends with a
// resume point, and that reopening the split at its resume points reads
// exactly the rows after each. A table whose key is an ENUM
// (not pageable) is read in one piece; a keyless table is copied by the
// binlog split.
func TestSnapshotChunks(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d,
		fmt.Sprintf(`CREATE TABLE %s.ck (a int, b varchar(10) CHARACTER SET latin1, c datetime(6), e varbinary(4), v int,
			PRIMARY KEY (a, b, c, e))`, db),
		fmt.Sprintf(`INSERT INTO %[1]s.ck SELECT CAST(seq AS SIGNED) %% 5 - 2, ELT(1 + seq %% 6, '', 'a', 'B', 'é', 'z z', 'Zé'),
			'2024-01-01' + INTERVAL (seq %% 3) SECOND + INTERVAL seq MICROSECOND, IF(seq %% 2, x'', x'00ff'), seq
			FROM %[1]s.seq_1_to_300`, db),
		fmt.Sprintf("CREATE TABLE %s.en (k enum('x','b','a') PRIMARY KEY, v int)", db),
		fmt.Sprintf("INSERT INTO %s.en VALUES ('a', 1), ('b', 2), ('x', 3)", db),
		fmt.Sprintf("CREATE TABLE %s.nokey (v int, w varchar(5))", db),
		fmt.Sprintf("INSERT INTO %s.nokey VALUES (1, 'a'), (1, 'a'), (2, NULL)", db))
	src := newSource(t, d, db, mysql.Config{SnapshotChunkRows: 7, SnapshotParallelism: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	streams := []string{"ck", "en", "nokey"}
	splits, err := src.Open(ctx, streams, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(splits) != 3 {
		t.Fatalf("%d splits, want the binlog split and 2 snapshot splits (the keyless table has none)", len(splits))
	}
	ck := snapshotSplit(t, splits, "snapshot:"+db+".ck")
	r := &recorder{}
	if err := ck.Read(ctx, r, true); err != nil {
		t.Fatal(err)
	}
	want := tableSet(t, d, fmt.Sprintf("SELECT a, b, c, hex(e), v FROM %s.ck", db))
	got := rowSet(t, r.recs, "ck")
	for i := range got { // e printed as hex, as the query does
		f := strings.Split(got[i], "|")
		f[3] = strings.ToUpper(fmt.Sprintf("%x", f[3]))
		got[i] = strings.Join(f, "|")
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("chunked snapshot:\n%v\nwant\n%v", got, want)
	}
	if len(r.states) != 300/7+1 {
		t.Errorf("%d resume points for 300 rows in chunks of 7, want %d", len(r.states), 300/7+1)
	}
	for _, x := range r.recs {
		if x.Seq != r.recs[0].Seq {
			t.Fatalf("snapshot seqs %d and %d: every row has the origin's", x.Seq, r.recs[0].Seq)
		}
	}
	// Reopen at resume points (every fifth, and the last two): the rest
	// of the rows, exactly.
	for i, st := range r.states {
		if i%5 != 0 && i < len(r.states)-2 {
			continue
		}
		again, err := src.Open(ctx, streams, map[source.SplitID][]byte{ck.ID(): st})
		if err != nil {
			t.Fatal(err)
		}
		rest := &recorder{}
		if err := snapshotSplit(t, again, string(ck.ID())).Read(ctx, rest, true); err != nil {
			t.Fatalf("resume point %d (%s): %v", i, st, err)
		}
		n := min(len(r.recs), 7*(i+1))
		if len(rest.recs) != len(r.recs)-n {
			t.Fatalf("resumed at point %d (%s): %d rows, want %d", i, st, len(rest.recs), len(r.recs)-n)
		}
		for k := range rest.recs {
			if string(rest.recs[k].Payload) != string(r.recs[n+k].Payload) || rest.recs[k].Seq != r.recs[n+k].Seq {
				t.Fatalf("resumed at point %d: row %d differs", i, k)
			}
		}
	}

	en := &recorder{}
	if err := snapshotSplit(t, splits, "snapshot:"+db+".en").Read(ctx, en, true); err != nil {
		t.Fatal(err)
	}
	if got := rowSet(t, en.recs, "en"); !slices.Equal(got, []string{"a|1", "b|2", "x|3"}) || len(en.states) != 1 {
		t.Errorf("ENUM-keyed table: %v in %d resume points, want 3 rows in one", got, len(en.states))
	}
	bin := &recorder{}
	if err := splits[0].Read(ctx, bin, true); err != nil {
		t.Fatal(err)
	}
	if got := rowSet(t, bin.recs, "nokey"); !slices.Equal(got, []string{"1|a", "1|a", "2|NULL"}) {
		t.Errorf("keyless table copied by the binlog split: %v", got)
	}
	var st struct{ Copied []string }
	if err := json.Unmarshal(bin.states[0], &st); err != nil || !slices.Equal(st.Copied, []string{"nokey"}) {
		t.Errorf("binlog split's first state %s: want nokey copied", bin.states[0])
	}
}

// TestSnapshotAfterOrigin changes a keyed and a keyless table between
// Open (which fixes the origin) and the splits' reads, so every read
// happens after changes the binlog split streams. Applied in seq order,
// the output must equal the tables: the keyed table's snapshot rows
// (later values, the origin's seq) are overtaken by the streamed changes;
// the keyless table's copy is taken at a binlog position of its own and
// the stream skips its changes before that position.
func TestSnapshotAfterOrigin(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d,
		fmt.Sprintf("CREATE TABLE %s.kd (id int PRIMARY KEY, v varchar(10))", db),
		fmt.Sprintf("INSERT INTO %s.kd VALUES (1, 'one'), (2, 'two'), (3, 'three')", db),
		fmt.Sprintf("CREATE TABLE %s.kl (v int, w varchar(10))", db),
		fmt.Sprintf("INSERT INTO %s.kl VALUES (1, 'one'), (2, 'two'), (3, 'three')", db))
	src := newSource(t, d, db, mysql.Config{SnapshotChunkRows: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	splits, err := src.Open(ctx, []string{"kd", "kl"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, d,
		fmt.Sprintf("UPDATE %s.kd SET v = 'uno' WHERE id = 1", db),
		fmt.Sprintf("DELETE FROM %s.kd WHERE id = 2", db),
		fmt.Sprintf("INSERT INTO %s.kd VALUES (4, 'four')", db),
		fmt.Sprintf("UPDATE %s.kd SET id = 5 WHERE id = 3", db),
		fmt.Sprintf("UPDATE %s.kl SET w = 'uno' WHERE v = 1", db),
		fmt.Sprintf("DELETE FROM %s.kl WHERE v = 2", db),
		fmt.Sprintf("INSERT INTO %s.kl VALUES (4, 'four')", db))
	r := &recorder{}
	if err := readAll(ctx, splits, r); err != nil {
		t.Fatal(err)
	}
	// After the copy, more changes to the keyless table: streamed.
	execSQL(t, d, fmt.Sprintf("INSERT INTO %s.kl VALUES (5, 'five')", db), fmt.Sprintf("DELETE FROM %s.kl WHERE v = 4", db))
	more, err := src.Open(ctx, []string{"kd", "kl"}, map[source.SplitID][]byte{splits[0].ID(): r.last()})
	if err != nil {
		t.Fatal(err)
	}
	if err := more[0].Read(ctx, r, true); err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(r.recs, func(a, b rec) int { return cmp.Compare(a.Seq, b.Seq) })
	keyed := map[string]string{}
	var keyless []string
	for _, x := range r.recs {
		v := strings.Join(values(t, x.Payload), "|")
		switch x.Stream {
		case "kd":
			if x.Op == source.OpDelete {
				delete(keyed, string(x.Key))
			} else {
				keyed[string(x.Key)] = v
			}
		case "kl":
			if x.Op == source.OpDelete {
				i := slices.Index(keyless, v)
				if i < 0 {
					t.Fatalf("keyless delete of %s, which the output does not hold: %v", v, keyless)
				}
				keyless = slices.Delete(keyless, i, i+1)
			} else {
				keyless = append(keyless, v)
			}
		}
	}
	var got []string
	for _, v := range keyed {
		got = append(got, v)
	}
	slices.Sort(got)
	if want := tableSet(t, d, fmt.Sprintf("SELECT id, v FROM %s.kd", db)); !slices.Equal(got, want) {
		t.Errorf("keyed table applied in seq order: %v, want %v", got, want)
	}
	slices.Sort(keyless)
	if want := tableSet(t, d, fmt.Sprintf("SELECT v, w FROM %s.kl", db)); !slices.Equal(keyless, want) {
		t.Errorf("keyless table applied in seq order: %v, want %v", keyless, want)
	}
	var st struct {
		Copied []string
		Skip   map[string]any
	}
	if err := json.Unmarshal(r.states[0], &st); err != nil || !slices.Equal(st.Copied, []string{"kl"}) || st.Skip["kl"] == nil {
		t.Errorf("binlog split's state after the copy: %s, want kl copied with a skip position", r.states[0])
	}
}

// blocker is an Emitter whose Record blocks after the first call until
// release is closed, like a pipeline applying backpressure.
type blocker struct {
	n       int
	first   chan struct{}
	release chan struct{}
}

func (b *blocker) Record(string, source.Op, int64, []byte, []byte) error {
	b.n++
	if b.n == 1 {
		close(b.first)
	}
	<-b.release
	return nil
}

func (b *blocker) ResumePoint([]byte) error { return nil }

// TestProgressAndLag: a snapshot split held back after its first row
// reports its stream, rows copied and the table's estimate, and nothing
// once done; a binlog split held back by a backlog reports bytes behind.
func TestProgressAndLag(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d, fmt.Sprintf("CREATE TABLE %s.pl (id int PRIMARY KEY, v varchar(100))", db),
		fmt.Sprintf("INSERT INTO %[1]s.pl SELECT seq, repeat('x', 100) FROM %[1]s.seq_1_to_2000", db), "ANALYZE TABLE "+db+".pl")
	src := newSource(t, d, db, mysql.Config{SnapshotChunkRows: 500})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	splits, err := src.Open(ctx, []string{"pl"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	type progress interface {
		SnapshotProgress() (string, int64, int64, bool)
	}
	type lag interface {
		Lag() (int64, string, time.Duration, bool)
	}
	snap := splits[1].(progress)
	if _, _, _, ok := snap.SnapshotProgress(); ok {
		t.Error("progress reported before the split reads")
	}
	b := &blocker{first: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- splits[1].Read(ctx, b, true) }()
	<-b.first
	stream, n, est, ok := snap.SnapshotProgress()
	if !ok || stream != "pl" || n != 0 || est <= 0 {
		t.Errorf("progress while held at the first row: %q %d/%d %v, want pl, 0 done, an estimate", stream, n, est, ok)
	}
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, n, _, ok := snap.SnapshotProgress(); ok || n != 2000 {
		t.Errorf("progress after the snapshot: %d rows, ok %v; want 2000 and not ok", n, ok)
	}

	// A backlog for the binlog split, which is held at its first record.
	execSQL(t, d, fmt.Sprintf("UPDATE %s.pl SET v = repeat('y', 100)", db))
	bl := splits[0].(lag)
	b = &blocker{first: make(chan struct{}), release: make(chan struct{})}
	go func() { done <- splits[0].Read(ctx, b, false) }()
	<-b.first
	var behind int64
	var unit string
	testutil.Until(t, "the held binlog split to know its lag", func() bool {
		behind, unit, _, ok = bl.Lag()
		return ok
	})
	if unit != "byte" {
		t.Errorf("lag unit %q", unit)
	}
	// The held split read at most the update's first rows event (8 KiB);
	// 2000 updated rows of 200 bytes of images are behind.
	if !ok || behind < 100_000 {
		t.Errorf("lag of a split held at the first record of a backlog: %d bytes, ok %v; want over 100000", behind, ok)
	}
	cancel()
	close(b.release)
	<-done
}

// hookEmitter is a recorder that runs onResume after each resume point.
type hookEmitter struct {
	recorder
	onResume func(n int)
}

func (h *hookEmitter) ResumePoint(st []byte) error {
	h.recorder.ResumePoint(st)
	h.onResume(len(h.states))
	return nil
}

// TestSnapshotAsOfOrigin changes keyed tables after Open fixed the
// snapshot's origin, before the first chunk is read and again after it:
// inserts of new keys, updates of keys behind and ahead of the chunks
// read, a key changed twice, a key moved, deletes of keys behind, inside
// and ahead of the next chunks and in the last one. The snapshot split
// must emit each table as it was at the origin — rows since deleted or
// moved included — each row once with the origin's seq, and the binlog
// split every change after it: no row version twice, none missing
// (TestRunRidesOutServerRestart checks it through a pipeline). Table kc
// has a key of latin1 text (compared case-insensitively, unlike its
// bytes), DATETIME and VARBINARY, so the deleted keys are placed in the
// chunks' ranges in the key's order.
func TestSnapshotAsOfOrigin(t *testing.T) {
	d := dsn(t)
	db := database(t, d)
	execSQL(t, d,
		fmt.Sprintf("CREATE TABLE %s.kd (id int PRIMARY KEY, v varchar(10))", db),
		fmt.Sprintf("INSERT INTO %s.kd VALUES (1, 'v1'), (2, 'v2'), (3, 'v3'), (4, 'v4'), (5, 'v5'), (6, 'v6'), (7, 'v7'), (8, 'v8'), (9, 'v9'), (10, 'v10')", db),
		fmt.Sprintf("CREATE TABLE %s.kc (a varchar(4) CHARACTER SET latin1, b datetime(6), c varbinary(4), v int, PRIMARY KEY (a, b, c))", db),
		fmt.Sprintf(`INSERT INTO %s.kc VALUES ('a', '2024-01-01', X'01', 1), ('B', '2024-01-01', X'01', 2), ('c', '2024-01-01', X'01', 3),
			('D', '2024-01-01', X'01', 4), ('D', '2024-01-01 00:00:00.5', X'01', 5), ('D', '2024-01-01 00:00:00.5', X'02', 6), ('e', '2024-01-01', '', 7)`, db))
	src := newSource(t, d, db, mysql.Config{SnapshotChunkRows: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	splits, err := src.Open(ctx, []string{"kc", "kd"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	origin := map[string][]string{"kd": tableSet(t, d, "SELECT id, v FROM "+db+".kd"), "kc": tableSet(t, d, "SELECT a, b, hex(c), v FROM "+db+".kc")}
	execSQL(t, d,
		fmt.Sprintf("UPDATE %s.kd SET v = 'a' WHERE id = 1", db),
		fmt.Sprintf("INSERT INTO %s.kd VALUES (11, 'v11')", db),
		fmt.Sprintf("UPDATE %s.kd SET v = 'b' WHERE id = 5", db),
		fmt.Sprintf("DELETE FROM %s.kd WHERE id = 3", db),
		fmt.Sprintf("UPDATE %s.kd SET id = 12 WHERE id = 6", db),
		fmt.Sprintf("DELETE FROM %s.kc WHERE a = 'c'", db),
		fmt.Sprintf("DELETE FROM %s.kc WHERE a = 'D' AND c = X'01' AND b > '2024-01-01'", db),
		fmt.Sprintf("INSERT INTO %s.kc VALUES ('b', '2024-01-02', X'01', 8)", db))
	after1 := map[string][]string{
		"kd": {
			fmt.Sprintf("UPDATE %s.kd SET v = 'c' WHERE id = 2", db),
			fmt.Sprintf("UPDATE %s.kd SET v = 'd' WHERE id = 4", db),
			fmt.Sprintf("INSERT INTO %s.kd VALUES (13, 'v13')", db),
			fmt.Sprintf("UPDATE %s.kd SET v = 'e' WHERE id = 5", db),
			fmt.Sprintf("DELETE FROM %s.kd WHERE id = 2", db),
			fmt.Sprintf("DELETE FROM %s.kd WHERE id = 7", db),
			fmt.Sprintf("DELETE FROM %s.kd WHERE id = 10", db)},
		"kc": {
			fmt.Sprintf("DELETE FROM %s.kc WHERE a = 'a'", db),
			fmt.Sprintf("DELETE FROM %s.kc WHERE a = 'e'", db)},
	}
	var all []rec
	var kdFirst []byte // kd's resume state after its first chunk
	snapSeq := int64(-1)
	for _, tbl := range []string{"kc", "kd"} {
		snap := &hookEmitter{onResume: func(n int) {
			if n == 1 { // after the first chunk
				execSQL(t, d, after1[tbl]...)
			}
		}}
		if err := snapshotSplit(t, splits, "snapshot:"+db+"."+tbl).Read(ctx, snap, true); err != nil {
			t.Fatal(err)
		}
		if len(snap.states) < 3 {
			t.Fatalf("%s: %d resume points from the snapshot split, want one per chunk of 2 rows", tbl, len(snap.states))
		}
		var got []string
		for _, x := range snap.recs {
			got = append(got, strings.Join(values(t, x.Payload), "|"))
			if snapSeq < 0 {
				snapSeq = x.Seq
			}
			if x.Op != source.OpInsert || x.Seq != snapSeq {
				t.Errorf("%s: snapshot record %v: want an insert with the origin's seq %d", tbl, x, snapSeq)
			}
		}
		slices.Sort(got)
		if tbl == "kc" {
			got = nil
			for _, x := range snap.recs {
				v := values(t, x.Payload)
				got = append(got, fmt.Sprintf("%s|%s|%X|%s", v[0], v[1], v[2], v[3]))
			}
			slices.Sort(got)
		}
		if !slices.Equal(got, origin[tbl]) {
			t.Errorf("%s: snapshot rows %v, want the table at the origin %v", tbl, got, origin[tbl])
		}
		all = append(all, snap.recs...)
		if tbl == "kd" {
			kdFirst = snap.states[0]
		}
	}
	bin := &recorder{}
	if err := splits[0].Read(ctx, bin, true); err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, x := range bin.recs {
		if x.Seq <= snapSeq {
			t.Errorf("binlog record %v at or before the snapshot's seq", x)
		}
		if x.Stream == "kd" {
			changes = append(changes, fmt.Sprint(x.Op)+" "+strings.Join(values(t, x.Payload), "|"))
		}
	}
	want := []string{"update 1|a", "insert 11|v11", "update 5|b", "delete 3|v3", "delete 6|v6", "update 12|v6",
		"update 2|c", "update 4|d", "insert 13|v13", "update 5|e", "delete 2|c", "delete 7|v7", "delete 10|v10"}
	if !slices.Equal(changes, want) {
		t.Errorf("kd's binlog records %v, want %v", changes, want)
	}
	// Applied in seq order, the output is the table.
	all = append(all, bin.recs...)
	slices.SortStableFunc(all, func(a, b rec) int { return cmp.Compare(a.Seq, b.Seq) })
	final := map[string]string{}
	for _, x := range all {
		if x.Stream != "kd" {
			continue
		}
		if x.Op == source.OpDelete {
			delete(final, string(x.Key))
		} else {
			final[string(x.Key)] = strings.Join(values(t, x.Payload), "|")
		}
	}
	got := slices.Collect(maps.Values(final))
	slices.Sort(got)
	if want := tableSet(t, d, fmt.Sprintf("SELECT id, v FROM %s.kd", db)); !slices.Equal(got, want) {
		t.Errorf("kd applied in seq order: %v, want %v", got, want)
	}

	// A later attempt resuming kd after its first chunk, after all the
	// changes, reads the rest of the table at the origin again.
	again, err := src.Open(ctx, []string{"kd"}, map[source.SplitID][]byte{splits[0].ID(): bin.last(), source.SplitID("snapshot:" + db + ".kd"): kdFirst})
	if err != nil {
		t.Fatal(err)
	}
	rest := &recorder{}
	if err := snapshotSplit(t, again, "snapshot:"+db+".kd").Read(ctx, rest, true); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, x := range rest.recs {
		got = append(got, strings.Join(values(t, x.Payload), "|"))
		if x.Seq != snapSeq {
			t.Errorf("resumed snapshot record %v: want the origin's seq %d", x, snapSeq)
		}
	}
	slices.Sort(got)
	want = slices.DeleteFunc(slices.Clone(origin["kd"]), func(r string) bool { return r == "1|v1" || r == "2|v2" })
	if !slices.Equal(got, want) {
		t.Errorf("resumed after the first chunk: %v, want the table at the origin after key 2 %v", got, want)
	}
}

package mysql_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var unit string
		if behind, unit, _, ok = bl.Lag(); ok {
			if unit != "byte" {
				t.Errorf("lag unit %q", unit)
			}
			break
		}
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

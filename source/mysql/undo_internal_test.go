package mysql

import (
	"testing"

	"github.com/openetl/etl/source"
)

// TestUndoLog: a chunk's rows come out as of the origin from the first
// change of each key after it, whatever came later: an unchanged key as
// read, an updated or deleted-and-inserted-again key with its row at the
// origin, a key inserted (or moved to) after the origin not at all; each
// key once. Keys that had a row at the origin and none now are the gone
// ones, until a chunk places them.
func TestUndoLog(t *testing.T) {
	u := newUndoLog(position{file: "bin.000001", idx: 1, pos: 4})
	u.had([]byte("1"), []byte("one@O"))  // updated
	u.had([]byte("1"), []byte("one@p1")) // and again: not its first change
	u.hadNone([]byte("2"))               // inserted after O
	u.had([]byte("2"), []byte("two@p2")) // then updated: still no row at O
	u.had([]byte("3"), []byte("three@O"))
	u.hadNone([]byte("3")) // deleted, inserted again
	u.had([]byte("4"), []byte("four@O"))
	u.hadNone([]byte("5")) // 4 moved to 5
	u.had([]byte("6"), []byte("six@O"))

	for _, c := range []struct {
		key, read, want string
		ok              bool
	}{
		{"0", "zero", "zero", true},
		{"1", "one@now", "one@O", true},
		{"2", "two@now", "", false},
		{"3", "three@now", "three@O", true},
		{"5", "four@now", "", false},
		{"1", "one@now", "", false}, // a second read emits nothing
	} {
		row, ok := u.asOfOrigin([]byte(c.key), []byte(c.read))
		if string(row) != c.want || ok != c.ok {
			t.Errorf("key %s read as %q: %q %v, want %q %v", c.key, c.read, row, ok, c.want, c.ok)
		}
	}
	if got := u.gone(); len(got) != 2 || got[0] != "4" || got[1] != "6" {
		t.Errorf("gone keys %q, want 4 and 6", got)
	}

	// The literals emitGone compares keys with, in the column's order.
	tbl := &table{name: "t", key: []int{0, 1, 2, 3}, keyLits: []litKind{litNumber, litText, litQuoted, litBinary},
		keyTypes: []string{"int", "varchar", "date", "varbinary"}, keyColls: [][2]string{{}, {"latin1", "latin1_swedish_ci"}, {}, {}},
		stream: source.Stream{Columns: []source.Column{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}}}
	var got []byte
	for j, v := range []string{"7", "é", "2024-01-02", "\x00\x01"} {
		var err error
		if got, err = tbl.keyLiteral(append(got, ' '), j, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if want := " 7 CONVERT(_utf8mb4 X'c3a9' USING latin1) COLLATE latin1_swedish_ci CAST('2024-01-02' AS DATE) X'0001'"; string(got) != want {
		t.Errorf("key literals %s, want %s", got, want)
	}
	tbl.keyColls[1][1] = "latin1_swedish_ci; DROP TABLE t"
	if _, err := tbl.keyLiteral(nil, 1, []byte("x")); err == nil {
		t.Error("a collation name with SQL in it is taken")
	}
}

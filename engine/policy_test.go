package engine_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source"
	"github.com/zeebo/xxh3"
)

var testKey = engine.HashKey("k3y-for-tests")

func goHMAC(v string) string {
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

// TestPolicyRules runs each column rule through the binding, on a
// declared and on a JSON stream.
func TestPolicyRules(t *testing.T) {
	cases := []struct {
		rule      engine.Rule
		column    string   // the output column to look at ("" none)
		want      []string // its cells
		wantNames []string // the stream's output columns
	}{
		{engine.Rule{Kind: engine.RuleExclude, Column: "ssn"}, "", nil, []string{"id", "email", "card"}},
		{engine.Rule{Kind: engine.RuleInclude, Columns: []string{"id", "card"}}, "", nil, []string{"id", "card"}},
		{engine.Rule{Kind: engine.RuleRename, Column: "email", To: "contact"}, "contact", []string{"ann@example.com", "<nil>"}, []string{"id", "contact", "ssn", "card"}},
		{engine.Rule{Kind: engine.RuleNull, Column: "ssn"}, "ssn", []string{"<nil>", "<nil>"}, nil},
		{engine.Rule{Kind: engine.RuleHash, Column: "email", Key: testKey}, "email", []string{goHMAC("ann@example.com"), "<nil>"}, nil},
		{engine.Rule{Kind: engine.RuleMask, Column: "card", N: 4}, "card", []string{"************4242", "42"}, nil},
		{engine.Rule{Kind: engine.RuleTruncateChars, Column: "ssn", N: 3}, "ssn", []string{"123", "98é"}, nil},
		{engine.Rule{Kind: engine.RuleTruncateBytes, Column: "ssn", N: 3}, "ssn", []string{"123", "98"}, nil},
	}
	decl := rowSpec("t", source.TypesPostgres, "id", "int8", "email", "text", "ssn", "text", "card", "text")
	declRows := batch("t",
		rec{source.OpInsert, 1, "1", string(row("1", "ann@example.com", "123-45-6789", "4242424242424242"))},
		rec{source.OpInsert, 2, "2", string(row("2", null, "98é-x", "42"))})
	jsonRows := batch("t",
		rec{source.OpInsert, 1, "1", `{"id":1,"email":"ann@example.com","ssn":"123-45-6789","card":"4242424242424242"}`},
		rec{source.OpInsert, 2, "2", `{"id":2,"email":null,"ssn":"98é-x","card":"42"}`})
	for _, c := range cases {
		for _, declared := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/declared=%v", c.rule.Kind, declared), func(t *testing.T) {
				spec, b := engine.StreamSpec{Name: "t"}, jsonRows
				if declared {
					spec, b = decl, declRows
				}
				spec.Rules = []engine.Rule{c.rule}
				e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
				out := push(t, e, b)
				if c.column != "" {
					equal(t, c.column, cells(t, out.Record, c.column), c.want)
				}
				if c.wantNames != nil {
					names := colNames(out.Record)
					equal(t, "columns", names[:len(names)-4], c.wantNames)
				}
			})
		}
	}
}

func TestPolicyFilter(t *testing.T) {
	and := func(cs ...engine.Cond) *engine.Cond { return &engine.Cond{Op: engine.OpAnd, Args: cs} }
	cases := []struct {
		filter *engine.Cond
		seqs   string
	}{
		{&engine.Cond{Op: engine.OpGe, Column: "amount", Value: int64(20)}, "[2 3]"},
		{&engine.Cond{Op: engine.OpLt, Column: "amount", Value: 20.5}, "[0 1 2]"},
		{&engine.Cond{Op: engine.OpEq, Column: "region", Value: "eu"}, "[0 2]"},
		{&engine.Cond{Op: engine.OpIn, Column: "region", Values: []any{"us", "apac"}}, "[1]"},
		{&engine.Cond{Op: engine.OpIsNull, Column: "region"}, "[3]"},
		{&engine.Cond{Op: engine.OpNot, Args: []engine.Cond{{Op: engine.OpEq, Column: "region", Value: "eu"}}}, "[1]"},
		{and(engine.Cond{Op: engine.OpEq, Column: "region", Value: "eu"}, engine.Cond{Op: engine.OpGt, Column: "amount", Value: 10}), "[2]"},
		{&engine.Cond{Op: engine.OpOr, Args: []engine.Cond{{Op: engine.OpEq, Column: "vip", Value: true}, {Op: engine.OpIsNull, Column: "region"}}}, "[1 3]"},
	}
	spec := rowSpec("t", source.TypesPostgres, "id", "int8", "amount", "numeric(10,2)", "region", "text", "vip", "bool")
	b := batch("t",
		rec{source.OpInsert, 0, "1", string(row("1", "10.00", "eu", "f"))},
		rec{source.OpInsert, 1, "2", string(row("2", "15.50", "us", "t"))},
		rec{source.OpInsert, 2, "3", string(row("3", "20.00", "eu", "f"))},
		rec{source.OpInsert, 3, "4", string(row("4", "99.99", null, null))})
	for _, c := range cases {
		t.Run(fmt.Sprint(c.filter.Op), func(t *testing.T) {
			s := spec
			s.Filter = c.filter
			e := newEngine(t, engine.Config{Lanes: 2, Streams: []engine.StreamSpec{s}})
			out := push(t, e, b)
			var got []string
			if out.Record != nil {
				got = cells(t, out.Record, "_openetl_seq")
			}
			// Lanes reorder rows: compare as a set.
			if n := len(got); n+out.Filtered != b.Len() || !sameSet(got, c.seqs) {
				t.Errorf("kept seqs %v (filtered %d), want %s", got, out.Filtered, c.seqs)
			}
			if out.LaneOffsets[len(out.LaneOffsets)-1] != len(got) {
				t.Errorf("lane offsets %v for %d rows", out.LaneOffsets, len(got))
			}
		})
	}
}

func sameSet(got []string, want string) bool {
	w := strings.Fields(strings.Trim(want, "[]"))
	if len(w) != len(got) {
		return false
	}
	seen := map[string]bool{}
	for _, g := range got {
		seen[g] = true
	}
	for _, x := range w {
		if !seen[x] {
			return false
		}
	}
	return true
}

func TestPolicyMergeFilterDeletes(t *testing.T) {
	spec := rowSpec("t", source.TypesPostgres, "id", "int8", "region", "text")
	spec.Keyed, spec.Key, spec.Merge = true, []string{"id"}, true
	spec.Filter = &engine.Cond{Op: engine.OpEq, Column: "region", Value: "eu"}
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	out := push(t, e, batch("t",
		rec{source.OpInsert, 1, "1", string(row("1", "eu"))},
		rec{source.OpUpdate, 2, "1", string(row("1", "us"))},
		rec{source.OpDelete, 3, "2", ""}))
	equal(t, "ops", cells(t, out.Record, "_openetl_op"), []string{"insert", "delete", "delete"})
	equal(t, "region", cells(t, out.Record, "region"), []string{"eu", "<nil>", "<nil>"})
	equal(t, "id", cells(t, out.Record, "id"), []string{"1", "1", "<nil>"})
	if out.Filtered != 0 {
		t.Errorf("filtered %d, want 0", out.Filtered)
	}
}

// TestPolicyMergeFilterAbsentColumn: on a merged document stream, a
// filter naming a column the stream has never had (a misspelt name) sets
// failing rows aside instead of deleting their keys; once the column
// exists, failing rows are deletes again. An appended stream drops them.
func TestPolicyMergeFilterAbsentColumn(t *testing.T) {
	spec := engine.StreamSpec{Name: "t", Keyed: true, Key: []string{"id"}, Merge: true,
		Filter: &engine.Cond{Op: engine.OpEq, Column: "regoin", Value: "eu"}}
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	out := push(t, e, batch("t",
		rec{source.OpInsert, 1, "1", `{"id":1,"region":"eu"}`},
		rec{source.OpUpdate, 2, "2", `{"id":2,"region":"us"}`},
		rec{source.OpDelete, 3, "3", `{"id":3}`}))
	equal(t, "ops", cells(t, out.Record, "_openetl_op"), []string{"delete"})
	equal(t, "id", cells(t, out.Record, "id"), []string{"3"})
	if len(out.Quarantined) != 2 || out.Quarantined[0].Row != 0 || out.Quarantined[1].Row != 1 {
		t.Fatalf("quarantined %+v, want rows 0 and 1", out.Quarantined)
	}
	for _, q := range out.Quarantined {
		if q.Reason != engine.ReasonFilterColumn || !strings.Contains(q.Detail, `"regoin"`) {
			t.Errorf("quarantined %+v, want %s naming the column", q, engine.ReasonFilterColumn)
		}
	}
	if out.Filtered != 0 {
		t.Errorf("filtered %d, want 0", out.Filtered)
	}
	// The column appears: a row that fails is a delete of its key.
	out = push(t, e, batch("t",
		rec{source.OpInsert, 4, "4", `{"id":4,"regoin":"eu"}`},
		rec{source.OpUpdate, 5, "5", `{"id":5,"regoin":"us"}`}))
	equal(t, "ops", cells(t, out.Record, "_openetl_op"), []string{"insert", "delete"})
	if len(out.Quarantined) != 0 {
		t.Errorf("quarantined %+v once the column exists", out.Quarantined)
	}
	// A later batch without it: the stream has had it, so a delete.
	out = push(t, e, batch("t", rec{source.OpUpdate, 6, "6", `{"id":6,"region":"eu"}`}))
	equal(t, "ops", cells(t, out.Record, "_openetl_op"), []string{"delete"})
	if len(out.Quarantined) != 0 {
		t.Errorf("quarantined %+v in a batch without the column the stream has had", out.Quarantined)
	}
	// The next attempt's engine, from the saved state, knows it too.
	st, err := e.State()
	if err != nil {
		t.Fatal(err)
	}
	e = newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}, State: st})
	out = push(t, e, batch("t", rec{source.OpUpdate, 7, "7", `{"id":7}`}))
	equal(t, "ops", cells(t, out.Record, "_openetl_op"), []string{"delete"})
	if len(out.Quarantined) != 0 {
		t.Errorf("quarantined %+v after a restart from state", out.Quarantined)
	}
	// Appended: dropped and counted, as before.
	spec.Name, spec.Merge = "a", false
	e = newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	out = push(t, e, batch("a", rec{source.OpInsert, 1, "1", `{"id":1,"region":"eu"}`}))
	if out.Record != nil || out.Filtered != 1 || len(out.Quarantined) != 0 {
		t.Errorf("appended: record %v, filtered %d, quarantined %+v; want the row filtered", out.Record, out.Filtered, out.Quarantined)
	}
}

func TestPolicyErrors(t *testing.T) {
	decl := rowSpec("t", source.TypesPostgres, "id", "int8", "f", "float8")
	decl.Key, decl.Merge = []string{"id"}, true
	cases := []struct {
		rules  []engine.Rule
		filter *engine.Cond
		want   string
	}{
		{[]engine.Rule{{Kind: engine.RuleHash, Column: "nope", Key: testKey}}, nil, `no column "nope"`},
		{[]engine.Rule{{Kind: engine.RuleHash, Column: "f", Key: testKey}}, nil, "can't take"},
		{[]engine.Rule{{Kind: engine.RuleExclude, Column: "id"}}, nil, "key column"},
		{[]engine.Rule{{Kind: engine.RuleMask, Column: "f", N: -1}}, nil, "at least 0"},
		{nil, &engine.Cond{Op: engine.OpEq, Column: "f", Value: "x"}, "can't be compared"},
		{nil, &engine.Cond{Op: engine.OpEq, Column: "f", Value: []int{1}}, "want int64"},
	}
	for _, c := range cases {
		s := decl
		s.Rules, s.Filter = c.rules, c.filter
		e, err := engine.New(engine.Config{Streams: []engine.StreamSpec{s}})
		if errors.Is(err, engine.ErrUnavailable) {
			t.Skip(err)
		}
		if err == nil {
			e.Close()
			t.Errorf("%+v %+v: no error", c.rules, c.filter)
			continue
		}
		if !errors.Is(err, engine.ErrInvalidInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want ErrInvalidInput with %q", err, c.want)
		}
		if strings.Contains(err.Error(), hex.EncodeToString(testKey)) || strings.Contains(err.Error(), string(testKey)) {
			t.Errorf("error shows the key: %v", err)
		}
	}
}

// TestPolicyKeyNeverShown: the hash key is in no state, no print.
func TestPolicyKeyNeverShown(t *testing.T) {
	spec := engine.StreamSpec{Name: "t", Rules: []engine.Rule{{Kind: engine.RuleHash, Column: "a", Key: testKey}}}
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	push(t, e, docs("t", `{"a":"x"}`))
	st, err := e.State()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{string(st), fmt.Sprintf("%v %+v %#v %s", spec, spec, spec, spec.Rules[0].Key)} {
		if strings.Contains(s, string(testKey)) || strings.Contains(s, hex.EncodeToString(testKey)) || strings.Contains(s, fmt.Sprint([]byte(testKey))) {
			t.Errorf("the key shows in %s", s)
		}
	}
}

// TestPolicyHashLengths compares the engine's HMAC with crypto/hmac for
// values of every length around SHA-256's block and padding boundaries.
func TestPolicyHashLengths(t *testing.T) {
	spec := engine.StreamSpec{Name: "t", Rules: []engine.Rule{{Kind: engine.RuleHash, Column: "v", Key: testKey}}}
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{spec}})
	var want []string
	b := &engine.RawBatch{Stream: "t"}
	for n := range 200 {
		v := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		want = append(want, goHMAC(v))
		b.Append(uint8(source.OpInsert), int64(n), nil, fmt.Appendf(nil, `{"v":%q}`, v))
	}
	equal(t, "hashes", cells(t, push(t, e, b).Record, "v"), want)
}

// TestPolicyIDHidesValues plays a reader of the table who knows the
// published _openetl_id function, the stream, the seq and every column
// delivered, and hashes guesses at a value the rules hid: no guess may
// match, the right one included. Before the fix the ID hashed the raw
// payload (keyless) or raw key, and the right guess matched.
func TestPolicyIDHidesValues(t *testing.T) {
	const ssn = "123456789"
	doc := func(id, ssn string) string { return fmt.Sprintf(`{"id":%q,"name":"ann","ssn":%q}`, id, ssn) }
	// Guesses around the secret, the secret among them.
	guesses := make([]string, 0, 2000)
	for i := range 2000 {
		guesses = append(guesses, fmt.Sprintf("1234%05d", 56000+i))
	}
	for _, tc := range []struct {
		name  string
		spec  engine.StreamSpec
		key   string                   // the record's key ("" keyless)
		guess func(g string) [2]string // key and payload with the guess
	}{
		{"keyless exclude", engine.StreamSpec{Name: "t", Rules: []engine.Rule{{Kind: engine.RuleExclude, Column: "ssn"}}},
			"", func(g string) [2]string { return [2]string{"", doc("7", g)} }},
		{"keyless mask", engine.StreamSpec{Name: "t", Rules: []engine.Rule{{Kind: engine.RuleMask, Column: "ssn", N: 4}}},
			"", func(g string) [2]string { return [2]string{"", doc("7", g)} }},
		{"keyless hash", engine.StreamSpec{Name: "t", Rules: []engine.Rule{{Kind: engine.RuleHash, Column: "ssn", Key: testKey}}},
			"", func(g string) [2]string { return [2]string{"", doc("7", g)} }},
		{"merged, key hashed", engine.StreamSpec{Name: "t", Keyed: true, Key: []string{"id"}, Merge: true,
			Rules: []engine.Rule{{Kind: engine.RuleHash, Column: "id", Key: testKey}}},
			ssn, func(g string) [2]string { return [2]string{g, ""} }},
		{"append, key masked", engine.StreamSpec{Name: "t", Keyed: true, Key: []string{"id"},
			Rules: []engine.Rule{{Kind: engine.RuleMask, Column: "id", N: 2}}},
			ssn, func(g string) [2]string { return [2]string{g, ""} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{tc.spec}})
			payload := doc("7", ssn)
			if tc.key != "" {
				payload = doc(ssn, "0")
			}
			out := push(t, e, batch("t", rec{source.OpInsert, 42, tc.key, payload}))
			got := cells(t, out.Record, "_openetl_id")[0]
			for _, g := range guesses {
				kp := tc.guess(g)
				if goID("t", kp[0], kp[1], 42) == got {
					t.Fatalf("the guess %s is confirmed by _openetl_id", g)
				}
			}
			// Deterministic: the same record, again, gets the same ID.
			e2 := newEngine(t, engine.Config{Streams: []engine.StreamSpec{tc.spec}})
			again := push(t, e2, batch("t", rec{source.OpInsert, 1, "x", `{"id":"x"}`}, rec{source.OpInsert, 42, tc.key, payload}))
			equal(t, "ID on replay", cells(t, again.Record, "_openetl_id")[1], got)
		})
	}
}

// TestPolicyIDLayouts computes the IDs that policies change in Go, from
// the layouts in the package doc, independently of the engine.
func TestPolicyIDLayouts(t *testing.T) {
	le32 := func(b []byte, n int) []byte { return append(b, byte(n), byte(n>>8), byte(n>>16), byte(n>>24)) }
	id := func(stream string, part []byte, seq int64) string {
		b := le32(nil, len(stream))
		b = append(b, stream...)
		b = append(b, part...)
		for i := range 8 {
			b = append(b, byte(uint64(seq)>>(8*i)))
		}
		h := xxh3.Hash128(b).Bytes()
		return hex.EncodeToString(h[:])
	}
	// A hashed key: 0x03 ‖ HMAC-SHA-256(k, key).
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte("42"))
	hashed := id("t", append([]byte{3}, m.Sum(nil)...), 7)
	e := newEngine(t, engine.Config{Streams: []engine.StreamSpec{{Name: "t", Keyed: true, Key: []string{"id"}, Merge: true,
		Rules: []engine.Rule{{Kind: engine.RuleHash, Column: "id", Key: testKey}}}}})
	out := push(t, e, batch("t", rec{source.OpInsert, 7, "42", `{"id":42}`}))
	equal(t, "hashed key ID", cells(t, out.Record, "_openetl_id")[0], hashed)

	// A keyless row: 0x04 ‖ u32le(len(row)) ‖ row, the non-null values
	// by name: "a" text "x", "b" bool true ("n" null, "ssn" excluded).
	var row []byte
	row = le32(row, 1)
	row = append(row, 'a', 1)
	row = le32(row, 1)
	row = append(row, 'x')
	row = le32(row, 1)
	row = append(row, 'b', 3, 1)
	rowID := id("t", append(le32([]byte{4}, len(row)), row...), 9)
	e = newEngine(t, engine.Config{Streams: []engine.StreamSpec{{Name: "t",
		Rules: []engine.Rule{{Kind: engine.RuleExclude, Column: "ssn"}}}}})
	out = push(t, e, batch("t", rec{source.OpInsert, 9, "", `{"b":true,"ssn":"123456789","a":"x","n":null}`}))
	equal(t, "keyless row ID", cells(t, out.Record, "_openetl_id")[0], rowID)
}

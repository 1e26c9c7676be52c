//go:build cgo && linux && amd64

package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// fullConfig sets every field of Config and of what it holds (checked by
// allSet, so a field added later must be set here too), as a valid
// config: every key the Go side can send the engine is in its JSON.
func fullConfig(t *testing.T, state []byte) Config {
	t.Helper()
	cfg := Config{
		Lanes:            2,
		MaxDocumentBytes: 1 << 20,
		State:            state,
		Unsupported:      []string{"interval"},
		Naming:           &NamingRules{MaxLength: 63, Case: CaseLower, Simple: true, Reserved: []string{"select"}},
		Tables:           []string{"rows", "docs"},
		Streams: []StreamSpec{{
			Name:         "rows",
			Declared:     true,
			Types:        "postgres",
			Columns:      []Column{{Name: "id", Type: "int8", Nullable: false}, {Name: "name", Type: "text", Nullable: true}, {Name: "amount", Type: "numeric(10,2)", Nullable: true}, {Name: "note", Type: "text"}},
			Policy:       PolicyFreeze,
			NestedAsText: true,
			Timestamps:   true,
			Keyed:        true,
			Key:          []string{"id"},
			Merge:        true,
			Rules: []Rule{
				{Kind: RuleInclude, Columns: []string{"id", "name", "amount", "note"}},
				{Kind: RuleRename, Column: "amount", To: "amt"},
				{Kind: RuleHash, Column: "name", Key: HashKey("secret")},
				{Kind: RuleMask, Column: "note", N: 2},
			},
			Filter: &Cond{Op: OpAnd, Args: []Cond{
				{Op: OpGt, Column: "amount", Value: 1.5},
				{Op: OpNot, Args: []Cond{{Op: OpIsNull, Column: "name"}}},
				{Op: OpIn, Column: "id", Values: []any{int64(1), int64(2)}},
			}},
		}, {
			// A JSON stream: keys of its own (no columns, policies without
			// a key) and a state with inferred columns.
			Name:   "docs",
			Types:  "mysql",
			Policy: PolicyEvolve,
			Rules:  []Rule{{Kind: RuleTruncateChars, Column: "s", N: 3}},
		}},
	}
	allSet(t, "Config", reflect.ValueOf(cfg))
	return cfg
}

// allSet fails when a field of a struct type under v (through pointers,
// slices and structs) is zero everywhere that type appears: every field
// of every config type must be set somewhere.
func allSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	set := map[reflect.Type][]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Struct:
			fs, ok := set[v.Type()]
			if !ok {
				fs = make([]bool, v.NumField())
				set[v.Type()] = fs
			}
			for i := range v.NumField() {
				if !v.Field(i).IsZero() {
					fs[i] = true
				}
				walk(v.Field(i))
			}
		}
	}
	walk(v)
	for typ, fs := range set {
		for i, ok := range fs {
			if !ok {
				t.Errorf("%s: %s.%s is never set: set it in the test", path, typ.Name(), typ.Field(i).Name)
			}
		}
	}
}

// fullState is a state holding every key the engine writes: declared and
// inferred streams, names, options, a decimal and a nested column.
func fullState(t *testing.T) []byte {
	t.Helper()
	cfg := fullConfig(t, []byte("{}"))
	cfg.State = nil
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var b RawBatch
	b.Stream = "docs"
	b.Append(1, 1, []byte("k"), []byte(`{"s":"abcdef","d":12345678901234567890.5,"o":{"a":[1]}}`))
	out, err := e.Push(&b, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if out.Record != nil {
		out.Record.Release()
	}
	st, err := e.State()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"scale"`, `"int_digits"`, `"tree"`, `"names"`, `"declared"`, `"types"`, `"keyed"`, `"nested_text"`, `"timestamps"`, `"policy"`, `"nullable"`, `"key"`} {
		if !strings.Contains(string(st), key) {
			t.Fatalf("the state has no %s: %s", key, st)
		}
	}
	return st
}

// TestEveryKeySentIsAccepted: a config with every field set, and a state
// with every key, are accepted as they are.
func TestEveryKeySentIsAccepted(t *testing.T) {
	e, err := New(fullConfig(t, fullState(t)))
	if err != nil {
		t.Fatalf("New with every field set: %v", err)
	}
	e.Close()
}

// TestMisspeltKeysFail renames each key of the engine config (stream
// specs, policies, rules, conditions, naming rules, the state's streams
// and columns inside it), one at a time: each must fail New with an error
// naming the key, wrapping ErrInvalidInput (ErrState inside the state),
// never be silently ignored.
func TestMisspeltKeysFail(t *testing.T) {
	cfg := fullConfig(t, fullState(t))
	js, lanes, err := configJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var root any
	if err := json.Unmarshal(js, &root); err != nil {
		t.Fatal(err)
	}
	paths := keyPaths(root, nil)
	if len(paths) < 60 {
		t.Fatalf("only %d keys in the config: %s", len(paths), js)
	}
	for _, p := range paths {
		name := strings.Join(p, ".")
		t.Run(name, func(t *testing.T) {
			var doc any
			_ = json.Unmarshal(js, &doc)
			bad := p[len(p)-1] + "x"
			renameKey(doc, p, bad)
			b, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			e, err := newFromJSON(b, lanes)
			if err == nil {
				e.Close()
				t.Fatalf("key %q renamed %q: accepted", name, bad)
			}
			want := ErrInvalidInput
			if p[0] == "state" && len(p) > 1 {
				want = ErrState
			}
			if !errors.Is(err, want) || !strings.Contains(err.Error(), fmt.Sprintf("unknown key %q", bad)) {
				t.Fatalf("key %q renamed %q: %v, want %v naming the key", name, bad, err, want)
			}
		})
	}
}

// keyPaths lists the path of every object key under v (array elements by
// index), but not inside filter literals ({"int":1}) and a state's nested
// column types ({"list":...}): one-key objects whose key is a type tag,
// refused as a bad literal or a bad tree.
func keyPaths(v any, at []string) [][]string {
	var out [][]string
	switch x := v.(type) {
	case map[string]any:
		if slices.Contains(at, "value") || slices.Contains(at, "values") || slices.Contains(at, "tree") {
			return nil
		}
		for k, c := range x {
			p := append(slices.Clip(at), k)
			out = append(out, p)
			out = append(out, keyPaths(c, p)...)
		}
	case []any:
		for i, c := range x {
			out = append(out, keyPaths(c, append(slices.Clip(at), fmt.Sprint(i)))...)
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(strings.Join(a, "."), strings.Join(b, ".")) })
	return out
}

// renameKey renames the key at path p of doc to to.
func renameKey(doc any, p []string, to string) {
	for _, k := range p[:len(p)-1] {
		switch x := doc.(type) {
		case map[string]any:
			doc = x[k]
		case []any:
			var i int
			fmt.Sscan(k, &i)
			doc = x[i]
		}
	}
	m := doc.(map[string]any)
	k := p[len(p)-1]
	m[to] = m[k]
	delete(m, k)
}

// A flag of another type than bool is an error, not false.
func TestFlagsMustBeBooleans(t *testing.T) {
	for _, js := range []string{
		`{"streams":[{"name":"s","keyed":"true"}]}`,
		`{"streams":[{"name":"s","format":"row","types":"postgres","columns":[{"name":"a","type":"int4","nullable":1}]}]}`,
		`{"state":{"version":1,"streams":[{"name":"s","columns":[],"timestamps":"yes"}]}}`,
	} {
		e, err := newFromJSON([]byte(js), 1)
		if err == nil {
			e.Close()
			t.Errorf("%s: accepted", js)
		} else if !strings.Contains(err.Error(), "not a boolean") {
			t.Errorf("%s: %v, want a message saying not a boolean", js, err)
		}
	}
}

// The Parquet options: every field set is accepted, and each key renamed
// fails naming it.
func TestParquetOptionsKeys(t *testing.T) {
	opts := ParquetOptions{Codec: "zstd", Level: 3, RowGroupRows: 10, Dictionary: true, DictionaryColumns: map[string]bool{"a": false}, CreatedBy: "test"}
	allSet(t, "ParquetOptions", reflect.ValueOf(opts))
	schema := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	w, err := NewParquetWriter(schema, opts)
	if err != nil {
		t.Fatalf("every option set: %v", err)
	}
	w.Close()
	js, err := json.Marshal(opts.json())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 6 {
		t.Fatalf("options JSON %s: want 6 keys", js)
	}
	for k := range m {
		bad := map[string]any{}
		for k2, v := range m {
			bad[k2] = v
		}
		bad[k+"x"] = bad[k]
		delete(bad, k)
		b, _ := json.Marshal(bad)
		w, err := newParquetWriterJSON(schema, b)
		if err == nil {
			w.Close()
		}
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), fmt.Sprintf("unknown key %q", k+"x")) {
			t.Errorf("option %q renamed: %v, want ErrInvalidInput naming the key", k, err)
		}
	}
}

package avrorow

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestJSONRefChains: the $ref budget is one chain's: a schema may refer
// to one definition any number of times, and a definition used by many
// is compiled once (a fan-out of $refs nested deep is linear work); a
// chain of $refs that comes back to itself is an error.
func TestJSONRefChains(t *testing.T) {
	var props []string
	for i := range 2000 {
		props = append(props, fmt.Sprintf(`"p%d":{"$ref":"#/$defs/s"}`, i))
	}
	s, err := ParseJSONSchema(`{"type":"object","$defs":{"s":{"$ref":"#/$defs/t"},"t":{"type":"string"}},"properties":{`+
		strings.Join(props, ",")+`}}`, nil)
	if err != nil {
		t.Fatalf("2000 properties of one definition: %v", err)
	}
	if len(s.Cols()) != 2000 || s.Cols()[1999].Type() != "text" {
		t.Fatalf("columns %v", colTypes(s.Cols())[:3])
	}

	// d0 is a oneOf of d1 twice, d1 of d2 twice, ...: 2^40 paths.
	const levels = 40
	var defs []string
	for i := range levels {
		defs = append(defs, fmt.Sprintf(`"d%d":{"oneOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, fmt.Sprintf(`"d%d":{"type":"integer"}`, levels))
	s, c, err := parseJSONSchema(`{"type":"object","$defs":{`+strings.Join(defs, ",")+`},"properties":{"a":{"$ref":"#/$defs/d0"}}}`, nil)
	if err != nil {
		t.Fatalf("fan-out: %v", err)
	}
	if got := colTypes(s.Cols()); len(got) != 1 || got[0] != "a int8" {
		t.Errorf("fan-out columns %v", got)
	}
	if c.evals > levels+2 {
		t.Errorf("fan-out of %d levels: %d subschemas compiled", levels, c.evals)
	}

	for _, text := range []string{
		`{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"properties":{"p":{"$ref":"#/$defs/a"}}}`,
		`{"$ref":"#"}`,
		`{"type":"object","properties":{"p":{"$ref":"#/properties/p"}}}`,
	} {
		if _, err := ParseJSONSchema(text, nil); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "cycle") {
			t.Errorf("%s: %v", text, err)
		}
	}
	// A cycle through items is bounded by the nesting depth.
	if _, err := ParseJSONSchema(`{"type":"object","$defs":{"l":{"type":"array","items":{"$ref":"#/$defs/l"}}},"properties":{"p":{"$ref":"#/$defs/l"}}}`, nil); !errors.Is(err, ErrSchema) {
		t.Errorf("recursive items: %v", err)
	}
}

// TestJSONIntegerWritten: "integer" takes any number whose value is
// integral (1.0, 1e3, -2.50e1), written exactly as its digits; a
// fraction is undecodable, and so is an integer beyond int64 written in
// float notation (in digits, the engine holds it, out_of_range).
func TestJSONIntegerWritten(t *testing.T) {
	s, err := ParseJSONSchema(`{"type":"object","properties":{"n":{"type":"integer"},
 "l":{"type":"array","items":{"type":"integer"}},"f":{"type":"number"},"u":{"type":["integer","string"]}}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.NewDecoder(s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`1.0`: "1", `1e3`: "1000", `1E+3`: "1000", `-2.50e1`: "-25", `0.0`: "0", `-0.0`: "0", `0e99`: "0", `0.000e-5`: "0",
		`12345678901234567890e-1`: "1234567890123456789", `1500e-2`: "15", `10.00`: "10",
		`9.223372036854775807e18`: "9223372036854775807", `-9.223372036854775808e18`: "-9223372036854775808",
		`9223372036854775807.0`: "9223372036854775807", `42`: "42", `100000000000000000000`: "100000000000000000000",
		`1.5`: "fraction", `1e-1`: "fraction", `1.05e1`: "fraction", `123e-5`: "fraction", `1e-99999999999999999999`: "fraction",
		`9.223372036854775808e18`: "beyond", `-9.223372036854775809e18`: "beyond", `1e19`: "beyond", `1e400`: "beyond",
		`1e99999999999999999999`: "beyond",
	} {
		out, err := d.Row(nil, []byte(`{"n":`+in+`}`))
		switch want {
		case "fraction", "beyond":
			if !errors.Is(err, ErrData) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error saying %q", in, err, want)
			}
		default:
			if err != nil {
				t.Errorf("%s: %v", in, err)
			} else if got := entries(t, out)[0]; got != want {
				t.Errorf("%s: %s, want %s", in, got, want)
			}
		}
	}
	out, err := d.Row(nil, []byte(`{"l":[1.0,2e1,3],"f":1.0,"u":2.0}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(entries(t, out), "|"); got != "<null>|{1,20,3}|1.0|2.0" {
		t.Errorf("row %s", got)
	}
}

// TestJSONLoneSurrogate: a \u escape of a UTF-16 surrogate that is not
// half of a pair is no character: the value is undecodable (its text is
// never silently changed to U+FFFD), in a text column, a JSON column or
// a key; pairs are their character.
func TestJSONLoneSurrogate(t *testing.T) {
	s, err := ParseJSONSchema(`{"type":"object","properties":{"s":{"type":"string"},"j":{}}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.NewDecoder(s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`{"s":"\ud800"}`, `{"s":"a\udc00b"}`, `{"s":"\ud800x"}`, `{"s":"\ud800\u0041"}`, `{"s":"\ud800\ud800"}`,
		`{"s":"\udc00\ud800"}`, `{"j":{"k":"\ud83d"}}`, `{"\ud800":1}`, `{"s":"\uD800"}`} {
		if _, err := d.Row(nil, []byte(v)); !errors.Is(err, ErrData) || !strings.Contains(err.Error(), "surrogate") {
			t.Errorf("%s: %v", v, err)
		}
	}
	out, err := d.Row(nil, []byte(`{"s":"\ud83d\ude00 \u00e9\uD83D\uDE00","j":["\ud83d\ude00"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(entries(t, out), "|"); got != `😀 é😀|["\ud83d\ude00"]` {
		t.Errorf("row %s", got)
	}
}

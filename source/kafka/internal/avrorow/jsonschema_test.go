package avrorow

import (
	"errors"
	"strings"
	"testing"
)

const jsonAll = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"Ev","type":"object",
 "definitions":{"Addr":{"type":"object","properties":{"city":{"type":"string"}}},"Day":{"type":"string","format":"date"}},
 "properties":{
  "id":{"type":"integer"},
  "flag":{"type":"boolean"},
  "x":{"type":"number"},
  "name":{"type":"string"},
  "color":{"type":"string","enum":["RED","GREEN"]},
  "at":{"type":"string","format":"date-time"},
  "day":{"$ref":"#/definitions/Day"},
  "uid":{"type":"string","format":"uuid"},
  "opt":{"type":["string","null"]},
  "alt":{"oneOf":[{"type":"null"},{"type":"integer"}]},
  "mixed":{"type":["integer","string"]},
  "nums":{"type":"array","items":{"type":"integer"}},
  "tags":{"type":"array","items":{"type":["string","null"]}},
  "addr":{"$ref":"#/definitions/Addr"},
  "objs":{"type":"array","items":{"$ref":"#/definitions/Addr"}},
  "any":{},
  "_openetl_x":{"type":"string"}
 },
 "required":["id"]}`

func TestJSONSchema(t *testing.T) {
	s, err := ParseJSONSchema(jsonAll, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "id int8, flag bool, x float8, name text, color enum('RED','GREEN'), at timestamptz, day date, uid uuid, " +
		"opt text, alt int8, mixed text, nums _int8, tags _text, addr jsonb, objs jsonb, any jsonb"
	if got := strings.Join(colTypes(s.Cols()), ", "); got != want {
		t.Fatalf("columns\n%s\nwant\n%s", got, want)
	}
	d, err := s.NewDecoder(s.Cols())
	if err != nil {
		t.Fatal(err)
	}
	row := func(payload string) string {
		t.Helper()
		out, err := d.Row(nil, []byte(payload))
		if err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
		return strings.Join(entries(t, out), "|")
	}
	got := row(` { "id": -9007199254740993, "flag": true, "x": 1.5e-3, "name": "a \"q\" \u00fc \ud83d\ude00\n",
	 "color": "GREEN", "at": "2024-01-01T12:00:00.5+02:00", "day": "2024-02-29", "uid": "0f8fad5b-d9cb-469f-a165-70867728950e",
	 "opt": null, "alt": 3, "mixed": "m", "nums": [1, -2], "tags": ["a b", null, "c,d", ""], "addr": {"city": "Oslo"},
	 "objs": [{"city":"A"}, {}], "any": [1, {"k": null}], "extra": {"ignored": true}, "_openetl_x": "dropped", "id": 7 } `)
	wantRow := "7|true|1.5e-3|a \"q\" ü 😀\n|GREEN|2024-01-01T12:00:00.5+02:00|2024-02-29|0f8fad5b-d9cb-469f-a165-70867728950e|" +
		`<null>|3|m|{1,-2}|{a b,NULL,"c,d",""}|{"city": "Oslo"}|[{"city":"A"}, {}]|[1, {"k": null}]`
	if got != wantRow {
		t.Errorf("row\n%s\nwant\n%s", got, wantRow)
	}
	if got := row(`{}`); got != strings.TrimSuffix(strings.Repeat("<null>|", 16), "|") {
		t.Errorf("empty object: %s", got)
	}
	for _, bad := range []string{`[1]`, `{"id": "7"}`, `{"id": 1.5}`, `{"name": {}}`, `{"id": 1`, `{"id": 1} x`,
		`{"name": "\x"}`, `{"nums": [1, "a"]}`, `{"flag": tru}`, "{\"name\": \"\xff\"}"} {
		if _, err := d.Row(nil, []byte(bad)); !errors.Is(err, ErrData) {
			t.Errorf("Row(%s): %v", bad, err)
		}
	}
	js, err := d.JSON(nil, []byte(` { "id" : 42, "s": "a b" } `))
	if err != nil || string(js) != `{"id":42,"s":"a b"}` {
		t.Errorf("JSON: %s %v", js, err)
	}
	// A schema of something else than an object is one column.
	one, err := ParseJSONSchema(`{"type":"integer"}`, nil)
	if err != nil || strings.Join(colTypes(one.Cols()), ",") != "value int8" {
		t.Fatalf("integer schema: %v %v", one, err)
	}
	// A reference by name, and versions joining.
	ref := `{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"integer"}}}`
	v2, err := ParseJSONSchema(`{"type":"object","properties":{"id":{"type":"number"},"addr":{"$ref":"addr.json"},
	 "home":{"$ref":"addr.json#/properties/city"},"more":{"type":"string"}}}`, []Ref{{Name: "addr.json", Text: ref}})
	if err != nil {
		t.Fatal(err)
	}
	j := Join(s.Cols(), v2.Cols())
	if got := strings.Join(colTypes(j[:1]), ",") + " " + strings.Join(colTypes(j[len(j)-2:]), ","); got != "id float8 home text,more text" {
		t.Errorf("joined %s", got)
	}
	if _, err := ParseJSONSchema(`{"properties":{"a":{"$ref":"#/definitions/none"}}}`, nil); !errors.Is(err, ErrSchema) {
		t.Errorf("a dangling $ref: %v", err)
	}
	var dst []byte
	msg := []byte(`{"id":1,"name":"x\"y","nums":[1,2],"addr":{"city":"c"}}`)
	if n := testing.AllocsPerRun(100, func() {
		if dst, err = d.Row(dst[:0], msg); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations a row", n)
	}
}

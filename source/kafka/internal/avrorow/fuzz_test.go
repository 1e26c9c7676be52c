package avrorow

import (
	"encoding/json"
	"testing"

	"github.com/openetl/etl/source"
)

// FuzzProtoRow: no bytes make the Protobuf decoder panic; what it
// accepts is a valid row payload, and its JSON valid JSON.
func FuzzProtoRow(f *testing.F) {
	pf := mustProto(f, protoAll)
	s, err := pf.Message([]int{1})
	if err != nil {
		f.Fatal(err)
	}
	md := pf.fd.Messages().Get(1)
	for _, js := range []string{`{}`, `{"id":"1","nums":["1","2"],"attrs":{"a":1},"st":{"k":[1,{"x":null}]},"val":[true]}`,
		`{"addrs":[{"city":"x","zip":1}],"ts":"2024-01-01T00:00:00Z","dur":"1.5s","colors":["GREEN"],"tss":["1970-01-01T00:00:00Z"]}`} {
		f.Add(protoEncode(f, md, js))
	}
	// oneof members one after the other; a merged message.
	f.Add(append(protoEncode(f, md, `{"cs":"a","addr":{"city":"x"}}`), protoEncode(f, md, `{"ci":2,"addr":{"zip":1}}`)...))
	d, _ := s.NewDecoder(s.Cols())
	f.Fuzz(func(t *testing.T, b []byte) {
		if out, err := d.Row(nil, b); err == nil {
			if _, err := source.DecodeRow(nil, out); err != nil {
				t.Fatalf("Row(%x) = %q: %v", b, out, err)
			}
		}
		if out, err := d.JSON(nil, b); err == nil && !json.Valid(out) {
			t.Fatalf("JSON(%x) = %s: not JSON", b, out)
		}
	})
}

// FuzzJSONSchemaRow: likewise for JSON Schema values.
func FuzzJSONSchemaRow(f *testing.F) {
	s, err := ParseJSONSchema(jsonAll, nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, v := range []string{`{}`, `{"id":1,"nums":[1,2],"tags":["a",null],"addr":{"city":"x"},"any":[{"a":"\u00fc"}]}`,
		` {"name":"\ud83d\ude00\n","x":-1.5e3} `, `[1]`, `{"id":`, `{"id":1.0e2,"nums":[2e0,-0.0]}`, `{"name":"\ud800"}`} {
		f.Add([]byte(v))
	}
	d, _ := s.NewDecoder(s.Cols())
	f.Fuzz(func(t *testing.T, b []byte) {
		if out, err := d.Row(nil, b); err == nil {
			if _, err := source.DecodeRow(nil, out); err != nil {
				t.Fatalf("Row(%q) = %q: %v", b, out, err)
			}
		}
		if out, err := d.JSON(nil, b); err == nil && !json.Valid(out) {
			t.Fatalf("JSON(%q) = %s: not JSON", b, out)
		}
	})
}

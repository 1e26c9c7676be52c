package kafka

import (
	"context"
	"testing"

	"github.com/openetl/etl/source/kafka/internal/avrorow"
)

// TestSeenByMessageType: the schemas a topic's values were seen with
// hold one entry per schema ID and message type, however many encodings
// of its message index the producers write.
func TestSeenByMessageType(t *testing.T) {
	f, err := avrorow.ParseProto(`syntax = "proto3"; message A { int64 id = 1; } message B { int64 id = 1; }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Message([]int{0})
	s := newSchemas(nil, false)
	s.putLocked(7, &schemaEntry{proto: f})
	d := newRegDecoder(s, "t", 0, a.Cols(), 0)
	for _, idx := range [][]byte{{0}, {0x80, 0}, {2, 0}, {2, 0x80, 0}, {0x82, 0, 0x80, 0x80, 0}, {2, 2}, {0x82, 0, 0x82, 0}} {
		body := append(idx, 0x08, 0x01)
		md, rest, err := d.lookup(context.Background(), &d.vals, kindValue, 7, body)
		if err != nil || md.dec == nil || len(rest) != 2 {
			t.Fatalf("index % x: %+v, rest % x, %v", idx, md, rest, err)
		}
	}
	if got := s.seen["t"]; len(got) != 2 || got[0] != (seenSchema{7, "\x00"}) || got[1] != (seenSchema{7, "\x02\x02"}) {
		t.Errorf("seen %v, want one entry for [0] and one for [1]", got)
	}
}

package etl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
)

// TestKeyedJSONMissingKey: a record of a JSON stream whose catalog names
// a primary key (a Kafka topic with Config.PrimaryKey, say) that comes
// without a key, or whose document lacks a key field or holds null
// there, can't be merged or deleted by key (a merge would fold all of
// them into one row): it is quarantined missing_key, counted, and the
// rest of its batch lands. A stream without a key takes the same
// records.
func TestKeyedJSONMissingKey(t *testing.T) {
	recs := []fuzzRecord{
		{op: source.OpInsert, key: []byte("1"), payload: []byte(`{"id":1}`)},
		{op: source.OpInsert, payload: []byte(`{"id":2}`)},
		{op: source.OpUpdate, key: []byte("3"), payload: []byte(`{"id":3}`)},
		{op: source.OpDelete},
		{op: source.OpInsert, key: []byte("5"), payload: []byte(`{"name":"no id"}`)},
		{op: source.OpUpdate, key: []byte("6"), payload: []byte(`{"id":null}`)},
		{op: source.OpInsert, key: []byte("7"), payload: []byte(`{"id":7}`)},
	}
	for _, keyed := range []bool{true, false} {
		stream := source.Stream{Name: "orders", Format: source.FormatJSON, CDC: true}
		want := checkpoint.Counts{Read: 7, Written: 7}
		if keyed {
			stream.PrimaryKey = []string{"id"}
			want = checkpoint.Counts{Read: 7, Written: 3, Quarantined: 4}
		}
		src := &fuzzSource{stream: stream, recs: recs}
		dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{})
		store := checkpoint.NewMem()
		p, err := etl.NewPipeline("mk").From(src).To(dst).Checkpoints(store).Build()
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := res.Streams["orders"]; got != want {
			t.Errorf("keyed %v: counts %+v, want %+v", keyed, got, want)
		}
		if n := len(dst.Rows("orders")); n != int(want.Written) {
			t.Errorf("keyed %v: %d rows at the destination, want %d", keyed, n, want.Written)
		}
		b, err := store.ReadFile(context.Background(), "mk", etl.QuarantineName("orders", 1))
		if !keyed {
			if err == nil {
				t.Errorf("unkeyed: quarantined %s", b)
			}
			continue
		}
		if err != nil {
			t.Fatalf("keyed: %v", err)
		}
		var seqs []int64
		for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
			var l struct {
				Reason string
				Seq    int64
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			if l.Reason != "missing_key" {
				t.Errorf("keyed: quarantine line %s: want reason missing_key", sc.Bytes())
			}
			seqs = append(seqs, l.Seq)
		}
		if fmt.Sprint(seqs) != "[2 4 5 6]" {
			t.Errorf("keyed: quarantined seqs %v, want [2 4 5 6]", seqs)
		}
	}
}

package clickhouse

import (
	"errors"
	"strings"
	"testing"

	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// TestCheckStream: a merged stream needs its key and no OrderBy of its
// own; overwrite and hard deletes are not declared, so Build refuses
// them (package delivery) before CheckStream is asked. No server is
// needed: the checks read only the spec, Config.Tables and Features.
func TestCheckStream(t *testing.T) {
	d := &Destination{tables: map[string]Table{"events": {OrderBy: []string{"at"}}}}
	for _, spec := range []sink.StreamSpec{
		{Stream: "customers", Table: "customers", Mode: sink.Merge, Key: []string{"id"}},
		{Stream: "events", Table: "events", Mode: sink.Append},
		{Stream: "orders", Table: "orders"},
	} {
		if err := d.CheckStream(spec); err != nil {
			t.Errorf("CheckStream(%+v): %v", spec, err)
		}
	}
	for _, c := range []struct {
		spec sink.StreamSpec
		want string
	}{
		{sink.StreamSpec{Stream: "events", Table: "events", Mode: sink.Merge, Key: []string{"id"}}, `Config.Tables["events"].OrderBy is set, but a merged stream's table is ordered by its key ["id"]`},
		{sink.StreamSpec{Stream: "orders", Table: "orders", Mode: sink.Merge}, "merge needs the stream's primary key"},
	} {
		if err := d.CheckStream(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckStream(%+v): %v; want %q", c.spec, err, c.want)
		}
	}
	caps := d.Capabilities()
	if !caps.Merge || caps.HardDeletes || caps.Overwrite {
		t.Errorf("Capabilities %+v: want merge, without hard deletes or overwrite", caps)
	}
	for _, c := range []struct {
		s    delivery.Stream
		want string
	}{
		{delivery.Stream{Name: "orders", Mode: sink.Merge, HasKey: true, Deletes: sink.HardDeletes}, "use soft deletes"},
		{delivery.Stream{Name: "orders", Mode: sink.Overwrite}, "can't replace a table's contents"},
	} {
		c.s.Replay, c.s.Class, c.s.Capabilities = source.ReplayExact, d.Class(), caps
		if _, err := delivery.Decide(c.s, delivery.AtLeastOnce); !errors.Is(err, delivery.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decide(%+v): %v; want %q", c.s, err, c.want)
		}
	}
}

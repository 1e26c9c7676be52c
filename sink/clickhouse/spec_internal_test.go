package clickhouse

import (
	"strings"
	"testing"

	"github.com/openetl/etl/sink"
)

// TestCheckStream: a merge table (Table.Key) must be merged by the
// pipeline by its primary key and the other way round; overwrite is
// refused. No server is needed: the check reads only Config.Tables.
func TestCheckStream(t *testing.T) {
	d := &Destination{tables: map[string]Table{"customers": {Key: []string{"id"}}}}
	merge := sink.StreamSpec{Stream: "customers", Table: "customers", Mode: sink.Merge, Key: []string{"id"}}
	if err := d.CheckStream(merge); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec sink.StreamSpec
		want string
	}{
		{sink.StreamSpec{Stream: "customers", Table: "customers", Mode: sink.Append, Key: []string{"id"}}, `Config.Tables["customers"].Key makes it a merge table, but the pipeline writes it in append mode`},
		{sink.StreamSpec{Stream: "orders", Table: "orders", Mode: sink.Merge, Key: []string{"id"}}, `Config.Tables["orders"] has no Key`},
		{sink.StreamSpec{Stream: "customers", Table: "customers", Mode: sink.Merge, Key: []string{"email"}}, `primary key is ["email"]`},
		{sink.StreamSpec{Stream: "orders", Table: "orders", Mode: sink.Overwrite}, "overwrite mode"},
	} {
		if err := d.CheckStream(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckStream(%+v): %v; want %q", c.spec, err, c.want)
		}
	}
	if err := d.CheckStream(sink.StreamSpec{Stream: "orders", Table: "orders"}); err != nil {
		t.Errorf("an append stream into an unconfigured table: %v", err)
	}
}

package etl_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
)

// TestPoliciesRenameKeyAndMergeFilter: renames carry into the spec's
// key and columns, a hashed column's spec type is text, and on a merged
// stream a row failing the filter becomes a delete of its key.
func TestPoliciesRenameKeyAndMergeFilter(t *testing.T) {
	ctx := context.Background()
	src := &twoOrders{rows: map[string]int{"Orders": 3}}
	dst := &userDest{writes: map[string]int{}, FakeDestination: sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{
		Class: sink.StageAndApply, Capabilities: sink.Capabilities{Merge: true, HardDeletes: true, IdentifierCase: "lower", SimpleIdentifiers: true}})}
	p, err := etl.NewPipeline("renames").From(src).To(dst).Checkpoints(checkpoint.NewMem()).Streams("Orders").
		Mode(delivery.Merge, "Orders").Deletes(sink.HardDeletes, "Orders").
		Columns("Orders", etl.Rename("ID", "OrderID"), etl.Rename("Note", "Remark"), etl.HashHMAC("Note", []byte("k"))).
		Filter("Orders", etl.Lt("ID", 2)).
		Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	res, err := p.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []sink.StreamSpec{{Stream: "Orders", Table: "orders", Mode: sink.Merge, Key: []string{"orderid"}, Deletes: sink.HardDeletes,
		Types: source.TypesPostgres, Columns: []sink.Column{{Name: "orderid", Type: "int4"}, {Name: "remark", Type: "text", Nullable: true}}}}
	if got := dst.configs[0].Streams; !reflect.DeepEqual(got, want) {
		t.Errorf("spec %+v\nwant %+v", got, want)
	}
	// Row 2 fails the filter: a delete of key 2, written.
	if c := res.Streams["Orders"]; c.Read != 3 || c.Written != 3 || c.Filtered != 0 {
		t.Errorf("counts %+v, want 3 read and written", c)
	}
	rows := dst.Rows("orders")
	if len(rows) != 2 || rows[0].Key != "0" || rows[1].Key != "1" {
		t.Errorf("merged rows %+v, want keys 0 and 1", rows)
	}
	for _, r := range rows {
		if v, _ := r.Values["remark"].(string); len(v) != 64 {
			t.Errorf("remark %q is not a hash", v)
		}
	}
}

func TestPoliciesBuildErrors(t *testing.T) {
	parts := func() *etl.Builder {
		dst := sinktest.NewFakeDestination(sinktest.FakeDestinationConfig{Class: sink.StageAndApply, Capabilities: sink.Capabilities{Merge: true}})
		return etl.NewPipeline("p").From(&twoOrders{}).To(dst).Checkpoints(checkpoint.NewMem()).Mode(delivery.Merge, "Orders")
	}
	secret := []byte("do-not-show-me")
	for _, tc := range []struct {
		b    *etl.Builder
		want string
	}{
		{parts().Columns("Orders", etl.Exclude("nope")), `no column "nope"`},
		{parts().Columns("Orders", etl.Exclude("ID")), `key column "ID": exclude`},
		{parts().Columns("Orders", etl.Mask("ID", 2)), `key column "ID": mask`},
		{parts().Columns("Orders", etl.Mask("Note", -1)), "negative"},
		{parts().Columns("Orders", etl.HashHMAC("Note", nil)), "empty key"},
		{parts().Columns("Orders", etl.Include("Note")), "not included"},
		{parts().Columns("Orders", etl.Rename("Note", "ID")), "already"},
		{parts().Columns("Orders", etl.HashHMAC("Note", secret), etl.Mask("Note", 1)), "two rules"},
		{parts().Columns("nosuch", etl.HashHMAC("x", secret)), `stream "nosuch" is not among the streams read`},
		{parts().Filter("Orders", etl.Eq("ID", "x")), "can't be compared with a string"},
		{parts().Filter("Orders", etl.IsNull("nope")), `filter: the stream has no column "nope"`},
		{parts().Filter("Orders", etl.Condition{}), "empty condition"},
		{parts().Filter("Orders", etl.IsNull("ID")).Filter("Orders", etl.IsNull("Note")), "has one already"},
		{parts().Columns("Orders"), "at least one rule"},
	} {
		_, err := tc.b.Build()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build = %v, want an error saying %s", err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), string(secret)) || strings.Contains(err.Error(), fmt.Sprintf("%x", secret))) {
			t.Errorf("the error shows the key: %v", err)
		}
	}
	// Allowed on a merged key: hash and rename; JSON streams take rules
	// on columns not seen yet.
	if _, err := parts().Columns("Orders", etl.HashHMAC("ID", secret), etl.Rename("ID", "order_id")).
		Columns("orders", etl.Mask("later", 2)).Filter("orders", etl.Gt("amount", 1.5)).Build(); err != nil {
		t.Errorf("Build: %v", err)
	}
}

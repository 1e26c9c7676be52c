package iceberg_test

import (
	"strings"
	"testing"

	"github.com/openetl/etl"
	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/iceberg"
	"github.com/openetl/etl/source/faker"
)

// TestBuildRefusesModesThatDisagree: a stream the pipeline merges into a
// table configured for append (which would append while Guarantees says
// merged and exactly once), or the other way round, or merged by another
// key, fails Build, naming the stream and both settings.
func TestBuildRefusesModesThatDisagree(t *testing.T) {
	wh := newWarehouse(t)
	for _, c := range []struct {
		name   string
		tables map[string]iceberg.TableConfig
		mode   delivery.Mode
		want   []string
	}{
		{"merge into append", nil, delivery.Merge,
			[]string{`stream "customers"`, "writes it in merge mode", `Config.Tables["customers"].Mode is append`}},
		{"append into merge", map[string]iceberg.TableConfig{faker.Customers: {Mode: iceberg.Merge, Key: []string{"id"}}}, delivery.Append,
			[]string{`stream "customers"`, "writes it in append mode", `Config.Tables["customers"].Mode is merge`}},
		{"overwrite into append", nil, delivery.Overwrite,
			[]string{`stream "customers"`, "writes it in overwrite mode"}},
		{"another key", map[string]iceberg.TableConfig{faker.Customers: {Mode: iceberg.Merge, Key: []string{"email"}}}, delivery.Merge,
			[]string{`stream "customers"`, `Config.Tables["customers"].Key is ["email"]`, `primary key is ["id"]`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := faker.New(faker.Config{Rows: 10})
			if err != nil {
				t.Fatal(err)
			}
			dst := newDest(t, wh.cat, iceberg.Config{Tables: c.tables})
			_, err = etl.NewPipeline("spec").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
				Mode(c.mode, faker.Customers).Build()
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Build: %v; want an error with %q", err, w)
				}
			}
			if err != nil && strings.Contains(err.Error(), faker.Orders) {
				t.Errorf("Build error %q names %s, which agrees", err, faker.Orders)
			}
		})
	}
	// Agreeing settings build.
	src, err := faker.New(faker.Config{Rows: 10})
	if err != nil {
		t.Fatal(err)
	}
	dst := newDest(t, wh.cat, iceberg.Config{Tables: map[string]iceberg.TableConfig{faker.Customers: {Mode: iceberg.Merge, Key: []string{"id"}}}})
	if _, err := etl.NewPipeline("spec").From(src).To(dst).Checkpoints(checkpoint.NewMem()).
		Mode(delivery.Merge, faker.Customers).Build(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckStreamUsesDestinationNames: the spec names the table and key
// as the destination does (lower case for Iceberg).
func TestCheckStreamUsesDestinationNames(t *testing.T) {
	wh := newWarehouse(t)
	dst := newDest(t, wh.cat, iceberg.Config{Tables: map[string]iceberg.TableConfig{"orders": {Mode: iceberg.Merge, Key: []string{"id"}}}})
	if err := dst.CheckStream(sink.StreamSpec{Stream: "Orders", Table: "orders", Mode: sink.Merge, Key: []string{"id"}}); err != nil {
		t.Fatal(err)
	}
	if err := dst.CheckStream(sink.StreamSpec{Stream: "other", Table: "other", Mode: sink.Merge, Key: []string{"id"}}); err == nil {
		t.Fatal("a merged stream into an unconfigured table passed")
	}
}

package engine_test

import (
	"testing"

	"github.com/openetl/etl/engine"
)

// TestTablesNamedAhead: Config.Tables gives table names at New, in its
// order, so that they don't depend on which stream is pushed first, and
// NamesFromState reads them before any push.
func TestTablesNamedAhead(t *testing.T) {
	rules := &engine.NamingRules{Case: engine.CaseLower, Simple: true}
	e := newEngine(t, engine.Config{Naming: rules, Tables: []string{"Orders", "orders"}})
	st, err := e.State()
	if err != nil {
		t.Fatal(err)
	}
	names, err := engine.NamesFromState(st)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "Orders", names["Orders"].Table, "orders")
	equal(t, "orders", names["orders"].Table, "orders_2")
	// "orders" is pushed first, but "Orders" was named first.
	out := push(t, e, docs("orders", `{"a":1}`))
	equal(t, "pushed table", out.Table, "orders_2")
	out = push(t, e, docs("Orders", `{"a":1}`))
	equal(t, "second table", out.Table, "orders")
}

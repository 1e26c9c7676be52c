package runner

import (
	"testing"

	"github.com/openetl/etl/sink"
)

// TestBaseName: the spec's names follow the engine's naming rules
// (engine/rust/src/names.rs, Rules::base).
func TestBaseName(t *testing.T) {
	lowerSimple := sink.Capabilities{IdentifierCase: "lower", SimpleIdentifiers: true}
	for _, c := range []struct {
		caps       sink.Capabilities
		name, want string
	}{
		{sink.Capabilities{}, "Public.Orders", "Public.Orders"},
		{lowerSimple, "Public.Orders", "public_orders"},
		{lowerSimple, "1st", "_1st"},
		{lowerSimple, "café", "caf_"},
		{sink.Capabilities{IdentifierCase: "upper"}, "orders", "ORDERS"},
		{sink.Capabilities{ReservedWords: []string{"SELECT"}}, "select", "select_"},
		{sink.Capabilities{MaxIdentifier: 8}, "abcdefghij", "abcdefgh"},
		{sink.Capabilities{MaxIdentifier: 8}, "abcdefgé", "abcdefg"},
	} {
		if got := baseName(c.caps, c.name); got != c.want {
			t.Errorf("baseName(%+v, %q) = %q; want %q", c.caps, c.name, got, c.want)
		}
	}
}

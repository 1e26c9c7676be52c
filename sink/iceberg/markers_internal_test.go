package iceberg

import "testing"

// TestMarkerPipeline: a marker key names its pipeline up to its last
// '.', so a shard's name (name.shard-i-of-S) reads back whole.
func TestMarkerPipeline(t *testing.T) {
	for k, want := range map[string]string{
		epochKey("orders"): "orders", fenceKey("orders.shard-1-of-2"): "orders.shard-1-of-2",
		genKey("a.b.c"): "a.b.c", "openetl.overwrite": "", "openetl.orders.other": "", "other.orders.epoch": "",
		"openetl..epoch": "",
	} {
		got, ok := markerPipeline(k)
		if got != want || ok != (want != "") {
			t.Errorf("markerPipeline(%q) = %q, %v; want %q", k, got, ok, want)
		}
	}
}

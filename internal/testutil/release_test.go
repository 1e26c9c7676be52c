package testutil

import "testing"

// TestSameValue: the readers' forms of one value compare equal, and
// different values don't, so CheckReleased can fail.
func TestSameValue(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"12.5", "12.5", true}, {`"12.5"`, "12.50", true}, {"12.50", "12.5", true},
		{`[1,{"sku":"a"}]`, `[1.0, {"sku": "a"}]`, true}, {`\N`, `\N`, true}, {"NULL", "NULL", true},
		{"12.5", "12.6", false}, {`"12.5"`, "12", false}, {"null", "0", false}, {`\N`, "0", false},
		{`[1]`, `[2]`, false}, {"x", "y", false},
	} {
		if got := SameValue(c.a, c.b); got != c.want {
			t.Errorf("SameValue(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

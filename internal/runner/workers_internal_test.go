package runner

import "testing"

// TestMergeEngineStates: each stream's entry comes from its worker, one
// no worker owns from the first, equal states are returned as they are
// (whatever their form), and the bytes of the entries are kept (no HTML
// escapes of a name the engine wrote plainly).
func TestMergeEngineStates(t *testing.T) {
	owner := map[string]int{"a<b": 1, "c": 0}
	of := func(s string) int { return owner[s] }
	w0 := `{"streams":[{"name":"a<b","columns":[]},{"name":"c","columns":[{"name":"x","type":"int64"}]},{"name":"z","columns":[]}],"version":1}`
	w1 := `{"streams":[{"name":"a<b","columns":[{"name":"y","type":"utf8"}]},{"name":"c","columns":[]},{"name":"z","columns":[{"name":"stale","type":"int64"}]}],"version":1}`
	got, err := mergeEngineStates([][]byte{[]byte(w0), []byte(w1)}, of)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"streams":[{"name":"a<b","columns":[{"name":"y","type":"utf8"}]},{"name":"c","columns":[{"name":"x","type":"int64"}]},{"name":"z","columns":[]}],"version":1}`
	if string(got) != want {
		t.Errorf("merged\n%s\nwant\n%s", got, want)
	}
	if got, err := mergeEngineStates([][]byte{[]byte(`{}`), []byte(`{}`)}, of); err != nil || string(got) != `{}` {
		t.Errorf("equal states: %s, %v", got, err)
	}
	if _, err := mergeEngineStates([][]byte{[]byte(`{}`), []byte(w1)}, of); err == nil {
		t.Error("a state without a streams list merged")
	}
}

//go:build race

package iceberg_test

// raceEnabled: the kill test's children are the test binary, so under
// -race they run ten times slower; the non-race run covers it.
const raceEnabled = true

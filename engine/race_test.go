//go:build race

package engine_test

// raceEnabled: tests that start no goroutine of their own skip under
// -race, where the detector has nothing to find.
const raceEnabled = true

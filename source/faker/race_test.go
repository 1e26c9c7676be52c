//go:build race

package faker_test

// raceEnabled: tests that call Generate on one goroutine, and start no
// other, skip under -race: the detector only reports accesses from two
// goroutines, so it has nothing to find there, and they run ten times
// slower (the plain run covers them).
const raceEnabled = true

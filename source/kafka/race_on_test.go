//go:build race

package kafka_test

// raceEnabled: the race detector multiplies memory use, so TestMemoryBound
// does not apply.
const raceEnabled = true

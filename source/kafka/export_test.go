package kafka

import (
	"time"

	"github.com/openetl/etl/source/kafka/internal/avrorow"
)

// SetRegistryRetries sets the registry's tries and first backoff for a
// test; the returned func restores them.
func SetRegistryRetries(tries int, backoff time.Duration) (restore func()) {
	t, b := registryTries, registryBackoff
	registryTries, registryBackoff = tries, backoff
	return func() { registryTries, registryBackoff = t, b }
}

// RegistryFetches returns how many schemas src asked the registry for.
func RegistryFetches(src *Source) int {
	src.sch.mu.Lock()
	defer src.sch.mu.Unlock()
	return src.sch.fetchN
}

// SetFastPath turns the engine's Avro fast path (fast.go) on or off for
// the Sources made after it; the returned func restores it.
func SetFastPath(on bool) (restore func()) {
	old := fastOff
	fastOff = !on
	return func() { fastOff = old }
}

// FastRegistration registers the fast path of an Avro writer schema's
// decoder into its own columns, as a Source does for schema ID id.
func FastRegistration(s *avrorow.Schema, dec *avrorow.Decoder, id int) (uint64, bool) {
	return fastPath(s, s.Cols(), dec, id)
}

// FastGoRows returns how many messages of the fast path the Go decoder
// wrote after all (in batches the engine left to it).
func FastGoRows() int64 { return goRowsN.Load() }

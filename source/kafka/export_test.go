package kafka

import "time"

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

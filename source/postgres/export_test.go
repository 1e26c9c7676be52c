package postgres

// SetBeforeStart sets a function Read calls between its check of the
// slot and START_REPLICATION (nil: none), for tests of what another
// process can do in between.
func SetBeforeStart(f func()) { beforeStart = f }

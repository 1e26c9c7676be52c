package postgres

// SetBeforeStart sets a function Read calls between its check of the
// slot and START_REPLICATION, at its start and when it takes a broken
// stream up again (nil: none), for tests of what another process can do
// in between.
func SetBeforeStart(f func()) { beforeStart = f }

// Snapped returns the snapshot splits whose rest a change stream's state
// (its split's resume state) says the stream has read (handOver).
func Snapped(state []byte) []string {
	st, err := decodeState(state)
	if err != nil || st.tail == nil {
		return nil
	}
	x, err := decodeExtra(st.tail)
	if err != nil {
		return nil
	}
	return x.Snapped
}

// StateSnapshot returns the slot snapshot's position (the seq of its
// rows) that a change stream's state holds, or 0 if the state is bad.
func StateSnapshot(state []byte) int64 {
	st, err := decodeState(state)
	if err != nil {
		return 0
	}
	return int64(st.snapshot)
}

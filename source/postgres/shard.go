package postgres

import (
	"fmt"

	"github.com/openetl/etl/source"
)

// Shard returns the Source itself (source.Sharder): a Postgres pipeline
// is sharded by configuration, not by dealing splits. Each shard is a
// table group with a Source of its own: its own Config.Tables,
// Publication and Slot (see "Shards" in the package doc). Giving two
// shards the same slot would make them take turns on it, each
// resuming from its own checkpoint; nothing here can tell, so keep the
// groups apart. It fails (source.ErrUnshardable) only for an index
// outside [0, count).
func (s *Source) Shard(index, count int) (source.Source, error) {
	if count < 1 || index < 0 || index >= count {
		return nil, fmt.Errorf("postgres: shard %d of %d: %w: the index must be 0 to count-1", index, count, source.ErrUnshardable)
	}
	return s, nil
}

package mysql

import (
	"fmt"

	"github.com/openetl/etl/source"
)

// Shard refuses every count above 1 with an error wrapping
// source.ErrUnshardable (source.Sharder): one binlog is one shard. The
// snapshot is read in parallel inside it; for more than one host, run
// one pipeline per database (or per group of tables read from another
// server), each with a name of its own.
func (s *Source) Shard(index, count int) (source.Source, error) {
	if count == 1 && index == 0 {
		return s, nil
	}
	return nil, fmt.Errorf("mysql: shard %d of %d: %w: one binlog is one shard (its snapshot is parallel inside it); "+
		"run a MySQL pipeline unsharded", index, count, source.ErrUnshardable)
}

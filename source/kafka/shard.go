package kafka

import (
	"fmt"

	"github.com/openetl/etl/source"
)

// MaxShards is the largest shard count Shard accepts.
const MaxShards = MaxPartitions

// Shard returns a Source that reads shard index of count
// (source.Sharder): partition p of every topic belongs to shard
// p mod count, so shards 0..count-1 together read every partition once.
// The new Source has the receiver's Config and a client of its own (it
// doesn't connect until used); close it when done (etl.Pipeline.Close
// does, for the one etl.Builder.Shard made). A partition added to a
// topic joins its shard at the shard's next Open.
//
// Open of a shard that owns no partition of the selected topics (count
// above their partition counts) fails with an error wrapping
// source.ErrUnshardable, which Permanent reports: lower the shard count
// or add partitions. Shard fails so for an index outside [0, count) or
// a count outside [1, MaxShards], and on a Source that already is a
// shard.
func (s *Source) Shard(index, count int) (source.Source, error) {
	switch {
	case count < 1 || count > MaxShards:
		return nil, fmt.Errorf("kafka: shard %d of %d: %w: the count must be 1 to %d", index, count, source.ErrUnshardable, MaxShards)
	case index < 0 || index >= count:
		return nil, fmt.Errorf("kafka: shard %d of %d: %w: the index must be 0 to %d", index, count, source.ErrUnshardable, count-1)
	case s.shards > 0:
		return nil, fmt.Errorf("kafka: shard %d of %d: %w: the source already is shard %d of %d", index, count, source.ErrUnshardable,
			s.shard, s.shards)
	}
	sh, err := New(s.cfg)
	if err != nil {
		return nil, err
	}
	sh.shard, sh.shards = index, count
	return sh, nil
}

// owns reports whether partition p belongs to the source's shard.
func (s *Source) owns(p int32) bool { return s.shards <= 1 || int(p)%s.shards == s.shard }

// noPartitions is Open's error for a shard that owns no partition.
func (s *Source) noPartitions(topics []topicMeta) error {
	most := int32(0)
	for _, t := range topics {
		most = max(most, t.partitions)
	}
	return fmt.Errorf("kafka: shard %d of %d owns no partition (partition p is shard p mod %d's, and the topics have at most %d): %w: "+
		"lower the shard count or add partitions", s.shard, s.shards, s.shards, most, source.ErrUnshardable)
}

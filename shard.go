package etl

import (
	"context"
	"fmt"
	"reflect"

	"github.com/openetl/etl/source"
)

// MaxShards is the largest shard count Builder.Shard accepts.
const MaxShards = 4096

// Shard says which shard of a sharded pipeline a Pipeline runs: Index
// of Count (Builder.Shard). The zero value, and {0, 1}, is an unsharded
// pipeline.
type Shard struct {
	Index, Count int
}

// Sharded reports whether s is one shard of more than one.
func (s Shard) Sharded() bool { return s.Count > 1 }

// String returns "2/4" for shard 2 of 4, "" when unsharded.
func (s Shard) String() string {
	if !s.Sharded() {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// ShardKey returns the name a shard's checkpoint log, destination fences
// and staging are kept under: pipeline + ".shard-" + index + "-of-" +
// count ("orders.shard-2-of-4"); pipeline itself when count is 1. The
// count is part of the key, so the shards of another count (a reshard,
// Reshard) have logs of their own.
func ShardKey(pipeline string, index, count int) string {
	if count <= 1 {
		return pipeline
	}
	return fmt.Sprintf("%s.shard-%d-of-%d", pipeline, index, count)
}

// Shard makes the pipeline shard index (from 0) of count: it reads only
// its share of the source's splits, which the source deals
// (source.Sharder: Kafka partition p is shard p mod count's; a
// Postgres source is given its own table group, publication and slot
// per shard; MySQL refuses), and is an ordinary pipeline of its own:
// its checkpoint log, destination fences and staging are kept under
// ShardKey(name, index, count), so count pipelines built with the same
// name and parts, one per shard, may run on as many hosts, each
// claiming only its own key. Moving a shard to another host needs no
// state hand-off: the next owner's first attempt claims the shard's
// next generation and fences the old one (checkpoint.ErrFenced) at the
// checkpoint log and at the destination.
//
// Name, Status().Pipeline, events' Pipeline and the openetl.pipeline
// metric attribute are the shard's key; Status().Shard and events'
// Shard say which shard it is. The Source that Shard returns belongs to
// the Pipeline (Close closes it); the one passed to From stays the
// caller's. A destination that ties a table to one pipeline (sink/parquet:
// one pipeline per stream under a prefix) takes a prefix per shard.
// Package shard says which shard a host runs: from its environment or
// StatefulSet ordinal, or by leases in a bucket.
//
// Shards started together would close their epochs together, and
// their commits to a shared destination (one Iceberg table) would come
// in bursts: shard index closes its first epoch (index+1)/count of the
// epoch interval after its start (EpochEvery), then every interval.
//
// Changing count is an explicit step, Reshard, with every shard
// stopped.
//
// Default: unsharded; Shard(0, 1) is the same. Build fails when count is
// outside [1, MaxShards] or index outside [0, count), and, wrapping
// source.ErrUnshardable, when the source is no source.Sharder or its
// Shard fails.
func (b *Builder) Shard(index, count int) *Builder {
	b.shard = Shard{Index: index, Count: count}
	b.shardSet = true
	return b
}

// buildShard checks the shard and returns the name and source of the
// shard's pipeline; owned is the source the Pipeline must close (nil
// when it is the caller's).
func buildShard(name string, sh Shard, src source.Source) (key string, shardSrc, owned source.Source, err error) {
	switch {
	case sh.Count < 1 || sh.Count > MaxShards:
		return name, src, nil, fmt.Errorf("shard %d of %d: the count must be 1 to %d", sh.Index, sh.Count, MaxShards)
	case sh.Index < 0 || sh.Index >= sh.Count:
		return name, src, nil, fmt.Errorf("shard %d of %d: the index must be 0 to %d", sh.Index, sh.Count, sh.Count-1)
	case sh.Count == 1:
		return name, src, nil, nil
	case src == nil:
		return name, nil, nil, nil // Validate reports the missing source
	}
	key = ShardKey(name, sh.Index, sh.Count)
	s, ok := src.(source.Sharder)
	if !ok {
		return key, nil, nil, fmt.Errorf("shard %d of %d: %w: the source (%T) can't deal its splits into shards (no Shard method)",
			sh.Index, sh.Count, source.ErrUnshardable, src)
	}
	shardSrc, err = s.Shard(sh.Index, sh.Count)
	if err != nil {
		return key, nil, nil, fmt.Errorf("shard %d of %d: %w", sh.Index, sh.Count, err)
	}
	if shardSrc == nil {
		return key, nil, nil, fmt.Errorf("shard %d of %d: %w: the source's Shard returned nil", sh.Index, sh.Count, source.ErrUnshardable)
	}
	if !sameSource(shardSrc, src) {
		owned = shardSrc
	}
	return key, shardSrc, owned, nil
}

// sameSource reports whether a and b are the same value, without
// panicking on types that can't be compared.
func sameSource(a, b source.Source) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

// closeSource closes a shard's source that a failed Build made.
func closeSource(s source.Source) {
	if c, ok := s.(source.Closer); ok {
		_ = c.Close(context.Background())
	}
}

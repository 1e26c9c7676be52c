// Package shard says which shard of a sharded pipeline (etl.Builder.Shard)
// a host runs. Two ways, both leaning on what users already run, with no
// consensus of this project's own:
//
//   - Fixed: the host is told. FromEnv reads the index from an
//     environment variable, FromHostname from a Kubernetes StatefulSet
//     pod's ordinal ("orders-3" → 3). Kubernetes keeps one pod per
//     ordinal running and restarts it elsewhere when its node dies.
//   - Automatic: Leases spreads S shards among N hosts that share a
//     bucket (the kind the checkpoint store uses: S3, GCS, Azure, a
//     directory), balanced, and moves a dead host's shards to the others
//     within a bound (Leases.Bound).
//
// Either way, which host runs a shard is only a decision about who
// should: the shard's checkpoint generation stays the only fence. A
// shard run by two hosts at once (a pod that Kubernetes presumed dead, a
// host paused past its lease) is safe: the newer attempt claims the next
// generation and the older one gets checkpoint.ErrFenced (etl.IsFenced)
// at its next commit, at the checkpoint log and at the destination.
//
// # A StatefulSet
//
// Each pod runs the shard its ordinal names; replicas is the shard
// count. The shard count is part of each shard's checkpoint key
// (etl.ShardKey), so changing it is a reshard, not a scale-up: keep
// SHARDS and replicas equal, and to change both, scale the StatefulSet
// to 0, run etl.Reshard from the old count's pipelines to the new
// count's, then set SHARDS and replicas to the new count.
//
//	apiVersion: apps/v1
//	kind: StatefulSet
//	metadata:
//	  name: orders
//	spec:
//	  serviceName: orders
//	  replicas: 4
//	  podManagementPolicy: Parallel
//	  selector:
//	    matchLabels: {app: orders}
//	  template:
//	    metadata:
//	      labels: {app: orders}
//	    spec:
//	      containers:
//	        - name: etl
//	          image: example.com/orders-etl:1.0
//	          env:
//	            - {name: SHARDS, value: "4"}
//	          readinessProbe:
//	            httpGet: {path: /readyz, port: 8080}
//
// and in the program (etl.HealthHandler serves /readyz):
//
//	count, _ := strconv.Atoi(os.Getenv("SHARDS"))
//	index, err := shard.FromHostname(count) // "orders-2" → 2
//	if err != nil {
//		return err // an *IndexError: not a StatefulSet pod, or an ordinal ≥ count
//	}
//	p, err := etl.NewPipeline("orders").From(src).To(dst).Checkpoints(store).
//		Shard(index, count).Build()
//
// Outside Kubernetes, FromEnv("SHARD", count) reads the index a process
// manager sets.
//
// # Leases
//
// With Leases, every host runs the same program; each builds the
// pipeline of a shard when it gets the shard's lease:
//
//	bucket, _ := cloud.NewBucket(s3bucket, "etl") // or object.NewDir on a shared mount
//	leases, err := shard.NewLeases(shard.LeaseConfig{
//		Bucket: bucket, Prefix: "orders/_leases", Host: podName, Shards: 8,
//	})
//	err = leases.Run(ctx, func(ctx context.Context, i int) error {
//		// dstFor(i): a destination per shard (sink/parquet: a prefix of its own)
//		p, err := etl.NewPipeline("orders").From(src).To(dstFor(i)).Checkpoints(store).Shard(i, 8).Build()
//		if err != nil {
//			return err
//		}
//		defer p.Close(context.WithoutCancel(ctx))
//		return p.Run(ctx) // returns once the lease is lost or given up
//	})
//
// Expiry is judged by each host from what it observes, never by
// comparing clocks: a lease is expired when its version (the object's
// ETag or generation) has not changed for TTL as this host watched it.
// docs/shards.md has the protocol and its bound.
package shard

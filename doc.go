// Package etl moves data from operational systems into analytical ones
// with a delivery guarantee per stream: exactly once where the source can
// replay exactly and the destination can stage and apply.
//
// A pipeline is built from typed values: a source (package source and its
// connectors), a destination (package sink and its connectors) and a
// checkpoint store (package checkpoint). Build checks everything once and
// returns an immutable *Pipeline:
//
//	src, _ := faker.New(faker.Config{Rows: 100_000})
//	bucket, _ := parquet.OpenDir("/data/tables") // any mount; or an s3blob, gcsblob, azureblob bucket
//	dst, _ := parquet.New(parquet.Config{Bucket: bucket})
//	store, _ := checkpoint.OpenDir("/data/checkpoints")
//
//	p, err := etl.NewPipeline("orders").
//		From(src).
//		To(dst).
//		Checkpoints(store).
//		Build()
//	if err != nil {
//		return err // names every part at fault
//	}
//	res, err := p.Sync(ctx) // or: err = p.Run(ctx)
//
// # How a sync commits
//
// The source's splits emit records and resume points. The runner hands
// records in batches to the engine (a Rust library reached through cgo,
// one call per batch), which infers each stream's schema, turns the
// records into Arrow and sets malformed ones aside (quarantine, with a
// reason). Writer lanes hand the Arrow batches to the destination.
//
// Data is committed in epochs. A barrier placed right after every split's
// resume point closes an epoch: each writer makes its data durable but
// invisible (PreCommit), the runner writes a checkpoint record with the
// splits' resume states and the writers' committables, and moves the
// checkpoint HEAD to it with a compare-and-swap — the commit point. Only
// then does the destination make the epoch visible (Commit, idempotent).
// A crash at any point is repaired by the next attempt: it claims the
// pipeline, asks the destination whether HEAD's epoch was applied, applies
// it if not, and resumes reading from HEAD's resume states.
//
// # Attempts and fencing
//
// Each Sync or Run is an attempt that claims the pipeline with the next
// generation number. An older attempt still running — a second copy
// started by mistake, a process that was presumed dead — gets
// checkpoint.ErrFenced at its next commit and stops without committing;
// IsFenced tells a host not to restart it.
//
// Run supervises itself: when an attempt fails with a transient error
// (an object store, a network or a database that is briefly away), it
// starts a new attempt after a backoff, which resumes from the last
// checkpoint, and returns only on a permanent error, on cancellation, or
// once an outage outlasts its budget (see Retry and Builder.Retry).
//
// # More than one host
//
// Builder.Shard(i, n) makes the pipeline shard i of n: it reads only the
// splits the source deals it (Kafka partitions p mod n) and keeps its
// checkpoints and destination fences under a key of its own
// (ShardKey), so n hosts run n shards and a shard moves between hosts
// by starting it elsewhere: the new owner's claim fences the old.
// Package shard says which host runs which (a StatefulSet ordinal, or
// leases in a bucket); docs/shards.md has the design.
//
// # After a sync
//
// Builder.AfterSync adds steps that run once a Sync has committed
// everything it read, such as dbt over the tables it loaded; Command
// runs a program, and examples/dbt is a whole dbt project:
//
//	p, err := etl.NewPipeline("orders").From(src).To(dst).Checkpoints(store).
//		AfterSync("dbt build", etl.Command(func(ctx context.Context, _ etl.Result) *exec.Cmd {
//			return exec.CommandContext(ctx, "dbt", "build", "--project-dir", "analytics")
//		})).
//		Build()
//
// A step that fails fails the Sync with a *StepError. What the Sync
// copied stays committed, so the error is retryable: the next Sync copies
// nothing new and runs the step again. Run doesn't run steps.
//
// # Watching a pipeline
//
// A host sees a pipeline without reading its code:
//
//   - Metrics and spans go to the OpenTelemetry providers passed to
//     Builder.Telemetry (default: the global ones). docs/metrics.md lists
//     every metric (openetl.rows.read, openetl.job.lag, openetl.pipeline.freshness
//     ...) with its unit and attributes, and the spans: one per attempt,
//     recovery, epoch (barrier to commit), checkpoint commit, destination
//     Commit and PreCommit.
//   - Builder.OnEvent delivers typed events (sync.started, epoch.committed,
//     quarantine.added, schema.changed, stream.paused, pipeline.fenced,
//     sync.failed ...) on a goroutine of its own through a bounded queue: a
//     slow callback never slows the data path; what doesn't fit is dropped
//     and counted.
//   - Pipeline.Status returns a snapshot at any time (phase, generation,
//     last epoch and its time, per-stream counts, snapshot progress, lag,
//     last error), and HealthHandler serves it as /healthz and /readyz for
//     Kubernetes probes.
//   - Builder.OnProgress is called about once a second and after each
//     epoch with the same figures.
//   - Builder.Logger takes a *slog.Logger: lifecycle at Info, retries at
//     Warn, per-epoch and per-batch detail at Debug, never row data, and
//     passwords redacted from every message and attribute.
//
// Sources whose splits implement LagReporter or SnapshotReporter (plain
// methods with standard types) feed the lag and snapshot figures.
//
// # Metadata columns
//
// Every row written carries _openetl_id (a hash of stream, key or payload,
// and seq: the same version of a record always has the same ID),
// _openetl_op (insert, update, delete), _openetl_seq (the version's
// position in the source) and _openetl_synced_at (when it was processed,
// UTC). See package engine for the ID's definition and test vectors.
//
// # Transforms
//
// Builder.Transform runs a TransformFunc of yours on a stream's Arrow
// batches on the writer lanes, between the engine and the destination:
// it emits what to write (fewer rows, more, other columns) and rejects
// rows into quarantine. It must keep the metadata columns and be
// deterministic, for the stream's guarantee to hold for what it returns;
// rows it drops are counted (Counts.Filtered). See TransformFunc and
// docs/transforms.md.
//
// # Design
//
// The repository's docs/ directory describes the design: architecture.md
// (the parts and the data path), commit-protocol.md (epochs, the commit
// point, attempts, fencing and recovery), delivery.md (how each stream's
// guarantee is decided), storage-layout.md (what the checkpoint store and
// the destinations keep), metrics.md (every metric, span and event) and
// transforms.md (the Go hook on Arrow batches).
package etl

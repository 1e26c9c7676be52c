// Package postgres reads tables from PostgreSQL (12 or later; tested on
// 15, 16, 17 and 18) through logical replication: a consistent snapshot of a
// publication's tables that hands over to the slot's pgoutput change
// stream without losing or repeating a change. It reads from a primary,
// or from a standby on 16+, and follows a promotion through a failover
// slot on 17+ (see Failover and standbys).
//
//	src, err := postgres.New(postgres.Config{
//		DSN:               "postgres://etl@db/app",
//		Publication:       "etl_orders",
//		CreatePublication: true,
//		Tables:            []string{"orders", "billing.invoices"},
//		Slot:              "etl_orders",
//	})
//	...
//	p, err := etl.NewPipeline("orders").From(src).To(sink).Checkpoints(store).Build()
//
// The server needs wal_level=logical and a role with REPLICATION (and
// CREATE on the database when the source creates the publication).
//
// # Streams
//
// Each table of the publication is a FormatRow stream with CDC set,
// named after the table ("orders"; "billing.invoices" outside schema
// public); a partitioned table is one stream, under its root's name (see
// Partitioned tables). Its columns are those the publication sends (all of the
// table's, less those outside its column list and the generated ones
// pgoutput leaves out), in attribute order, typed with
// pg_type names (int4, numeric(12,2), timestamptz, _text ...: package
// engine maps them to Arrow) — except enum types, declared
// enum('label',...) in label order, which the engine marks as enums —
// and its primary key is the table's; under REPLICA IDENTITY USING INDEX
// it is that index's columns instead, the key whose changes Postgres logs
// (an update that changes only the primary key is an update of the
// index's key, and one that changes the index's columns a delete of the
// old one).
// The snapshot reads the same columns, so no column is declared that
// the change stream would leave null. pgoutput sends no
// generated column before Postgres 18; on 18 it sends stored ones when
// the publication has publish_generated_columns = stored, which the
// source sets on a publication it creates (Config.CreatePublication),
// and virtual ones never. On 18, ALTER PUBLICATION ... SET
// (publish_generated_columns = stored) adds the stored generated columns
// of a publication you own; the next Open declares them and reads the
// table again for them (a schema.changed event).
// Values travel in Postgres's text form, with DateStyle ISO, TimeZone
// UTC, extra_float_digits 3 and bytea_output hex set on both connections,
// so a value reads the same in the snapshot and in the stream.
//
// # Reading
//
// Open returns one split for the slot's change stream ("slot:" + the
// slot name) and one snapshot split per table ("snapshot:" + the stream
// name; per leaf partition of a partitioned table, "snapshot:" + the
// stream + "/" + the partition); the runner reads them in parallel (at
// most Config.SnapshotParallelism splits at once, each on its own
// connection).
//
// A first Open (no resume state for the change stream) drops an idle slot
// of that name, creates it with an exported snapshot and keeps that
// connection idle until every snapshot split has imported the snapshot
// (REPEATABLE READ, SET TRANSACTION SNAPSHOT). A snapshot split reads its
// table in chunks of Config.SnapshotChunkRows rows in primary-key order
// (keyset pagination: WHERE (key) > (last key) ORDER BY key LIMIT n), or,
// without a key, in ranges of heap pages (ctid ranges, a TID range scan
// on Postgres 14+), and places a resume point after each chunk: a sync
// killed during the snapshot resumes after the last committed chunk.
// Every snapshot row is an insert whose seq is the slot's consistent LSN.
//
// The change stream runs beside the snapshot, from that LSN, over
// pgoutput (protocol 2, or 1 before Postgres 14; see Config.Protocol):
// inserts, updates (the new row; when the key changed, first a delete of
// the old key carrying what the server sends of the old row) and deletes
// (under REPLICA IDENTITY DEFAULT or USING INDEX the row holds the key
// columns, the others null; under FULL the whole old row), each
// with seq = the LSN of its change, and a resume point after each
// transaction that touched an opened table, and at keepalives between
// transactions (the server's position then), so quiet tables still let the slot
// confirm the WAL the rest of the cluster writes. Reopening at a
// resume point replays exactly what followed (source.ReplayExact). A
// bounded Read stops at a transaction boundary once it has passed the
// WAL insert position as of its start.
//
// On Postgres 14 and later the stream uses protocol 2 (Config.Protocol),
// under which the server streams a large transaction while it runs. The
// source keeps its changes (in memory up to Config.StreamedTxnMemory, then
// in a temporary file) and emits them at its commit, without those of
// aborted subtransactions, and drops them if it aborts. Resume points of
// transactions that commit meanwhile are placed as usual: a restart from
// one makes the server decode the open transaction again from its start
// and send it whole, and the part the killed process held is gone with
// it. Relation messages sent inside a streamed transaction count, once it
// commits, for the changes after it, as the server treats them; a change
// whose relation was never described is an error, never skipped.
// Under protocol 1 the server spills large transactions to its disk and
// sends them at commit.
//
// # Snapshots that resume, and tables added later
//
// A table's first snapshot is read under the snapshot the slot exported
// when it was made, so its rows are the table at the slot's consistent
// point and carry that position as their seq, below every change the
// stream emits. That snapshot dies with its connection, so no later
// attempt can use it. On Postgres 14 or later, a keyed table's snapshot
// that a later attempt still has to read is read by the change stream
// instead, as a re-snapshot (see "Reading a table again"): the rest of a
// snapshot resumed after a kill, from after the last key its split
// committed (of its leaf partition, for a partitioned table); the whole
// of one whose split had recorded no state when its attempt ended (its
// first chunk not yet checkpointed, or not begun behind
// Config.SnapshotParallelism); and the whole of a table opened after the
// slot was made (added to the publication or to the pipeline's streams,
// or a partition attached since). It is read in chunks, each consistent
// with the stream by its watermark and carrying the watermark's position
// as seq, so every row is the table's state at its seq, and rows changed
// or deleted meanwhile land at their latest version. The snapshot split
// emits nothing meanwhile; it is done once the stream's state says the
// job finished. The hand-over is repeated from the split's state by each
// attempt until the stream's state holds the job, so a crash in between
// loses nothing; at worst a table's rest is read twice. Status shows the
// table's snapshot in progress until its job ends (while the job waits,
// with the rows read before the resume), between resnapshot.started and
// resnapshot.done events (TestSnapshotResumesAfterLastChunk and
// TestSnapshotWithoutStateHandedOver follow the hand-over step by step).
// The trade: these snapshots are read one table at a time on the
// stream's connection, a watermark per chunk, where the snapshot splits
// read SnapshotParallelism tables at once.
//
// Three cases keep the old way, a new snapshot of the split's own: a
// table without a key (its rows can't be matched to the changes
// meanwhile), Postgres 13 or earlier (no logical messages), and a
// standby (which can't write the watermarks). Its rows carry the slot
// snapshot's seq (a partition attached since: the WAL insert position of
// the Open that reads it). A row changed since then appears both as a
// snapshot row and as its later changes, and the change with the
// highest seq is the row's state. So a destination that keeps the
// latest version per key (merge) holds exactly the table; an append
// destination holds a change log that, applied in seq order, equals it,
// though a snapshot row there may hold a value newer than its seq. For a
// table without a key, a resumed snapshot can repeat or miss a row that
// a concurrent update moved between pages.
//
// # Reading a table again
//
// Source.Resnapshot (or etl.Pipeline.Resnapshot, or an INSERT into
// Config.SignalTable) reads one stream's table again while the pipeline
// streams its changes, for a destination that lost or mangled rows:
//
//	err := src.Resnapshot(ctx, "orders") // or p.Resnapshot(ctx, "orders")
//	// or, in SQL: INSERT INTO openetl_signal (stream) VALUES ('orders')
//
// The request is written into the WAL (a logical decoding message
// naming the slot), so it is durable at once and read in order by the
// running attempt, or the next one. The change stream's split then
// reads the table in chunks of Config.SnapshotChunkRows rows in
// primary-key order, each under a snapshot of its own followed by a
// watermark message in the WAL, and goes on streaming meanwhile: a
// change from a transaction the chunk's snapshot did not see drops its
// key's row from the chunk, and at the watermark the chunk's other rows
// are emitted as inserts whose seq is the watermark's commit position
// (a change written before it and committed after it gets a seq just
// above it). So rows changed meanwhile land at their latest version,
// rows deleted meanwhile stay deleted, and no exported snapshot is
// needed; docs/sources.md has the argument. An append destination gets
// the table's rows once more; applied in seq order it equals the table
// (TestResnapshotUnderWriter).
//
// Progress is in the stream's checkpoint state: a pipeline killed part
// way goes on from the last committed chunk (TestResnapshotKilled). A
// bounded Sync reads every requested table to its end before it stops.
// While a table is read again, Status shows it as the stream's snapshot
// (Snapshotting, SnapshotDone, SnapshotEstimated), and the events
// resnapshot.started and resnapshot.done say when it begins and ends.
// One table is read at a time; other requests queue.
//
// It needs Postgres 14 or later (pgoutput sends logical messages from
// 14 on) and EXECUTE on pg_logical_emit_message. A stream not in the
// publication fails Resnapshot with source.ErrUnknownStream, a table
// without a key with source.ErrNoKey; a signal for such a stream, or
// one the pipeline doesn't read, is logged at Warn and dropped. A chunk's
// rows wait in memory for its watermark. Rows deleted at the source
// whose delete the destination never got are not removed.
//
// # Partitioned tables
//
// A partitioned table is one stream under its root's name, with the
// root's columns and primary key, when the publication publishes it via
// its root (Postgres 13+):
//
//	CREATE PUBLICATION etl_events FOR TABLE events WITH (publish_via_partition_root = true);
//
// A publication the source creates (Config.CreatePublication) has it
// set. pgoutput then sends the changes of every partition as the root's.
// A publication that covers a partitioned table (FOR TABLE, FOR TABLES IN
// SCHEMA, FOR ALL TABLES) without it would send them as those of
// separate tables, one per partition: Discover and Open refuse it with a
// *PartitionRootError (ErrNotViaRoot, permanent) that says how to fix
// it. Partitions listed in a publication without their partitioned
// table are streams of their own, as any table.
//
// The snapshot reads each leaf partition (pg_partition_tree) as a split
// of its own, under the slot's snapshot, within
// Config.SnapshotParallelism. Every key of a partitioned table holds the
// partition key, so an update that moves a row to another partition
// changes its key: Postgres logs it as a delete from the old partition
// and an insert into the new one, and the stream carries exactly that (a
// delete of the old key, then an insert of the new). Foreign-table
// partitions are not read: Postgres publishes no changes of them.
//
// A partition attached while the pipeline runs (ATTACH PARTITION, or
// CREATE TABLE ... PARTITION OF) holds rows that never passed through the
// change stream. The stream looks for new partitions between
// transactions (every Config.StatusInterval), at a relation message of
// the table, and at the end of a bounded Read; finding one, it ends the
// attempt with a *SchemaChangeError (source.ErrReopen) naming the
// partition, and the next attempt, which the runner starts by itself,
// has the change stream read the partition in chunks under watermarks
// (see above): each row carries its chunk's watermark position as seq,
// above every version of it the destination may hold (from before a
// detach) and below every change after it. On a standby or Postgres
// 13, or for a table without a key, the partition's split reads it
// under a snapshot of its own, its rows carrying the WAL insert position
// of that Open as seq, as those of a table read again do (see Hard
// cases); rows changed between the attach and that Open then also come
// as those changes: an append destination holds them twice, and applied
// in seq order equals the table.
//
// A detached partition (DETACH PARTITION, CONCURRENTLY or not, or
// dropped) is no longer read: its rows stay at the destination
// (Postgres logs no delete for them), and its changes after the detach
// are not sent. Once the snapshot is done the source holds no
// transaction open that a concurrent detach waits for; during it, the
// detach waits for the snapshot's transactions. A partition
// detached and attached again is read again: rows changed meanwhile
// reach the destination; rows deleted meanwhile stay there.
//
// A TRUNCATE of the partitioned table is a truncate of its stream (see
// Config.Truncates). Postgres sends no TRUNCATE of a single partition
// when the publication publishes via the root: the stream goes on, and
// the partition's rows stay at the destination, as after a detach.
//
// # Hard cases
//
//   - Unchanged TOAST values: an update that leaves a large (TOASTed)
//     column alone doesn't carry its value. Under REPLICA IDENTITY FULL
//     the old row does, and the value is taken from it. Otherwise the
//     row is written with source.AppendRowUnchanged, never as null, and
//     the engine quarantines it (reason unchanged_value) so nothing is
//     silently changed: set REPLICA IDENTITY FULL on tables whose large
//     columns outlive updates of other columns. A TOASTed key column is
//     always filled: the server sends the old key with such an update.
//   - Schema changes: relation messages are matched to the declared
//     columns by name. A column added, a type changed, or a declared
//     column the stream no longer sends (dropped, or taken out of the
//     publication), after the attempt read the catalog stops the stream
//     with a *SchemaChangeError (ErrSchemaChanged) naming the table and
//     column, once the changes before it are read. The error also matches
//     source.ErrReopen, so the runner starts a new attempt by itself,
//     which declares the new shape and continues from the last
//     checkpoint; a Sync or Run goes on without returning. A table added
//     to the publication while an attempt streams does the same, and the
//     new attempt snapshots it (through the change stream, under
//     watermarks, as above). Changes streamed from before a change the
//     catalog already shows are read under the catalog's columns (a
//     column added later is null in them).
//   - Columns added with a default: ALTER TABLE ... ADD COLUMN ...
//     DEFAULT x gives the rows that exist then the value x without any
//     change in the WAL, so the destination's rows would keep null there.
//     Each snapshot split's state records the columns its rows were read
//     with; when an Open finds a column added since with a default (or an
//     identity, or generated), or one renamed since, it reads the table
//     again: a new snapshot whose rows carry the WAL insert position of
//     that Open as seq, above every version the destination has, and
//     below every change after it (a change committed after that position
//     but written before it is raised above it, as for the slot's
//     snapshot). Applied by key in seq order the destination equals the
//     table again; an append destination gets the table's rows once more.
//     A schema.changed event (source.Reporter) names the column and
//     says so. A column added without a default reads null at both ends:
//     nothing is read again. A table without a key is not read again
//     (its rows can't be merged): the event says its rows were not
//     backfilled. States written before this was recorded compare
//     nothing.
//   - Truncates stop the stream with a *TruncateError, unless
//     Config.Truncates is TruncateIgnore.
//   - A transaction in progress when the slot was created can have
//     changes whose LSN precedes the snapshot's: their seq is raised to
//     just above the snapshot's, so two changes of one row in such a
//     transaction share a seq.
//
// Ack reports the acknowledged LSN to the server as the slot's flush
// position (set explicitly, never left for the server to take from the
// write position), in the status updates of a running Read, or with
// pg_replication_slot_advance when none runs. The runner acknowledges
// one checkpoint behind, so the slot never discards WAL a restart from
// the last checkpoint still needs. Config.HeartbeatInterval adds a tiny
// WAL write now and then for clusters where nothing else writes.
//
// Snapshot splits report their table's progress (SnapshotProgress) and
// the change stream its lag in bytes of WAL (Lag), which the pipeline's
// status, metrics and events show.
//
// # Errors
//
// A resume state whose slot is gone (dropped by hand, say) fails Open or
// Read with a *SlotError wrapping ErrSlotMissing; one the slot has
// already confirmed past, with ErrSlotAdvanced; a slot that lost WAL it
// needed (wal_status "lost"), with ErrWALRemoved; one read past the
// fork of a promoted standby's timeline, with ErrForked (see Failover
// and standbys). Read looks at the
// slot again once its connection holds it: a slot dropped and created
// again by another process (a second copy of the pipeline starting
// fresh) after Read's first look would stream from its own start, past
// the changes in between, and fails with ErrSlotAdvanced instead. Every
// *SlotError matches source.ErrPositionLost. The slot is never recreated
// silently;
// Config.OnPositionLost = source.PositionLostResnapshot lets the source
// start over with a new slot and snapshot instead, and report it (a
// source.reset event); see source.PositionLostResnapshot for what a
// destination then holds.
//
// # Server shutdown
//
// A stopping walsender waits until its client confirms the end of WAL,
// and the source confirms only what the destination has committed, so
// it never confirms that end in time. It lets go instead: when the
// server ends the stream, terminates the connection (admin_shutdown), or
// asks twice in a row for a reply right after the last one (what a
// stopping walsender does; an idle one asks only after
// wal_sender_timeout/2), Read closes the replication connection and
// returns an error wrapping ErrServerStopping, retryable. pg_ctl stop
// -m fast then takes about the time it takes without a client, and the
// next attempt resumes from the last checkpoint.
//
// # Lost connections
//
// When the replication stream breaks — the connection drops, the
// walsender is terminated (pg_terminate_backend), the server stops —
// and no change was emitted since the split's last resume point (the
// break came between transactions), Read takes the stream up again from
// that point on a new connection, within the same attempt: that repeats
// and skips nothing. It tries for about 1.3 s (a slot still held by the
// old walsender, a server not back yet), and takes a stream up again
// only once in a row without a resume point past the last one. Otherwise
// Read returns the error, retryable, and the pipeline's next attempt
// resumes from its last checkpoint (etl.Retry: Run starts it by
// itself). Each reconnect is logged at Warn.
//
// The source's query connection (slot checks, heartbeats, partition
// look-ups) and a re-snapshot's chunk connection may be ended while they
// sit idle: a query that finds its connection gone runs once more on a
// new one (a chunk is read again whole), and the attempt goes on.
// TestConnectionsEndedUnderWriter ends the source's connections 21 times
// at random under a writer, during the first snapshot, its hand-over and
// streaming: the output applied in seq order equals the table.
//
// # Failover and standbys
//
// On Postgres 17 and later, Config.Failover makes the slot a failover
// slot, which a standby copies so that the pipeline continues from that
// standby once it is promoted, without a new snapshot and without losing
// or repeating a change. The servers need:
//
//	primary: synchronized_standby_slots = 'standby1'  (the standby's physical slot)
//	standby: sync_replication_slots = on, hot_standby_feedback = on,
//	         primary_slot_name = 'standby1', and dbname=... in primary_conninfo
//
// The standby's slot sync worker copies the slot; a slot made since its
// last sync (up to 30 s when nothing changes) is not there yet, and a
// new copy stays temporary (lost at promotion) until the primary's slot
// has moved past the standby's own position, which needs a
// running-transactions record on the primary (every 15 s, or
// pg_log_standby_snapshot()): on the standby, pg_replication_slots
// shows it with synced, and temporary false once it counts. An Open
// that resumes from a slot made without Failover turns it on. Before
// 17, a set Failover fails Open with ErrUnsupported.
//
// synchronized_standby_slots makes the primary hold a failover slot's
// changes back until the standby has their WAL, so the pipeline never
// commits a change the promoted standby lacks. Without it the pipeline
// may have read changes the standby never received (gone with the old
// primary, yet at the destination), and its checkpoint then lies past
// the point where the new primary's timeline forked from the old one:
// reading on would skip the new primary's first changes. Read sees that
// in the timeline history (resume states record the timeline they were
// read on) and fails with a *SlotError wrapping ErrForked, which
// matches source.ErrPositionLost: Run stops (TestPromotionPastForkFails),
// or, under source.PositionLostResnapshot, starts over from a new
// snapshot.
//
// To follow a promotion, point the pipeline at the new primary. A DSN
// naming both servers, whichever takes writes, does it by itself:
//
//	postgres://etl@db1:5432,db2:5432/app?target_session_attrs=read-write
//
// The attempts fail (retryable) while no server takes writes, and the
// first after the promotion resumes from the last checkpoint through the
// standby's copy of the slot (TestFailoverSlotFollowsPromotion: a
// PostgreSQL 17 primary crashed under a running pipeline and a writer,
// the standby promoted, more rows written; Run carries on, and the
// output holds each row of the new primary once). A new Source with the
// new primary's DSN, under the same pipeline name and checkpoint store,
// does the same.
//
// On Postgres 16 and later the source also reads from a standby (DSN
// the standby's; the publication made on the primary): the slot is made
// on the standby, the snapshot read there under the slot's exported
// snapshot, and the positions the source takes (a bounded Read's end,
// the seq of a table read again) are the standby's replay position
// (pg_last_wal_replay_lsn), where the primary's insert position can't
// be read. Making the slot on a standby waits for a running-transactions
// record from the primary (every 15 s on a busy primary, none on an idle
// one): run SELECT pg_log_standby_snapshot() on the primary to send one
// at once. A standby writes no WAL: Config.HeartbeatInterval fails
// Discover and Open there with ErrUnsupported, and the publication must exist (made on
// the primary; Config.CreatePublication can't make it there). Postgres
// makes no failover slot on a standby, so Failover and reading from a
// standby don't go together. TestDecodeFromStandby reads from a
// PostgreSQL 17 standby (and passed on a 16 one by hand): the snapshot,
// then two bounded syncs of inserts, updates and deletes made on the
// primary; the output applied in seq order equals the table.
//
// # Credentials that expire
//
// Config.Credentials is asked for the user and password of every
// connection the source opens — the query, snapshot and replication
// connections, and every reconnection of each — so that an RDS or
// Aurora IAM auth token (valid 15 minutes; the server checks it only at
// login, so an open connection outlives it) or a password rotated in a
// secret store is current at each login:
//
//	Credentials: func(ctx context.Context) (postgres.Credentials, error) {
//		tok, err := auth.BuildAuthToken(ctx, "db.example.com:5432", "eu-west-1", "etl", awsCfg.Credentials)
//		return postgres.Credentials{Password: tok}, err
//	},
//
// (auth is the AWS SDK's feature/rds/auth; IAM logins need TLS, e.g.
// sslmode=verify-full in the DSN.) A connection for which the hook
// fails, or whose login the server refuses, fails with an error wrapping
// ErrCredentials. With the hook both are retryable: the pipeline's next
// attempt asks it again, so a rotation the hook has not caught up with
// yet is ridden out within the etl.Retry budget; a hook error with a
// method Permanent() bool returning true stops Run at once. Without the
// hook a refused login is permanent: a fixed password rotated on the
// server stops Run at the next login with an error saying so
// (TestStalePasswordAfterRotation). TestCredentialsRotated changes the
// password of the source's role twice under a running pipeline, during
// the snapshot and while streaming, and ends every connection of the
// role each time: Run carries on, and each row is in the output once
// (run on Postgres 15, 16, 17 and 18).
//
// # Shards
//
// A pipeline split into shards over several hosts (etl.Builder.Shard)
// shards Postgres by table groups: shard i's Source reads its own
// Config.Tables with its own Publication and Slot, so each shard's
// slot holds back WAL only for its tables and moves with its own
// checkpoints. Source.Shard returns the Source as it is: the
// configuration is the shard. Build each host's source for the shard it
// runs (shard 2's tables, publication "orders_2", slot "orders_2").
//
// # Teardown
//
// Source.Teardown drops the slot, and the publication when the source
// creates it (Config.CreatePublication), for a pipeline taken out of
// service.
package postgres

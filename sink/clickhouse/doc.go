// Package clickhouse is a stage-and-apply destination that writes each
// stream into a ClickHouse table through clickhouse-go's native protocol,
// in large column blocks, and applies every epoch at most once per block,
// verifiably, even on servers without insert deduplication tokens.
//
// # Tables
//
// A stream's table is created from the engine's Arrow schema on first
// use (CREATE TABLE IF NOT EXISTS): the stream's columns, the metadata
// columns, and _openetl_batch (UInt64: the staged block a row came from).
// Append tables are MergeTree ordered by Table.OrderBy (default
// _openetl_seq). The tables of streams the pipeline merges
// (etl.Builder.Mode with delivery.Merge, which the writers learn from
// their sink.WriterConfig) are ReplacingMergeTree(_openetl_seq) ordered
// by the stream's primary key, with
// _openetl_deleted (UInt8, 1 for a row deleted at the source, from
// _openetl_op); on servers with is_deleted (23.2+) it is the engine's
// second argument. Read a merge table's current rows with
//
//	SELECT ... FROM t FINAL WHERE _openetl_deleted = 0
//
// New columns in a stream's schema are added with ALTER TABLE ... ADD
// COLUMN (to the table, then its staging table). A column the engine
// widened (an integer to a wider one or to Float64, Float32 to Float64,
// anything but an array to String, non-Nullable to Nullable) is altered
// in place with ALTER TABLE ... MODIFY COLUMN, which keeps every value.
// Any other type change, and any change of a merge table's key column
// (ClickHouse refuses those), is not applied: Write fails naming the
// column and both types, and the stream is held back (nothing of it is
// written, nothing truncated) until the column is altered by hand.
//
// Type map (Arrow → ClickHouse; Nullable(T) for nullable fields, except
// key columns and arrays):
//
//	int8..int64, uint8..uint64      Int8..Int64, UInt8..UInt64
//	float32, float64                Float32, Float64
//	bool                            Bool (21.12+), else UInt8
//	utf8, binary                    String (_openetl_op: LowCardinality(String) on 19.1+)
//	dictionary<utf8>, or utf8       LowCardinality(String) (19.1+; 18.12..19.0 with
//	marked an enum (below)          allow_experimental_low_cardinality_type, which the
//	                                destination sets on its statements), else String;
//	                                nullable: LowCardinality(Nullable(String))
//	fixed_size_binary(16) (uuid)    UUID (18.1+; reads back as the source's text form),
//	                                else FixedString(16); a table created with
//	                                FixedString(16) keeps it (the same 16 bytes)
//	fixed_size_binary(n)            FixedString(n)
//	decimal128/256(p,s)             Decimal(p,s): the server picks 32/64/128/256 bits;
//	                                p is capped at 38 (76 on 20.8+), wider values quarantined
//	date32, date64                  Date32 (21.9+), else Date
//	timestamp[unit, tz]             DateTime64(0/3/6/9, 'UTC') (20.1+); older servers
//	                                list timestamps as unsupported, so the engine holds
//	                                them back, except _openetl_synced_at: DateTime('UTC'),
//	                                whole seconds
//	list<T>                         Array(T)
//	struct                          String: the value's JSON text (named Tuples need 20.x)
//	interval, duration, time, null  unsupported (Capabilities): held back by the engine
//
// # Held values
//
// On one server the destination applies patches
// (sink.Capabilities.Patches), so the runner releases held values once
// it takes their column: when a later version of this package (or of a
// server) takes a type that was held back. The next attempt sends them
// in its first epoch as patch batches (sink.PatchMetadataKey), which a
// lane stages like rows, in the table's staging table, as blocks of
// their own (the column is added to the table and the staging table
// first, Nullable). Commit, after the epoch's copies and before it
// records the epoch, applies each patched column with one mutation,
//
//	ALTER TABLE t UPDATE c = <the row's staged value>
//	WHERE isNull(c) AND _openetl_id IN (SELECT _openetl_id FROM
//	_openetl_stage_t WHERE _openetl_batch = token ...) AND fence <= gen
//
// (empty(c) for an Array column, whose rows without a value hold an
// empty array), and waits until system.mutations reports it done, for
// at most Config.ApplyWait. A mutation only sets what is unset, with the
// same values, so applying an epoch again (a Commit retried, a crash
// before the epoch's record, a zombie beside its successor) changes
// nothing more: each held value lands on its row once, with the row's
// _openetl_id and _openetl_seq, and no row is added. A patch of a merge
// table's key whose row was replaced by a newer version since changes
// nothing a reader sees (FINAL reads the newer version, and merges drop
// the older). Mutations, not re-inserted rows: an append
// table (MergeTree) has no version that could replace a row, and a
// merge table's re-inserted row would need a higher _openetl_seq. A
// mutation rewrites the parts that hold patched rows, once per released
// column; a column of a table's sorting key, or one neither Nullable nor
// an Array (created by hand), can't be patched: Write fails naming it.
// A cluster (Config.Cluster) applies no patches (a mutation runs on each
// replica by itself, against what that replica has fetched of the
// staging table): its held values stay under the pipeline's _held/.
//
// # Quarantine
//
// Rows with a value the column's type can't hold are not written and
// never truncated: a date before 1970 or after 2149 in a Date column, a
// timestamp outside DateTime's or DateTime64's range, a sub-second
// timestamp in a DateTime column, a decimal wider than the column, a null
// key of a merge table, a null list. They go to the _openetl_quarantine
// table (table, column, reason, the row as JSON, _openetl_id,
// _openetl_seq) in the same epoch, through the same staging, so exactly
// when the epoch is applied. The reasons are the Reason constants.
//
// # How an epoch travels
//
// Each lane gathers a table's rows into one clickhouse-go batch of the
// table's staging table (_openetl_stage_{table}: the same columns plus
// _openetl_stage_pipeline and _openetl_stage_generation, PARTITION BY
// _openetl_batch) and sends it as one block when it reaches
// Config.BlockRows, when the schema changes, and at PreCommit. Each block
// has a random token, written in its rows' _openetl_batch: the committable
// lists the blocks (table, token, rows). Staged rows are invisible to
// readers of the table.
//
// Commit, on lane 0, copies every block of the epoch into its table:
//
//	INSERT INTO t (cols) SELECT cols FROM _openetl_stage_t
//	WHERE _openetl_batch = token AND (SELECT max(generation) FROM _openetl_fence
//	WHERE pipeline = p) <= gen SETTINGS min_insert_block_size_rows = rows+1, ...
//
// The squashing settings make the copy one insert block, so one part of
// an unpartitioned table: a block lands whole or not at all. Then it
// records the epoch in _openetl_epochs and drops the staging partitions.
// An epoch recorded there is skipped: Commit is idempotent. Before a copy
// Commit checks that the block is still staged whole: a partition gone
// (dropped by hand) is an error, never an epoch recorded without its rows.
// Collect (sink.Collector), which the runner calls after Recover, drops
// the blocks older generations of the pipeline left staged (sent before
// a crash, in no checkpoint record), except the head epoch's, and
// counts them.
//
// # Guarantee
//
// A crash between a block's copy and the epoch's record leaves the copy
// in the table. Before copying a block that may already be there (one
// this process did not stage, or whose copy it sent before and saw fail),
// Commit counts the block's rows in the table (WHERE _openetl_batch =
// token) and copies it only when there are none. So a replayed apply
// never duplicates a block, on 18.16 as on current servers: append
// streams from an exact source are exactly once, merge streams are
// exactly once per version (effectively once from a superset source: a
// repeat lands on the same key and _openetl_seq).
//
// The count must not miss a copy still running. Each copy is named in
// system.processes (query_id openetl-apply-{pipeline hash}-...), and reads
// the fence in the same query, after the server registered it. Recover
// raises the fence first, then waits until no copy of the pipeline runs
// (Config.ApplyWait): a zombie's copy registered before that wait is
// waited for and then counted; one registered after it reads the raised
// fence and copies nothing. Commit counts only after the same wait.
//
// # Retries and several addresses
//
// A block whose send to its staging table fails (Write, PreCommit), or
// whose copy into its table fails (Commit), is tried again, up to
// Config.Retries times, with the same sealed block: the failed
// connection is closed, and the next try takes a fresh one from the
// pool, whose dialer moves on to the next of Options.Addr when one is
// down. Before each retry the writer asks, through the new connection,
// whether the failed try landed after all (its answer may have been
// lost): it waits until the failed query (named by its query ID) no
// longer runs, then counts the block's rows in the staging table (a
// send) or the table (a copy), and sends again only if there are none.
// So a retry never doubles a block, wherever the failure happened. A
// Commit that still fails is retried by the runner, verified the same
// way, and a failed send fails the attempt (the next one redoes the
// epoch).
//
// The guarantee is the same on every server version: the count does
// not need insert deduplication tokens, which servers that have them
// (22.2+) get as a second guard. With the Class (stage-and-apply) and
// Capabilities (merge, no skip by _openetl_id) this destination reports,
// the delivery package works out: exactly once for either mode from an
// exact-replay source; from a superset source (one that may repeat
// records after a crash), effectively once for merge and at least once
// for append, since a repeated record is a new row in a new block.
//
// What this rests on, stated exactly:
//   - one server: the fence, system.processes and the parts are one
//     server's (every address reaches it). Behind a Distributed table or with several replicas and
//     Replicated tables, the count and the fence are not linearizable;
//     on servers with insert deduplication tokens (22.2+) every copy also
//     carries the token pipeline/table/block and the tables are created
//     with non_replicated_deduplication_window, which covers a repeat the
//     count misses there, but this package has only run against 18.16;
//   - a table nobody else writes blocks into with our tokens, and whose
//     rows are not deleted (TTL, ALTER DELETE) between a crash and the
//     next attempt's count;
//   - ClickHouse's durability: a part is renamed into place atomically,
//     but not fsynced by default, so a power loss can lose what the
//     server acknowledged.
//
// # Clusters
//
// With Config.Cluster instead of Conn, the destination writes to a
// sharded, replicated cluster: Cluster.Shards lists each shard's
// replicas' addresses, and the destination opens, per shard, one pool
// over its replicas in order (every query goes to the first replica
// that answers, and moves on when it stops) and one pool per replica
// for the statements each replica runs (Destination.Close closes them):
//
//	dst, err := clickhouse.New(ctx, clickhouse.Config{
//		Database: "analytics",
//		Cluster: &clickhouse.Cluster{
//			Shards: [][]string{{"ch1a:9000", "ch1b:9000"}, {"ch2a:9000", "ch2b:9000"}},
//			Name:   "events", // remote_servers: a Distributed table t_all per table t
//		},
//	})
//
// Every table of the destination is the Replicated form of its engine
// (ReplicatedMergeTree, ReplicatedReplacingMergeTree), the staging and
// state tables too, at /clickhouse/tables/{shard}/openetl/DATABASE/TABLE
// in ZooKeeper with replica name {replica}: the servers' macros
// (Cluster.ZooKeeperPath sets another prefix, e.g. for servers that
// are each a shard of their own: /clickhouse/tables/{replica}/).
//
// DDL is per replica, never ON CLUSTER: CREATE ... IF NOT EXISTS runs on
// every replica of every shard that answers, and ALTER ... ADD or
// MODIFY COLUMN through the replica the shard's queries use (a
// Replicated table's ALTER reaches its other replicas through
// ZooKeeper; a Distributed table, each server's own, is altered on
// every replica). ON CLUSTER, which 18.16 has with the servers'
// distributed_ddl queue, is not used because it needs a remote_servers
// cluster listing exactly Cluster.Shards (Cluster.Name is optional, and
// for reads); because the server that takes it waits for every host of
// that cluster, up to distributed_ddl_task_timeout (180 s by default),
// and then fails (code 159) when one is down, though the others ran it,
// where the writer must go on with a replica down; and because
// statements per replica reach the same tables, a replica that was down
// getting its own at the next attempt. Every statement is idempotent: "already exists" from a writer racing
// this one (a zombie, another process on the same tables) is success,
// so two writers creating and altering the same tables at once both go
// on.
//
// A row goes to shard FNV-1a(value) mod shards: of its key columns for a
// merge table, so that every version of a key lands on the same shard
// and FINAL on each shard is FINAL of the whole; of _openetl_id for an
// append table (the same for a record however often it is read, so a
// replayed record goes where it went before); of every column for a row
// without _openetl_id. Integers hash as 8 bytes whatever their width, so
// a widened key column routes as before; changing the shards' number or
// order moves keys (older versions of a key stay on the shard that had
// them): re-sync into new tables instead.
//
// A table the user shards by a column of theirs (Cluster.ShardBy: an
// integer column, for a merged stream one of its key columns) routes a
// row to shard value mod shards, a signed value taken as the unsigned
// integer of its width: ClickHouse's own rule for a Distributed table's
// integer sharding key over shards of weight 1, in remote_servers'
// order. The writer creates the table's Distributed table (Cluster.Name)
// with that column as its sharding key:
//
//	CREATE TABLE db.t_all AS db.t ENGINE = Distributed('events', 'db', 't', tenant)
//
// so rows another client inserts through it land on the shard the
// writer would pick, and every version of a key on one shard. The rule
// holds when remote_servers lists the shards in Cluster.Shards' order,
// each of weight 1; a Distributed table that already exists is kept as
// it is. Another sharding expression (cityHash64 of a string, a range)
// is the user's to compute into an integer column, before the
// destination (a transform) and, for other writers, in their inserts.
// Without ShardBy the Distributed table has no sharding key, so
// ClickHouse refuses inserts through it when there are several shards
// (FNV-1a is not a ClickHouse function).
//
// Each shard is then exactly one server of the sections above: its own
// staging, blocks, fence (_openetl_fence), applied epochs
// (_openetl_epochs) and verification, all through the replica its pool
// uses, so counts read the replica that was written. A lane's
// committable holds every shard's. Commit first checks that every
// shard's blocks are staged (or applied), then applies the shards at
// once; an epoch applied on some shards when a Commit failed is applied
// on the others by the retry, and skipped where it was. Recover raises
// every shard's fence and reports the epoch Applied when every shard
// applied its share, Recoverable when each share not applied is still
// staged, Lost when none was applied and a share is gone; applied on
// some shards and gone from others is an error (a replay would double
// the applied shards' rows), which the check before applying makes
// possible only when a replica dies between that check and its copy.
//
// Replicas: a replica that stops answering is skipped, the shard's
// queries move to the next, and a block being sent is sent again there
// after the same check as on one server. A replica that was down when
// the database or a table was created gets it at the next attempt
// (Recover creates the database and state tables on every replica, and
// the attempt's first Write of a table its tables); until then a missing
// database is not a permanent error on a cluster. Before Recover calls
// an epoch Lost it asks every replica of the shard, since the one in
// use may not have fetched the parts another applied: Lost only when
// all answer and none has the epoch; with one down, Recover fails until
// it is back. Replicated tables deduplicate a
// repeated insert of the same block by its checksum, a second guard
// when a copy retried through another replica repeats one that landed.
// What this rests on beyond one server's list: ClickHouse's replication
// is asynchronous, so a part acknowledged by a replica that dies before
// the others fetched it is missing until that replica returns (a staged
// block so missing makes its epoch Lost, and the runner replays it); the
// fence is read on the replica that copies, so a zombie copying through
// another replica than the one Recover used may see the raised fence
// late (a network partition between replicas; not a crash).
//
// # Limits
//
//   - There is no overwrite mode, and deletes are soft (a deleted key's
//     row is kept, _openetl_deleted = 1): Capabilities declares neither
//     overwrite nor hard deletes, so Build refuses them, naming the
//     stream.
//   - A Write is never split: a block holds whole batches, so it can pass
//     Config.BlockRows by one batch.
//   - Arrays of enums and MySQL SET columns are plain strings, not
//     LowCardinality; structs are stored as their JSON text.
//   - Several addresses in the caller's clickhouse.Options must be ways
//     to the same data: one server's ports, or proxies and load
//     balancers in front of one server (see Guarantee). Not independent
//     servers, and not replicas of Replicated tables: a block staged
//     through one replica may not be there yet through another, and the
//     count that guards a retried copy would not be exact. A cluster is
//     Config.Cluster's (see Clusters).
//   - Clusters are tested on 18.16 only (2 shards x 2 replicas with
//     ZooKeeper); the statements for current servers (Keeper, dedup
//     tokens, is_deleted) are checked word for word by unit tests. A
//     user's sharding is an integer column (Cluster.ShardBy), not an
//     arbitrary expression. Held values are not released into a
//     cluster (Held values).
//   - Writes use clickhouse-go's column Append with Go slices filled once
//     per batch per column (strings and timestamps in slices the writer
//     reuses); decimals and fixed strings cost an allocation per value
//     (the driver takes them only as values that own their bytes). ch-go,
//     which could take Arrow buffers without copying, does not speak
//     18.16's protocol (it fails on the first query). Each staged row
//     carries three bookkeeping columns (_openetl_batch, the staging
//     table's pipeline and generation): about 1.15x the client CPU of a
//     plain insert of the same rows.
//
// Declared enums: the engine gives a declared enum column (a MySQL
// enum('a','b'), or a Postgres enum type, which the Postgres source
// declares by its labels) as utf8 marked by the field metadata
// openetl.logical_type = enum (engine.LogicalTypeKey,
// engine.LogicalTypeEnum); such a field, like a dictionary<int, utf8>
// one, becomes LowCardinality(String) (LowCardinality(Nullable(String))
// when nullable; on 18.12..19.0 with
// allow_experimental_low_cardinality_type, which the destination sets on
// its statements; String before 18.12). The mark names no labels, so a
// label added to the source's enum changes nothing here, and any label
// is taken. A column that already exists keeps its type when only
// LowCardinality differs (a table created before the engine marked
// enums keeps its String column).
//
// Reading merge tables needs FINAL (or OPTIMIZE ... FINAL first): until
// parts merge, older versions of a key are stored beside the latest.
package clickhouse

// Package iceberg is a stage-and-apply destination that writes each
// stream into an Apache Iceberg table (format v2, or v3 by option)
// through an iceberg-go catalog, exactly once: a SQL catalog on SQLite
// or Postgres, or a REST catalog, with the warehouse on a local
// directory (file://) or any bucket iceberg-go's gocloud.dev IO reaches
// (s3://, gs://, azblob).
//
//	db, _ := sql.Open(sqliteshim.ShimName, "file:lake/catalog.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
//	cat, _ := sqlcat.NewCatalog("lake", db, sqlcat.SQLite, iceberg.Properties{"warehouse": "file:///abs/lake/warehouse"})
//	dst, _ := iceberg.New(iceberg.Config{Catalog: cat, Namespace: []string{"shop"}})
//	p, _ := etl.NewPipeline("shop").From(src).To(dst).Checkpoints(store).
//		Mode(delivery.Merge, "orders").Build() // orders is merged by its primary key
//
// How each table is written (its stream's write mode, key and delete
// handling) is the pipeline's to say, and reaches the writers in their
// sink.WriterConfig; Config holds only physical options (partition
// specs, file sizes, grouping).
//
// On SQLite, open the catalog with _txlock=immediate (as above): iceberg-go
// reads and then writes in one transaction, and under WAL a deferred
// transaction that must upgrade to a writer fails at once with
// SQLITE_BUSY ("database is locked") when another lane or process wrote
// meanwhile, busy_timeout or not; an immediate one waits for the lock.
//
// # Catalogs with auth
//
// The caller opens the catalog, so its authentication is iceberg-go's:
// for a REST catalog, rest.WithCredential("id:secret") (OAuth2 client
// credentials, tokens fetched from the catalog's /v1/oauth/tokens or
// rest.WithAuthURI and refreshed before they expire), rest.WithOAuthToken
// (a bearer token), rest.WithSigV4 (AWS Glue, S3 Tables) or a custom
// rest.AuthManager. SigV4 is rest.WithSigV4RegionSvc(region, service)
// (service "glue", "s3tables" or, the default, "execute-api"), with
// rest.WithAwsConfig for credentials other than the SDK's default chain.
// The client-credentials, bearer-token and SigV4 paths are tested
// through proxies that enforce them in front of the REST catalog test
// server: tokens that expire during the sync, and every request's SigV4
// signature recomputed with aws-sdk-go-v2's signer.
//
// Destination.Permanent (sink.Classifier) calls a refusal permanent: a
// 401 or 403 from the catalog (a SigV4 signature made with a wrong or
// rotated secret is a 403), or the token endpoint's invalid_client,
// invalid_grant, unauthorized_client, invalid_scope, invalid_request or
// unsupported_grant_type. Run returns such an error at once and
// etl.IsPermanent reports it; an unreachable token endpoint, a 419
// (authorization expired) and server errors are retried.
//
// # How an epoch travels
//
// The first batch of a schema creates the table from the batch's Arrow
// schema when it is missing (fresh field IDs; the IDs then never change,
// columns are matched by name), or adds nullable columns and widens int →
// long, float → double and decimal precision when the engine's schema
// grew. For an Append table, Write hands batches to a writer that
// encodes Parquet data files under the table's data location in the
// background; PreCommit waits for them. A Merge table's batches are kept
// in memory (retained, not copied) until PreCommit, which writes them.
// The writer is the engine's (arrow-rs, one cgo call per row group's
// worth of rows; the statistics for the manifest come from the file's
// footer) for tables of the codecs and types it takes, partitioned ones
// too when each partition field is identity, year, month, day, hour,
// bucket, truncate or void of a top-level int, long, date, timestamp,
// timestamptz or string column (the sink then computes each row's
// partition and writes a file per partition), and iceberg-go's
// otherwise (Config.Encoder, Encoder). No snapshot refers to
// the files, so readers don't see them. The committable lists the files with
// their statistics, so another process can add them.
//
// After the checkpoint record holding the committables is the log's HEAD,
// lane 0's Commit makes one Iceberg commit per table, once the group is
// due (see below): it adds every lane's files of the table in one snapshot
// and, in the same commit, sets the table properties
//
//	openetl.{pipeline}.epoch       every file of this epoch and before is in
//	openetl.{pipeline}.generation  the attempt that applied it
//	openetl.{pipeline}.fence       the highest generation that recovered
//
// (where the markers live is Config.Fence: see Fencing below; by
// default they are table properties, and the epoch's snapshots record
// them in their summaries too). The commit carries a requirement, which
// the catalog checks against the table's current metadata, that the fence
// is not above the writer's generation and the table does not already
// record the epoch: a repeated Commit is a no-op, and a zombie's Commit
// fails with sink.ErrFenced. The SQL catalog validates requirements on the
// metadata it loaded and then swaps the metadata location only if it is
// still that one, so the check and the commit are atomic.
//
// Recover(gen) raises the fence on every table of the namespace that
// carries the pipeline's markers (tables are marked with fence 0 when
// the pipeline first writes them), with the same kind of requirement, so
// two attempts recovering at once can't lower it.
//
// # Fencing
//
// Config.Fence says where the markers live:
//
//   - FenceProperties: table properties only. On a REST catalog the
//     pipeline's requirement can't travel with the commit, so it is
//     checked on metadata loaded right before it: a window of one
//     request in which a zombie's commit can still land after Recover
//     raised the fence (the checkpoint log's fence keeps the zombie's
//     epochs out of the log all the same).
//   - FenceSnapshots: in the summary of the snapshots the pipeline
//     commits. Each epoch's snapshots record the epoch, generation and
//     fence; Recover raises the fence with a snapshot of its own, without
//     files; the markers are read from the newest snapshot, from the
//     current one back, that has them. Every commit requires branch main
//     to be at the snapshot the markers were read from
//     (assert-ref-snapshot-id, which the catalog checks with the commit),
//     so the check is atomic on REST catalogs too: a zombie's commit
//     that passed its check when Recover raised the fence is refused,
//     and its replay is fenced (tested with the commit held in flight).
//     For catalogs that refuse or drop custom table properties. The
//     price: one snapshot without files per table and attempt (and one
//     when the pipeline creates a table); the markers must stay
//     reachable — Maintain carries them into its compaction snapshot and,
//     before expiring snapshots, onto the current one, but another
//     engine's rewrite followed by an expiry that removes every snapshot
//     that has them leaves the table's markers unreadable, and Commit and
//     Recover then fail ("the pipeline's markers can't be read") rather
//     than guess; and rolling a table back by hand rolls its markers
//     back too, the fence included, until the next Recover raises it. A
//     pipeline moved to FenceSnapshots reads the markers its tables have
//     as properties too, so it goes on from the last epoch applied; but
//     a copy still running with FenceProperties reads only those and is
//     not fenced by a raise in a snapshot: stop every copy before the
//     move.
//   - FenceAuto (the default): table properties, with each epoch's
//     snapshots recording the markers too and the higher of both
//     checked. A commit that sets the properties and fails is tried
//     again without them (not on a SQL catalog, which keeps any
//     property: there it fails as it is); if that one succeeds, or the
//     catalog took the properties and did not keep them, the
//     Destination goes on as FenceSnapshots (logged at Warn). Both kinds of catalog are tested
//     through a proxy in front of the REST catalog test server that
//     refuses (400) or drops openetl.* properties: zombies are fenced
//     behind both, and a pipeline syncs exactly once behind the one that
//     refuses (400) or answers 503 (an outage is no refusal: the
//     commit is retried with the properties). On a catalog that can't
//     check the fence with the commit (REST), Recover also raises the
//     fence in a snapshot without files, as FenceSnapshots does, and
//     every epoch's commit requires main at the snapshot it checked, so
//     FenceAuto has no window either (tested with the commit held in
//     flight); the price is FenceSnapshots' one snapshot per table and
//     attempt. On the SQL catalog the check is atomic and the raise is
//     a property update only.
//
// # Conflicts
//
// A commit that loses a race — another writer committed to the table
// after it was loaded, e.g. maintenance, a lane evolving the schema, or
// another shard of the pipeline (etl.Builder.Shard) writing the same
// table — is redone: a failed branch assertion ("requirement failed:
// branch main has changed", which iceberg-go v0.7.0 does not report as
// table.ErrCommitFailed) is turned into one, after re-checking the
// pipeline's requirement on fresh metadata; iceberg-go refreshes and
// replays a failed commit only on tables that set
// commit.retry.num-retries (its default is 0, and tables this package
// creates don't set it), and past that Commit reloads the table,
// re-checks the pipeline's fence and epoch marker (files the table
// already records are skipped) and builds the transaction again, up to
// Config.MaxCommitTries times, pausing between tries (20ms doubling to
// 1s, each drawn at random from its upper half) so that writers that
// lost to the same commit don't all come back at once. A Commit that
// loses every try returns an error; the runner calls it again. Metadata
// and manifest files written by failed attempts are orphans: Maintain
// removes them, with data files of epochs that were never committed.
//
// Shards of one pipeline may write one table: each commits its own
// epochs, under its own markers (openetl.{name.shard-i-of-S}.*), and
// their commits race, above all when shards started together close
// their epochs together. Measured through the REST catalog test server
// (BENCHMARKS.md, "Shards into one Iceberg table"), every epoch committed, exactly once
// in every run: 16 shards at 10s epochs needed 2.9 retries per commit,
// 8 shards at 1s epochs (8 commits/s asked of one table) 2.2; past what
// the catalog takes per table (4 to 6 commits/s there) commits fall
// behind and their retries grow.
// With the default Grouping a shard commits a table about once a
// minute, so S shards ask S/60 commits/s of it: there is no per-table
// committer, and none is needed while that stays well below what the
// catalog takes for one table. Lengthen Grouping.Interval before adding
// shards past that.
//
// # Garbage collection
//
// Data files of an epoch whose checkpoint record was never written (an
// attempt crashed, failed or was fenced between PreCommit and the
// record) are in no snapshot and no record. Collect (sink.Collector),
// which the runner calls once per attempt after Recover and before any
// Write, removes them: the writer names its data files with a write
// UUID that carries the pipeline (version 8, a hash of the pipeline's
// name in its first bytes), and Collect scans each of the pipeline's
// tables for such files that no snapshot refers to and the record the
// attempt resumes from doesn't name (files waiting for their group are
// named there), asks the runner whether the attempt's generation still
// holds the checkpoint log's HEAD, and only then deletes them. Nothing
// else is touched: compaction's and other writers' files, metadata of
// commits that lost a race, and a Merge table's equality-delete files and
// files of hard-deleted keys (iceberg-go names those itself) are
// Maintain's (OrphansOlderThan). Position-delete files of a commit that
// never happened carry the pipeline's write UUID and are Collect's.
//
// # Merge
//
// A stream the pipeline merges (etl.Builder.Mode with delivery.Merge) is
// upserted by its primary key: PreCommit keeps, of each key's rows in the
// epoch, the one with the highest _openetl_seq, and writes those as data
// files. With soft deletes (the default) a deleted key keeps a row with
// _openetl_deleted = true (the live view is "WHERE NOT
// _openetl_deleted"); with hard deletes (etl.Builder.Deletes) it has no
// row. How the epoch removes the keys' older rows is Config.MergeDeletes
// (per table: TableConfig.MergeDeletes):
//
//   - PositionDeletes (the default): Iceberg v2 position deletes, which
//     pyiceberg's scan, DuckDB's iceberg_scan and Spark with Iceberg's
//     runtime read (all tested), and every reader of v2 tables should
//     (Trino: not tested here).
//     PreCommit writes no delete file, only, with hard deletes, a small
//     file of the keys deleted for good; both are named in
//     the committable. Commit, on lane 0, reads the keys back from the
//     epoch's files, looks their older rows up in a key index it keeps in
//     memory (key → data file and row of the live row, updated by each
//     commit; a single integer key is held by value, about 40 bytes a key,
//     others by their encoding, about 80), writes a position-delete file
//     with those rows (its name carries the pipeline's write UUID, like
//     the data files) and adds it with the epoch's data files in one
//     row-delta snapshot. The index describes one snapshot of the table:
//     when the table is at another (the process is new, compaction
//     rewrote files, another writer or attempt committed, Recover took an
//     epoch back), Commit first rebuilds it from the live data files' key
//     columns and their deletes, and the commit requires the
//     table still to be at the snapshot the rows were found in (a commit
//     that lost that race finds them again on the new head). The files of
//     keys deleted for good are removed once their epoch is in the table.
//     On a format v3 table (Config.Properties "format-version": "3") the
//     deletes are deletion vectors instead: one per data file, in a Puffin
//     file named like the position-delete files, each holding the rows
//     the file's previous vector held, which it replaces in the same
//     snapshot, and those of the file's position-delete files (a table
//     upgraded from v2 keeps them; readers ignore them once the file has
//     a vector); pyiceberg and DuckDB read those too (tested).
//   - EqualityDeletes: an Iceberg v2 equality-delete file with every key
//     of the epoch, written at PreCommit; the deletes remove older rows of
//     the keys (lower data sequence numbers) and not the new ones. Nothing
//     is looked up, but pyiceberg 0.12 can't scan such a table, Snowflake
//     refuses it, and DuckDB 1.5 reads it slowly (see BENCHMARKS.md).
//
// The mode is recorded per file in the committable, so a table whose mode
// changes while epochs wait is committed as each epoch was written. A
// replayed epoch of a superset source is not compared with the table's
// current _openetl_seq: an older version can replace a newer one if a
// source replays it after the newer one was committed.
//
// # Reading
//
// Any Iceberg reader over the same catalog: pyiceberg's SqlCatalog on the
// SQLite file (with the same catalog name), DuckDB's iceberg_scan on the
// table's current metadata file, Spark or Trino. The tests read every
// mode back with pyiceberg 0.12, the position-delete merge tables with
// DuckDB 1.5.5 too, and the REST kill test's tables (a merge table with
// position deletes, written through SIGKILLs) with Spark 4.0 and
// iceberg-spark-runtime 1.10 as well: the same rows as pyiceberg.
//
// # Grouping epochs into commits
//
// Every epoch is durable on its own (PreCommit writes its files, the
// checkpoint record lists them), but tables are committed only when a
// group is due (Config.Grouping: one table has 128 MiB of waiting files or
// has waited 60s, whichever first, by default; then every waiting table
// is committed; Grouping{} commits every epoch). Until then Commit
// leaves the files waiting and every lane lists its waiting files again
// in its next committables, until a Commit has seen them in the table, so
// the HEAD record always names every file not yet in the table. The epoch
// marker means "every file of this epoch and before is in the table", and
// a commit requires the table's marker to be below the oldest file it
// adds, so nothing is added twice. When the attempt ends (a Sync's end, a
// Run's clean stop) the runner closes lane 0's writer, which commits
// what is still waiting; after a crash, Recover finds the waiting files
// in the HEAD record (Recoverable) and lane 0 carries them on. A Merge
// group gets one row-delta snapshot per epoch, in epoch order, in one
// catalog commit: an epoch's equality deletes must have a higher data
// sequence number than the rows of earlier epochs they replace, and its
// position deletes may name rows an earlier epoch of the group added.
// On a format v3 table (deletion vectors) each epoch of the group is a
// catalog commit of its own, in epoch order: iceberg-go refuses a
// deletion vector of a data file the same commit adds.
//
// An epoch whose files wait is committed in the checkpoint log but not
// visible: the writer reports the newest epoch up to which every file is
// in its table (sink.Visibility; the destination declares
// sink.Capabilities.Deferred), and the runner acknowledges source
// positions (Kafka offsets, a Postgres slot's confirmed LSN) only up to
// it, so a group lost before its commit is read again from the source.
//
// Grouping saves snapshots, manifests and metadata files; it does not
// merge data files, which are written per epoch, table and lane before
// the epoch's commit point. The knobs that set the file size are the
// pipeline's epoch length (etl's EpochEvery) and compaction (Maintain with
// Compact), which keeps the markers intact.
//
// # Overwrite
//
// A table of a stream written in overwrite mode (etl.Builder.Mode with
// delivery.Overwrite) is replaced by each refresh: a
// Sync that reads its source to the end. The refresh's files wait
// (whatever the grouping) until the runner calls Finish after the Sync's
// last epoch (its checkpoint record is Final), which commits one
// snapshot that removes every data file of the table and adds the
// refresh's. Readers see the previous contents, whole, until then, and
// the new contents, whole, after. A crash mid-refresh (or a Run stopped,
// or a Sync cancelled) shows readers the previous contents; the next
// attempt finds the refresh's files in the HEAD record and goes on with
// it, reading from the same record's resume states, and replaces the
// table when that read ends. A crash after the Final record and before
// Finish is finished by the next attempt's Recover, so its reads start a
// new refresh.
//
// # Maintenance
//
// Destination.Maintain expires snapshots, compacts small data files
// (rewriting the rows the delete files of a Merge table remove, and
// dropping position-delete files and deletion vectors that apply only to
// rewritten files) and removes orphan files, as MaintainOptions says; the
// pipeline's markers survive it (table properties are not touched;
// markers in snapshot summaries are carried over, see Fencing). A
// host calls it when it likes (a cron, between syncs), or sets
// Config.Maintenance to have lane 0's writer run it every
// Maintenance.Every, between two Commits of a Sync or Run: the files the
// writer knows are waiting for their group are never removed, and a
// failed run is logged at Warn and tried again at the next interval. A
// compaction moves the table, so the next Commit of a Merge table
// rebuilds its key index (see Merge).
//
// # Limits
//
//   - Partition specs (TableConfig.Partition) apply when the destination
//     creates a table; a Merge table may only be partitioned by key
//     columns; a spec changed under a running pipeline fails the commit.
//   - A refresh that writes no rows leaves an Overwrite table as it was
//     (there is no snapshot to replace it with).
//   - Grouped files wait up to Grouping.Interval (plus an epoch) before
//     readers see them, and are listed in every checkpoint record until
//     then (about 0.7 KB per file of an 8-column table, more with more
//     columns: their statistics travel along).
//   - A Merge table's rows of an epoch are held in memory until
//     PreCommit; with position deletes, lane 0 also holds the key index
//     of each Merge table it commits (about 40 bytes a key for one
//     integer key column, 80 for others), and rebuilds it, reading every
//     live data file's key columns, after another writer moved the table
//     (compaction included) and in every new process (about 0.3 s per
//     million keys here, see BENCHMARKS.md).
//   - Format v3 tables (Config.Properties "format-version": "3") can't
//     be overwritten (CheckStream refuses it): iceberg-go v0.7.0 wants a
//     first_row_id on every file that replaces a table's contents. Their
//     appends are committed as row deltas, which assign them.
//   - A schema change Iceberg can't make (e.g. long → string, or long →
//     double, which the engine does when a JSON field turns fractional)
//     is reported by Destination.CheckSchema (sink.SchemaChecker), which
//     the runner asks about each new schema: it holds such columns back
//     (their values under the pipeline's _held/ directory, the table's
//     column left as it was, null for those rows) instead of failing the
//     epoch. A Writer used without the runner fails Write or PreCommit
//     with a *SchemaError naming the table, column and both types.
//   - Held values are released (Capabilities.Patches) once the table
//     takes their column: the runner writes them as patch batches
//     (sink.PatchMetadataKey) in the attempt's first epoch. PreCommit
//     adds the patched columns to the table if it lacks them and writes
//     the patches as a Parquet file under the table's data location,
//     named in the committable but never added to the table. Commit, in
//     the transaction that applies the epoch, after the epoch's own
//     snapshots, finds the live row of each patched _openetl_id (reading
//     the _openetl_id column of every live data file, leaving out rows
//     that position deletes and deletion vectors delete), copies each
//     row that has a null where a patch sets a value into a new data
//     file with the value set (same _openetl_id and _openetl_seq; a
//     row written before the column existed counts as null) and deletes
//     the old row by position (a deletion vector on a v3 table), in one
//     more row-delta snapshot of the epoch's commit: under its fence
//     and epoch marker, so a Commit redone after the catalog took it
//     changes nothing, and an epoch taken back (Recover, Lost) takes the
//     patch back with it. A patch of a row the epoch replaces or deletes
//     (Merge) finds no live row and changes nothing; a Merge table's key
//     index is rebuilt at its next commit. A Commit with patches reads
//     the _openetl_id column of the whole table once, and holds the
//     patches and the patched ids in memory; the patched rows are
//     rewritten, not their files. The patch file is removed once its
//     epoch is in the table. Overwrite tables get no patches (their next
//     refresh writes the column whole).
//   - Fencing is atomic with the commit on the SQL catalog (SQLite,
//     Postgres). Other catalogs (REST) can't carry the pipeline's
//     requirement: with FenceProperties it is checked on metadata loaded
//     right before the commit, which leaves a window of one request (the
//     checkpoint log's fence still keeps a zombie's epochs out);
//     FenceSnapshots and the default FenceAuto close it (see Fencing).
//     The REST path is tested against Apache Iceberg's REST catalog test
//     server.
//   - A grouped epoch whose waiting files disappear before the group is
//     committed (deleted by hand, or by Maintain's orphan removal) is
//     reported Lost after its Commit returned nil, and the log rewinds
//     and reads it again from the source. That loses nothing: the
//     destination declares sink.Capabilities.Deferred and its writer
//     reports which epochs are visible (Visible), and the runner tells
//     the source it may drop positions only of those. It costs the
//     re-read, and holds the source's positions (a Kafka group's
//     offsets, a Postgres slot's WAL) up to Grouping.Interval behind:
//     keep Maintain's OrphansOlderThan above Grouping.Interval plus an
//     epoch.
//   - After a stopped Run, waiting files are committed when lane 0's
//     writer closes, best effort; the next attempt applies what is left.
//   - A Merge table's equality-delete files and files of hard-deleted
//     keys of epochs never recorded are not collected by the next attempt
//     (their names don't carry the pipeline); Maintain with
//     OrphansOlderThan removes them.
//   - Collect's scan reads the manifests of every snapshot of each of
//     the pipeline's tables, once per attempt: on a local warehouse
//     about 2 ms per snapshot (24 ms at 10 snapshots, 420 ms at 200, one
//     table). Expire old snapshots (Maintain with ExpireOlderThan) to
//     keep it short, above all on object storage.
//   - pyiceberg 0.12 can't scan a Merge table written with
//     EqualityDeletes (iceberg-go, Spark, Trino and Flink can; DuckDB 1.5
//     can, slowly); the default PositionDeletes has no such limit.
package iceberg

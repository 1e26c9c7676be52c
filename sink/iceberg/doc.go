// Package iceberg is a stage-and-apply destination that writes each
// stream into an Apache Iceberg table (format v2) through an iceberg-go
// catalog, exactly once: a SQL catalog on SQLite or Postgres, with the
// warehouse on a local directory (file://) or any bucket iceberg-go's
// gocloud.dev IO reaches (s3://, gs://, azblob).
//
//	db, _ := sql.Open(sqliteshim.ShimName, "file:lake/catalog.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
//	cat, _ := sqlcat.NewCatalog("lake", db, sqlcat.SQLite, iceberg.Properties{"warehouse": "file:///abs/lake/warehouse"})
//	dst, _ := iceberg.New(iceberg.Config{Catalog: cat, Namespace: []string{"shop"},
//		Tables: map[string]iceberg.TableConfig{"orders": {Mode: iceberg.Merge, Key: []string{"id"}}}})
//
// # How an epoch travels
//
// The first batch of a schema creates the table from the batch's Arrow
// schema when it is missing (fresh field IDs; the IDs then never change,
// columns are matched by name), or adds nullable columns and widens int →
// long, float → double and decimal precision when the engine's schema
// grew. For an Append table, Write hands batches to iceberg-go's writer,
// which encodes Parquet data files under the table's data location in the
// background; PreCommit waits for them. A Merge table's batches are kept
// in memory (retained, not copied) until PreCommit. No snapshot refers to
// the files, so readers don't see them. The committable lists the files with
// their statistics, so another process can add them.
//
// After the checkpoint record holding the committables is the log's HEAD,
// lane 0's Commit makes one Iceberg commit per table: it adds every lane's
// files of the table in one snapshot and, in the same commit, sets the
// table properties
//
//	openetl.{pipeline}.epoch       the last epoch applied
//	openetl.{pipeline}.generation  the attempt that applied it
//	openetl.{pipeline}.fence       the highest generation that recovered
//
// The markers are table properties, not snapshot summary fields (which
// the epoch's snapshot has too, for people), because compaction and
// snapshot expiry drop summaries. The commit carries a requirement, which
// the catalog checks against the table's current metadata, that the fence
// is not above the writer's generation and the table does not already
// record the epoch: a repeated Commit is a no-op, and a zombie's Commit
// fails with sink.ErrFenced. The SQL catalog validates requirements on the
// metadata it loaded and then swaps the metadata location only if it is
// still that one, so the check and the commit are atomic.
//
// Recover(gen) raises the fence on every table of the namespace that
// carries the pipeline's properties (tables are marked with fence 0 when
// the pipeline first writes them), with the same kind of requirement, so
// two attempts recovering at once can't lower it.
//
// # Conflicts
//
// A commit that loses a race — another writer committed to the table
// after it was loaded, e.g. maintenance, or a lane evolving the schema —
// is redone: iceberg-go v0.7.0 refreshes and replays on a failed
// compare-and-swap, and a failed branch assertion ("requirement failed:
// branch main has changed", which iceberg-go does not report as
// table.ErrCommitFailed) is turned into one, after re-checking the
// pipeline's requirement on fresh metadata; past the library's retries,
// Commit reloads the table and builds the transaction again, up to
// Config.MaxCommitTries times. Metadata and manifest files written by
// failed attempts are orphans: Maintain removes them, with data files of
// epochs that were never committed.
//
// # Merge
//
// A Merge table (Config.Tables) is upserted by its key: PreCommit keeps,
// of each key's rows in the epoch, the one with the highest _openetl_seq,
// writes those as data files and writes an equality-delete file with
// every key of the epoch; Commit adds both in one row-delta snapshot. The
// deletes remove older rows of the keys (lower data sequence numbers) and
// not the new ones. With soft deletes (the default) a deleted key keeps a
// row with _openetl_deleted = true (the live view is "WHERE NOT
// _openetl_deleted"); with TableConfig.HardDeletes it has no row. A
// replayed epoch of a superset source is not compared with the table's
// current _openetl_seq: an older version can replace a newer one if a
// source replays it after the newer one was committed.
//
// # Reading
//
// Any Iceberg reader over the same catalog: pyiceberg's SqlCatalog on the
// SQLite file (with the same catalog name), Spark, Trino or DuckDB.
//
// # Small files
//
// Every epoch is durable on its own, so each epoch adds at least one data
// file per table and lane, and one snapshot per table. Grouping several
// epochs into one snapshot would not reduce the files (they are written
// at PreCommit, before the epoch's commit point), only the snapshots; the
// knobs that reduce files are the pipeline's epoch size (etl's
// EpochEvery: e.g. 60s or 128 MB per epoch for Iceberg) and compaction
// (Maintain with Compact), which keeps the markers intact.
//
// # Limits
//
//   - Partition specs (TableConfig.Partition) apply when the destination
//     creates a table; a Merge table may only be partitioned by key
//     columns; a spec changed under a running pipeline fails the commit.
//   - Append and Merge; no Overwrite mode yet.
//   - A Merge table's rows of an epoch are held in memory until
//     PreCommit.
//   - A schema change Iceberg can't make (e.g. long → double, which the
//     engine does when a JSON field turns fractional) fails Write or
//     PreCommit with a *SchemaError; the engine's hold-back is not wired to it yet.
//   - The write mode and key come from Config.Tables: the runner does not
//     pass a stream's mode or primary key to writers.
//   - Fencing is atomic with the commit on the SQL catalog (SQLite,
//     Postgres). Other catalogs (REST) can't carry the pipeline's
//     requirement: it is checked on metadata loaded right before the
//     commit, which leaves a window of one request. Untested here: no
//     REST catalog server ran on this machine.
//   - pyiceberg 0.12 can't scan tables with equality deletes (Merge
//     tables); iceberg-go, Spark, Trino and Flink can.
package iceberg

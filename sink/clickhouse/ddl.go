package clickhouse

import (
	"fmt"
	"strings"
)

// The statements the destination runs, built by pure functions so that
// tests can check them word for word for servers this machine doesn't
// have (DateTime64, dedup tokens, is_deleted).

// column is one column of a table as the destination creates it.
type column struct {
	name string
	typ  colType
}

// Names of the destination's own tables in Config.Database.
const (
	fenceTable      = "_openetl_fence"
	epochsTable     = "_openetl_epochs"
	quarantineTable = "_openetl_quarantine"
	stagePrefix     = "_openetl_stage_"
)

// dedupWindow is non_replicated_deduplication_window on servers with
// insert deduplication tokens: how many recent blocks' tokens a table
// remembers. An epoch's blocks are applied right after each other, so a
// repeat of the last epoch always finds its tokens.
const dedupWindow = 10000

func qualified(db, table string) string { return quoteIdent(db) + "." + quoteIdent(table) }

func stageName(table string) string { return stagePrefix + table }

func createDatabase(db string) string {
	return "CREATE DATABASE IF NOT EXISTS " + quoteIdent(db)
}

// createState returns the statements that create the fence and epoch
// tables. The fence is the highest generation of a pipeline in
// _openetl_fence; _openetl_epochs has a row for each applied epoch that
// had rows.
//
// In a cluster (zk, the tables' ZooKeeper path prefix, not empty) they
// are ReplicatedMergeTree tables of the shard, so that every replica of
// the shard sees the same fence and epochs.
func createState(db, zk string) []string {
	return []string{
		"CREATE TABLE IF NOT EXISTS " + qualified(db, fenceTable) +
			" (pipeline String, generation UInt64, at DateTime) ENGINE = " + engine("MergeTree", db, fenceTable, zk) + " ORDER BY (pipeline, generation)",
		"CREATE TABLE IF NOT EXISTS " + qualified(db, epochsTable) +
			" (pipeline String, epoch UInt64, generation UInt64, blocks UInt64, rows UInt64, at DateTime) ENGINE = " + engine("MergeTree", db, epochsTable, zk) + " ORDER BY (pipeline, epoch)",
	}
}

// DefaultZooKeeperPath is where a cluster's replicated tables keep their
// replicas' shared state in ZooKeeper (or Keeper), by shard, unless
// Cluster.ZooKeeperPath says otherwise: {shard} is the servers' macro.
const DefaultZooKeeperPath = "/clickhouse/tables/{shard}/openetl/"

// engine is a table engine without arguments of its own (MergeTree), or
// in a cluster (zk, the ZooKeeper path prefix, not empty) its
// Replicated form with the table's ZooKeeper path (zk + db/table) and
// the replica's name, the {replica} macro.
func engine(name, db, table, zk string, args ...string) string {
	if zk != "" {
		name = "Replicated" + name
		args = append([]string{quoteString(zk + db + "/" + table), quoteString("{replica}")}, args...)
	}
	if len(args) == 0 {
		return name
	}
	return name + "(" + strings.Join(args, ", ") + ")"
}

func columnList(cols []column) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = quoteIdent(c.name) + " " + c.typ.ch
	}
	return strings.Join(parts, ", ")
}

func nameList(names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = quoteIdent(n)
	}
	return strings.Join(parts, ", ")
}

// createTarget is the table readers read. A merge table is a
// ReplacingMergeTree ordered by the key, _openetl_seq its version, so that
// the latest version of a key wins (and reads with FINAL see only it); on
// servers with is_deleted, _openetl_deleted is its second argument. An
// append table is a MergeTree ordered by orderBy (default _openetl_seq).
// With dedup tokens the table remembers its last blocks' tokens. In a
// cluster (zk not empty) it is the Replicated form of the same engine,
// and a replicated table deduplicates repeated blocks by itself.
func createTarget(db, table string, cols []column, key, orderBy []string, f Features, zk string) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS ")
	b.WriteString(qualified(db, table))
	b.WriteString(" (")
	b.WriteString(columnList(cols))
	b.WriteString(") ENGINE = ")
	if len(key) > 0 {
		args := []string{quoteIdent(colSeq)}
		if f.IsDeleted {
			args = append(args, quoteIdent(colDeleted))
		}
		b.WriteString(engine("ReplacingMergeTree", db, table, zk, args...))
		b.WriteString(" ORDER BY (")
		b.WriteString(nameList(key))
		b.WriteString(")")
	} else {
		if len(orderBy) == 0 {
			orderBy = []string{colSeq}
		}
		b.WriteString(engine("MergeTree", db, table, zk))
		b.WriteString(" ORDER BY (")
		b.WriteString(nameList(orderBy))
		b.WriteString(")")
	}
	if f.DedupToken && zk == "" {
		fmt.Fprintf(&b, " SETTINGS non_replicated_deduplication_window = %d", dedupWindow)
	}
	return b.String()
}

// Columns only staging tables have: who staged a block, so that Recover
// can drop what older generations of the pipeline left behind. The
// pipeline's name is in the first row of each batch of a block (the
// other rows have an empty string): Recover looks for any row.
const (
	colStagePipeline = "_openetl_stage_pipeline"
	colStageGen      = "_openetl_stage_generation"
)

// stageOnly are the staging tables' own columns.
var stageOnly = []column{
	{colStagePipeline, colType{ch: "String", kind: kString}},
	{colStageGen, colType{ch: "UInt64", kind: kUint64}},
}

// createStage is the staging table of a target: the same columns plus
// stageOnly, one partition per staged block (so a block is dropped whole
// once applied). In a cluster (zk not empty) it is replicated too, so
// that a block staged through one replica can be applied through
// another.
func createStage(db, table string, cols []column, zk string) string {
	return "CREATE TABLE IF NOT EXISTS " + qualified(db, stageName(table)) + " (" + columnList(append(cols[:len(cols):len(cols)], stageOnly...)) +
		") ENGINE = " + engine("MergeTree", db, stageName(table), zk) + " PARTITION BY " + quoteIdent(colBatch) + " ORDER BY tuple()"
}

// createDistributed is a Distributed table over table on every shard of
// cluster, for reads: readers see the whole cluster's rows through it.
// With shardBy (Cluster.ShardBy) that column is its sharding key, which
// routes an insert through it as the writer routes rows; without, it has
// none, and ClickHouse refuses inserts through it.
func createDistributed(db, table, cluster, shardBy string) string {
	q := "CREATE TABLE IF NOT EXISTS " + qualified(db, table+distSuffix) + " AS " + qualified(db, table) +
		" ENGINE = Distributed(" + quoteString(cluster) + ", " + quoteString(db) + ", " + quoteString(table)
	if shardBy != "" {
		q += ", " + quoteIdent(shardBy)
	}
	return q + ")"
}

// distSuffix names a table's Distributed table (Config.Cluster).
const distSuffix = "_all"

// leftoverBlocks lists the blocks an older generation of pipeline staged
// in a staging table.
func leftoverBlocks(db, stage, pipeline string, gen uint64) string {
	return fmt.Sprintf("SELECT DISTINCT %s FROM %s WHERE %s = %s AND %s < %d", quoteIdent(colBatch), qualified(db, stage),
		quoteIdent(colStagePipeline), quoteString(pipeline), quoteIdent(colStageGen), gen)
}

// addColumn adds a column; servers before 19 have no IF NOT EXISTS (the
// caller takes "already exists" as done).
func addColumn(db, table string, c column, f Features) string {
	ine := ""
	if f.LowCardinality { // 19.1+: IF NOT EXISTS is there too
		ine = "IF NOT EXISTS "
	}
	return "ALTER TABLE " + qualified(db, table) + " ADD COLUMN " + ine + quoteIdent(c.name) + " " + c.typ.ch
}

// modifyColumn changes a column's type.
func modifyColumn(db, table string, c column) string {
	return "ALTER TABLE " + qualified(db, table) + " MODIFY COLUMN " + quoteIdent(c.name) + " " + c.typ.ch
}

// fenceExpr is the pipeline's fence, evaluated once when a query starts.
func fenceExpr(db, pipeline string) string {
	return "(SELECT max(generation) FROM " + qualified(db, fenceTable) + " WHERE pipeline = " + quoteString(pipeline) + ")"
}

// raiseFence records gen as a generation of pipeline; the fence is the
// highest one, so a late lower generation never lowers it.
func raiseFence(db, pipeline string, gen uint64) string {
	return fmt.Sprintf("INSERT INTO %s (pipeline, generation, at) SELECT %s, %d, now()",
		qualified(db, fenceTable), quoteString(pipeline), gen)
}

// applyBlock copies one staged block into its table, only while gen is
// not fenced: the fence is read by the same query that copies, after the
// server registered it in system.processes (see doc.go: why that closes
// the zombie's window). The squashing settings make the block one insert
// block, so one part: it lands whole or not at all. With dedup tokens the
// server also drops a repeat of the block by its token.
func applyBlock(db, table string, cols []string, token uint64, rows int64, pipeline string, gen uint64, f Features) string {
	names := nameList(cols)
	s := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s = %d AND %s <= %d SETTINGS min_insert_block_size_rows = %d, min_insert_block_size_bytes = %d",
		qualified(db, table), names, names, qualified(db, stageName(table)), quoteIdent(colBatch), token,
		fenceExpr(db, pipeline), gen, rows+1, int64(1)<<40)
	if f.DedupToken {
		s += ", insert_deduplicate = 1, insert_deduplication_token = " + quoteString(dedupToken(pipeline, table, token))
	}
	return s
}

func dedupToken(pipeline, table string, token uint64) string {
	return fmt.Sprintf("openetl/%s/%s/%016x", pipeline, table, token)
}

// markEpoch records epoch as applied, under the same fence condition.
func markEpoch(db, pipeline string, epoch, gen uint64, blocks int, rows int64) string {
	return fmt.Sprintf("INSERT INTO %s (pipeline, epoch, generation, blocks, rows, at) SELECT %s, %d, %d, %d, %d, now() WHERE %s <= %d",
		qualified(db, epochsTable), quoteString(pipeline), epoch, gen, blocks, rows, fenceExpr(db, pipeline), gen)
}

func dropStagePartition(db, table string, token uint64) string {
	return fmt.Sprintf("ALTER TABLE %s DROP PARTITION %d", qualified(db, stageName(table)), token)
}

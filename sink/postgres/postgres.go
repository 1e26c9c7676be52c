package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/openetl/etl/internal/pgerr"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/ledger"
)

// Config configures a Destination. Pool is required.
type Config struct {
	// Pool reaches the database; the caller opens and closes it. Writers
	// take a connection for each COPY and each commit.
	Pool *pgxpool.Pool
	// Schema is the schema of the tables. Default "public".
	Schema string
	// StagingSchema is the schema of the staging tables (one per table
	// and lane for each epoch, dropped when the epoch is applied) and of
	// their registry. Default "_openetl_staging_" + Schema.
	StagingSchema string
	// UnloggedStaging makes the staging tables UNLOGGED: a COPY writes no
	// WAL for them, so staging costs the server about half the WAL and
	// I/O, but their rows are lost when the server crashes (not on a
	// clean restart) and are not on its replicas. Recover then reports
	// the checkpoint's epoch Lost and the runner reads it again from the
	// source, which keeps it until the epoch is applied. Default false:
	// staged rows are as durable as the tables.
	UnloggedStaging bool
	// Ledger is the table of the commit protocol's books (package
	// ledger), in Schema. Default ledger.DefaultTable.
	Ledger string
	// Logger gets a line per Recover (Info) and per quarantined batch
	// (Debug). Default: discard.
	Logger *slog.Logger
}

// Destination writes streams to tables of a Postgres database, exactly
// once: see the package doc. It is safe for concurrent use.
type Destination struct {
	cfg Config
	db  *sql.DB
	// sifting: the quarantine table exists.
	sifting atomic.Bool
	// merge: the server has MERGE (PostgreSQL 15 and later).
	merge bool
}

var (
	_ sink.Destination = (*Destination)(nil)
	_ sink.SpecChecker = (*Destination)(nil)
	_ sink.Namer       = (*Destination)(nil)
)

// New returns a Destination on cfg.Pool and creates the ledger table
// when it does not exist. Close it when done (the pool stays open).
func New(ctx context.Context, cfg Config) (*Destination, error) {
	if cfg.Pool == nil {
		return nil, errors.New("postgres: Config.Pool is nil")
	}
	if cfg.Schema == "" {
		cfg.Schema = "public"
	}
	if cfg.StagingSchema == "" {
		cfg.StagingSchema = "_openetl_staging_" + cfg.Schema
	}
	if cfg.Ledger == "" {
		cfg.Ledger = ledger.DefaultTable
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for _, n := range []string{cfg.Schema, cfg.StagingSchema, cfg.Ledger} {
		if len(n) > MaxIdentifier {
			return nil, fmt.Errorf("postgres: name %q is longer than %d bytes", n, MaxIdentifier)
		}
	}
	if cfg.StagingSchema == cfg.Schema {
		return nil, fmt.Errorf("postgres: Config.StagingSchema is Schema (%q): staged rows would be visible", cfg.Schema)
	}
	d := &Destination{cfg: cfg, db: stdlib.OpenDBFromPool(cfg.Pool)}
	if err := d.createSchema(ctx); err != nil {
		d.db.Close()
		return nil, fmt.Errorf("postgres: schema %s: %w", cfg.Schema, err)
	}
	var version int
	if err := d.db.QueryRowContext(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		d.db.Close()
		return nil, fmt.Errorf("postgres: server version: %w", err)
	}
	d.merge = version >= 150000
	// CREATE TABLE IF NOT EXISTS of the ledger is not under the DDL
	// lock (package ledger's own): two processes starting at once may
	// both try to create it, and the loser fails with a duplicate key
	// of the catalog; the table is there then.
	err := d.books().Create(ctx)
	if isDuplicate(err) {
		err = d.books().Create(ctx)
	}
	if err != nil {
		d.db.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return d, nil
}

// isDuplicate reports whether err is a unique violation (23505), a
// duplicate table (42P07) or object (42710, the table's row type): a
// concurrent CREATE ... IF NOT EXISTS won.
func isDuplicate(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07" || pe.Code == "42710")
}

// createSchema creates the schemas of the tables and staging tables, the
// registry of staging tables and the cast function sift uses, when they
// do not exist.
func (d *Destination) createSchema(ctx context.Context) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, lockDDL); err != nil {
		return err
	}
	for _, s := range []string{d.cfg.Schema, d.cfg.StagingSchema} {
		if err := createSchemaIn(ctx, tx, s); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+d.registry()+` (staging text PRIMARY KEY,
		pipeline text NOT NULL, stage text NOT NULL, batch bigint NOT NULL, table_name text NOT NULL,
		held boolean NOT NULL DEFAULT false, cols jsonb)`); err != nil {
		return err
	}
	var fn bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname = '_openetl_cast_error')`, d.cfg.StagingSchema).Scan(&fn); err != nil {
		return err
	}
	if !fn {
		if _, err := tx.ExecContext(ctx, d.castFuncDDL()); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// registry is the table of staging tables: which pipeline, lane stage
// and batch each holds rows of, for which table, and whether an
// overwrite holds them for Finish (with their columns).
func (d *Destination) registry() string {
	return ident(d.cfg.StagingSchema) + "." + ident("_openetl_staged")
}

// lockDDL queues the DDL of concurrent lanes, pipelines and processes:
// CREATE ... IF NOT EXISTS of two at once races otherwise.
const lockDDL = `SELECT pg_advisory_xact_lock(hashtextextended('openetl ddl', 0))`

// createSchemaIn creates schema name in tx, which holds the DDL lock,
// unless it exists. The lock's last holder may have just created it:
// CREATE SCHEMA IF NOT EXISTS once failed here with a duplicate key on
// pg_namespace_nspname_index (two lanes, under -race), as if its lookup
// (the backend's catalog cache, which an advisory lock's wait need not
// refresh) missed the new schema. A query reads the catalog as
// committed, with the statement's own snapshot.
func createSchemaIn(ctx context.Context, tx *sql.Tx, name string) error {
	var ok bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, name).Scan(&ok); err != nil || ok {
		return err
	}
	_, err := tx.ExecContext(ctx, `CREATE SCHEMA `+ident(name))
	return err
}

// Close releases the Destination's database/sql handle on the pool.
func (d *Destination) Close() error { return d.db.Close() }

func (d *Destination) books() ledger.SQL {
	return ledger.SQL{DB: d.db, Dialect: ledger.Postgres, Table: ident(d.cfg.Schema) + "." + ident(d.cfg.Ledger)}
}

// Name returns "postgres".
func (d *Destination) Name() string { return "postgres" }

// Class returns sink.StageAndApply: an epoch's rows are staged, durable
// and invisible, at PreCommit, and Commit applies them in one transaction
// with the ledger row. With it package delivery reports exactly once
// from exact sources, and effectively once for merge from superset
// sources (a repeat lands on its key, guarded by _openetl_seq).
func (d *Destination) Class() sink.Class { return sink.StageAndApply }

// MaxIdentifier is the longest name Postgres keeps, in bytes (NAMEDATALEN-1).
const MaxIdentifier = 63

// Capabilities: merge (soft or hard deletes) and overwrite; names of at
// most 63 bytes, lower case, ASCII letters, digits and '_', none of
// Postgres's reserved words; the Arrow types listed in the package doc;
// patches, so held values are released (see the package doc).
func (d *Destination) Capabilities() sink.Capabilities {
	return sink.Capabilities{Merge: true, HardDeletes: true, Overwrite: true, MaxIdentifier: MaxIdentifier, IdentifierCase: "lower",
		SimpleIdentifiers: true, ReservedWords: reserved, Unsupported: unsupported, Patches: true}
}

// CheckStream refuses merge without a key, and a stream written to a
// table of the destination's own: the ledger, or any whose name starts
// with sink.ReservedPrefix (the quarantine table).
func (d *Destination) CheckStream(spec sink.StreamSpec) error {
	switch spec.Mode {
	case sink.Append:
	case sink.Merge:
		if len(spec.Key) == 0 {
			return fmt.Errorf("postgres: merge mode needs a primary key, and the stream has none")
		}
	case sink.Overwrite:
	default:
		return fmt.Errorf("postgres: %v mode is not supported", spec.Mode)
	}
	// The ledger, the quarantine table and any later table of the
	// destination's own: writing a stream into one would fail its
	// epochs (or worse, write into the books) instead of Build.
	if strings.HasPrefix(strings.ToLower(spec.Table), sink.ReservedPrefix) || spec.Table == d.cfg.Ledger {
		return fmt.Errorf("postgres: table %s is the destination's own", spec.Table)
	}
	return nil
}

// Writer returns the writer of one lane of an attempt of cfg.Pipeline.
func (d *Destination) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	for _, s := range cfg.Streams {
		if err := d.CheckStream(s); err != nil {
			return nil, fmt.Errorf("%w (stream %s)", err, s.Stream)
		}
	}
	if cfg.Lane == 0 {
		d.sweep(ctx)
	}
	l := &lane{d: d, cfg: cfg, stage: fmt.Sprintf("%d-%s", cfg.Lane, rand.Text()), tables: map[string]*table{}}
	return ledger.NewWriter(ledger.Config[*sql.Tx]{Pipeline: cfg.Pipeline, Lane: cfg.Lane, Stager: l,
		Books: d.books(), Applier: applier{d, cfg.Streams}, Name: "postgres", Where: "the Postgres table " + d.cfg.Schema + "." + d.cfg.Ledger,
		Logger: d.cfg.Logger})
}

// sweep pings the pool's idle connections as an attempt starts, and
// drops those the server or the network ended: a fault that failed the
// last attempt (a restart, a failover, connections ended by an
// administrator) leaves them in the pool, and pgxpool pings a
// connection before handing it out only when it was idle for over a
// second, so an attempt right after would fail on each in turn. Each
// idle connection is pinged once an attempt; connections in use (by the
// user's other code, on a shared pool) are left alone.
func (d *Destination) sweep(ctx context.Context) {
	for _, c := range d.cfg.Pool.AcquireAllIdle(ctx) {
		// A failed ping closes the connection, and Release drops a
		// closed one from the pool.
		c.Ping(ctx)
		c.Release()
	}
}

// DropStaged drops every staging table of every pipeline (but those of
// an overwritten table whose rows applied epochs hold for Finish),
// returning how many rows they held: the space of pipelines that will
// not run again. It is safe at any time: a pipeline whose last
// checkpoint's rows it dropped reads that epoch again (Recover reports it
// Lost), and a lane writing into a table it dropped fails its attempt.
func (d *Destination) DropStaged(ctx context.Context) (int, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	// SKIP LOCKED: a table whose row a Commit or a Recover holds is in
	// use; DropStaged leaves it and never waits on a row lock while it
	// holds others (a Commit locks each lane's rows in turn, so waiting
	// could close a cycle with it).
	tables, err := d.stagingTables(ctx, tx, true, `NOT held`)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tables {
		var k int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+d.staging(t)).Scan(&k); err != nil {
			return 0, err
		}
		n += k
	}
	if err := d.dropStaging(ctx, tx, tables); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// stagingTables lists the registered staging tables whose registry rows
// match cond (SQL on its columns, with args).
func (d *Destination) stagingTables(ctx context.Context, q querier, skipLocked bool, cond string, args ...any) ([]string, error) {
	// FOR UPDATE: every transaction that reads or drops a staging table
	// locks its registry row first (this, or lockStaging), so a row a
	// concurrent transaction deleted is skipped once it commits, and no
	// two transactions count or drop one table. DropStaged skips rows
	// others hold (skipLocked), so it never waits on a row while holding
	// one; a Commit or a Recover may wait on DropStaged's rows, but holds
	// no lock on their tables (it locks a table's row before the table),
	// so no wait closes a cycle.
	lock := ` FOR UPDATE`
	if skipLocked {
		lock += ` SKIP LOCKED`
	}
	rs, err := q.QueryContext(ctx, `SELECT staging FROM `+d.registry()+` WHERE `+cond+` ORDER BY staging`+lock, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var t string
		if err := rs.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rs.Err()
}

// lockStaging locks the registry rows of tables (see stagingTables)
// and returns those of them still registered: a table missing was
// dropped by DropStaged, and its rows with it.
func (d *Destination) lockStaging(ctx context.Context, tx *sql.Tx, tables []string) (map[string]bool, error) {
	have := make(map[string]bool, len(tables))
	if len(tables) == 0 {
		return have, nil
	}
	lits := make([]string, len(tables))
	for i, t := range tables {
		lits[i] = literal(t)
	}
	rs, err := tx.QueryContext(ctx, `SELECT staging FROM `+d.registry()+` WHERE staging IN (`+strings.Join(lits, ", ")+`) ORDER BY staging FOR UPDATE`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	for rs.Next() {
		var t string
		if err := rs.Scan(&t); err != nil {
			return nil, err
		}
		have[t] = true
	}
	return have, rs.Err()
}

// dropStaging drops staging tables and their registry rows, in tx.
func (d *Destination) dropStaging(ctx context.Context, tx *sql.Tx, tables []string) error {
	for len(tables) > 0 {
		chunk := tables[:min(len(tables), 100)]
		tables = tables[len(chunk):]
		names := make([]string, len(chunk))
		lits := make([]string, len(chunk))
		for i, t := range chunk {
			names[i], lits[i] = d.staging(t), literal(t)
		}
		if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+strings.Join(names, ", ")); err != nil {
			return fmt.Errorf("postgres: drop staging tables: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+d.registry()+` WHERE staging IN (`+strings.Join(lits, ", ")+`)`); err != nil {
			return fmt.Errorf("postgres: drop staging tables: %w", err)
		}
	}
	return nil
}

func (d *Destination) staging(table string) string {
	return ident(d.cfg.StagingSchema) + "." + ident(table)
}

func (d *Destination) target(table string) string {
	return ident(d.cfg.Schema) + "." + ident(table)
}

// reserved are Postgres's reserved key words (its documentation's
// Appendix C, "reserved" and "reserved (can be function or type)").
var reserved = []string{"all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric",
	"authorization", "binary", "both", "case", "cast", "check", "collate", "collation", "column",
	"concurrently", "constraint", "create", "cross", "current_catalog", "current_date", "current_role",
	"current_schema", "current_time", "current_timestamp", "current_user", "default", "deferrable", "desc",
	"distinct", "do", "else", "end", "except", "false", "fetch", "for", "foreign", "freeze", "from", "full",
	"grant", "group", "having", "ilike", "in", "initially", "inner", "intersect", "into", "is", "isnull",
	"join", "lateral", "leading", "left", "like", "limit", "localtime", "localtimestamp", "natural", "not",
	"notnull", "null", "offset", "on", "only", "or", "order", "outer", "overlaps", "placing", "primary",
	"references", "returning", "right", "select", "session_user", "similar", "some", "symmetric",
	"system_user", "table", "tablesample", "then", "to", "trailing", "true", "union", "unique", "user",
	"using", "variadic", "verbose", "when", "where", "window", "with"}

// Permanent reports whether err is a server error no retry fixes:
// credentials refused (SQLSTATE class 28), a database that does not
// exist (3D000), a privilege the user lacks (42501). Run returns such an
// error at once instead of retrying it for its budget (sink.Classifier).
func (d *Destination) Permanent(err error) bool { return pgerr.Permanent(err) }

// Package postgres is a destination that writes streams to tables of a
// PostgreSQL database (pgx), exactly once: each epoch is applied in one
// transaction together with the pipeline's row in the ledger table, under
// the fence that stops a zombie attempt.
//
//	pool, err := pgxpool.New(ctx, "postgres://etl@db/analytics")
//	...
//	dst, err := postgres.New(ctx, postgres.Config{Pool: pool, Schema: "raw"})
//	...
//	defer dst.Close()
//	p, err := etl.NewPipeline("orders").From(src).To(dst).Checkpoints(store).
//		Mode(delivery.Merge, "orders").Build()
//
// # How an epoch travels
//
// Each writer lane COPYs every batch it gets (binary COPY, encoded from
// the Arrow arrays) into a staging table of its own for the table and
// the epoch, in Config.StagingSchema ("_openetl_staging_" + Schema):
// the table's name cut to fit, and a hash of the pipeline, lane, epoch
// and table. It is created, with the batch's columns, on the epoch's
// first COPY into it and registered in the same transaction in
// _openetl_staged (which pipeline, lane and epoch it holds rows of);
// no other lane touches it, so a schema change within the epoch alters
// it without waiting for anyone. Staged rows are durable once Write
// returns (unless Config.UnloggedStaging) and invisible to readers of
// the tables. PreCommit returns a small reference to them (each table's
// staging table, row count and columns, its mode and key).
//
// Commit, on lane 0, runs one transaction: it locks the pipeline's row of
// the ledger table (Config.Ledger, "_openetl_ledger", in Schema; package
// ledger keeps the books), fails with sink.ErrFenced when a newer
// generation has recovered, does nothing for an epoch already applied,
// creates each table (and adds its new columns, nullable) when needed,
// moves every lane's staged rows of the epoch into the tables (INSERT
// ... SELECT, or MERGE), drops their staging tables and records the
// epoch. The epoch lands whole, once, or not at all. Recover reports the
// checkpoint's epoch Applied from the ledger row, Recoverable when every
// lane's staging tables hold all their rows, Lost otherwise (DropStaged
// dropped them, or an unlogged one was emptied by a crash), and drops
// the staging tables of attempts that died.
//
// Lanes stage at Write, so the writer relies on the runner's order:
// Recover runs before any lane writes, and drops the staging tables every
// earlier attempt left but those the checkpoint still needs. Creating a
// table or changing its columns takes a database-wide advisory lock
// (pg_advisory_xact_lock), so lanes, pipelines and processes never race
// on DDL; it is held by the commit transaction only when that epoch
// brings new tables or columns.
//
// What a failed attempt staged (the tables of an epoch it never
// recorded, rows COPYed before it died) stays until the next attempt's
// Recover, which drops it in the transaction that holds the pipeline's
// ledger row and raises the fence, and logs the count at Info: the
// destination is no sink.Collector, and the runner's staging.collected
// event doesn't count these tables. A zombie's Recover after a newer
// one's is fenced before it looks, so it never drops a newer attempt's
// tables; what a zombie stages after the newer Recover waits for the
// Recover after. A pipeline that will not run again keeps its last
// staging tables until DropStaged.
//
// # Write modes
//
// A stream's mode, key and delete handling come from its spec
// (etl.Builder.Mode, etl.Builder.Deletes):
//
//   - Append (the default): every version is a row.
//   - Merge: the table has the stream's key as its PRIMARY KEY; each
//     epoch upserts the newest version of each key (MERGE, on PostgreSQL
//     15 and later; INSERT ... ON CONFLICT DO UPDATE before), only over a
//     row with a lower _openetl_seq, so a replayed older version never
//     overwrites a newer one. The lanes note whether a key repeats in
//     their epoch; only then is each key's newest row picked first
//     (DISTINCT ON, a sort). MERGE is a join, not a speculative insert
//     per row: about 1.5 times cheaper for the server here, but a
//     concurrent writer of the same key (another pipeline into the same
//     table) fails the commit with a unique violation, which the runner
//     retries. Deletes are
//     soft by default: the key's row stays, with _openetl_deleted true and
//     the delete's _openetl_op and _openetl_seq; with sink.HardDeletes the
//     row is deleted (and a replay of an older version of the key, from
//     a superset source, inserts it again: soft deletes don't have that
//     gap).
//   - Overwrite: each epoch's rows are applied into a holding place (their
//     staging tables, marked held) and the table keeps its old
//     contents until the Sync that read its source to the end finishes:
//     Finish replaces the contents (DELETE and INSERT, one transaction)
//     with every row the refresh's epochs held, none when it had none.
//     DropStaged keeps held staging tables.
//
// # Types
//
// Tables are created from the stream's Arrow schema:
//
//	int8, int16, uint8      smallint
//	int32, uint16           integer
//	int64, uint32           bigint
//	uint64                  numeric(20,0)
//	float32, float64        real, double precision
//	bool                    boolean
//	utf8, large_utf8        text, or the declared type: uuid, json, jsonb,
//	                        inet, cidr, macaddr, macaddr8, xml, timetz,
//	                        varchar, varchar(n), char(n), bpchar, numeric,
//	                        numeric(p,s) (unbounded and wide numerics
//	                        arrive as text)
//	binary, fixed_size_bin  bytea; uuid where declared (fixed_size_binary(16))
//	date32                  date
//	timestamp               timestamp with time zone (with a zone),
//	                        timestamp without time zone (without)
//	time32, time64          time without time zone
//	decimal128(p,s)         numeric(p,s), or the declared numeric type
//	list<T>                 T[] of T's type above (the declared element
//	                        type kept: a declared _jsonb or jsonb[] is
//	                        jsonb[]); lists of lists and of structs are
//	                        named by CheckSchema (held)
//	duration, interval,     unsupported (Capabilities): held back by the
//	struct, null            engine under the pipeline's _held/
//
// A Postgres source's declared types (StreamSpec.Columns with Types
// "postgres") are kept where the Arrow type is text, decimal or a list
// of them, as listed; enums are text. Values staged as text (decimals,
// declared types, arrays) are written in Postgres's input form, read
// the same under any DateStyle, TimeZone or bytea_output, and cast by
// Apply. Not kept, and why: lists of lists (a Postgres array is
// rectangular, a list of lists need not be) and of structs, intervals
// and durations are held back; enums, a bare char (character(1), whose
// cast would cut longer values) and types not listed are text. A column
// that appears later is added to the
// table, nullable, in the transaction that applies its first rows. The
// engine's widenings are applied in place, in the same transaction
// (ALTER COLUMN ... TYPE): an integer or real column to double
// precision, any column to text. Any other type change is named by
// CheckSchema, so the runner holds the column's values back under the
// pipeline's _held/ and the table's column keeps its type.
//
// Names follow Postgres's rules (Capabilities): at most 63 bytes, lower
// case, ASCII letters, digits and '_', none of its reserved words; the
// engine gives every table and column such a name, which never changes
// (Orders: orders; a column select: select_; a second Note: note_2; a
// name cut to 63 bytes that repeats one: cut to 61 and _2). A merged
// table's primary key is named table$pk (cut, with a hash, to fit), not
// Postgres's table_pkey, which a later stream's table may be named. A
// stream whose table would be one of the destination's own (the ledger,
// or any name starting with _openetl_) fails Build.
//
// # Quarantine
//
// Rows with a value Postgres can't take unchanged are not written and
// never changed, and the epoch never fails for them. The lanes find most
// before staging: a NUL character or invalid UTF-8 in text, a timestamp
// or time with nanoseconds, a date, timestamp or time of day outside
// Postgres's range, a number too large for its numeric(p,s) or with
// digits past its scale (Postgres would round it), a text longer than
// its varchar(n) or char(n) (Postgres would cut it), a null key column
// of a merge table; in an array's elements too. A value of a declared
// type whose text the type's input rejects (a uuid, jsonb, inet, timetz
// Postgres can't read, \u0000 in jsonb) is found when the epoch is
// applied: the statement fails, Apply rolls back to a savepoint, tries
// each staged value of the table's cast columns on its own and sets
// aside the rows that fail, then moves the rest. Either way the rows go
// to the table _openetl_quarantine in Schema (table_name, column_name,
// reason, row_json, _openetl_id, _openetl_seq, _openetl_op), visible
// exactly when their epoch is applied: every row a writer is given is in
// its table or there, once. The reasons are the Reason constants.
//
// # Held values
//
// The destination applies patches (sink.Capabilities.Patches), so the
// runner releases held values once it takes their column: when a
// column's values were held because CheckSchema named it (the table's
// column has another type) and the host has since changed the column
// (ALTER TABLE ... ALTER COLUMN ... TYPE), or because its type was
// unsupported and a later version supports it. The next attempt sends
// them in its first epoch as patch batches (sink.PatchMetadataKey),
// which a lane stages in a staging table of their own; Commit applies
// them in the epoch's transaction, under its fence, after adding the
// column to the table if it lacks it: for each column, UPDATE table SET
// column = value WHERE _openetl_id = the held row's AND column IS NULL.
// A row whose _openetl_id is gone (a merge table's key updated since, or
// deleted) is left as it is, a value set since is never overwritten, and
// no row is added. The join has no index on _openetl_id: each patched
// column costs a scan of the table, once. A patch value Postgres can't
// take unchanged is set aside like a row's (Quarantine).
//
// # Proofs
//
// The package's tests run the conformance suite (sink/sinktest) and the
// whole-runner simulation (sim.Options.Target) against a real server, and
// check with psql that a zombie's Commit after a newer Recover fails with
// sink.ErrFenced and changes nothing, that merge keeps the newest version
// of each key, that an overwrite replaces the contents at Finish, that
// values Postgres can't take unchanged are set aside with their reasons
// while the epoch commits; Postgres to Postgres pipelines of the declared
// types and arrays, read back on both sides; and SIGKILLs of child
// processes syncing, two copies at once every other round, after which
// every version is in the tables once; Syncs failed at a Write, at
// PreCommit, at the checkpoint write and at Commit, after each of which
// the staging tables of the one before are gone, and after a clean Sync
// none; held values released into the tables (a later version taking
// their type, the host changing a column's type) once each, on their
// rows, read back with psql, also across crashes before and after the
// epoch's commit point; and the pool's connections ended 20 times at
// random under a Sync (TestConnectionsEndedUnderSync), every version in
// the tables once.
//
// # Lost connections
//
// A connection the server or the network ended leaves an attempt only
// where it was in use: each attempt starts by pinging the pool's idle
// connections and dropping the dead ones (pgxpool itself pings only a
// connection idle for over a second), and a Write that finds its
// connection lost as it creates its batch's staging table does so again
// on another. Lost anywhere else (a COPY, a Commit), the connection
// fails the attempt, and the next one resumes from the checkpoint.
package postgres

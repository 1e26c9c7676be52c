// Package postgres reads tables from PostgreSQL (12 or later, tested on
// 15) through logical replication: a consistent snapshot of a
// publication's tables that hands over to the slot's pgoutput change
// stream without losing or repeating a change.
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
// public). Its columns are the table's, in attribute order, typed with
// pg_type names (int4, numeric(12,2), timestamptz, _text ...: package
// engine maps them to Arrow), and its primary key is the table's.
// Values travel in Postgres's text form, with DateStyle ISO, TimeZone
// UTC, extra_float_digits 3 and bytea_output hex set on both connections,
// so a value reads the same in the snapshot and in the stream.
//
// # Reading
//
// The source has one split, named after the slot. Its first Read (no
// resume state) drops any slot of that name, creates it with an exported
// snapshot, reads every opened table under that snapshot (REPEATABLE
// READ, SET TRANSACTION SNAPSHOT, before START_REPLICATION) as inserts
// whose seq is the slot's consistent LSN, and places a resume point. It
// then streams pgoutput (protocol version 1) from that LSN: inserts,
// updates (the new row; when the key changed, first a delete of the old
// key) and deletes (under REPLICA IDENTITY DEFAULT the row holds the key
// columns, the others null), each with seq = the LSN of its change, and
// a resume point after each transaction that touched an opened table.
// A resume state is the LSN after the last whole transaction; reopening
// there replays exactly what followed (source.ReplayExact). A bounded
// Read stops, at a transaction boundary, once it has passed the WAL
// insert position as of the end of the snapshot (resuming: as of the
// start of Read).
//
// Ack reports the acknowledged LSN to the server as the slot's flush
// position (set explicitly, never left for the server to take from the
// write position), in the status updates of a running Read, or with
// pg_replication_slot_advance when none runs. The runner acknowledges
// one checkpoint behind, so the slot never discards WAL a restart from
// the last checkpoint still needs.
//
// # Errors
//
// A resume state whose slot is gone (dropped by hand, say) fails Open or
// Read with a *SlotError wrapping ErrSlotMissing; one the slot has
// already confirmed past fails with ErrPositionLost. The slot is never
// recreated silently: start the pipeline over (a new snapshot) instead.
//
// # Limits of this version
//
//   - Unchanged TOAST values: an update that leaves a large (TOASTed)
//     column alone doesn't carry its value; the row is written with
//     source.AppendRowUnchanged, never as null, and the engine
//     quarantines it today (reason unchanged_value). Set REPLICA IDENTITY
//     FULL on such tables to get whole rows.
//   - The snapshot is read in one go by the one split and is not a
//     resume point until it is done: a sync killed during the snapshot
//     starts it over. Chunked, parallel snapshot splits come later.
//   - Truncates are logged and not replicated; DDL during streaming
//     (relation messages changing the columns) is not applied to the
//     declared schema; tables added to the publication later are not
//     snapshotted; pgoutput streaming of in-progress transactions
//     (protocol 2) is not used.
//   - A transaction in progress when the slot was created can have
//     changes whose LSN precedes the snapshot's: their seq is raised to
//     just above the snapshot's, so two changes of one row in such a
//     transaction share a seq.
//   - No heartbeats: on a quiet database the slot's position only moves
//     when the runner acknowledges.
//   - Teardown (dropping the slot and a created publication) is the
//     host's job.
package postgres

// Package ledger keeps the books of the commit protocol for an
// exactly-once writer of your own, so that the writer is its data path
// and a few lines: the fence that stops a zombie attempt, the epochs
// applied, the outcome of recovery (sink.Applied, sink.Recoverable,
// sink.Lost), the check that the destination is not ahead of the
// checkpoint log (sink.AheadError), the generation of the attempt, and
// finishing a Sync's last epoch.
//
// It fits a destination with transactions: one transaction checks the
// fence, applies an epoch's staged data and records the epoch, so the
// epoch lands whole and once. You provide three things:
//
//   - a Stager per writer lane: Write takes Arrow batches, Stage makes an
//     epoch's rows durable and invisible (a staging table, staged
//     files) and returns a reference to them;
//   - an Applier: Apply makes one lane's staged data visible inside a
//     transaction, Intact says whether it is all still there, Discard
//     drops what dead attempts left staged (and Finish, for a Finisher);
//   - Books, where a Marker per pipeline lives in the same transactions.
//     SQL keeps them in a table of a database/sql database (SQLite,
//     Postgres).
//
// NewWriter puts them together into a sink.Writer:
//
//	func (d *MyDest) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
//		return ledger.NewWriter(ledger.Config[*sql.Tx]{
//			Pipeline: cfg.Pipeline, Lane: cfg.Lane,
//			Stager:   &myLane{db: d.DB},            // Write, Stage, Close
//			Books:    ledger.SQL{DB: d.DB, Dialect: ledger.Postgres},
//			Applier:  myTables{},                   // Apply, Intact, Discard
//			Name:     "mydest",
//		})
//	}
//
// The rules your parts must keep:
//
//   - Books.Tx's transactions on one pipeline's Marker are serializable
//     across processes (SQL's doc says how it does it per dialect), and
//     Apply writes through the transaction it is given: that is what
//     makes a Commit all or nothing, idempotent and fenced.
//   - Stage's reference is small and self-contained: it travels in the
//     checkpoint record and reaches Apply in another process after a
//     crash. Staged data must stay until Apply (or Discard) drops it;
//     if it may expire, Intact must tell, and the epoch is read again.
//   - Lane 0's Applier runs on the commit goroutine while its Stager
//     writes the next epoch: share nothing between them without a lock.
//   - A destination that can't apply an epoch in one transaction (files
//     and manifests per table, no transactions) needs other books:
//     sink/parquet, sink/iceberg and sink/clickhouse keep their own.
//
// Prove the writer with the conformance suite (sink/sinktest) and the
// simulation of the whole runner under faults (sim.Options.Target), as
// examples/connector does for its SQLite writer.
package ledger

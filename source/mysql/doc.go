// Package mysql reads tables from MySQL (8.0 or later) and MariaDB (10.5
// or later, tested on 10.11) through the binary log: a consistent
// snapshot of a database's tables that hands over to the binlog without
// losing or repeating a change. It uses go-mysql's replication package
// (the raw BinlogSyncer, not canal, which pulls in the TiDB parser and
// runs mysqldump).
//
//	src, err := mysql.New(mysql.Config{
//		DSN:    "etl:secret@db:3306/app",
//		Tables: []string{"orders", "customers"},
//	})
//	...
//	p, err := etl.NewPipeline("app").From(src).To(sink).Checkpoints(store).Build()
//
// # Server settings
//
// The server needs the binary log in row format with full row images and
// full row metadata (column names, signedness, ENUM and SET members;
// without them BIGINT UNSIGNED max arrives as -1):
//
//	log_bin=ON  binlog_format=ROW  binlog_row_image=FULL  binlog_row_metadata=FULL
//
// and, on MySQL, binlog_row_value_options empty (no partial JSON
// updates). Discover, Open and Read check them and fail with a
// *SettingsError naming the setting to change. The user needs SELECT on
// the tables, REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR
// on MariaDB), and on MySQL RELOAD for the snapshot's lock.
//
// # Flavors
//
// The flavor is detected from the server's version (Config.Flavor, when
// set, must match: the MySQL protocol against MariaDB silently replaces
// GTID events with dummies). MariaDB's GTID position is one
// domain-server-seq per domain ("0-1-42,1-2-7"); MySQL's is the executed
// set ("3e11fa47-...:1-42", tagged GTIDs included). A resume state
// resumes by GTID position when the server has GTIDs (always on MariaDB;
// gtid_mode=ON on MySQL), else by binlog file and offset. MariaDB writes
// v1 rows events and JSON as text; MySQL writes v2 rows events and binary
// JSON, decoded to JSON text.
//
// # Streams
//
// Each base table of Config.Database (or of Config.Tables) is a
// FormatRow stream with CDC set, named after the table, typed
// source.TypesMySQL with information_schema's COLUMN_TYPE ("int(10)
// unsigned", "decimal(65,30)", "enum('a','b')", "datetime(6)": package
// engine maps them to Arrow), keyed by its primary key. Values travel in
// the text form package engine parses, the same from the snapshot and
// from the binlog (the tests compare them byte for byte):
//
//	integers, YEAR        decimal digits; BIGINT UNSIGNED max is
//	                      18446744073709551615, never -1
//	DECIMAL               exact, with the column's scale (p > 38: text)
//	FLOAT, DOUBLE         the shortest text of the exact value (FLOAT is
//	                      read as DOUBLE in the snapshot: MySQL prints it
//	                      with 6 digits)
//	BIT                   an unsigned number
//	DATE, DATETIME, TIME  as MySQL prints them; zero dates included (no
//	                      Arrow date holds one: the engine holds the cell
//	                      under _held/ and the row lands with a null there)
//	TIMESTAMP             in UTC: the snapshot runs with time_zone '+00:00',
//	                      the binlog's epoch seconds are formatted in UTC;
//	                      the machine's zone (time.Local) never shows
//	ENUM, SET             member names ("a,c")
//	CHAR, VARCHAR, *TEXT  UTF-8 (latin1 columns converted; columns of other
//	                      character sets than utf8mb4, utf8mb3, ascii, latin1
//	                      and binary are refused at Discover)
//	BINARY, *BLOB         the bytes; BINARY(n) padded to n with 0x00 (the
//	                      binlog strips the padding)
//	JSON                  JSON text (MariaDB's JSON is LONGTEXT; on MySQL
//	                      the snapshot has the server's text, the binlog
//	                      go-mysql's rendering of the binary form: the same
//	                      JSON, spaced differently)
//
// # Reading
//
// Open returns the binlog split ("binlog:" and the database name) and a
// snapshot split per opened table with a primary key ("snapshot:", the
// database, a dot and the table name); the runner reads them in
// parallel, at most Config.SnapshotParallelism snapshot splits at once,
// each on a connection of its own.
//
// A first Open (no resume states) fixes the snapshot's origin: it starts
// a transaction WITH CONSISTENT SNAPSHOT and reads the binlog position
// that snapshot sees (on MariaDB the server reports it,
// binlog_snapshot_file and _position, and BINLOG_GTID_POS for the GTID
// position, with no lock; on MySQL, FLUSH TABLES WITH READ LOCK holds
// writes off while the transaction starts and SHOW MASTER STATUS, or
// SHOW BINARY LOG STATUS, is read), and commits it. A snapshot split
// reads its table in chunks of Config.SnapshotChunkRows rows in key order
// (keyset pagination: WHERE (k1 > v1) OR (k1 = v1 AND k2 > v2) ... ORDER
// BY the key LIMIT n, each chunk a transaction WITH CONSISTENT SNAPSHOT
// of its own) with a resume point after each chunk; its state holds the
// last key read, so a sync killed during the snapshot resumes after the
// last committed chunk (TestKill checks it from the checkpoints, three
// times). Every snapshot row is an insert whose seq is the origin. The
// binlog split streams from the origin at the same time: inserts,
// updates (the new row; when the key changed, first a delete of the old
// key with the old row) and deletes (the old row), with a resume point
// after every transaction (XID, COMMIT, or a statement of its own) that
// touched an opened table, and about once a second between transactions
// that did not.
//
// Why each row version is emitted once, across any number of kills and
// restarts: the snapshot split emits its table as it was at the origin,
// exactly, and the binlog split every change after it. A chunk is read
// after the origin, under a consistent snapshot at binlog position C, so
// it may hold changes made between the origin and C, which the binlog
// split emits too; the snapshot split takes them back out. It reads the
// binlog itself from the origin to C (on a connection of its own; once
// per attempt, each chunk going on from where the previous one stopped)
// and notes each key's first change after the origin: a key the chunk
// holds that was first inserted after the origin is left to the binlog
// split; one first updated or deleted is emitted with that change's
// before-image (the row at the origin; binlog_row_image=FULL); a key
// that had a row at the origin and none at C (deleted or moved since)
// is emitted, with its before-image, by the chunk whose key range holds
// it (the server compares the keys in the key's order: the column's
// collation, dates as dates). A chunk read again by a later attempt,
// under a later snapshot, yields the same rows with the same seq, since
// the table at the origin does not change; the binlog split, if it had
// committed no state yet, starts at the origin (the snapshot states
// carry it), and a snapshot split that had committed none (an attempt
// ended during its first chunk) keeps its origin (the binlog split's
// state carries it: the binlog split has emitted the table's changes
// since). So an append destination holds each version once, and a
// merge destination the table (TestSnapshotAsOfOrigin,
// TestRunRidesOutServerRestart, TestKill). This keeps the approach of
// source/postgres — no coordination between the splits, so chunks of
// many tables read in parallel, on any number of connections, each under
// its own snapshot (MySQL has no way to share one snapshot between
// connections) — rather than a watermark scheme (low and high binlog
// marks around each chunk, reconciled with the binlog split's stream).
// The cost: each snapshot split reads the binlog written since its
// origin once per attempt, and keeps in memory the keys changed since
// (with the before-image of those not read yet) until it is done.
//
// Tables without a primary key can't be paged nor merged by key, so the
// binlog split copies them itself, whole, in one transaction WITH
// CONSISTENT SNAPSHOT taken when its Read starts, as inserts whose seq
// is that snapshot's binlog position, before it streams; the stream
// skips their row events before that position (the resume state lists
// the tables copied and, until the stream passes it, the position of
// each copy). The copy is exact, but it is not resumable: nothing is a
// resume point until every such table is copied, and a Read killed
// during the copy copies again. Tables whose key has a column that can't
// be paged exactly (FLOAT, DOUBLE, BIT, ENUM, SET, TEXT, BLOB, JSON,
// spatial) are read by their snapshot split in one query, with one
// resume point at the end.
//
// A resume state of the binlog split is JSON: the flavor, the binlog file
// and offset after the last whole transaction, the GTID position there,
// the keyless tables copied, and each keyed table's snapshot origin.
// Reopening it replays exactly what followed (source.ReplayExact). A
// record's seq is the binlog file's number in the high 32 bits and, in
// the low 32, the offset of its rows event plus the row's index in it (a
// row takes at least a byte of the event, so seqs grow strictly through
// the binlog). A bounded Read of the
// binlog split stops at the first transaction end at or past the server's
// binlog position as of the start of streaming; a bounded Read of a
// snapshot split stops when its table is read.
//
// A table opened for the first time by a pipeline whose binlog split
// already has a state (added to Config.Tables or to the pipeline's
// streams; not among the state's snapshot origins) gets a snapshot
// split whose origin is the binlog split's position at that Open, or,
// without a key, is copied by the binlog split as above.
//
// Progress: snapshot splits report their table's rows copied and
// information_schema's estimate (SnapshotProgress, see
// source.SnapshotReporter); the binlog split reports the same while it
// copies keyless tables, and its lag in bytes of binlog not yet read (Lag,
// see source.LagReporter), from SHOW BINARY LOGS polled every 2 s while
// it streams.
//
// Rows events are decoded by the source itself (decode.go), straight
// from the binlog's bytes into that text, and only for opened tables;
// go-mysql's decoder, which boxes every value and formats DATETIMEs with
// fmt.Sprintf, still reads MariaDB's compressed rows events and tables
// with MySQL binary JSON columns. The tests decode the same events both
// ways, golden and random values of every type, and compare the records
// byte for byte.
//
// A data change of an opened table logged as a statement (a session with
// binlog_format STATEMENT or MIXED) fails the Read with a *SettingsError:
// its rows are not in the binlog.
//
// When the binlog stream's connection is lost (it drops, the server
// kills the dump thread or shuts down) and no record was emitted since
// the split's last resume point, Read streams again from that point on
// a new connection, within the same attempt, once the server answers
// (it tries for about 1.3 s): that repeats and skips nothing. A break
// inside a transaction, a server that stays away, or a second break
// without a new resume point ends the Read with the error, and the
// pipeline's next attempt resumes from its last checkpoint (etl.Retry:
// Run starts it by itself). Each reconnect is logged at Warn.
//
// A running pipeline never delays the server's shutdown: MariaDB ends
// binlog dump threads and open snapshot transactions itself at
// shutdown (it doesn't wait for a replica as Postgres's walsender
// does), and the source takes the shutdown's error or the closed
// connection as a lost link, retryable, so `mariadb-admin shutdown`
// takes the time it takes without a client.
//
// # Reading a table again
//
// Source.Resnapshot (or etl.Pipeline.Resnapshot) reads one stream's
// table again while the pipeline streams the binlog, for a destination
// that lost or mangled rows:
//
//	err := src.Resnapshot(ctx, "orders") // or p.Resnapshot(ctx, "orders")
//
// The binlog has no logical messages, so the source writes rows to a
// table of its own in the database, _openetl_watermark (created the
// first time; the user needs CREATE, INSERT and DELETE there; it is
// never a stream): the request is a row ("request:orders"), durable at
// once and read in binlog order by the running attempt or the next, and
// every pipeline reading the stream from this database acts on it. SQL
// hosts may insert that row themselves. The binlog split then reads the
// table in chunks of Config.SnapshotChunkRows rows in primary-key
// order, each query between a low and a high watermark row written in
// transactions of their own, and goes on streaming meanwhile: a change
// of the table between the two marks drops its key's row from the
// chunk, and at the high mark the chunk's other rows are emitted as
// inserts whose seq is the mark's position. With ordered commits
// (MariaDB's group commit; MySQL's binlog_order_commits, on by default)
// transactions become visible in binlog order, so the chunk's query,
// run after the low mark committed, saw every change before it, and
// the changes between the marks are all it may have missed: rows changed
// meanwhile land at their latest version, rows deleted meanwhile stay
// deleted. An append destination gets the table's rows once more;
// applied in seq order it equals the table (TestResnapshotUnderWriter).
//
// Progress is in the binlog split's resume state: a pipeline stopped
// part way goes on from the last committed chunk (TestResnapshotKilled
// kills the process with SIGKILL there). A bounded Sync reads every requested table
// to its end before it stops. While a table is read again, Status shows
// it as the stream's snapshot, and the events resnapshot.started and
// resnapshot.done say when it begins and ends. One table is read at a
// time; other requests queue. A table without a primary key, or with
// one that can't be paged, fails Resnapshot with source.ErrNoKey; a
// stream the source doesn't read with source.ErrUnknownStream. A
// chunk's rows wait in memory for its high mark. Rows deleted at the
// source whose delete the destination never got are not removed.
//
// # Credentials that expire
//
// Config.Credentials is asked for the user and password of every
// connection the source opens — the query and snapshot connections, the
// binlog connections of the binlog split and of the snapshot splits, and
// every reconnection of each — so that an RDS or Aurora IAM auth token
// (valid 15 minutes; the server checks it only at login, so an open
// connection outlives it) or a password rotated in a secret store is
// current at each login:
//
//	Credentials: func(ctx context.Context) (mysql.Credentials, error) {
//		tok, err := auth.BuildAuthToken(ctx, "db.example.com:3306", "eu-west-1", "etl", awsCfg.Credentials)
//		return mysql.Credentials{Password: tok}, err
//	},
//
// (auth is the AWS SDK's feature/rds/auth; the server takes the token
// in clear text, mysql_clear_password, so set Config.TLS.) A connection
// for which the hook fails, or whose login the server refuses, fails
// with an error wrapping ErrCredentials. With the hook both are
// retryable: the pipeline's next attempt asks it again, so a rotation
// the hook has not caught up with yet is ridden out within the
// etl.Retry budget; a hook error with a method Permanent() bool
// returning true stops Run at once. Without the hook a refused login is
// permanent: a fixed password rotated on the server stops Run at the
// next login with an error saying so (TestStalePasswordAfterRotation).
// TestCredentialsRotated changes the password of the source's user twice
// under a running pipeline, during the snapshot and while streaming, and
// kills every connection of the user each time: Run carries on, and
// each row is in the output once.
//
// # Performance
//
// A catch-up of 2M row changes waiting in the binlog runs at more than
// twice the changes per CPU-second of a bare BinlogSyncer loop that only
// decodes the events, because the source decodes the read tables' row
// images itself (go-mysql's decoder was two thirds of the pipeline's
// CPU); go-mysql's canal with a no-op handler is about even with that
// loop. BENCHMARKS.md in the repository has the current figures;
// reproduce them with
//
//	go test -run '^$' -bench CatchUp -benchtime 1x ./source/mysql
//
// # Shards
//
// One binlog is one shard: Source.Shard (etl.Builder.Shard) refuses a
// count above 1 with an error wrapping source.ErrUnshardable. The
// snapshot is read in parallel inside the one pipeline.
//
// # Schema changes
//
// Binlog columns are matched to the declared columns by name. Events
// written before the catalog was read may lack columns added since (they
// read as null) or carry columns dropped since (ignored). A table whose
// columns change while a Read streams it (ALTER TABLE ... ADD COLUMN, a
// numeric type widened) ends the Read before the change: a bounded Read
// with nothing emitted since its last resume point returns there (the
// next sync discovers the new columns and reads on); otherwise it fails
// with a *SchemaChangeError, which matches source.ErrReopen: the runner
// starts a new attempt at once, which reads on from the last checkpoint
// with the new columns (a Sync or Run goes on without returning).
//
// ALTER TABLE ... ADD COLUMN with a default (or NOT NULL, whose implicit
// default MySQL gives the existing rows, or generated, or
// auto_increment) gives the rows that exist then a value without any row
// event, so the destination's rows would keep null there. Each snapshot
// split's state records the columns its rows were read with; when an
// Open finds such a column added since (or a column gone and one new: a
// rename, as far as the catalog can tell), it reads the table again,
// with the binlog position of that Open as origin: at or after the
// change, so its rows' seq is above every version the destination has
// and below every row event after it, and applied by key in seq order
// the destination equals the table again (an append destination gets the
// table's rows once more). A schema.changed event (source.Reporter) names
// the column and says so. A nullable column added without a default
// reads null at both ends: nothing is read again. Tables without a key
// (copied by the binlog split) are not compared, and states written
// before this was recorded compare nothing.
//
// # Errors
//
// A resume state whose binlog file is gone (purged; or, on MySQL, whose
// GTIDs the server purged) fails Open or Read with a *PurgedError
// wrapping ErrBinlogPurged and matching source.ErrPositionLost: the
// changes since are lost. Start the pipeline over from a new snapshot, or
// set Config.OnPositionLost to source.PositionLostResnapshot to have the
// source read a new snapshot itself and report it (a source.reset
// event); that writes every current row again but cannot delete rows
// deleted while the binlog was missing. A state of
// the other flavor fails with ErrFlavor, a malformed one with
// ErrBadState.
//
// # Tested
//
// Against MariaDB 10.11 from Debian (scripts/servers.sh start mariadb):
// the conformance suite (static and with a concurrent writer), a golden
// type table (extremes, NULLs, zero dates) compared byte for byte between
// snapshot and binlog and read back from Parquet with pyarrow, a pipeline
// SIGKILLed three times inside the snapshot (each resuming after the
// last committed chunk, checked from the checkpoints) and three times
// while streaming under a concurrent writer, whose Parquet output applied
// in seq order equals the table (TestKill), keyset chunks over a
// composite key of integer, latin1 text, DATETIME and VARBINARY reopened
// at their resume points (TestSnapshotChunks), tables changed between the
// origin and the reads, keyed and keyless (TestSnapshotAfterOrigin), and
// before and between chunks — inserts, updates, moved and deleted keys,
// over an integer key and a key of latin1 text, DATETIME and VARBINARY —
// with the snapshot's rows compared to the table at the origin
// (TestSnapshotAsOfOrigin), the server restarted under a Run while a
// writer inserts from before the snapshot on, each row once in the
// Parquet output (TestRunRidesOutServerRestart), and restarted while a
// snapshot's first chunk is held by a table lock after the binlog split
// committed rows inserted since the origin (TestRestartDuringSnapshot),
// progress and lag (TestProgressAndLag), the source's connections
// killed 21 times at random under a writer, during the snapshot and while
// streaming, the output still equal to the table
// (TestConnectionsKilledUnderWriter), DDL, purged binlogs, settings.
// The project's test servers include no MySQL server (Debian 12 packages
// none): the MySQL code paths (v2 rows events, GTID sets with server UUIDs and tags, binary
// JSON, anonymous GTIDs) are tested on binlog events built byte for byte
// as MySQL 8 writes them, through go-mysql's parser; the MySQL snapshot
// (FLUSH TABLES WITH READ LOCK, for the origin and for each chunk) and
// MySQL's error texts have not run against a real server.
//
// # Limits of this version
//
//   - Tables without a primary key are copied whole by the binlog split
//     (not resumable, not parallel, the stream waits); tables whose key
//     can't be paged are read whole by their snapshot split.
//   - InnoDB tables only: a non-transactional table (MyISAM) is not in the
//     consistent snapshot.
//   - TRUNCATE, DROP and RENAME of an opened table are logged and not
//     replicated; tables created later are not read until the pipeline
//     opens them (they then get a snapshot, see Reading).
//   - After a failover to another server, resuming by GTID works, but seqs
//     come from the new server's binlog file numbers.
//   - XA transactions: the rows of an XA PREPARE are emitted at the
//     prepare; an XA ROLLBACK after it is not undone (nor taken out of a
//     snapshot chunk).
//   - On MySQL each snapshot chunk takes FLUSH TABLES WITH READ LOCK for
//     as long as its transaction takes to start (MariaDB reports a
//     snapshot's binlog position without a lock).
//   - A snapshot split reads the binlog since its origin once per
//     attempt, and holds the keys changed since in memory while it reads
//     (the before-images of those it has not read yet, a key's bytes for
//     the others): a long snapshot of a table under heavy writes costs
//     binlog reads and memory in proportion, and the binlog since the
//     origin must stay on the server until the snapshot is done (a
//     purged one fails the snapshot split with a *PurgedError, whatever
//     Config.OnPositionLost says).
//   - Compressed rows events (MariaDB log_bin_compress, MySQL binlog
//     transaction compression) with more rows than bytes fail the Read:
//     their seqs would not fit in the event.
//   - Spatial columns (GEOMETRY and its kinds) are declared with their
//     type names, which the engine takes as text: their WKB values are
//     quarantined.
//   - sink/parquet cannot write TIME columns yet (Arrow durations).
package mysql

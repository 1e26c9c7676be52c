package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/openetl/etl/internal/pgerr"
	"github.com/openetl/etl/source"
)

// Config configures a Source.
type Config struct {
	// ConnConfig is the connection the source uses, owned by the host (TLS,
	// auth and the like are the host's): the source copies it for its
	// query connection and again, with replication=database, for its
	// replication connection. Exactly one of ConnConfig and DSN is set.
	ConnConfig *pgconn.Config
	// DSN is a connection string parsed with pgconn.ParseConfig, used when
	// ConnConfig is nil.
	DSN string
	// Credentials, when set, is called before every connection the
	// source opens — its query connection, each snapshot split's, the
	// replication connections (the slot's exporter and each Read's) —
	// and before each reconnection of any of them, and the user (when
	// not empty) and password it returns replace ConnConfig's or the
	// DSN's for that connection. It is for credentials that expire or
	// rotate: an RDS or Aurora IAM auth token (valid 15 minutes, and
	// checked only when a connection starts, so a connection outlives
	// its token), a password read from a secret store. It may be called
	// from several goroutines at once, with the context of the call
	// that connects; cache what is costly to fetch, and return fresh
	// values once they change.
	//
	// An error it returns fails that connection with an error wrapping
	// ErrCredentials and it: retryable (the next attempt asks again)
	// unless the error has a method Permanent() bool returning true
	// (see etl.IsPermanent). With Credentials set, a login the server
	// refuses (SQLSTATE class 28) is retryable too, so a rotation the
	// hook has not caught up with yet is ridden out within the
	// pipeline's etl.Retry budget; without it, such a refusal is
	// permanent (see Permanent). ConnConfig.OAuthTokenProvider
	// (OAUTHBEARER on Postgres 18) is asked by pgconn for each connection
	// anyway. Default nil: the credentials of ConnConfig or DSN, for
	// every connection.
	Credentials func(ctx context.Context) (Credentials, error)

	// Publication names the publication whose tables are the streams.
	// Required; lowercase letters, digits and '_' only, at most 63 bytes.
	Publication string
	// CreatePublication creates the publication, FOR TABLE Tables, when it
	// does not exist yet: on Postgres 13+ WITH (publish_via_partition_root
	// = true), so a partitioned table is one stream (see the package doc),
	// and on 18+ also publish_generated_columns = stored, so stored
	// generated columns are streamed. An existing publication is used as
	// it is.
	// Default false: a missing publication is an error.
	CreatePublication bool
	// Tables lists the tables ("name" or "schema.name") a created
	// publication covers. Required with CreatePublication.
	Tables []string

	// SignalTable names a table ("name" or "schema.name") that hosts
	// insert into to ask for a re-snapshot in SQL, as Resnapshot does:
	// INSERT INTO signal (stream) VALUES ('orders') reads the table of
	// stream orders again (see the package doc, "Reading a table
	// again"). The host creates it, with a text column named stream
	// (CREATE TABLE openetl_signal (id bigserial PRIMARY KEY, stream text
	// NOT NULL)), and it must be in the publication (a created
	// publication includes it): the change stream sees its inserts,
	// in order with the changes, and the pipeline acts on them once their
	// transaction commits. It is not a stream. Every pipeline whose
	// publication and SignalTable name the table acts on its inserts.
	// Open fails when the table is not in the publication or has no
	// stream column. Default "": none.
	SignalTable string

	// Slot names the logical replication slot. Required; lowercase
	// letters, digits and '_' only, at most 63 bytes (pglogrepl puts it
	// into replication commands unquoted). The pipeline owns the slot: a
	// Read without a resume state drops an idle slot of this name and
	// creates it again with a fresh snapshot, since nothing read from it
	// was ever committed; it refuses (ErrSlotInUse) when another process
	// is streaming from the slot.
	Slot string

	// Failover makes the slot a failover slot (Postgres 17+): a standby
	// with sync_replication_slots = on keeps a copy of it, which the
	// pipeline continues from once that standby is promoted (see
	// Failover and standbys in the package doc for the servers'
	// settings). A first Open creates the slot with FAILOVER true; an
	// Open that resumes from an existing slot without it turns it on
	// (ALTER_REPLICATION_SLOT). On a server before 17 Open fails with an
	// error wrapping ErrUnsupported; on a standby, where Postgres makes
	// no failover slots, creating the slot fails. Default false.
	Failover bool

	// StatusInterval is how often the replication connection reports the
	// acknowledged position to the server while streaming, asking for a
	// keepalive in return: a keepalive between transactions is a resume
	// point at the server's WAL position, so a pipeline whose tables are
	// quiet still confirms the WAL other databases and tables write, and
	// the slot does not hold it. Default 10s.
	StatusInterval time.Duration

	// HeartbeatInterval, when positive, writes a tiny logical-decoding
	// message (pg_logical_emit_message, not transactional, prefix
	// "openetl.heartbeat") into this database's WAL at that interval while
	// streaming, so the slot's position moves even when nothing else in
	// the cluster writes. The role needs EXECUTE on
	// pg_logical_emit_message (superusers have it). A standby can't
	// write: Open there fails with ErrUnsupported. Default 0: off.
	HeartbeatInterval time.Duration

	// SnapshotChunkRows is how many rows a snapshot split reads per query
	// (in primary-key order; tables without a key are read in ranges of
	// heap pages holding about as many rows). Each chunk ends with a resume
	// point, so a sync killed during the snapshot resumes after the last
	// committed chunk. Default 50,000.
	SnapshotChunkRows int
	// SnapshotParallelism is how many tables are read at once during the
	// snapshot, each on a connection of its own; each leaf partition of a
	// partitioned table counts as one. Default 4.
	SnapshotParallelism int

	// OnPositionLost says what the source does when the slot a resume
	// state needs is gone (dropped), has lost WAL it needed, or has
	// confirmed a position past the state (a *SlotError, matching
	// source.ErrPositionLost). source.PositionLostFail (the default):
	// Open fails with the *SlotError. source.PositionLostResnapshot: Open
	// starts over as a first Open does, with a new slot and a new
	// snapshot of every table, logs the *SlotError at Warn, and the
	// change stream's split reports it when its Read starts (a
	// source.reset event, see source.Reporter); a slot lost while an
	// attempt streams ends that attempt with an error matching
	// source.ErrReopen, and the runner's next attempt starts over. See
	// source.PositionLostResnapshot for what a destination then holds.
	OnPositionLost source.PositionLostPolicy

	// Protocol is the pgoutput protocol version: 0 (the default) picks 2
	// on Postgres 14 and later and 1 before; 1 or 2 asks for that one (2
	// on a server before 14 fails Read with an error naming it).
	//
	// Under protocol 2 the server streams a large transaction while it
	// runs, once its decoded changes pass the server's
	// logical_decoding_work_mem, instead of spilling it to its own disk
	// until the commit. The source keeps such a transaction's changes
	// (StreamedTxnMemory bytes in memory, the rest in a temporary file)
	// and emits them at its commit, without those of aborted
	// subtransactions, and drops them if it aborts: nothing uncommitted
	// reaches the destination. Under protocol 1 the server sends a
	// transaction whole at its commit.
	Protocol int

	// StreamedTxnMemory is how many bytes of each transaction the server
	// streams in progress (Protocol 2) the source keeps in memory before
	// it writes the rest to a temporary file (os.TempDir), removed when
	// the transaction commits or aborts. Default 64 MiB.
	StreamedTxnMemory int

	// Truncates says what a TRUNCATE of a read table does: TruncateFail
	// (the default) stops the stream with a *TruncateError before any
	// change after it is read, since the destination cannot be emptied
	// through a change stream; TruncateIgnore logs it at Warn and goes on,
	// leaving the truncated rows at the destination.
	Truncates TruncatePolicy

	// Logger receives lifecycle events at Info and details at Debug.
	// Default: discard.
	Logger *slog.Logger
}

// TruncatePolicy says what a replicated TRUNCATE does (Config.Truncates).
type TruncatePolicy uint8

const (
	// TruncateFail stops the stream with a *TruncateError.
	TruncateFail TruncatePolicy = iota
	// TruncateIgnore logs the truncate and goes on.
	TruncateIgnore
)

// TruncateError is returned by Read when a read table was truncated and
// Config.Truncates is TruncateFail. The changes before the truncate's
// transaction are committed; empty the destination tables (or restart the
// pipeline from a new snapshot), or set TruncateIgnore, and run again.
type TruncateError struct {
	Streams []string      // the truncated streams
	LSN     pglogrepl.LSN // where the truncate's transaction starts
}

func (e *TruncateError) Error() string {
	return fmt.Sprintf("postgres: %s truncated at %s: a truncate can't be replicated as changes (see Config.Truncates)",
		strings.Join(e.Streams, ", "), e.LSN)
}

// SchemaChangeError is returned by Read when a table's columns changed
// in the stream (ALTER TABLE ... ADD COLUMN, a type change) in a way the
// attempt's declared schema can't carry, when a table was added to the
// publication after the attempt read the catalog, or a partition to a
// partitioned table it reads (attached, or dropped under its snapshot:
// see the package doc). It matches both
// ErrSchemaChanged and source.ErrReopen, so the runner starts a new
// attempt at once, which declares the new shape (Discover reads it from
// the catalog), snapshots an added table and continues where this one
// stopped; a host sees it only if that keeps failing. A declared column
// the stream stops sending (dropped, or taken out of the publication)
// does the same: the new attempt no longer declares it.
type SchemaChangeError struct {
	Stream string
	Detail string        // which column changed, and how
	LSN    pglogrepl.LSN // the position of the change
}

func (e *SchemaChangeError) Error() string {
	return fmt.Sprintf("postgres: the catalog changed at %s: %s: %s; a new attempt reads it", e.LSN, e.Stream, e.Detail)
}

// Is makes errors.Is(err, ErrSchemaChanged) and errors.Is(err,
// source.ErrReopen) true.
func (e *SchemaChangeError) Is(target error) bool {
	return target == ErrSchemaChanged || target == source.ErrReopen
}

// Errors returned by the source.
var (
	// ErrSchemaChanged is matched by a *SchemaChangeError.
	ErrSchemaChanged = errors.New("postgres: table columns changed")
	// ErrSlotMissing is wrapped by the *SlotError that Open or Read return
	// when a resume state names a slot that no longer exists (dropped by
	// hand, say). The source never recreates it silently: the changes
	// since the resume state are gone from the server.
	ErrSlotMissing = errors.New("postgres: replication slot not found")
	// ErrSlotAdvanced is wrapped by the *SlotError returned when the slot
	// has already confirmed a position past the resume state (another
	// reader advanced it, or the checkpoints were restored from an older
	// copy), so the changes in between can't be replayed.
	ErrSlotAdvanced = errors.New("postgres: replication slot is past the resume position")
	// ErrWALRemoved is wrapped by the *SlotError returned when the server
	// has removed WAL the slot still needs (its wal_status is "lost",
	// after max_slot_wal_keep_size): the changes since the resume state
	// are gone.
	ErrWALRemoved = errors.New("postgres: WAL needed by the replication slot was removed")
	// ErrForked is wrapped by the *SlotError returned when the resume
	// state's position was read on a timeline that, on this server (a
	// promoted standby), ended before it: the pipeline read changes this
	// server never had, and this server's own changes after the fork
	// would be skipped. A failover without synchronized_standby_slots on
	// the old primary does this (see Failover and standbys in the
	// package doc).
	ErrForked = errors.New("postgres: resume position past where this server's history forked")
	// ErrSlotInUse is returned by a Read without a resume state (which
	// would drop and recreate the slot) when another process is streaming
	// from the slot: it belongs to someone else.
	ErrSlotInUse = errors.New("postgres: replication slot is in use")
	// ErrPublicationMissing is returned by Discover and Open when the
	// publication does not exist and Config.CreatePublication is false.
	ErrPublicationMissing = errors.New("postgres: publication not found")
	// ErrNotViaRoot is wrapped by the *PartitionRootError that Discover
	// and Open return when the publication sends a partitioned table's
	// changes as its partitions' (publish_via_partition_root is off).
	ErrNotViaRoot = errors.New("postgres: partitioned table not published via its root")
	// ErrUnsupported is wrapped by the error Discover, Open or Read
	// return when an option can't work on the server: Config.Failover
	// before Postgres 17, Config.HeartbeatInterval on a standby (which
	// writes no WAL), Config.Protocol 2 before 14. Permanent: no retry
	// fixes it.
	ErrUnsupported = errors.New("postgres: not supported by the server")
	// ErrBadState is returned by Open for a resume state this source did
	// not write.
	ErrBadState = errors.New("postgres: malformed resume state")
	// ErrCredentials is wrapped by the error of a connection for which
	// Config.Credentials failed (the error wraps the hook's too), or
	// whose login the server refused (SQLSTATE class 28: a wrong or
	// rotated password, an expired token; the error wraps the
	// *pgconn.PgError too).
	ErrCredentials = errors.New("postgres: credentials refused or unavailable")
	// ErrServerStopping is wrapped by the error a Read returns when the
	// server began a shutdown (it ended the stream, terminated the
	// connection with admin_shutdown, or asks again and again for a
	// position the destination has not committed yet): the Read lets go
	// of its walsender at once, so the server's stop doesn't wait for
	// it (it then tries for about 1.3 s to take the stream up again,
	// which a stopping server refuses; see the package doc). The error is retryable: the next attempt resumes from the last
	// checkpoint once the server is back.
	ErrServerStopping = errors.New("postgres: the server is shutting down")
)

// SlotError says the replication slot can't continue from a resume
// state. It wraps ErrSlotMissing, ErrWALRemoved, ErrSlotAdvanced or
// ErrForked, and matches source.ErrPositionLost.
type SlotError struct {
	Slot      string
	Want      pglogrepl.LSN // the resume state's position
	Confirmed pglogrepl.LSN // the slot's confirmed_flush_lsn (0 when missing)
	Err       error
}

func (e *SlotError) Error() string {
	return e.cause() + ": the changes since are lost; start the pipeline over from a new snapshot, " +
		"or set Config.OnPositionLost to source.PositionLostResnapshot"
}

// cause says what happened to the slot.
func (e *SlotError) cause() string {
	switch {
	case errors.Is(e.Err, ErrForked):
		return fmt.Sprintf("postgres: replication slot %q: %v", e.Slot, e.Err)
	case errors.Is(e.Err, ErrWALRemoved):
		return fmt.Sprintf("postgres: replication slot %q lost WAL it needed (resume position %s; see max_slot_wal_keep_size)", e.Slot, e.Want)
	case errors.Is(e.Err, ErrSlotMissing):
		return fmt.Sprintf("postgres: replication slot %q not found (resume position %s): was it dropped by hand?", e.Slot, e.Want)
	}
	return fmt.Sprintf("postgres: replication slot %q confirmed %s, past the resume position %s: "+
		"did another reader advance it, or were the checkpoints restored from an older copy?", e.Slot, e.Confirmed, e.Want)
}

// lostWhileReading is what Read returns under PositionLostResnapshot
// when the slot was lost after Open: the attempt's snapshot splits
// belong to the old slot, so a new attempt starts over. It matches
// source.ErrReopen, so the runner starts that attempt itself, and the
// *SlotError.
type lostWhileReading struct{ *SlotError }

func (e lostWhileReading) Error() string {
	return e.cause() + ": the next attempt starts over from a new slot and snapshot (Config.OnPositionLost)"
}

func (e lostWhileReading) Unwrap() []error { return []error{e.SlotError, source.ErrReopen} }

// Unwrap returns Err and source.ErrPositionLost: every SlotError means
// the resume position is gone.
func (e *SlotError) Unwrap() []error { return []error{e.Err, source.ErrPositionLost} }

// Source reads a publication's tables through one logical replication
// slot. Create it with New; close it with Close.
type Source struct {
	cfg  Config
	conn *pgconn.Config
	log  *slog.Logger

	mu    sync.Mutex
	query *pgconn.PgConn // lazily opened, for catalog queries and Ack
	exp   *exporter      // the slot's exported snapshot, while splits import it
	// signal is Config.SignalTable as the last catalog read found it in
	// the publication; nil when it isn't.
	signal *table

	snapshots semaphore     // bounds the snapshot splits reading at once
	reading   atomic.Bool   // a Read is streaming from the slot
	acked     atomic.Uint64 // highest acknowledged LSN
	// forked is the *SlotError (ErrForked) a Read found for its start:
	// Open, which can't see the fork without a replication connection,
	// starts over from it under PositionLostResnapshot.
	forked atomic.Pointer[SlotError]
}

var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// session settings on both connections, so a value's text form is the
// same in the snapshot and in the stream.
var sessionParams = map[string]string{
	"DateStyle":          "ISO, MDY",
	"IntervalStyle":      "postgres",
	"TimeZone":           "UTC",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
	"client_encoding":    "UTF8",
}

// New validates cfg and returns a Source. It does not connect.
func New(cfg Config) (*Source, error) {
	if (cfg.ConnConfig == nil) == (cfg.DSN == "") {
		return nil, errors.New("postgres: set exactly one of Config.ConnConfig and Config.DSN")
	}
	if !nameRE.MatchString(cfg.Slot) {
		return nil, fmt.Errorf("postgres: slot name %q: use 1 to 63 lowercase letters, digits and '_'", cfg.Slot)
	}
	if !nameRE.MatchString(cfg.Publication) {
		return nil, fmt.Errorf("postgres: publication name %q: use 1 to 63 lowercase letters, digits and '_'", cfg.Publication)
	}
	if cfg.CreatePublication && len(cfg.Tables) == 0 {
		return nil, errors.New("postgres: CreatePublication needs Config.Tables")
	}
	var conn *pgconn.Config
	if cfg.ConnConfig != nil {
		conn = cfg.ConnConfig.Copy()
	} else {
		c, err := pgconn.ParseConfig(cfg.DSN)
		if err != nil {
			return nil, fmt.Errorf("postgres: parse DSN: %w", err)
		}
		conn = c
	}
	if conn.RuntimeParams == nil {
		conn.RuntimeParams = map[string]string{}
	}
	for k, v := range sessionParams {
		conn.RuntimeParams[k] = v
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	if cfg.SnapshotChunkRows <= 0 {
		cfg.SnapshotChunkRows = 50_000
	}
	if cfg.Protocol < 0 || cfg.Protocol > 2 {
		return nil, fmt.Errorf("postgres: Config.Protocol %d: pgoutput protocol 1 or 2 (0: the newest the server has)", cfg.Protocol)
	}
	if !cfg.OnPositionLost.Valid() {
		return nil, fmt.Errorf("postgres: Config.OnPositionLost: unknown policy %d (source.PositionLostFail or source.PositionLostResnapshot)",
			uint8(cfg.OnPositionLost))
	}
	if cfg.StreamedTxnMemory <= 0 {
		cfg.StreamedTxnMemory = 64 << 20
	}
	if cfg.SnapshotParallelism <= 0 {
		cfg.SnapshotParallelism = 4
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{cfg: cfg, conn: conn, log: log.With("source", "postgres", "slot", cfg.Slot),
		snapshots: make(semaphore, cfg.SnapshotParallelism)}, nil
}

// Replay returns source.ReplayExact: a resume state is an LSN at a
// transaction boundary, and the slot replays exactly what follows it.
// A first snapshot is the exception: in an attempt after the one that
// made the slot, its rest is read again under watermarks (see the
// package doc), each row its table's state at its own seq rather than
// the row the first attempt read. Applied in seq order the records still
// equal the table, and a destination that stages epochs (the exactly
// once classes) shows each committed epoch's records once; only an
// epoch that was never committed is read differently.
func (s *Source) Replay() source.Replay { return source.ReplayExact }

// Close closes the source's connections. Reads must have returned.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exp != nil {
		s.exp.close()
		s.exp = nil
	}
	if s.query != nil {
		err := s.query.Close(ctx)
		s.query = nil
		return err
	}
	return nil
}

// queryConn returns the shared query connection, connecting if needed.
// The caller holds s.mu.
func (s *Source) queryConn(ctx context.Context) (*pgconn.PgConn, error) {
	if s.query != nil && !s.query.IsClosed() {
		return s.query, nil
	}
	c, err := s.connect(ctx, false)
	if err != nil {
		return nil, err
	}
	s.query = c
	return c, nil
}

// withQuery runs fn on the shared query connection (see onLive). The
// caller holds s.mu.
func (s *Source) withQuery(ctx context.Context, fn func(c *pgconn.PgConn) error) error {
	return s.onLive(ctx, func() (*pgconn.PgConn, error) { return s.queryConn(ctx) }, fn)
}

// onLive runs fn on the connection conn returns. When fn fails because
// that connection was lost (ended by the server, as a password
// rotation's pg_terminate_backend does, or by the network: pgconn closes
// it), fn runs once more on the one conn returns then, a new one, so
// that a connection ended while it sat idle costs no attempt. fn must be
// safe to repeat: reads, and writes whose repeat changes nothing.
func (s *Source) onLive(ctx context.Context, conn func() (*pgconn.PgConn, error), fn func(c *pgconn.PgConn) error) error {
	for try := 0; ; try++ {
		c, err := conn()
		if err != nil {
			return err
		}
		if err = fn(c); err == nil || try > 0 || ctx.Err() != nil || !c.IsClosed() {
			return err
		}
		s.log.DebugContext(ctx, "connection lost; querying again on a new one", "err", err)
	}
}

// writable reports whether the server can write the logical messages a
// re-snapshot's watermarks are: Postgres 14 or later, and not a standby
// (in recovery).
func (s *Source) writable(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows [][][]byte
	old := false
	if err := s.withQuery(ctx, func(c *pgconn.PgConn) (err error) {
		if old = serverMajor(c) < 14; old {
			return nil
		}
		if rows, err = queryText(ctx, c, "SELECT pg_is_in_recovery()"); err != nil {
			return fmt.Errorf("postgres: in recovery: %w", err)
		}
		return nil
	}); err != nil {
		return false, err
	}
	return !old && string(rows[0][0]) == "f", nil
}

func (s *Source) replConfig() *pgconn.Config {
	c := s.conn.Copy()
	c.RuntimeParams["replication"] = "database"
	return c
}

// table is one published table and its stream.
type table struct {
	schema, name string
	stream       source.Stream
	key          []int    // indexes of the key columns: the primary key, or the replica identity index
	oids         []uint32 // per column: its type's OID
	typmods      []int32  // per column: its type modifier
	// discovered is the WAL insert position just before the catalog was
	// read: relation messages before it may show an older shape.
	discovered pglogrepl.LSN
	// identity is pg_class.relreplident: 'd' default (the key), 'f' full,
	// 'i' an index, 'n' nothing.
	identity byte
	// toastable says a column can hold TOASTed (out-of-line) values.
	toastable bool
	// Per column: its attribute number, whether rows that existed when it
	// was added may hold a value in it (a default, an identity or a
	// generated column), and its default expression ("" without one).
	attnums  []int
	filled   []bool
	defaults []string
	// snapSeq is the seq of the table's snapshot rows (the slot's
	// snapshot, or a later re-snapshot's; see snapSplit.reconcile): the
	// highest of its partitions' for a partitioned table.
	snapSeq pglogrepl.LSN
	// partitioned says the table is a partitioned table (relkind 'p'),
	// whose rows live in its leaf partitions, parts (see partition.go).
	partitioned bool
	parts       []part
}

func (t *table) ident() string {
	return quoteIdent(t.schema) + "." + quoteIdent(t.name)
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// streamName is the table's name in schema public and schema.name in any
// other schema.
func streamName(schema, name string) string {
	if schema == "public" {
		return name
	}
	return schema + "." + name
}

// Discover reports one FormatRow CDC stream per table of the publication,
// creating the publication first when Config.CreatePublication asks.
func (s *Source) Discover(ctx context.Context) (source.Catalog, error) {
	tables, err := s.tables(ctx)
	if err != nil {
		return source.Catalog{}, err
	}
	var cat source.Catalog
	for _, t := range tables {
		cat.Streams = append(cat.Streams, t.stream)
	}
	return cat, nil
}

func (s *Source) tables(ctx context.Context) ([]*table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The first query finds a query connection lost since the last
	// attempt; the rest run on the one it leaves.
	var rows [][][]byte
	if err := s.withQuery(ctx, func(c *pgconn.PgConn) (err error) {
		rows, err = queryText(ctx, c, `SELECT 1 FROM pg_publication WHERE pubname = `+quoteLiteral(s.cfg.Publication))
		return err
	}); err != nil {
		return nil, err
	}
	c, err := s.queryConn(ctx)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		if !s.cfg.CreatePublication {
			return nil, fmt.Errorf("%w: %q (create it, or set Config.CreatePublication)", ErrPublicationMissing, s.cfg.Publication)
		}
		var idents []string
		for _, t := range append(slices.Clone(s.cfg.Tables), s.signalTables()...) {
			var parts []string
			for _, p := range strings.SplitN(t, ".", 2) {
				parts = append(parts, quoteIdent(p))
			}
			idents = append(idents, strings.Join(parts, "."))
		}
		sql := "CREATE PUBLICATION " + quoteIdent(s.cfg.Publication) + " FOR TABLE " + strings.Join(idents, ", ")
		switch major := serverMajor(c); {
		case major >= 18:
			// Stored generated columns then travel in the change stream
			// as in the snapshot; before 18 pgoutput never sends them,
			// and they are left out of the streams (see published).
			sql += " WITH (publish_via_partition_root = true, publish_generated_columns = stored)"
		case major >= 13:
			// A partitioned table's changes then come as its root's.
			sql += " WITH (publish_via_partition_root = true)"
		}
		if _, err := queryText(ctx, c, sql); err != nil {
			return nil, fmt.Errorf("postgres: create publication %q: %w", s.cfg.Publication, err)
		}
		s.log.InfoContext(ctx, "created publication", "publication", s.cfg.Publication)
	}
	if err := s.checkViaRoot(ctx, c); err != nil {
		return nil, err
	}
	discovered, standby, err := walPosition(ctx, c)
	if err != nil {
		return nil, err
	}
	if standby && s.cfg.HeartbeatInterval > 0 {
		return nil, fmt.Errorf("%w: Config.HeartbeatInterval writes WAL, which a standby can't: "+
			"leave it off when reading from a standby, and write heartbeats on the primary", ErrUnsupported)
	}
	// One row per column that pgoutput sends of every published table
	// (see published), in attribute order,
	// with its position in the key: the primary key's, or under REPLICA
	// IDENTITY USING INDEX that index's (the key Postgres logs changes
	// of).
	// The type name is pg_type's (int4, _text, timestamptz), with the
	// precision and scale of a constrained numeric; an enum type is
	// declared enum('label',...) in label order (quotes doubled), which
	// the engine marks as an enum whatever the labels.
	rows, err = queryText(ctx, c, `
SELECT n.nspname, c.relname, a.attname,
       CASE WHEN t.typname = 'numeric' AND a.atttypmod >= 4
            THEN format('numeric(%s,%s)', ((a.atttypmod - 4) >> 16) & 65535, (a.atttypmod - 4) & 65535)
            WHEN t.typtype = 'e'
            THEN 'enum(' || COALESCE((SELECT string_agg('''' || replace(e.enumlabel, '''', '''''') || '''', ',' ORDER BY e.enumsortorder)
                                      FROM pg_enum e WHERE e.enumtypid = t.oid), '') || ')'
            ELSE t.typname END,
       NOT a.attnotnull,
       COALESCE((SELECT array_position(i.indkey::int2[], a.attnum) - array_lower(i.indkey::int2[], 1) + 1
                 FROM pg_index i WHERE i.indrelid = c.oid
                 AND CASE WHEN c.relreplident = 'i' THEN i.indisreplident ELSE i.indisprimary END), 0),
       a.atttypid, a.atttypmod, c.relreplident, a.attlen = -1 AND a.attstorage <> 'p',
       a.attnum, a.atthasmissing OR a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '',
       COALESCE((SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d WHERE d.adrelid = c.oid AND d.adnum = a.attnum), ''),
       c.relkind
FROM pg_publication_tables pt
JOIN pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
WHERE pt.pubname = `+quoteLiteral(s.cfg.Publication)+published(serverMajor(c))+`
ORDER BY n.nspname, c.relname, a.attnum`)
	if err != nil {
		return nil, fmt.Errorf("postgres: read publication %q: %w", s.cfg.Publication, err)
	}
	var out []*table
	keyPos := map[*table][][2]int{}
	for _, r := range rows {
		schema, name := string(r[0]), string(r[1])
		if len(out) == 0 || out[len(out)-1].schema != schema || out[len(out)-1].name != name {
			out = append(out, &table{schema: schema, name: name, discovered: discovered, identity: r[8][0],
				partitioned: string(r[13]) == "p", stream: source.Stream{
					Name: streamName(schema, name), Format: source.FormatRow, CDC: true, Types: source.TypesPostgres,
				}})
		}
		t := out[len(out)-1]
		t.stream.Columns = append(t.stream.Columns, source.Column{Name: string(r[2]), Type: string(r[3]), Nullable: string(r[4]) == "t"})
		oid, err1 := strconv.ParseUint(string(r[6]), 10, 32)
		mod, err2 := strconv.ParseInt(string(r[7]), 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("postgres: type of %s.%s.%s: %w", schema, name, r[2], err)
		}
		t.toastable = t.toastable || string(r[9]) == "t"
		num, err := strconv.Atoi(string(r[10]))
		if err != nil {
			return nil, fmt.Errorf("postgres: number of %s.%s.%s: %w", schema, name, r[2], err)
		}
		t.attnums = append(t.attnums, num)
		t.filled = append(t.filled, string(r[11]) == "t")
		t.defaults = append(t.defaults, string(r[12]))
		t.oids = append(t.oids, uint32(oid))
		t.typmods = append(t.typmods, int32(mod))
		if pos := string(r[5]); pos != "0" {
			p, err := strconv.Atoi(pos)
			if err != nil {
				return nil, fmt.Errorf("postgres: key position %q of %s.%s: %w", pos, schema, name, err)
			}
			keyPos[t] = append(keyPos[t], [2]int{p, len(t.stream.Columns) - 1})
		}
	}
	for _, t := range out {
		kp := keyPos[t]
		slices.SortFunc(kp, func(a, b [2]int) int { return a[0] - b[0] })
		for _, k := range kp {
			t.key = append(t.key, k[1])
			t.stream.PrimaryKey = append(t.stream.PrimaryKey, t.stream.Columns[k[1]].Name)
		}
	}
	if out, err = s.addPartitions(ctx, c, out); err != nil {
		return nil, err
	}
	// The signal table is no stream.
	s.signal = nil
	out = slices.DeleteFunc(out, func(t *table) bool {
		if s.cfg.SignalTable != "" && t.stream.Name == signalStream(s.cfg.SignalTable) {
			s.signal = t
			return true
		}
		return false
	})
	slices.SortFunc(out, func(a, b *table) int { return strings.Compare(a.stream.Name, b.stream.Name) })
	return out, nil
}

// published returns the condition, on pg_publication_tables pt and
// pg_attribute a, that keeps the columns pgoutput sends on a server of
// that major version, so that the snapshot and the change stream carry
// the same columns and no column is declared that the stream would
// leave null. pgoutput leaves out a column outside the publication's
// column list (15+), and a generated column: always before 18, whose
// attnames still lists it; on 18 unless the publication has
// publish_generated_columns = stored (attnames then says which are
// sent), and a virtual one always.
func published(major int) string {
	switch {
	case major >= 18:
		return " AND a.attname = ANY(pt.attnames) AND a.attgenerated <> 'v'"
	case major >= 15:
		return " AND a.attname = ANY(pt.attnames) AND a.attgenerated = ''"
	}
	return " AND a.attgenerated = ''"
}

// walPosition returns the WAL position the server has reached and
// whether it is a standby: on a primary the insert position (not
// pg_current_wal_lsn, the write position, which lags behind commits
// under synchronous_commit=off); on a standby, where those functions
// fail, the replay position, which is as far as the standby's catalog
// and its logical decoding see.
func walPosition(ctx context.Context, c *pgconn.PgConn) (pglogrepl.LSN, bool, error) {
	rows, err := queryText(ctx, c, `SELECT pg_is_in_recovery(),
       CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END`)
	if err != nil {
		return 0, false, fmt.Errorf("postgres: current WAL position: %w", err)
	}
	if rows[0][1] == nil {
		// A server in recovery from its archive alone (no standby of a
		// running primary) before replaying anything.
		return 0, false, errors.New("postgres: current WAL position: the standby has replayed no WAL yet")
	}
	lsn, err := pglogrepl.ParseLSN(string(rows[0][1]))
	return lsn, string(rows[0][0]) == "t", err
}

// isUndefinedObject reports a Postgres "undefined_object" error (no
// such slot, say).
func isUndefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}

// queryText runs sql (one statement, no parameters) and returns its rows
// as text values; a null is nil.
func queryText(ctx context.Context, c *pgconn.PgConn, sql string) ([][][]byte, error) {
	res, err := c.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	var rows [][][]byte
	for _, r := range res {
		if r.Err != nil {
			return nil, r.Err
		}
		rows = append(rows, r.Rows...)
	}
	return rows, nil
}

// The resume state: a version byte, the LSN to continue from and the
// LSN of the slot's snapshot (both big endian): 17 bytes (version 1).
// Version 2 adds the server's timeline the position was read on (big
// endian, not 0): 21 bytes. Version 3 is version 2's 21 bytes (the
// timeline 0 when not known) followed by the re-snapshots' part (extra,
// JSON, not empty). Only states after the snapshot exist: it is read in
// one go.
const (
	stateVersion  = 1
	stateLen      = 17
	stateVersion2 = 2
	stateLen2     = 21
	stateVersion3 = 3
	splitIDPrefix = "slot:"
)

type state struct {
	lsn      pglogrepl.LSN // continue right after this position
	snapshot pglogrepl.LSN // the slot's consistent point: seq of snapshot rows
	// tli is the timeline of the server that sent lsn (IDENTIFY_SYSTEM);
	// 0 when not known (written before a stream started, or by a version
	// that didn't record it).
	tli  uint32
	tail []byte // re-snapshots (extra, JSON); nil without any
}

func (st state) encode() []byte {
	n, v := stateLen, byte(stateVersion)
	switch {
	case len(st.tail) > 0:
		n, v = stateLen2, stateVersion3
	case st.tli != 0:
		n, v = stateLen2, stateVersion2
	}
	b := make([]byte, n, n+len(st.tail))
	b[0] = v
	binary.BigEndian.PutUint64(b[1:9], uint64(st.lsn))
	binary.BigEndian.PutUint64(b[9:17], uint64(st.snapshot))
	if n == stateLen2 {
		binary.BigEndian.PutUint32(b[17:21], st.tli)
	}
	return append(b, st.tail...)
}

func decodeState(b []byte) (state, error) {
	if !(len(b) == stateLen && b[0] == stateVersion || len(b) == stateLen2 && b[0] == stateVersion2 ||
		len(b) > stateLen2 && b[0] == stateVersion3) {
		return state{}, fmt.Errorf("%w (%d bytes)", ErrBadState, len(b))
	}
	st := state{lsn: pglogrepl.LSN(binary.BigEndian.Uint64(b[1:9])), snapshot: pglogrepl.LSN(binary.BigEndian.Uint64(b[9:17]))}
	if len(b) >= stateLen2 {
		if st.tli = binary.BigEndian.Uint32(b[17:21]); st.tli == 0 && b[0] == stateVersion2 {
			return state{}, fmt.Errorf("%w: timeline 0", ErrBadState)
		}
	}
	if st.snapshot == 0 || st.lsn < st.snapshot {
		return state{}, fmt.Errorf("%w: position %s before snapshot %s", ErrBadState, st.lsn, st.snapshot)
	}
	if len(b) > stateLen2 {
		if _, err := decodeExtra(b[stateLen2:]); err != nil {
			return state{}, err
		}
		st.tail = slices.Clone(b[stateLen2:])
	}
	return st, nil
}

// Open returns the splits: the slot's change stream ("slot:" + the slot
// name) first, then one snapshot split per table ("snapshot:" + the
// stream name). Without a resume state for the change stream it creates
// the slot (see Config.Slot) with an exported snapshot that the snapshot
// splits read under; with one it checks that the slot still exists and
// has not moved past the state (a *SlotError otherwise).
func (s *Source) Open(ctx context.Context, streams []string, resume map[source.SplitID][]byte) ([]source.Split, error) {
	tables, err := s.tables(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkFailover(ctx); err != nil {
		return nil, err
	}
	sp := &split{src: s, id: source.SplitID(splitIDPrefix + s.cfg.Slot), rels: map[uint32]*relation{}, published: map[[2]string]bool{},
		signal: -1}
	if s.cfg.SignalTable != "" {
		s.mu.Lock()
		sig := s.signal
		s.mu.Unlock()
		if sig == nil {
			return nil, fmt.Errorf("postgres: signal table %q (Config.SignalTable) is not in publication %q: create it and add it "+
				"(ALTER PUBLICATION ... ADD TABLE)", s.cfg.SignalTable, s.cfg.Publication)
		}
		sp.signal = slices.IndexFunc(sig.stream.Columns, func(c source.Column) bool { return c.Name == "stream" })
		if sp.signal < 0 {
			return nil, fmt.Errorf("postgres: signal table %q (Config.SignalTable) has no column named stream", s.cfg.SignalTable)
		}
		sp.signalName = [2]string{sig.schema, sig.name}
		sp.published[sp.signalName] = true
	}
	for _, t := range tables {
		sp.published[[2]string{t.schema, t.name}] = true
		sp.discovered = max(sp.discovered, t.discovered)
		// pgoutput sends a partition's own relation message beside its
		// root's, before the partition's first change in a session: no
		// table added to the publication.
		for _, p := range t.parts {
			sp.published[[2]string{p.schema, p.name}] = true
		}
	}
	for _, name := range streams {
		i := slices.IndexFunc(tables, func(t *table) bool { return t.stream.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("postgres: stream %q is not in publication %q", name, s.cfg.Publication)
		}
		sp.tables = append(sp.tables, tables[i])
	}
	// One snapshot split per table; per leaf partition of a partitioned
	// table, whose rows are its root's stream.
	var snaps []*snapSplit
	for _, t := range sp.tables {
		if !t.partitioned {
			snaps = append(snaps, &snapSplit{src: s, id: source.SplitID(snapshotIDPrefix + t.stream.Name), t: t, chunk: s.cfg.SnapshotChunkRows})
			continue
		}
		if sp.parts == nil {
			sp.parts = map[*table]map[[2]string]string{}
		}
		known := map[[2]string]string{}
		for _, p := range t.parts {
			known[[2]string{p.schema, p.name}] = p.gen
			snaps = append(snaps, &snapSplit{src: s, id: source.SplitID(partSplitID(t, p)), t: t, part: &p, chunk: s.cfg.SnapshotChunkRows})
		}
		sp.parts[t] = known
	}
	seqs := map[uint64]bool{}
	for _, ss := range snaps {
		if b, ok := resume[ss.id]; ok {
			st, err := decodeSnapState(b)
			if err != nil {
				return nil, err
			}
			ss.st = st
			seqs[st.Seq] = true
		}
	}
	s.mu.Lock()
	if s.exp != nil {
		s.exp.close()
		s.exp = nil
	}
	s.mu.Unlock()

	var start *state
	if b, ok := resume[sp.id]; ok {
		st, err := decodeState(b)
		if err != nil {
			return nil, err
		}
		start = &st
	} else if len(seqs) == 1 {
		// Snapshot states but none for the stream: nothing streamed was
		// committed yet. The slot still holds every change since its
		// snapshot if it exists and has not confirmed past it: stream from
		// there.
		for seq := range seqs {
			start = &state{lsn: pglogrepl.LSN(seq), snapshot: pglogrepl.LSN(seq)}
		}
	}
	if start != nil {
		_, err := s.checkSlot(ctx, start.lsn)
		if f := s.forked.Load(); err == nil && f != nil && f.Want == start.lsn {
			err = f
		}
		if err != nil {
			// Every lost position starts over under the policy, a slot
			// that confirmed past the state too: that is what the slot
			// of a re-snapshot that failed before its first checkpoint
			// looks like to the next attempt, which resumes from the
			// checkpoint before it.
			var se *SlotError
			if !errors.As(err, &se) || s.cfg.OnPositionLost != source.PositionLostResnapshot {
				return nil, err
			}
			s.log.WarnContext(ctx, "replication slot lost: starting over with a new slot and snapshot (Config.OnPositionLost)", "err", err)
			start, sp.reset = nil, err
		} else if err := s.ensureFailover(ctx); err != nil {
			return nil, err
		}
	}
	if start == nil {
		// A fresh start: snapshot states of an earlier slot (an
		// inconsistent set) are no use with a new one.
		exp, st, err := s.createSlot(ctx, len(snaps))
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.exp = exp
		s.mu.Unlock()
		start = &st
		for _, ss := range snaps {
			ss.st = snapState{}
			ss.exp = exp
		}
	}
	sp.start = *start
	if err := sp.rs.restore(start.tail); err != nil {
		return nil, err
	}
	// Re-snapshots of streams this attempt doesn't read are dropped.
	sp.rs.x.Jobs = slices.DeleteFunc(sp.rs.x.Jobs, func(j job) bool {
		if t := sp.table(j.Stream); t == nil || len(t.key) == 0 {
			s.log.WarnContext(ctx, "re-snapshot of a stream this attempt doesn't read: dropped", "stream", j.Stream)
			return true
		}
		return false
	})
	sp.rs.setEncoded()
	// Whether the stream can read snapshots under watermarks (handOver).
	writable := false
	if len(snaps) > 0 {
		var err error
		if writable, err = s.writable(ctx); err != nil {
			return nil, err
		}
	}
	var now pglogrepl.LSN // the WAL insert position, read when a table must be read again
	for _, ss := range snaps {
		if ss.part != nil && ss.st.V != 0 && ss.st.Gen != ss.part.gen {
			// Detached and attached again since its rows were read (or
			// another table attached under its name): read it again.
			s.log.InfoContext(ctx, "partition attached again since it was read: reading it again", "stream", ss.t.stream.Name,
				"partition", streamName(ss.part.schema, ss.part.name))
			ss.st = snapState{}
		}
		if ss.st.V == 0 {
			// No state: any hand-over of the split that the stream's
			// state holds, begun or finished, is dropped. A checkpoint can
			// hold the job without the split's state (the runner records
			// no state of a split whose Read has emitted no resume point
			// yet), and nothing then tells whether the table is still the
			// one the job read part of (a partition attached again, a
			// column added with a default): the hand-over starts over
			// (handOver).
			sp.rs.x.Snapped = slices.DeleteFunc(sp.rs.x.Snapped, func(id string) bool { return id == string(ss.id) })
			sp.rs.x.Jobs = slices.DeleteFunc(sp.rs.x.Jobs, func(j job) bool { return j.Split == string(ss.id) })
			ss.st = snapState{V: snapStateVersion, Seq: uint64(start.snapshot)}
			ss.st.Cols, ss.st.Attnum = ss.t.shape()
			if ss.part != nil && ss.exp == nil && (!writable || len(ss.t.key) == 0) {
				// A partition read after the slot's snapshot (attached
				// since, say) that the stream can't read under watermarks
				// (handOver: a standby, Postgres 13, or a table without a
				// key): its rows never passed through the stream,
				// and the destination may hold older versions of them
				// (from before a detach). Its rows carry the WAL insert
				// position now, as a table read again does.
				if err := s.walInsertLSN(ctx, &now); err != nil {
					return nil, err
				}
				ss.st.Again = uint64(now)
			}
		} else if err := ss.reconcile(ctx, &now); err != nil {
			return nil, err
		}
		if ss.part != nil {
			ss.st.Gen = ss.part.gen
		}
		ss.t.snapSeq = max(ss.t.snapSeq, pglogrepl.LSN(ss.st.rowSeq()))
	}
	if len(snaps) > 0 {
		sp.handOver(ctx, snaps, writable)
	}
	// Changes committed after a re-snapshot chunk but written before it
	// are raised above its rows, on replay as the first time.
	for name, seq := range sp.rs.x.Raise {
		if t := sp.table(name); t != nil {
			t.snapSeq = max(t.snapSeq, pglogrepl.LSN(seq))
		}
	}
	for _, t := range sp.tables {
		switch {
		case t.identity == 'n' || t.identity != 'f' && len(t.key) == 0:
			s.log.WarnContext(ctx, "table has no replica identity: Postgres refuses its updates and deletes while it is published "+
				"(give it a primary key or set REPLICA IDENTITY FULL)", "stream", t.stream.Name)
		case t.identity != 'f' && t.toastable:
			s.log.InfoContext(ctx, "an update that leaves a large (TOASTed) value alone doesn't carry it: such rows are quarantined "+
				"as unchanged_value unless the table has REPLICA IDENTITY FULL", "stream", t.stream.Name)
		}
	}
	out := []source.Split{sp}
	for _, ss := range snaps {
		out = append(out, ss)
	}
	return out, nil
}

// checkSlot returns the slot's confirmed_flush_lsn, or a *SlotError when
// the slot is missing or past want.
func (s *Source) checkSlot(ctx context.Context, want pglogrepl.LSN) (pglogrepl.LSN, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// wal_status (Postgres 13+) is 'lost' once the server removed WAL the
	// slot needs (max_slot_wal_keep_size).
	var rows [][][]byte
	err := s.withQuery(ctx, func(c *pgconn.PgConn) (err error) {
		rows, err = queryText(ctx, c, `SELECT confirmed_flush_lsn,
       COALESCE((to_jsonb(s) ->> 'wal_status') = 'lost', false)
FROM pg_replication_slots s WHERE slot_name = `+quoteLiteral(s.cfg.Slot))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: look up slot %q: %w", s.cfg.Slot, err)
	}
	if len(rows) == 0 {
		return 0, &SlotError{Slot: s.cfg.Slot, Want: want, Err: ErrSlotMissing}
	}
	if string(rows[0][1]) == "t" {
		return 0, &SlotError{Slot: s.cfg.Slot, Want: want, Err: ErrWALRemoved}
	}
	var confirmed pglogrepl.LSN
	if rows[0][0] != nil {
		if confirmed, err = pglogrepl.ParseLSN(string(rows[0][0])); err != nil {
			return 0, err
		}
	}
	if confirmed > want {
		return confirmed, &SlotError{Slot: s.cfg.Slot, Want: want, Confirmed: confirmed, Err: ErrSlotAdvanced}
	}
	return confirmed, nil
}

// Ack records the acknowledged position. A Read in progress reports it
// as the slot's flush position with its next status update; when no Read
// runs, Ack advances the slot with pg_replication_slot_advance.
func (s *Source) Ack(ctx context.Context, states map[source.SplitID][]byte) error {
	b, ok := states[source.SplitID(splitIDPrefix+s.cfg.Slot)]
	if !ok {
		return nil
	}
	st, err := decodeState(b)
	if err != nil {
		return err
	}
	for {
		old := s.acked.Load()
		if uint64(st.lsn) <= old || s.acked.CompareAndSwap(old, uint64(st.lsn)) {
			break
		}
	}
	if s.reading.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lsn := pglogrepl.LSN(s.acked.Load()).String()
	// Only forward: advancing to a position before confirmed_flush_lsn is
	// an error, and an active slot can't be advanced (the Read reports it).
	err = s.withQuery(ctx, func(c *pgconn.PgConn) error {
		_, err := queryText(ctx, c, `SELECT pg_replication_slot_advance(slot_name, `+quoteLiteral(lsn)+`::pg_lsn)
FROM pg_replication_slots WHERE slot_name = `+quoteLiteral(s.cfg.Slot)+` AND NOT active
AND confirmed_flush_lsn < `+quoteLiteral(lsn)+`::pg_lsn`)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: advance slot %q to %s: %w", s.cfg.Slot, lsn, err)
	}
	return nil
}

// Teardown drops the pipeline's replication slot and, when
// Config.CreatePublication is set (the pipeline owns the publication),
// the publication, so a pipeline taken out of service leaves nothing
// holding WAL on the server. It fails with ErrSlotInUse while a process
// streams from the slot; a slot or publication already gone is not an
// error. Reads must have returned; the pipeline can't resume afterwards
// (its next sync starts from a new snapshot).
func (s *Source) Teardown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exp != nil {
		s.exp.close()
		s.exp = nil
	}
	c, err := s.queryConn(ctx)
	if err != nil {
		return err
	}
	rows, err := queryText(ctx, c, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = `+quoteLiteral(s.cfg.Slot)+` AND active`)
	if err != nil {
		return fmt.Errorf("postgres: look up slot %q: %w", s.cfg.Slot, err)
	}
	if len(rows) > 0 {
		return fmt.Errorf("%w: slot %q is streaming to process %s", ErrSlotInUse, s.cfg.Slot, rows[0][0])
	}
	if _, err := queryText(ctx, c, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = `+
		quoteLiteral(s.cfg.Slot)); err != nil {
		return fmt.Errorf("postgres: drop slot %q: %w", s.cfg.Slot, err)
	}
	if s.cfg.CreatePublication {
		if _, err := queryText(ctx, c, "DROP PUBLICATION IF EXISTS "+quoteIdent(s.cfg.Publication)); err != nil {
			return fmt.Errorf("postgres: drop publication %q: %w", s.cfg.Publication, err)
		}
	}
	s.log.InfoContext(ctx, "tore down", "publication_dropped", s.cfg.CreatePublication)
	return nil
}

// Permanent reports whether err is an error no retry fixes: credentials
// refused (SQLSTATE class 28) when Config.Credentials is not set (with
// it, the next attempt asks for fresh ones), an error of
// Config.Credentials that says so (a method Permanent() bool returning
// true), a database that does not exist (3D000), a privilege the user
// lacks (42501, e.g. no REPLICATION attribute), a publication that
// sends a partitioned table's changes as its partitions'
// (ErrNotViaRoot), and an option the server can't carry out
// (ErrUnsupported). Run returns such an error at once instead of
// retrying it for its budget (source.Classifier).
func (s *Source) Permanent(err error) bool {
	if errors.Is(err, ErrCredentials) {
		if permanentMark(err) {
			return true
		}
		if s.cfg.Credentials != nil {
			return false
		}
	}
	return pgerr.Permanent(err) || errors.Is(err, ErrNotViaRoot) || errors.Is(err, ErrUnsupported)
}

package mysql

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/openetl/etl/source"
)

// Flavors of server, as Config.Flavor and resume states name them.
const (
	FlavorMySQL   = "mysql"
	FlavorMariaDB = "mariadb"
)

// Config configures a Source.
type Config struct {
	// Addr is the server's host:port (or a unix socket path). Either Addr
	// (with User, Password and Database) or DSN is set.
	Addr     string
	User     string
	Password string
	// Database is the database (schema) whose tables are the streams.
	Database string
	// DSN is "user:password@host:port/database"; the go-sql-driver forms
	// "user:password@tcp(host:port)/database" and
	// "user:password@unix(/path/to/socket)/database" are accepted too
	// (parameters after '?' are ignored). Used when Addr is empty.
	DSN string
	// TLS, when set, is used for every connection (owned by the host).
	TLS *tls.Config
	// Credentials, when set, is called before every connection the
	// source opens — its query connection, each snapshot split's, the
	// binlog connections (the binlog split's and each snapshot split's,
	// see the package doc) — and before each reconnection of any of
	// them, and the user (when not empty) and password it returns
	// replace Config.User and Config.Password (or the DSN's) for that
	// connection. It is for credentials that expire or rotate: an RDS or
	// Aurora IAM auth token (valid 15 minutes, and checked only when a
	// connection starts, so a connection outlives its token), a password
	// read from a secret store. It may be called from several goroutines
	// at once, with the context of the call that connects; cache what is
	// costly to fetch, and return fresh values once they change.
	//
	// An error it returns fails that connection with an error wrapping
	// ErrCredentials and it: retryable (the next attempt asks again)
	// unless the error has a method Permanent() bool returning true
	// (see etl.IsPermanent). With Credentials set, a login the server
	// refuses (1045, 1698) is retryable too, so a rotation the hook has
	// not caught up with yet is ridden out within the pipeline's
	// etl.Retry budget; without it, such a refusal is permanent (see
	// Permanent). Default nil: Config.User and Config.Password (or the
	// DSN's), for every connection.
	Credentials func(ctx context.Context) (Credentials, error)

	// Tables lists the tables of Database to read. Default: every base
	// table of Database.
	Tables []string

	// Flavor is FlavorMySQL or FlavorMariaDB. Default: detected from the
	// server's version. When set, a server of the other flavor is an
	// error: the MySQL protocol against MariaDB silently drops GTIDs.
	Flavor string

	// ServerID is the replica server ID the binlog connection registers
	// with. It must differ from every other replica's and the server's
	// own: a second connection with the same ID makes the server drop
	// the first. Default: a random ID in [2^31, 2^32) for each Read.
	// Snapshot splits, which read the binlog too (see the package doc),
	// always use random IDs.
	ServerID uint32

	// OnPositionLost says what the source does when a resume state's
	// binlog position is no longer on the server (the binlogs, or on
	// MySQL its GTIDs, were purged: a *PurgedError, matching
	// source.ErrPositionLost). source.PositionLostFail (the default):
	// Open or Read fails with the *PurgedError.
	// source.PositionLostResnapshot: the source reads a new snapshot of
	// every table and streams on from it, as a first sync does, logs the
	// *PurgedError at Warn, and the binlog split reports it (a
	// source.reset event, see source.Reporter). See
	// source.PositionLostResnapshot for what a destination then holds.
	OnPositionLost source.PositionLostPolicy

	// Heartbeat is the period of the server's heartbeat events on an
	// idle binlog connection. Default 1s.
	Heartbeat time.Duration

	// SnapshotChunkRows is how many rows a snapshot split reads per query,
	// in primary-key order (keyset pagination). Each chunk ends with a
	// resume point, so a sync killed during the snapshot resumes after
	// the last committed chunk. Tables without a primary key, and tables
	// whose key has a column of a type that can't be paged exactly
	// (FLOAT, DOUBLE, BIT, ENUM, SET, TEXT, BLOB, JSON, spatial), are
	// read in one piece (see the package doc). Default 50,000.
	SnapshotChunkRows int
	// SnapshotParallelism is how many tables the snapshot reads at once,
	// each on a connection of its own. Default 4.
	SnapshotParallelism int

	// Logger receives lifecycle events at Info and details at Debug.
	// Default: discard.
	Logger *slog.Logger
}

// Errors returned by the source.
var (
	// ErrSettings is wrapped by the *SettingsError that Discover, Open and
	// Read return when a server setting keeps the source from reading the
	// binlog exactly.
	ErrSettings = errors.New("mysql: server settings do not allow binlog replication")
	// ErrBinlogPurged is wrapped by the *PurgedError returned when a resume
	// state's position is no longer in the server's binlogs.
	ErrBinlogPurged = errors.New("mysql: binlog position purged")
	// ErrFlavor is returned when Config.Flavor or a resume state names a
	// flavor the server is not.
	ErrFlavor = errors.New("mysql: wrong server flavor")
	// ErrSchemaChanged is wrapped by the *SchemaChangeError a Read returns
	// when a table's columns changed while it streamed (ALTER TABLE): the
	// next attempt discovers the new columns and reads on from the last
	// resume point.
	ErrSchemaChanged = errors.New("mysql: table schema changed")
	// ErrBadState is returned by Open for a resume state this source did
	// not write.
	ErrBadState = errors.New("mysql: malformed resume state")
	// ErrTableMissing is returned by Discover and Open for a table of
	// Config.Tables that does not exist in Config.Database.
	ErrTableMissing = errors.New("mysql: table not found")
	// ErrCredentials is wrapped by the error of a connection for which
	// Config.Credentials failed (the error wraps the hook's too), or
	// whose login the server refused (1045 access denied, 1698: a wrong
	// or rotated password, an expired token; the error wraps the
	// server's *mysql.MyError too).
	ErrCredentials = errors.New("mysql: credentials refused or unavailable")
)

// SettingsError names the server setting to change.
type SettingsError struct {
	Variable string // binlog_row_metadata, say
	Value    string // its value on the server ("" when not set)
	Want     string // the value the source needs
	Hint     string // what to do, when more than SET GLOBAL
}

func (e *SettingsError) Error() string {
	msg := fmt.Sprintf("mysql: server variable %s is %q, want %s: set %s=%s (SET GLOBAL %s = '%s', and in the server's configuration)",
		e.Variable, e.Value, e.Want, e.Variable, e.Want, e.Variable, e.Want)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *SettingsError) Unwrap() error { return ErrSettings }

// PurgedError says a resume state's binlog position is gone from the
// server. It matches ErrBinlogPurged and source.ErrPositionLost. Recover
// by starting the pipeline over (a new snapshot), or let the source do it
// (Config.OnPositionLost).
type PurgedError struct {
	File   string // the resume state's binlog file
	Pos    uint32
	GTID   string // the resume state's GTID position, when it has one
	Oldest string // the oldest binlog file the server still has
	Err    error  // the server's error, when it reported one
}

func (e *PurgedError) Error() string {
	msg := fmt.Sprintf("mysql: binlog position %s:%d", e.File, e.Pos)
	if e.GTID != "" {
		msg += " (GTID " + e.GTID + ")"
	}
	msg += " is no longer on the server"
	if e.Oldest != "" {
		msg += " (oldest binlog " + e.Oldest + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + ": the changes since are lost; start the pipeline over from a new snapshot, " +
		"or set Config.OnPositionLost to source.PositionLostResnapshot"
}

func (e *PurgedError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrBinlogPurged, source.ErrPositionLost, e.Err}
	}
	return []error{ErrBinlogPurged, source.ErrPositionLost}
}

// SchemaChangeError says a table's columns changed while a Read streamed
// it. The Read stopped before the change. It matches ErrSchemaChanged and
// source.ErrReopen: the runner starts a new attempt at once, which
// declares the new columns and reads on from the last checkpoint.
type SchemaChangeError struct {
	Table  string
	Detail string
}

func (e *SchemaChangeError) Error() string {
	return fmt.Sprintf("mysql: table %q changed while streaming (%s): a new attempt reads on with the new columns", e.Table, e.Detail)
}

func (e *SchemaChangeError) Unwrap() error { return ErrSchemaChanged }

// Is makes errors.Is(err, source.ErrReopen) true.
func (e *SchemaChangeError) Is(target error) bool { return target == source.ErrReopen }

// Source reads a database's tables: a consistent snapshot, then the
// binlog. Create it with New; close it with Close.
type Source struct {
	cfg  Config
	addr string
	log  *slog.Logger

	mu    sync.Mutex
	query *client.Conn // lazily opened, for catalog queries
	info  *serverInfo  // detected at the first connection

	snapshots semaphore // bounds the snapshot splits reading at once

	standardDecode bool // tests: rows decoded by go-mysql only
}

// serverInfo is what the source learns about the server once.
type serverInfo struct {
	flavor     string
	version    string
	gtidMode   bool              // MySQL: gtid_mode=ON (MariaDB: always)
	charsets   map[uint64]string // collation ID → character set
	fillLogPos bool              // MariaDB 11.4+: some events have LogPos 0
}

// New validates cfg and returns a Source. It does not connect.
func New(cfg Config) (*Source, error) {
	if cfg.Addr == "" {
		if cfg.DSN == "" {
			return nil, errors.New("mysql: set Config.Addr (with User, Password, Database) or Config.DSN")
		}
		d, err := parseDSN(cfg.DSN)
		if err != nil {
			return nil, err
		}
		cfg.Addr, cfg.User, cfg.Password = d.addr, d.user, d.password
		if cfg.Database == "" {
			cfg.Database = d.database
		}
	}
	if cfg.Database == "" {
		return nil, errors.New("mysql: Config.Database is required")
	}
	switch cfg.Flavor {
	case "", FlavorMySQL, FlavorMariaDB:
	default:
		return nil, fmt.Errorf("mysql: Config.Flavor %q: use %q, %q or leave it empty to detect", cfg.Flavor, FlavorMySQL, FlavorMariaDB)
	}
	if !cfg.OnPositionLost.Valid() {
		return nil, fmt.Errorf("mysql: Config.OnPositionLost: unknown policy %d (source.PositionLostFail or source.PositionLostResnapshot)",
			uint8(cfg.OnPositionLost))
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.SnapshotChunkRows <= 0 {
		cfg.SnapshotChunkRows = 50_000
	}
	if cfg.SnapshotParallelism <= 0 {
		cfg.SnapshotParallelism = 4
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{cfg: cfg, addr: cfg.Addr, log: log.With("source", "mysql", "database", cfg.Database),
		snapshots: make(semaphore, cfg.SnapshotParallelism)}, nil
}

type dsn struct{ user, password, addr, database string }

// parseDSN reads user:password@host:port/database (or @tcp(host:port)).
func parseDSN(s string) (dsn, error) {
	var d dsn
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return d, errors.New("mysql: DSN: want user:password@host:port/database")
	}
	d.user, d.password, _ = strings.Cut(s[:at], ":")
	rest := s[at+1:]
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		rest = rest[:q]
	}
	var host, db string
	switch {
	case strings.HasPrefix(rest, "tcp(") || strings.HasPrefix(rest, "unix("):
		open := strings.IndexByte(rest, '(')
		end := strings.IndexByte(rest, ')')
		if end < 0 {
			return d, fmt.Errorf("mysql: DSN %q: unclosed (", redact(s))
		}
		host = rest[open+1 : end]
		db = strings.TrimPrefix(rest[end+1:], "/")
	default:
		host, db, _ = strings.Cut(rest, "/")
	}
	if host == "" {
		return d, fmt.Errorf("mysql: DSN %q has no host", redact(s))
	}
	d.addr, d.database = host, db
	return d, nil
}

func redact(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	user, _, _ := strings.Cut(dsn[:at], ":")
	return user + ":***" + dsn[at:]
}

// Replay returns source.ReplayExact: a resume state is a binlog position
// (and GTID position) at a transaction's end, and the binlog replays
// exactly what follows it.
func (s *Source) Replay() source.Replay { return source.ReplayExact }

// Close closes the source's query connection. Reads must have returned.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.query != nil {
		err := s.query.Close()
		s.query = nil
		return err
	}
	return nil
}

// connect opens a connection with the session settings every query of
// the source runs under: UTC (TIMESTAMP values in UTC), utf8mb4.
func (s *Source) connect(ctx context.Context) (*client.Conn, error) {
	user, password, err := s.login(ctx)
	if err != nil {
		return nil, err
	}
	c, err := client.ConnectWithContext(ctx, s.addr, user, password, "", 10*time.Second, func(c *client.Conn) error {
		if s.cfg.TLS != nil {
			c.SetTLSConfig(s.cfg.TLS)
		}
		return nil
	})
	if err != nil {
		return nil, s.refused(fmt.Errorf("mysql: connect to %s: %w", s.addr, err), "connect", user)
	}
	// sql_mode '': PAD_CHAR_TO_FULL_LENGTH would pad CHAR values the
	// binlog does not.
	if _, err := c.Execute("SET NAMES utf8mb4, time_zone = '+00:00', sql_mode = ''"); err != nil {
		c.Close()
		return nil, fmt.Errorf("mysql: session settings: %w", err)
	}
	return c, nil
}

// queryConn returns the shared query connection, connecting if needed.
// The caller holds s.mu.
func (s *Source) queryConn(ctx context.Context) (*client.Conn, error) {
	if s.query != nil {
		if err := s.query.Ping(); err == nil {
			return s.query, nil
		}
		s.query.Close()
		s.query = nil
	}
	c, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.query = c
	if s.info == nil {
		info, err := s.detect(c)
		if err != nil {
			s.query = nil
			c.Close()
			return nil, err
		}
		s.info = info
	}
	return c, nil
}

// abort closes a connection's socket from another goroutine, which
// unblocks a read in progress (go-mysql's connections have no context,
// and their Close is not safe during a read).
func abort(c *client.Conn) {
	if c.Conn != nil && c.Conn.Conn != nil {
		c.Conn.Conn.Close()
	}
}

// exec runs one statement, aborting the connection when ctx ends first.
// When the abort has started, exec waits for it before it returns: on
// the shared query connection, an abort still running after the caller
// let go of s.mu closed the socket under the next caller's statement,
// which had passed its Ping ("use of closed network connection").
func exec(ctx context.Context, c *client.Conn, sql string, args ...any) (*gomysql.Result, error) {
	aborted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { abort(c); close(aborted) })
	defer func() {
		if !stop() {
			<-aborted
		}
	}()
	r, err := c.Execute(sql, args...)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return r, err
}

// rows returns a result's values as strings (NULL as "").
func rows(r *gomysql.Result) [][]string {
	if r == nil || r.Resultset == nil {
		return nil
	}
	out := make([][]string, 0, len(r.Values))
	for _, row := range r.Values {
		vals := make([]string, len(row))
		for i := range row {
			switch row[i].Type {
			case gomysql.FieldValueTypeNull:
			case gomysql.FieldValueTypeString:
				vals[i] = string(row[i].AsString())
			default:
				vals[i] = fmt.Sprint(row[i].Value())
			}
		}
		out = append(out, vals)
	}
	return out
}

// detect learns the server's flavor and settings, and checks them.
func (s *Source) detect(c *client.Conn) (*serverInfo, error) {
	info := &serverInfo{version: c.GetServerVersion()}
	info.flavor = FlavorMySQL
	if strings.Contains(strings.ToLower(info.version), "mariadb") {
		info.flavor = FlavorMariaDB
	}
	if s.cfg.Flavor != "" && s.cfg.Flavor != info.flavor {
		return nil, fmt.Errorf("%w: Config.Flavor is %q but the server is %s %s", ErrFlavor, s.cfg.Flavor, info.flavor, info.version)
	}
	if info.flavor == FlavorMariaDB {
		info.fillLogPos = mariadbAtLeast(info.version, 11, 4)
	}
	r, err := c.Execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS")
	if err != nil {
		return nil, fmt.Errorf("mysql: read collations: %w", err)
	}
	info.charsets = map[uint64]string{}
	for _, row := range rows(r) {
		id, err := strconv.ParseUint(row[0], 10, 64)
		if err == nil {
			info.charsets[id] = strings.ToLower(row[1])
		}
	}
	s.log.Info("connected", "flavor", info.flavor, "version", info.version)
	return info, nil
}

// checkServer reads the server's binlog settings, checks them (they can
// change between syncs) and notes whether it has GTIDs. The caller holds
// s.mu.
func (s *Source) checkServer(ctx context.Context, c *client.Conn) error {
	vars := map[string]string{}
	r, err := exec(ctx, c, `SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image',
'binlog_row_metadata', 'gtid_mode', 'binlog_row_value_options')`)
	if err != nil {
		return fmt.Errorf("mysql: read server variables: %w", err)
	}
	for _, row := range rows(r) {
		vars[strings.ToLower(row[0])] = row[1]
	}
	if err := checkSettings(s.info.flavor, vars); err != nil {
		return err
	}
	s.info.gtidMode = s.info.flavor == FlavorMariaDB || strings.EqualFold(vars["gtid_mode"], "ON")
	return nil
}

// checkSettings checks the binlog settings the source relies on: the
// binlog on, row format, full row images, full row metadata (column
// names, signedness, ENUM and SET values: without it BIGINT UNSIGNED
// max arrives as -1) and, on MySQL, whole JSON values.
func checkSettings(flavor string, vars map[string]string) error {
	if !strings.EqualFold(vars["log_bin"], "ON") && vars["log_bin"] != "1" {
		return &SettingsError{Variable: "log_bin", Value: vars["log_bin"], Want: "ON",
			Hint: "log_bin is read-only: start the server with --log-bin"}
	}
	for _, want := range [][2]string{{"binlog_format", "ROW"}, {"binlog_row_image", "FULL"}, {"binlog_row_metadata", "FULL"}} {
		v, ok := vars[want[0]]
		if !strings.EqualFold(v, want[1]) {
			e := &SettingsError{Variable: want[0], Value: v, Want: want[1]}
			if !ok && want[0] == "binlog_row_metadata" {
				e.Hint = "the server has no binlog_row_metadata: MySQL 8.0.1 or MariaDB 10.5 or later is needed"
			}
			if want[0] == "binlog_row_metadata" {
				e.Hint += "; events written before the change lack column names and signedness, so start from a new snapshot"
				e.Hint = strings.TrimPrefix(e.Hint, "; ")
			}
			return e
		}
	}
	if flavor == FlavorMySQL && vars["binlog_row_value_options"] != "" {
		return &SettingsError{Variable: "binlog_row_value_options", Value: vars["binlog_row_value_options"], Want: "",
			Hint: "partial JSON updates carry diffs, not values"}
	}
	return nil
}

// mariadbAtLeast reports whether a MariaDB version string is major.minor
// or later.
func mariadbAtLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimLeftFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// table is one table and its stream.
type table struct {
	name   string
	stream source.Stream
	key    []int // indexes of the primary-key columns, in key order
	// keyLits says how each key column's value is written as an SQL
	// literal for keyset pagination; nil when the key can't be paged
	// exactly (or there is none): the table is read in one piece.
	keyLits []litKind
	// keyTypes are the key columns' information_schema DATA_TYPE, and
	// keyColls the text key columns' character set and collation (empty
	// for others): what a key value's literal needs to compare in the
	// column's order without the column (keyLiteral).
	keyTypes []string
	keyColls [][2]string
	kinds    []colKind // per declared column: how its values are written
	sigs     []string  // per declared column: its type's signature
	byName   map[string]int
	// unsupported says why the table can't be read (a column's character
	// set), when it can't.
	unsupported error
	// Per declared column: whether rows that existed when it was added
	// may hold a value in it (a default, NOT NULL's implicit default,
	// generated, auto_increment), and its default ("" without one).
	filled   []bool
	defaults []string
}

// colNames returns the table's column names, for a snapshot state.
func (t *table) colNames() []string {
	out := make([]string, len(t.stream.Columns))
	for i, c := range t.stream.Columns {
		out[i] = c.Name
	}
	return out
}

// Discover reports one FormatRow CDC stream per table, with the table's
// columns (typed with MySQL's COLUMN_TYPE: "bigint(20) unsigned",
// "decimal(20,4)", "enum('a','b')") and primary key. It checks the
// server's binlog settings first.
func (s *Source) Discover(ctx context.Context) (source.Catalog, error) {
	tables, _, err := s.tables(ctx)
	if err != nil {
		return source.Catalog{}, err
	}
	var cat source.Catalog
	for _, t := range tables {
		cat.Streams = append(cat.Streams, t.stream)
	}
	return cat, nil
}

// tables reads the catalog, and the binlog position before it: every
// event before that position was written under the catalog read or an
// older one.
func (s *Source) tables(ctx context.Context) ([]*table, position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.queryConn(ctx)
	if err != nil {
		return nil, position{}, err
	}
	if err := s.checkServer(ctx, c); err != nil {
		return nil, position{}, err
	}
	before, err := s.masterStatus(ctx, c)
	if err != nil {
		return nil, position{}, err
	}
	r, err := exec(ctx, c, `SELECT c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, c.DATA_TYPE, c.IS_NULLABLE,
       COALESCE((SELECT k.SEQ_IN_INDEX FROM information_schema.STATISTICS k
                 WHERE k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME
                   AND k.INDEX_NAME = 'PRIMARY' AND k.COLUMN_NAME = c.COLUMN_NAME), 0),
       c.CHARACTER_SET_NAME,
       COALESCE(c.COLUMN_DEFAULT, ''), c.EXTRA, COALESCE(c.COLLATION_NAME, '')
FROM information_schema.COLUMNS c
JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
WHERE c.TABLE_SCHEMA = ? AND t.TABLE_TYPE = 'BASE TABLE'
ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION`, s.cfg.Database)
	if err != nil {
		return nil, position{}, fmt.Errorf("mysql: read the columns of database %q: %w", s.cfg.Database, err)
	}
	var all []*table
	keyPos := map[*table][][2]int{}
	dataTypes := map[*table][]string{}
	colls := map[*table][][2]string{}
	for _, row := range rows(r) {
		name := row[0]
		if len(all) == 0 || all[len(all)-1].name != name {
			all = append(all, &table{name: name, byName: map[string]int{}, stream: source.Stream{
				Name: name, Format: source.FormatRow, CDC: true, Types: source.TypesMySQL,
			}})
		}
		t := all[len(all)-1]
		colType, dataType := strings.ToLower(row[2]), strings.ToLower(row[3])
		if cs := strings.ToLower(row[6]); !supportedCharset(cs) && t.unsupported == nil {
			t.unsupported = fmt.Errorf("mysql: column %s.%s has character set %s: only utf8mb4, utf8mb3, ascii, latin1 and binary columns are read",
				name, row[1], cs)
		}
		t.byName[row[1]] = len(t.stream.Columns)
		t.stream.Columns = append(t.stream.Columns, source.Column{Name: row[1], Type: colType, Nullable: row[4] == "YES"})
		// MariaDB shows a nullable column without a default as the
		// default NULL (a string default is quoted).
		def := row[7]
		if def == "NULL" {
			def = ""
		}
		extra := strings.ToLower(row[8])
		t.defaults = append(t.defaults, def)
		t.filled = append(t.filled, def != "" || row[4] == "NO" || strings.Contains(extra, "generated") || strings.Contains(extra, "auto_increment"))
		t.kinds = append(t.kinds, kindOf(dataType, colType))
		dataTypes[t] = append(dataTypes[t], dataType)
		colls[t] = append(colls[t], [2]string{strings.ToLower(row[6]), strings.ToLower(row[9])})
		t.sigs = append(t.sigs, declaredSig(colType))
		if row[5] != "0" && row[5] != "" {
			p, err := strconv.Atoi(row[5])
			if err != nil {
				return nil, position{}, fmt.Errorf("mysql: key position %q of %s: %w", row[5], name, err)
			}
			keyPos[t] = append(keyPos[t], [2]int{p, len(t.stream.Columns) - 1})
		}
	}
	// The table re-snapshots write their marks to is no stream.
	all = slices.DeleteFunc(all, func(t *table) bool { return t.name == watermarkTable })
	for _, t := range all {
		kp := keyPos[t]
		slices.SortFunc(kp, func(a, b [2]int) int { return a[0] - b[0] })
		for _, k := range kp {
			t.key = append(t.key, k[1])
			t.stream.PrimaryKey = append(t.stream.PrimaryKey, t.stream.Columns[k[1]].Name)
		}
		for _, k := range t.key {
			lk := literalKind(dataTypes[t][k])
			if lk == litNone {
				t.keyLits, t.keyTypes, t.keyColls = nil, nil, nil
				break
			}
			t.keyLits = append(t.keyLits, lk)
			t.keyTypes = append(t.keyTypes, dataTypes[t][k])
			t.keyColls = append(t.keyColls, colls[t][k])
		}
	}
	if len(s.cfg.Tables) == 0 {
		for _, t := range all {
			if t.unsupported != nil {
				return nil, position{}, t.unsupported
			}
		}
		return all, before, nil
	}
	var out []*table
	for _, name := range s.cfg.Tables {
		i := slices.IndexFunc(all, func(t *table) bool { return t.name == name })
		if i < 0 {
			return nil, position{}, fmt.Errorf("%w: %q in database %q", ErrTableMissing, name, s.cfg.Database)
		}
		if all[i].unsupported != nil {
			return nil, position{}, all[i].unsupported
		}
		out = append(out, all[i])
	}
	slices.SortFunc(out, func(a, b *table) int { return strings.Compare(a.name, b.name) })
	return slices.CompactFunc(out, func(a, b *table) bool { return a.name == b.name }), before, nil
}

// masterStatus returns the server's current binlog position (and GTID
// position): the end of the last transaction written.
func (s *Source) masterStatus(ctx context.Context, c *client.Conn) (position, error) {
	r, err := exec(ctx, c, "SHOW MASTER STATUS")
	if err != nil && s.info.flavor == FlavorMySQL {
		// MySQL 8.4 renamed it.
		r, err = exec(ctx, c, "SHOW BINARY LOG STATUS")
	}
	if err != nil {
		return position{}, fmt.Errorf("mysql: read the binlog position: %w", err)
	}
	rs := rows(r)
	if len(rs) == 0 || len(rs[0]) < 2 {
		return position{}, &SettingsError{Variable: "log_bin", Value: "OFF", Want: "ON", Hint: "the server reports no binlog position"}
	}
	p, err := parsePosition(rs[0][0], rs[0][1])
	if err != nil {
		return position{}, err
	}
	if s.info.flavor == FlavorMySQL && len(rs[0]) >= 5 {
		p.gtid = strings.ReplaceAll(rs[0][4], "\n", "")
	}
	return p, nil
}

// quoteIdent quotes a MySQL identifier.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// randomServerID returns a replica server ID in [2^31, 2^32).
func randomServerID() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) | 1<<31
}

// hostPort splits Addr for the binlog syncer.
func hostPort(addr string) (string, uint16, error) {
	if strings.Contains(addr, "/") {
		return addr, 0, nil // a unix socket
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("mysql: address %q: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("mysql: address %q: port: %w", addr, err)
	}
	return host, uint16(p), nil
}

// Permanent reports whether err is an error no retry fixes: access
// denied to the user (1045, 1698: credentials refused) when
// Config.Credentials is not set (with it, the next attempt asks for
// fresh ones), an error of Config.Credentials that says so (a method
// Permanent() bool returning true), access denied to a database or a
// table (1044, 1142), a database that does not exist (1049), or a
// missing privilege such as REPLICATION SLAVE (1227). Run returns such
// an error at once instead of retrying it for its budget
// (source.Classifier).
func (s *Source) Permanent(err error) bool {
	if errors.Is(err, ErrCredentials) {
		if permanentMark(err) {
			return true
		}
		if s.cfg.Credentials != nil {
			return false
		}
	}
	var me *gomysql.MyError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Code {
	case 1044, 1045, 1049, 1142, 1227, 1698:
		return true
	}
	return false
}

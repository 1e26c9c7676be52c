package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/openetl/etl/sink"
)

// Defaults of Config.
const (
	DefaultDatabase  = "default"
	DefaultBlockRows = 100_000
	DefaultApplyWait = 2 * time.Minute
	DefaultRetries   = 3
)

// retryBackoff is the wait before the first retry of a block; it doubles
// with each retry.
const retryBackoff = 100 * time.Millisecond

// Table holds one destination table's physical options. Whether it is
// a merge table, and by which key, is the pipeline's to say
// (etl.Builder.Mode with delivery.Merge; the stream's primary key): a
// merged stream's table is a ReplacingMergeTree ordered by the key
// (package doc, Tables).
type Table struct {
	// OrderBy is an append table's sort key (destination column names);
	// default _openetl_seq. A merged stream's table is ordered by its
	// key: Build fails when OrderBy is set for one.
	OrderBy []string
}

// Config configures a Destination.
type Config struct {
	// Conn is the connection pool to the server, opened by the caller
	// (clickhouse.Open with the native protocol). The caller owns it and
	// closes it after the last Writer is closed. Required, unless
	// Cluster is set.
	//
	// Several Options.Addr are the ways to one set of data: addresses of
	// one server (or of proxies or load balancers in front of it), not
	// independent replicas. A connection that fails is dropped, and the
	// retry of the block dials again, which moves on to the next address
	// (clickhouse-go's ConnOpenStrategy picks the order). Each retry first
	// checks, through the new connection, whether the failed attempt
	// landed (doc.go, Guarantee): that check is exact only when every
	// address sees the same tables at once.
	Conn driver.Conn

	// Database holds the tables, the staging tables and the
	// destination's own state tables; created when missing. Default
	// "default".
	Database string

	// Tables holds tables' physical options by destination name; an
	// append table not listed is ordered by _openetl_seq.
	Tables map[string]Table

	// BlockRows is how many rows a lane gathers per stream before it
	// sends them to the staging table as one block; PreCommit sends the
	// rest. A block is applied (copied into the table) as one part, so
	// the server holds one block in memory while applying it. Default
	// 100000.
	BlockRows int

	// ApplyWait bounds how long Recover waits for applies of an older
	// generation still running on the server (a zombie's, or a killed
	// process's query the server finishes anyway), and how long Commit
	// waits for a mutation that releases held values (package doc, Held
	// values). Default 2m.
	ApplyWait time.Duration

	// Retries is how many times a block whose send to its staging table
	// (Write, PreCommit) or whose copy into its table (Commit) failed is
	// tried again, each time on a fresh connection from Conn, after
	// checking whether the failed try landed after all. Backoff 100ms,
	// doubling. Default 3; negative: never (a failed send then fails the
	// attempt, and a failed copy is left to the runner's Commit retries).
	Retries int

	// Logger receives lifecycle events at Info, per-block detail at
	// Debug. Never row data. Default: discard.
	Logger *slog.Logger

	// Cluster, instead of Conn, makes the destination write to a sharded
	// and replicated cluster (see Cluster and the package doc, Clusters).
	// Conn must be nil then.
	Cluster *Cluster
}

// conn is what the destination asks of a connection pool: a
// driver.Conn, or the pool of one shard of a Cluster.
type conn interface {
	Exec(ctx context.Context, query string, args ...any) error
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) driver.Row
	PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error)
}

// Destination writes streams into ClickHouse tables. It implements
// sink.Destination and is safe for concurrent use.
type Destination struct {
	conn      conn
	db        string
	tables    map[string]Table
	blockRows int
	applyWait time.Duration
	retries   int
	log       *slog.Logger
	features  Features

	// In a cluster: the shards' destinations (the Destination routes
	// rows to them and has no conn of its own), or, in one of those, the
	// shard's replicas (each its own pool: statements every replica
	// runs) and the cluster's name for Distributed tables.
	shards   []*Destination
	replicas []driver.Conn
	shard    int
	cluster  string
	shardBy  map[string]string // Cluster.ShardBy
	zkPath   string            // Cluster.ZooKeeperPath, or its default; empty on one server
	closers  []driver.Conn     // pools New opened, closed by Close

	mu      sync.Mutex
	schemas map[string]*tableSchema // table → what this process knows of it
	blocks  map[uint64]blockState   // blocks staged by this process
	gens    map[string]uint64       // pipeline → the generation that recovered here last
}

// blockState is what this process knows of a block it staged.
type blockState struct {
	// tried: an apply of the block was sent at least once; whether it
	// landed must then be checked before sending it again.
	tried bool
}

var _ sink.Destination = (*Destination)(nil)

// New connects to the server through cfg.Conn, detects its version
// (Features), and creates the database and the state tables when
// missing; with cfg.Cluster, it opens the cluster's pools and does so on
// every replica of every shard. Cancelling ctx stops it.
func New(ctx context.Context, cfg Config) (*Destination, error) {
	if cfg.Conn == nil && cfg.Cluster == nil {
		return nil, errors.New("clickhouse: Config.Conn is nil")
	}
	if cfg.Conn != nil && cfg.Cluster != nil {
		return nil, errors.New("clickhouse: Config.Conn and Config.Cluster are both set: a destination writes to one server or one cluster")
	}
	if cfg.Database == "" {
		cfg.Database = DefaultDatabase
	}
	if cfg.BlockRows < 0 {
		return nil, fmt.Errorf("clickhouse: Config.BlockRows is negative (%d)", cfg.BlockRows)
	}
	if cfg.BlockRows == 0 {
		cfg.BlockRows = DefaultBlockRows
	}
	if cfg.Retries == 0 {
		cfg.Retries = DefaultRetries
	} else if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	if cfg.ApplyWait <= 0 {
		cfg.ApplyWait = DefaultApplyWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for name := range cfg.Tables {
		if err := checkTable(name); err != nil {
			return nil, fmt.Errorf("clickhouse: Config.Tables: %w", err)
		}
	}
	if cfg.Cluster != nil {
		return newCluster(ctx, cfg)
	}
	return newOne(ctx, cfg, cfg.Conn, nil, 0)
}

// newOne is the destination of one server (replicas empty), or of one
// shard of a cluster: conn reaches its first healthy replica, and
// statements every replica must run go to each of replicas.
func newOne(ctx context.Context, cfg Config, c conn, replicas []driver.Conn, shard int) (*Destination, error) {
	var version string
	if err := c.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return nil, fmt.Errorf("clickhouse: ask the server's version: %w", err)
	}
	d := &Destination{
		conn:      c,
		db:        cfg.Database,
		tables:    cfg.Tables,
		blockRows: cfg.BlockRows,
		applyWait: cfg.ApplyWait,
		retries:   cfg.Retries,
		log:       cfg.Logger,
		features:  ServerFeatures(version),
		replicas:  replicas,
		shard:     shard,
		schemas:   make(map[string]*tableSchema),
		blocks:    make(map[uint64]blockState),
		gens:      make(map[string]uint64),
	}
	if cfg.Cluster != nil {
		d.cluster = cfg.Cluster.Name
		d.shardBy = cfg.Cluster.ShardBy
		d.zkPath = cfg.Cluster.ZooKeeperPath
		if d.zkPath == "" {
			d.zkPath = DefaultZooKeeperPath
		}
	}
	if err := d.createState(ctx); err != nil {
		return nil, err
	}
	if d.replicated() {
		d.log.Info("clickhouse: connected to a shard", "shard", shard, "replicas", len(replicas), "version", version, "database", d.db)
	} else {
		d.log.Info("clickhouse: connected", "version", version, "database", d.db, "dedup_tokens", d.features.DedupToken)
	}
	return d, nil
}

// createState creates the database and the state tables when missing
// (on every replica of a shard).
func (d *Destination) createState(ctx context.Context) error {
	for _, q := range append([]string{createDatabase(d.db)}, createState(d.db, d.zkPath)...) {
		if err := d.execAll(ctx, q); err != nil {
			return fmt.Errorf("clickhouse: create state tables in %q: %w", d.db, err)
		}
	}
	return nil
}

// replicated reports whether d is a shard of a cluster: its tables are
// Replicated ones.
func (d *Destination) replicated() bool { return len(d.replicas) > 0 }

var (
	_ sink.SpecChecker = (*Destination)(nil)
	_ sink.Classifier  = (*Destination)(nil)
)

// CheckStream fails for a merged stream without a key, or whose table
// Config.Tables gives an OrderBy (a merge table is ordered by its key),
// on a cluster with Distributed tables (Cluster.Name), for a table
// whose name ends in "_all": those names are the Distributed tables',
// and for a merged stream whose Cluster.ShardBy column is not one of its
// key columns.
// Overwrite and hard deletes are not in Capabilities: Build refuses
// them before asking.
func (d *Destination) CheckStream(spec sink.StreamSpec) error {
	switch {
	case d.cluster != "" && strings.HasSuffix(spec.Table, distSuffix):
		return fmt.Errorf("clickhouse: table %q ends in %q, the suffix of the Distributed tables Config.Cluster.Name asks for: rename the stream's table", spec.Table, distSuffix)
	case spec.Mode == sink.Merge && d.shardBy[spec.Table] != "" && !slices.Contains(spec.Key, d.shardBy[spec.Table]):
		return fmt.Errorf("clickhouse: Config.Cluster.ShardBy[%q] is %q, which is not a key column of the merged stream (key %q): every version of a key must land on one shard", spec.Table, d.shardBy[spec.Table], spec.Key)
	case spec.Mode != sink.Merge:
		return nil
	case len(spec.Key) == 0:
		return errors.New("clickhouse: merge needs the stream's primary key, and it has none")
	case len(d.tables[spec.Table].OrderBy) > 0:
		return fmt.Errorf("clickhouse: Config.Tables[%q].OrderBy is set, but a merged stream's table is ordered by its key %q: leave OrderBy empty", spec.Table, spec.Key)
	}
	return nil
}

// Features returns what the server can do, as detected by New.
func (d *Destination) Features() Features { return d.features }

// Class returns sink.StageAndApply: rows are staged in a staging table per
// table and copied into the table by Commit, one verifiable block at a
// time (doc.go says what that guarantees).
func (d *Destination) Class() sink.Class { return sink.StageAndApply }

// Capabilities: merge by key, with soft deletes only (a merge table
// keeps a deleted key's row, marked _openetl_deleted, which
// ReplacingMergeTree's is_deleted drops only from FINAL reads and
// merges: read it with FINAL WHERE _openetl_deleted = 0), and no
// overwrite (a table's contents are never replaced); simple
// lowercase-free identifiers up to 180
// bytes (a table's staging table adds a prefix, and table names are
// directory names on the server); the Arrow types no column here takes
// (struct, interval, duration, time, null, and on servers without
// DateTime64 timestamps, which DateTime would truncate) are held back;
// patches (held values released into rows already written, by a
// mutation: package doc, Held values) on one server, not on a Cluster.
func (d *Destination) Capabilities() sink.Capabilities {
	return sink.Capabilities{
		Merge:             true,
		MaxIdentifier:     maxIdentifier,
		SimpleIdentifiers: true,
		Unsupported:       unsupportedOn(d.features),
		Patches:           d.shards == nil,
	}
}

const maxIdentifier = 180

// Writer returns the writer of one lane of cfg.Pipeline. ctx is not
// used beyond the call.
func (d *Destination) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	if d.shards != nil {
		return d.clusterWriter(ctx, cfg)
	}
	pipeline, lane := cfg.Pipeline, cfg.Lane
	if pipeline == "" {
		return nil, errors.New("clickhouse: empty pipeline name")
	}
	if lane < 0 {
		return nil, fmt.Errorf("clickhouse: negative lane %d", lane)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("clickhouse: writer nonce: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte(pipeline))
	keys := make(map[string][]string)
	for _, s := range cfg.Streams {
		if s.Mode == sink.Merge {
			keys[s.Table] = slices.Clone(s.Key)
		}
	}
	return &writer{
		d:        d,
		keys:     keys,
		pipeline: pipeline,
		pipeHash: fmt.Sprintf("%016x", h.Sum64()),
		lane:     lane,
		nonce:    hex.EncodeToString(b[:]),
		open:     make(map[string]*openBlock),
	}, nil
}

// checkTable rejects table names the destination can't use.
func checkTable(name string) error {
	switch {
	case name == "":
		return errors.New("empty table name")
	case len(name) > maxIdentifier:
		return fmt.Errorf("table name %q is longer than %d bytes", name, maxIdentifier)
	case strings.HasPrefix(name, stagePrefix) || name == fenceTable || name == epochsTable:
		return fmt.Errorf("table name %q is reserved", name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("table name %q can't be a table name", name)
	}
	return nil
}

// newToken returns a random block token.
func newToken() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	t := binary.LittleEndian.Uint64(b[:])
	if t == 0 {
		t = 1
	}
	return t, nil
}

func (d *Destination) staged(token uint64) {
	d.mu.Lock()
	d.blocks[token] = blockState{}
	d.mu.Unlock()
}

// mustVerify reports whether the block may already be in its table: it
// was staged by another process, or an apply of it was sent before. It
// marks the block as tried.
func (d *Destination) mustVerify(token uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.blocks[token]
	d.blocks[token] = blockState{tried: true}
	return !ok || st.tried
}

func (d *Destination) forget(token uint64) {
	d.mu.Lock()
	delete(d.blocks, token)
	d.mu.Unlock()
}

// setGen records the generation of pipeline's attempt in this process:
// every lane stamps its staged blocks with it.
func (d *Destination) setGen(pipeline string, gen uint64) {
	d.mu.Lock()
	d.gens[pipeline] = gen
	d.mu.Unlock()
}

func (d *Destination) genOf(pipeline string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gens[pipeline]
}

// Permanent reports whether err is a server exception no retry fixes:
// an unknown user or refused credentials (192, 516), access denied
// (497), or, on one server, a database that does not exist (81; on a
// cluster a replica that was down when the database was created lacks
// it until the next attempt's Recover creates it there). Run returns
// such an error at once instead of retrying it for its budget
// (sink.Classifier).
func (d *Destination) Permanent(err error) bool {
	var exc *proto.Exception
	if !errors.As(err, &exc) {
		return false
	}
	switch exc.Code {
	case 81:
		return d.shards == nil
	case 192, 497, 516:
		return true
	}
	return false
}

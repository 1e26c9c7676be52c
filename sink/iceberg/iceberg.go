package iceberg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/sink"
)

// Mode is how a table's rows are written.
type Mode uint8

const (
	// Append adds every row written (the default).
	Append Mode = iota
	// Merge upserts by TableConfig.Key: each epoch's rows replace the
	// rows of the same key through equality deletes, in one snapshot.
	Merge
	// Overwrite is for full refreshes: the rows an attempt (a Sync)
	// writes replace the table's whole contents in one snapshot when the
	// attempt ends; until then readers see the previous contents. See
	// the package doc (Overwrite) for what a crash mid-refresh leaves.
	Overwrite
)

// String returns "append", "merge" or "overwrite".
func (m Mode) String() string {
	switch m {
	case Append:
		return "append"
	case Merge:
		return "merge"
	case Overwrite:
		return "overwrite"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// TableConfig configures one table (one stream). Its Mode and Key must
// agree with the pipeline's write mode and the stream's primary key
// (see Destination.CheckStream).
type TableConfig struct {
	// Mode is the write mode. Default Append.
	Mode Mode
	// Key names the primary-key columns of a Merge table, in the names
	// the table has (the engine's destination names). Required for
	// Merge, ignored for Append.
	Key []string
	// Partition is the table's partition spec, used when the destination
	// creates the table (an existing table keeps its own): fields in
	// order, each a column and an Iceberg transform: "identity", "year",
	// "month", "day", "hour", "bucket[N]" or "truncate[W]". A Merge table
	// may only be partitioned by its key columns: an equality delete
	// applies within its partition, so a row whose partition value
	// changed would otherwise keep its old version. Default unpartitioned.
	Partition []PartitionField
	// HardDeletes, for Merge: a row whose _openetl_op is "delete" removes
	// the key's row and writes nothing. Default false: soft deletes, the
	// row is kept with _openetl_deleted = true (see the package doc for
	// the read view that hides them).
	HardDeletes bool
}

// PartitionField is one field of a partition spec: Transform applied to
// Column (see TableConfig.Partition).
type PartitionField struct {
	Column    string
	Transform string
}

// Defaults of Config.
const (
	DefaultNamespace       = "openetl"
	DefaultTargetFileBytes = 128 << 20
	DefaultMaxCommitTries  = 16
)

// Config configures a Destination.
type Config struct {
	// Catalog holds the tables. Required. The caller owns it (and the
	// database or HTTP client behind it) and closes it after the last
	// Writer is closed. Fencing relies on requirements being checked
	// atomically with the commit, which the SQL catalog does in process
	// (see the package doc); other catalogs get a best-effort check.
	Catalog catalog.Catalog

	// Namespace holds the tables, created when missing. Default
	// {"openetl"}.
	Namespace []string

	// Properties are added to the properties of every table the
	// destination creates (e.g. "write.parquet.compression-codec").
	// format-version is always 2.
	Properties map[string]string

	// Tables configures tables by name; a table not listed is Append.
	Tables map[string]TableConfig

	// TargetFileBytes is the size at which a lane rolls to a new data
	// file within one epoch. Default 128 MiB.
	TargetFileBytes int64

	// Grouping decides how many epochs a table commit groups: nil means
	// DefaultGrouping (128 MiB or 60s); &Grouping{} commits every epoch.
	// See Grouping.
	Grouping *Grouping

	// MaxCommitTries bounds how often Commit reloads a table and redoes
	// its transaction after losing a race (another writer committed
	// first: maintenance, or another attempt about to be fenced).
	// Default 16.
	MaxCommitTries int

	// Logger receives lifecycle events at Info, retries at Warn and per
	// table detail at Debug; never row data. Default: discard.
	Logger *slog.Logger
}

// Destination writes Iceberg tables through a catalog. It implements
// sink.Destination and is safe for concurrent use.
type Destination struct {
	cat         catalog.Catalog
	ns          table.Identifier
	props       ice.Properties
	tables      map[string]TableConfig
	targetBytes int64
	maxTries    int
	group       Grouping
	log         *slog.Logger

	// applied holds, by pipeline and table, the last epoch a Commit in
	// this process saw recorded in the table: lanes stop carrying files
	// of epochs up to it (see group.go).
	appliedMu sync.Mutex
	applied   map[string]uint64

	nsOnce sync.Mutex
	nsDone bool
}

var _ sink.Destination = (*Destination)(nil)

// New returns a Destination writing to cfg.Catalog. It returns an error
// for a missing catalog, a negative size, or a Merge table without a key.
func New(cfg Config) (*Destination, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("iceberg: Config.Catalog is nil")
	}
	if cfg.TargetFileBytes < 0 {
		return nil, fmt.Errorf("iceberg: Config.TargetFileBytes is negative (%d)", cfg.TargetFileBytes)
	}
	if cfg.MaxCommitTries < 0 {
		return nil, fmt.Errorf("iceberg: Config.MaxCommitTries is negative (%d)", cfg.MaxCommitTries)
	}
	if cfg.TargetFileBytes == 0 {
		cfg.TargetFileBytes = DefaultTargetFileBytes
	}
	if cfg.MaxCommitTries == 0 {
		cfg.MaxCommitTries = DefaultMaxCommitTries
	}
	if len(cfg.Namespace) == 0 {
		cfg.Namespace = []string{DefaultNamespace}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	group := DefaultGrouping
	if cfg.Grouping != nil {
		group = *cfg.Grouping
	}
	if group.Bytes < 0 || group.Interval < 0 {
		return nil, fmt.Errorf("iceberg: Config.Grouping is negative (%d bytes, %v)", group.Bytes, group.Interval)
	}
	tables := make(map[string]TableConfig, len(cfg.Tables))
	for name, tc := range cfg.Tables {
		if err := checkName("table", name); err != nil {
			return nil, fmt.Errorf("iceberg: Config.Tables: %w", err)
		}
		switch tc.Mode {
		case Append, Overwrite:
		case Merge:
			if len(tc.Key) == 0 {
				return nil, fmt.Errorf("iceberg: Config.Tables[%q]: merge needs a key", name)
			}
		default:
			return nil, fmt.Errorf("iceberg: Config.Tables[%q]: unknown mode %d", name, uint8(tc.Mode))
		}
		for _, pf := range tc.Partition {
			if _, err := ice.ParseTransform(pf.Transform); err != nil {
				return nil, fmt.Errorf("iceberg: Config.Tables[%q].Partition: column %q: %w", name, pf.Column, err)
			}
			if tc.Mode == Merge && !slices.Contains(tc.Key, pf.Column) {
				return nil, fmt.Errorf("iceberg: Config.Tables[%q]: a merge table can only be partitioned by key columns, not %q", name, pf.Column)
			}
		}
		tc.Key = slices.Clone(tc.Key)
		tc.Partition = slices.Clone(tc.Partition)
		tables[name] = tc
	}
	props := ice.Properties{}
	for k, v := range cfg.Properties {
		props[k] = v
	}
	props[table.PropertyFormatVersion] = "2"
	return &Destination{
		cat:         cfg.Catalog,
		ns:          slices.Clone(table.Identifier(cfg.Namespace)),
		props:       props,
		tables:      tables,
		targetBytes: cfg.TargetFileBytes,
		maxTries:    cfg.MaxCommitTries,
		group:       group,
		log:         cfg.Logger,
		applied:     make(map[string]uint64),
	}, nil
}

var _ sink.SpecChecker = (*Destination)(nil)

// CheckStream fails when Config.Tables configures spec's table for
// another write mode than the pipeline's, or a merge table with another
// key than the stream's primary key.
func (d *Destination) CheckStream(spec sink.StreamSpec) error {
	tc := d.tables[spec.Table]
	if uint8(tc.Mode) != uint8(spec.Mode) {
		return fmt.Errorf("iceberg: the pipeline writes it in %v mode, but Config.Tables[%q].Mode is %v: set both the same", spec.Mode, spec.Table, tc.Mode)
	}
	if tc.Mode == Merge && !slices.Equal(slices.Sorted(slices.Values(tc.Key)), slices.Sorted(slices.Values(spec.Key))) {
		return fmt.Errorf("iceberg: Config.Tables[%q].Key is %q, but the stream's primary key is %q", spec.Table, tc.Key, spec.Key)
	}
	return nil
}

// Class returns sink.StageAndApply.
func (d *Destination) Class() sink.Class { return sink.StageAndApply }

// Capabilities reports merge, lower-case simple identifiers, and the
// Arrow type classes Iceberg v2 can't hold exactly: unsigned integers
// (uint64 does not fit a long), durations, intervals and the null type.
func (d *Destination) Capabilities() sink.Capabilities {
	return sink.Capabilities{
		Merge:             true,
		IdentifierCase:    "lower",
		SimpleIdentifiers: true,
		Unsupported:       []string{"uint", "duration", "interval", "null"},
	}
}

// Writer returns the writer of one lane of pipeline. ctx is not used
// beyond the call.
func (d *Destination) Writer(ctx context.Context, pipeline string, lane int) (sink.Writer, error) {
	if err := checkName("pipeline", pipeline); err != nil {
		return nil, err
	}
	if lane < 0 {
		return nil, fmt.Errorf("iceberg: negative lane %d", lane)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("iceberg: writer nonce: %w", err)
	}
	return &writer{
		d:         d,
		pipeline:  pipeline,
		lane:      lane,
		nonce:     hex.EncodeToString(b[:]),
		pending:   make(map[string]*pendingTable),
		carry:     make(map[string]*carried),
		waitSince: make(map[string]time.Time),
	}, nil
}

// ident returns the identifier of table name.
func (d *Destination) ident(name string) table.Identifier {
	return append(slices.Clone(d.ns), name)
}

// ensureNamespace creates the namespace once per Destination.
func (d *Destination) ensureNamespace(ctx context.Context) error {
	d.nsOnce.Lock()
	defer d.nsOnce.Unlock()
	if d.nsDone {
		return nil
	}
	ok, err := d.cat.CheckNamespaceExists(ctx, d.ns)
	if err != nil {
		return fmt.Errorf("iceberg: namespace %v: %w", d.ns, err)
	}
	if !ok {
		err := d.cat.CreateNamespace(ctx, d.ns, nil)
		if err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			return fmt.Errorf("iceberg: create namespace %v: %w", d.ns, err)
		}
	}
	d.nsDone = true
	return nil
}

// checkName rejects names the destination can't use as a table name or in
// a property key.
func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("iceberg: empty %s name", what)
	case strings.ContainsAny(s, "./\\\x00 "):
		return fmt.Errorf("iceberg: %s name %q has a '.', '/', '\\', space or NUL", what, s)
	}
	return nil
}

// Table property keys of the pipeline markers. They live in the table's
// properties, not in snapshot summaries, because compaction and snapshot
// expiry drop summaries.
func epochKey(pipeline string) string { return "openetl." + pipeline + ".epoch" }
func genKey(pipeline string) string   { return "openetl." + pipeline + ".generation" }
func fenceKey(pipeline string) string { return "openetl." + pipeline + ".fence" }

package iceberg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ice "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
)

// TableConfig holds one table's physical options. How a table is
// written (its stream's write mode, primary key and delete handling) is
// the pipeline's to say (etl.Builder.Mode, etl.Builder.Deletes) and
// reaches each writer in its sink.WriterConfig; see the package doc for
// what each mode writes.
type TableConfig struct {
	// Partition is the table's partition spec, used when the destination
	// creates the table (an existing table keeps its own): fields in
	// order, each a column and an Iceberg transform: "identity", "year",
	// "month", "day", "hour", "bucket[N]" or "truncate[W]". A merged
	// table may only be partitioned by its key columns (Build fails
	// otherwise): a delete file applies within its partition, so a
	// row whose partition value changed would otherwise keep its old
	// version. Default unpartitioned.
	Partition []PartitionField

	// MergeDeletes is how a merged table's updates and deletes remove
	// the older rows of their keys; MergeDeletesDefault takes
	// Config.MergeDeletes. It applies to the epochs written from then on
	// (each committable records how its files are to be committed).
	MergeDeletes MergeDeletes
}

// MergeDeletes says how a Merge table's epoch removes the rows of its
// keys that earlier epochs wrote.
type MergeDeletes int

const (
	// MergeDeletesDefault is PositionDeletes in Config, and
	// Config.MergeDeletes in TableConfig.
	MergeDeletesDefault MergeDeletes = iota
	// PositionDeletes (the default) writes Iceberg v2 position-delete
	// files: Commit finds the rows of the epoch's keys in the table's
	// data files (an index of key → file and row the commit side keeps,
	// rebuilt from the data files when another writer moved the table)
	// and deletes them by file and position. pyiceberg's scan and DuckDB
	// read them (tested); see the package doc.
	PositionDeletes
	// EqualityDeletes writes an Iceberg v2 equality-delete file with the
	// epoch's keys, and finds nothing: the cheapest to write, but
	// pyiceberg 0.12 can't scan the table and Snowflake refuses it.
	EqualityDeletes
)

func (m MergeDeletes) String() string {
	switch m {
	case MergeDeletesDefault:
		return "default"
	case PositionDeletes:
		return "position"
	case EqualityDeletes:
		return "equality"
	}
	return fmt.Sprintf("MergeDeletes(%d)", int(m))
}

// Fence says where a Destination keeps a pipeline's markers in each
// table: the last epoch applied, the generation that applied it, and the
// fence (the highest generation that recovered). See the package doc,
// "Fencing".
type Fence int

const (
	// FenceAuto (the default) keeps the markers in table properties and
	// also records them in the summary of every snapshot an epoch's
	// commit makes, and checks the higher of the two. When the catalog
	// refuses a table-property update, or accepts it without keeping
	// the properties, the Destination goes on with FenceSnapshots (it
	// logs this once at Warn). A commit that failed for a reason that
	// says nothing of its content (the catalog unreachable or failing,
	// 5xx, an outcome unknown, an authorization refused or expired) is
	// no refusal: it fails as it is and is retried with the properties.
	// Where the catalog can't check the fence atomically with a commit
	// (REST), Recover raises it in a snapshot as well as in the
	// properties, which closes FenceProperties' window (package doc,
	// Fencing).
	FenceAuto Fence = iota
	// FenceProperties keeps the markers in table properties only.
	FenceProperties
	// FenceSnapshots keeps the markers only in snapshot summaries (and
	// reads those a table has as properties from before): every
	// commit of the pipeline (an epoch's, and Recover raising the fence,
	// which adds a snapshot without files) records them, and every
	// commit requires the table's current snapshot to be the one it read
	// them from, which makes the check atomic on REST catalogs too.
	FenceSnapshots
)

func (f Fence) String() string {
	switch f {
	case FenceAuto:
		return "auto"
	case FenceProperties:
		return "properties"
	case FenceSnapshots:
		return "snapshots"
	}
	return fmt.Sprintf("Fence(%d)", int(f))
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
	// DefaultZstdLevel is the zstd level of the data files of tables the
	// destination creates, unless Config.Properties sets a codec or level.
	DefaultZstdLevel = 1
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
	// Without "write.parquet.compression-codec" or
	// "write.parquet.compression-level", data files are zstd at
	// DefaultZstdLevel ("write.parquet.compression-level" is set to it).
	// format-version is 2 unless Properties sets "3" (then Merge tables'
	// position deletes are deletion vectors).
	Properties map[string]string

	// Tables holds tables' physical options by table name (the
	// stream's destination name); a table not listed is unpartitioned.
	Tables map[string]TableConfig

	// TargetFileBytes is the size at which a lane rolls to a new data
	// file within one epoch. Default 128 MiB.
	TargetFileBytes int64

	// Grouping decides how many epochs a table commit groups: nil means
	// DefaultGrouping (128 MiB or 60s); &Grouping{} commits every epoch.
	// See Grouping.
	Grouping *Grouping

	// MergeDeletes is how merged tables' updates and deletes remove
	// older rows, for tables whose TableConfig does not say. Default
	// PositionDeletes.
	MergeDeletes MergeDeletes

	// Maintenance, when set, has lane 0's writer run Maintain on the
	// namespace's tables every Maintenance.Every, between two Commits
	// (see Maintenance). Default nil: the host calls Maintain.
	Maintenance *Maintenance

	// Fence is where the pipeline's markers live in each table: table
	// properties, snapshot summaries, or (FenceAuto, the default)
	// properties while the catalog keeps them, with summaries as well.
	// Use FenceSnapshots for a catalog that refuses or drops custom table
	// properties, or to make the fence atomic with the commit on a REST
	// catalog; see the package doc for what it costs.
	Fence Fence

	// Encoder is what encodes data files: EncoderAuto (the default) the
	// engine's Parquet writer where it can, iceberg-go's otherwise. See
	// Encoder.
	Encoder Encoder

	// MaxCommitTries bounds how often Commit reloads a table and redoes
	// its transaction after losing a race (another writer committed
	// first: maintenance, another shard of the pipeline, or another
	// attempt about to be fenced), pausing between tries (20ms doubling
	// to 1s, jittered). Default 16.
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
	encoder     Encoder
	maxTries    int
	group       Grouping
	maintenance *Maintenance
	deletes     MergeDeletes
	fence       Fence
	log         *slog.Logger

	// summaries is set once a FenceAuto destination found that the
	// catalog refuses or drops table properties: from then on it writes
	// the markers to snapshot summaries only.
	summaries atomic.Bool

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
// for a missing catalog, a negative size, or a partition spec it can't
// parse.
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
	if cfg.MergeDeletes < MergeDeletesDefault || cfg.MergeDeletes > EqualityDeletes {
		return nil, fmt.Errorf("iceberg: Config.MergeDeletes is %v", cfg.MergeDeletes)
	}
	if cfg.Fence < FenceAuto || cfg.Fence > FenceSnapshots {
		return nil, fmt.Errorf("iceberg: Config.Fence is %v", cfg.Fence)
	}
	switch cfg.Encoder {
	case EncoderAuto, EncoderIcebergGo:
	case EncoderEngine:
		if !engine.ParquetAvailable() {
			return nil, fmt.Errorf("iceberg: Config.Encoder is EncoderEngine: %w", engine.ErrUnavailable)
		}
	default:
		return nil, fmt.Errorf("iceberg: Config.Encoder is %v", cfg.Encoder)
	}
	if cfg.MergeDeletes == MergeDeletesDefault {
		cfg.MergeDeletes = PositionDeletes
	}
	group := DefaultGrouping
	if cfg.Grouping != nil {
		group = *cfg.Grouping
	}
	if group.Bytes < 0 || group.Interval < 0 {
		return nil, fmt.Errorf("iceberg: Config.Grouping is negative (%d bytes, %v)", group.Bytes, group.Interval)
	}
	if m := cfg.Maintenance; m != nil && m.Every <= 0 {
		return nil, fmt.Errorf("iceberg: Config.Maintenance.Every is %v: want a positive interval", m.Every)
	}
	var maint *Maintenance
	if cfg.Maintenance != nil {
		m := *cfg.Maintenance
		maint = &m
	}
	tables := make(map[string]TableConfig, len(cfg.Tables))
	for name, tc := range cfg.Tables {
		if err := checkName("table", name); err != nil {
			return nil, fmt.Errorf("iceberg: Config.Tables: %w", err)
		}
		for _, pf := range tc.Partition {
			if _, err := ice.ParseTransform(pf.Transform); err != nil {
				return nil, fmt.Errorf("iceberg: Config.Tables[%q].Partition: column %q: %w", name, pf.Column, err)
			}
		}
		if tc.MergeDeletes < MergeDeletesDefault || tc.MergeDeletes > EqualityDeletes {
			return nil, fmt.Errorf("iceberg: Config.Tables[%q].MergeDeletes is %v", name, tc.MergeDeletes)
		}
		tc.Partition = slices.Clone(tc.Partition)
		tables[name] = tc
	}
	props := ice.Properties{}
	for k, v := range cfg.Properties {
		props[k] = v
	}
	if props[table.PropertyFormatVersion] != "3" {
		props[table.PropertyFormatVersion] = "2"
	}
	// Zstd at its fastest level unless the host chose a codec or level:
	// a quarter to a third less writer CPU than the library's level 3
	// for files within a few percent of its size (BENCHMARKS.md,
	// "Parquet writer: codecs and levels").
	_, codec := props[table.ParquetCompressionKey]
	_, level := props[table.ParquetCompressionLevelKey]
	if !codec && !level {
		props[table.ParquetCompressionLevelKey] = strconv.Itoa(DefaultZstdLevel)
	}
	return &Destination{
		cat:         cfg.Catalog,
		ns:          slices.Clone(table.Identifier(cfg.Namespace)),
		props:       props,
		tables:      tables,
		targetBytes: cfg.TargetFileBytes,
		encoder:     cfg.Encoder,
		maxTries:    cfg.MaxCommitTries,
		group:       group,
		maintenance: maint,
		deletes:     cfg.MergeDeletes,
		fence:       cfg.Fence,
		log:         cfg.Logger,
		applied:     make(map[string]uint64),
	}, nil
}

// The optional capabilities of package sink it implements.
var (
	_ sink.SpecChecker   = (*Destination)(nil)
	_ sink.SchemaChecker = (*Destination)(nil)
)

// CheckStream fails for a merged stream without a key, for one whose
// table Config.Tables partitions by a column that is not part of the
// stream's key (a delete file applies within its partition), and for an
// overwritten stream when Config.Properties makes tables format v3.
// Every mode and delete handling is supported (Capabilities).
func (d *Destination) CheckStream(spec sink.StreamSpec) error {
	if spec.Mode == sink.Overwrite && d.props[table.PropertyFormatVersion] == "3" {
		return errors.New("iceberg: overwrite is not supported on format v3 tables (iceberg-go v0.7.0 wants a first_row_id on every file it replaces a table's with): leave Config.Properties' format-version at 2")
	}
	if spec.Mode != sink.Merge {
		return nil
	}
	if len(spec.Key) == 0 {
		return errors.New("iceberg: merge needs the stream's primary key, and it has none")
	}
	for _, pf := range d.tables[spec.Table].Partition {
		if !slices.Contains(spec.Key, pf.Column) {
			return fmt.Errorf("iceberg: Config.Tables[%q].Partition uses %q, but a merged table can only be partitioned by its key columns %q", spec.Table, pf.Column, spec.Key)
		}
	}
	return nil
}

// Class returns sink.StageAndApply.
func (d *Destination) Class() sink.Class { return sink.StageAndApply }

// Capabilities reports merge (with soft or hard deletes), overwrite,
// patches (released held values, see the package doc), lower-case
// simple identifiers, and the
// Arrow type classes Iceberg v2 can't hold exactly: unsigned integers
// (uint64 does not fit a long), durations, intervals and the null type.
func (d *Destination) Capabilities() sink.Capabilities {
	return sink.Capabilities{
		Merge:             true,
		HardDeletes:       true,
		Overwrite:         true,
		Deferred:          true, // grouping, and Overwrite until Finish
		IdentifierCase:    "lower",
		SimpleIdentifiers: true,
		Unsupported:       []string{"uint", "duration", "interval", "null"},
		Patches:           true,
	}
}

// Writer returns the writer of one lane of cfg.Pipeline. ctx is not
// used beyond the call.
func (d *Destination) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	pipeline, lane := cfg.Pipeline, cfg.Lane
	if err := checkPipeline(pipeline); err != nil {
		return nil, err
	}
	if lane < 0 {
		return nil, fmt.Errorf("iceberg: negative lane %d", lane)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("iceberg: writer nonce: %w", err)
	}
	specs := make(map[string]sink.StreamSpec, len(cfg.Streams))
	for _, s := range cfg.Streams {
		specs[s.Table] = s
	}
	return &writer{
		d:          d,
		pipeline:   pipeline,
		lane:       lane,
		specs:      specs,
		nonce:      hex.EncodeToString(b[:]),
		pending:    make(map[string]*pendingTable),
		carry:      make(map[string]*carried),
		waitSince:  make(map[string]time.Time),
		indexes:    make(map[string]*keyIndex),
		maintained: time.Now(),
	}, nil
}

// mergeDeletes is how merged table name's epochs remove older rows.
func (d *Destination) mergeDeletes(name string) MergeDeletes {
	if m := d.tables[name].MergeDeletes; m != MergeDeletesDefault {
		return m
	}
	return d.deletes
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
			// Another writer (a shard of the same pipeline) may have
			// created it meanwhile, and a catalog may answer that with
			// another error than "already exists" (the REST test
			// server's JDBC catalog fails on its unique key).
			if ok, cerr := d.cat.CheckNamespaceExists(ctx, d.ns); cerr != nil || !ok {
				return fmt.Errorf("iceberg: create namespace %v: %w", d.ns, err)
			}
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

// checkPipeline rejects pipeline names the destination can't use in a
// property key. Dots are allowed: a shard's pipeline is
// name.shard-i-of-S (etl.ShardKey), and a marker key's field, after its
// last dot, has none (markerPipeline).
func checkPipeline(s string) error {
	switch {
	case s == "":
		return errors.New("iceberg: empty pipeline name")
	case strings.ContainsAny(s, "/\\\x00 "):
		return fmt.Errorf("iceberg: pipeline name %q has a '/', '\\', space or NUL", s)
	}
	return nil
}

// Keys of the pipeline markers, in table properties and snapshot
// summaries alike (see Fence).
func epochKey(pipeline string) string { return "openetl." + pipeline + ".epoch" }
func genKey(pipeline string) string   { return "openetl." + pipeline + ".generation" }
func fenceKey(pipeline string) string { return "openetl." + pipeline + ".fence" }

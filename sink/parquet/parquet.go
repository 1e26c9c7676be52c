package parquet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"unicode/utf8"

	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"gocloud.dev/blob"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/sink"
)

// Compression is the codec of the Parquet files' column chunks.
type Compression uint8

const (
	// Zstd is the default: ~3× smaller than Snappy on text-like data.
	Zstd Compression = iota
	Snappy
	Gzip
	Lz4Raw
	// Uncompressed writes pages as they are.
	Uncompressed
)

// String returns the codec's name.
func (c Compression) String() string {
	switch c {
	case Zstd:
		return "zstd"
	case Snappy:
		return "snappy"
	case Gzip:
		return "gzip"
	case Lz4Raw:
		return "lz4_raw"
	case Uncompressed:
		return "uncompressed"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

func (c Compression) codec() (compress.Compression, bool) {
	switch c {
	case Zstd:
		return compress.Codecs.Zstd, true
	case Snappy:
		return compress.Codecs.Snappy, true
	case Gzip:
		return compress.Codecs.Gzip, true
	case Lz4Raw:
		return compress.Codecs.Lz4Raw, true
	case Uncompressed:
		return compress.Codecs.Uncompressed, true
	}
	return 0, false
}

// DefaultZstdLevel is the Zstd level used when Config.CompressionLevel
// is 0: the encoder's fastest speed. Measured on the engine's output for
// three workloads (BENCHMARKS.md, "Parquet writer: codecs and levels"),
// it took less CPU a row than level 3 for files a few percent larger.
const DefaultZstdLevel = 1

// level returns the writer's level for c given Config.CompressionLevel.
func (c Compression) level(l int) (int, error) {
	switch {
	case c == Zstd && l == 0:
		return DefaultZstdLevel, nil
	case l == 0:
		return compress.DefaultCompressionLevel, nil
	case c == Zstd && l >= 1 && l <= 22, c == Gzip && l >= 1 && l <= 9:
		return l, nil
	case c == Zstd || c == Gzip:
		return 0, fmt.Errorf("parquet: Config.CompressionLevel %d is out of range for %s", l, c)
	}
	return 0, fmt.Errorf("parquet: Config.CompressionLevel %d: %s has no levels", l, c)
}

// engineLevel is the engine's level for c: only Zstd takes one.
func engineLevel(c Compression, level int) int {
	if c == Zstd {
		return level
	}
	return 0
}

// Dictionary says which columns get Parquet dictionary encoding.
type Dictionary uint8

const (
	// DictionaryAuto is the default: a text or binary column gets a
	// dictionary when a sample of the first batch of each file (up to
	// 4096 values) has at most one distinct value in four (statuses,
	// countries, enum-like text); an Arrow dictionary column always does;
	// others are written plain. Hashing every value of a unique column
	// into a dictionary that is then abandoned cost about half the
	// writer's CPU, and zstd compresses plain pages as small or smaller.
	DictionaryAuto Dictionary = iota
	// DictionaryAll tries a dictionary on every column (arrow-go's
	// default), but the metadata columns _openetl_id and _openetl_seq.
	DictionaryAll
	// DictionaryNone writes every column plain.
	DictionaryNone
)

// Defaults of Config.
const (
	DefaultRowGroupRows    = 131072
	DefaultTargetFileBytes = 128 << 20
)

// Config configures a Destination.
type Config struct {
	// Bucket receives the files, manifests and fence markers. Required.
	// The caller owns it and closes it after the last Writer is closed.
	Bucket *blob.Bucket

	// Prefix is prepended to every key the destination writes or reads;
	// a "/" is appended when it is not empty and lacks one. Default ""
	// (the bucket's root). Readers (ReadManifest, Streams) take the same
	// prefix.
	Prefix string

	// Compression is the column chunks' codec. Default Zstd (the zero
	// value).
	Compression Compression

	// CompressionLevel is the codec's level, for the codecs that have
	// levels (Zstd, Gzip); 0 means the codec's default here, which for
	// Zstd is DefaultZstdLevel. Zstd takes 1 to 22 (levels 1–2, 3–5, 6–9
	// and 10 and up are four speeds of one encoder), Gzip 1 to 9. Another
	// value, or a level for a codec without levels, makes New fail.
	CompressionLevel int

	// Dictionary chooses the columns with dictionary encoding. Default
	// DictionaryAuto (the zero value).
	Dictionary Dictionary

	// RowGroupRows is the most rows in one row group. Each open file
	// (one per stream per lane) buffers a whole row group in memory
	// before writing it, so this bounds the memory a lane uses per
	// stream. Default 131072.
	RowGroupRows int64

	// TargetFileBytes is the size past which a lane closes a stream's
	// file and starts a new one. It is checked after each Write against
	// the bytes already flushed, i.e. at row-group boundaries, so a file
	// can exceed it by up to one row group. On S3, keep files under the
	// 5 GiB limit of a server-side copy (Commit copies each file once).
	// Default 128 MiB.
	TargetFileBytes int64

	// ManifestHistory is how many manifest versions before the current
	// one each stream keeps: a reader that listed the manifests and is
	// about to read the highest version it saw still finds it unless
	// that many commits came in between (ReadManifest then lists
	// again). Older versions are removed by the Commit that writes a
	// new one and by Collect. Default 16 (0 means the default); -1 keeps
	// every version.
	ManifestHistory int

	// Encoder chooses the code that encodes the files. Default
	// EncoderAuto (the zero value): the engine's writer, or arrow-go's
	// where the build has no engine or for Gzip. Both write the same
	// Arrow schema into the footer, so readers get the same types.
	Encoder Encoder

	// Logger receives lifecycle events (Recover, Commit) at Info and per
	// file detail at Debug. It never receives row data. Default: discard.
	Logger *slog.Logger
}

// Destination writes Parquet files to a bucket. It implements
// sink.Destination and is safe for concurrent use.
type Destination struct {
	bucket      *blob.Bucket
	prefix      string
	props       *pq.WriterProperties // DictionaryAll and DictionaryNone
	baseProps   []pq.WriterProperty  // DictionaryAuto: per file, with its columns
	dict        Dictionary
	arrowProps  pqarrow.ArrowWriterProperties
	engine      bool                  // encode with the engine (Config.Encoder)
	engineOpts  engine.ParquetOptions // the engine's options but the dictionary's
	targetBytes int64
	history     int // manifest versions kept before the current one; -1: all
	log         *slog.Logger
	versions    versions
}

var _ sink.Destination = (*Destination)(nil)

// New returns a Destination writing to cfg.Bucket. It returns an error
// for a nil bucket, an unknown compression or a negative size.
func New(cfg Config) (*Destination, error) {
	if cfg.Bucket == nil {
		return nil, errors.New("parquet: Config.Bucket is nil")
	}
	codec, ok := cfg.Compression.codec()
	if !ok {
		return nil, fmt.Errorf("parquet: Config.Compression: unknown codec %d", uint8(cfg.Compression))
	}
	level, err := cfg.Compression.level(cfg.CompressionLevel)
	if err != nil {
		return nil, err
	}
	useEng, err := useEngine(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Dictionary > DictionaryNone {
		return nil, fmt.Errorf("parquet: Config.Dictionary: unknown mode %d", uint8(cfg.Dictionary))
	}
	if cfg.RowGroupRows < 0 {
		return nil, fmt.Errorf("parquet: Config.RowGroupRows is negative (%d)", cfg.RowGroupRows)
	}
	if cfg.TargetFileBytes < 0 {
		return nil, fmt.Errorf("parquet: Config.TargetFileBytes is negative (%d)", cfg.TargetFileBytes)
	}
	if cfg.ManifestHistory < -1 {
		return nil, fmt.Errorf("parquet: Config.ManifestHistory is %d: -1 keeps every version, 1 or more keeps that many", cfg.ManifestHistory)
	}
	if cfg.ManifestHistory == 0 {
		cfg.ManifestHistory = DefaultManifestHistory
	}
	if cfg.RowGroupRows == 0 {
		cfg.RowGroupRows = DefaultRowGroupRows
	}
	if cfg.TargetFileBytes == 0 {
		cfg.TargetFileBytes = DefaultTargetFileBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	base := []pq.WriterProperty{
		pq.WithCompression(codec),
		pq.WithCompressionLevel(level),
		pq.WithMaxRowGroupLength(cfg.RowGroupRows),
		pq.WithCreatedBy("openetl sink/parquet"),
	}
	props := append(slices.Clip(base),
		// Unique per row: a dictionary only costs hashing and is
		// thrown away at the first page.
		pq.WithDictionaryFor(sink.ColumnID, false),
		pq.WithDictionaryFor(sink.ColumnSeq, false))
	if cfg.Dictionary == DictionaryNone {
		props = append(props, pq.WithDictionaryDefault(false))
	}
	return &Destination{
		bucket:     cfg.Bucket,
		prefix:     normPrefix(cfg.Prefix),
		props:      pq.NewWriterProperties(props...),
		baseProps:  base,
		dict:       cfg.Dictionary,
		arrowProps: pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()),
		engine:     useEng,
		engineOpts: engine.ParquetOptions{
			Codec:        cfg.Compression.String(),
			Level:        engineLevel(cfg.Compression, level),
			RowGroupRows: cfg.RowGroupRows,
			CreatedBy:    "openetl sink/parquet",
		},
		targetBytes: cfg.TargetFileBytes,
		history:     cfg.ManifestHistory,
		log:         cfg.Logger,
		versions:    blobVersions{cfg.Bucket},
	}, nil
}

// Class returns sink.StageAndApply.
func (d *Destination) Class() sink.Class { return sink.StageAndApply }

// Capabilities: files are appended, never merged or replaced (no
// Merge, no Overwrite: Build refuses those modes, naming the stream),
// and identifiers have no length limit. Intervals (Arrow
// month_day_nano_interval, from a Postgres interval column) and
// durations (from a MySQL TIME column) are unsupported: arrow-go's
// Parquet writer can't write them, so the runner keeps their values
// under _held/ instead of failing the sync. Patches: held values are
// released into the rows already written by rewriting their files
// (package doc, Held values).
func (d *Destination) Capabilities() sink.Capabilities {
	return sink.Capabilities{Unsupported: []string{"interval", "duration"}, Patches: true}
}

// Writer returns the writer of one lane of cfg.Pipeline. Each Writer
// gets a random nonce that names its files, so writers of different
// attempts never collide. Every stream is appended to (the
// Capabilities declare no other mode, so the runner gives it none), so
// the streams' specs need nothing more.
// ctx is not used beyond the call.
func (d *Destination) Writer(ctx context.Context, cfg sink.WriterConfig) (sink.Writer, error) {
	pipeline, lane := cfg.Pipeline, cfg.Lane
	if err := checkName("pipeline", pipeline); err != nil {
		return nil, err
	}
	if lane < 0 {
		return nil, fmt.Errorf("parquet: negative lane %d", lane)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("parquet: writer nonce: %w", err)
	}
	tables := make([]string, 0, len(cfg.Streams))
	for _, s := range cfg.Streams {
		tables = append(tables, s.Table)
	}
	slices.Sort(tables)
	return &writer{
		d:        d,
		pipeline: pipeline,
		lane:     lane,
		tables:   slices.Compact(tables),
		nonce:    hex.EncodeToString(b[:]),
		open:     make(map[string]*openFile),
		names:    make(map[string]bool),
		hints:    make(map[string]uint64),
	}, nil
}

func normPrefix(p string) string {
	if p != "" && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// checkName rejects names that can't be one path segment of a key, and
// stream names that would collide with the destination's own directories.
func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("parquet: empty %s name", what)
	case !utf8.ValidString(s):
		return fmt.Errorf("parquet: %s name %q is not valid UTF-8", what, s)
	case s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00"):
		return fmt.Errorf("parquet: %s name %q can't be a path segment", what, s)
	case what == "stream" && (s == stagingDir || s == openetlDir):
		return fmt.Errorf("parquet: stream name %q is reserved", s)
	}
	return nil
}

const (
	stagingDir = "_staging"
	openetlDir = "_openetl"
)

func (d *Destination) stagingKey(pipeline, stream, nonce string, lane, n int) string {
	return fmt.Sprintf("%s%s/%s/%s/%s-l%d-%d.parquet", d.prefix, stagingDir, pipeline, stream, nonce, lane, n)
}

func (d *Destination) finalKey(stream string, epoch uint64, lane, n int, nonce string) string {
	return fmt.Sprintf("%s%s/data/%020d-l%d-%d-%s.parquet", d.prefix, stream, epoch, lane, n, nonce)
}

func (d *Destination) fenceDir(pipeline string) string {
	return d.prefix + openetlDir + "/" + pipeline + "/fence/"
}

func manifestDir(prefix, stream string) string {
	return prefix + stream + "/_manifest/"
}

package iceberg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	ice "github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/openetl/etl/engine"
)

// Encoder chooses what encodes a table's data files.
type Encoder int

const (
	// EncoderAuto (the default) encodes with the engine's Parquet writer
	// (arrow-rs, one cgo call per batch) where it can, and with
	// iceberg-go's writer (arrow-go) otherwise: for partitioned tables,
	// codecs the engine lacks (gzip, brotli, lz4), uuid and v3-only
	// column types, and in builds without cgo. The engine writes a row
	// group at a time (write.parquet.row-group-limit rows, default
	// 131072), so its files end at the first row group that reaches
	// TargetFileBytes rather than near it; it writes no dictionaries
	// (measured faster for files a few percent larger: BENCHMARKS.md).
	EncoderAuto Encoder = iota
	// EncoderEngine is EncoderAuto, except that New fails with an error
	// wrapping engine.ErrUnavailable when the engine's writer is not in
	// the build.
	EncoderEngine
	// EncoderIcebergGo always encodes with iceberg-go's writer.
	EncoderIcebergGo
)

func (e Encoder) String() string {
	switch e {
	case EncoderAuto:
		return "auto"
	case EncoderEngine:
		return "engine"
	case EncoderIcebergGo:
		return "iceberg-go"
	}
	return "Encoder(" + strconv.Itoa(int(e)) + ")"
}

// engineOptions returns the engine writer's options for tbl's data files,
// and false when iceberg-go's writer encodes them instead (see
// EncoderAuto).
func (d *Destination) engineOptions(tbl *table.Table) (engine.ParquetOptions, bool) {
	if d.encoder == EncoderIcebergGo || !engine.ParquetAvailable() || !tbl.Spec().IsUnpartitioned() {
		return engine.ParquetOptions{}, false
	}
	props := tbl.Properties()
	opts := engine.ParquetOptions{CreatedBy: "openetl (iceberg)"}
	level := -1
	if v, ok := props[table.ParquetCompressionLevelKey]; ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return opts, false
		}
		level = n
	}
	switch codec := strings.ToLower(props.Get(table.ParquetCompressionKey, "zstd")); codec {
	case "zstd":
		opts.Codec = "zstd"
		switch {
		case level == -1:
			// iceberg-go's default level, for tables whose codec the
			// host set without a level.
			opts.Level = 3
		case level < 1 || level > 22:
			return opts, false
		default:
			opts.Level = level
		}
	case "snappy":
		opts.Codec = "snappy"
	case "uncompressed", "none":
		opts.Codec = "uncompressed"
	default:
		return opts, false
	}
	if v, ok := props[table.ParquetRowGroupLimitKey]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return opts, false
		}
		opts.RowGroupRows = n
	}
	for _, f := range tbl.Schema().Fields() {
		if !engineTakes(f.Type) {
			return opts, false
		}
	}
	return opts, true
}

// engineTakes reports whether the engine's writer stores t as Iceberg
// readers expect: every type but uuid (whose Parquet logical type the
// engine doesn't write) and the v3-only ones.
func engineTakes(t ice.Type) bool {
	switch t := t.(type) {
	case ice.BooleanType, ice.Int32Type, ice.Int64Type, ice.Float32Type, ice.Float64Type,
		ice.DecimalType, ice.DateType, ice.TimeType, ice.TimestampType, ice.TimestampTzType,
		ice.StringType, ice.BinaryType, ice.FixedType:
		return true
	case *ice.StructType:
		for _, f := range t.FieldList {
			if !engineTakes(f.Type) {
				return false
			}
		}
		return true
	case *ice.ListType:
		return engineTakes(t.Element)
	case *ice.MapType:
		return engineTakes(t.KeyType) && engineTakes(t.ValueType)
	}
	return false
}

// engineFiles encodes batches of one Arrow schema, sc, as data files of
// tbl with the engine's writer, rolling to a new file at the writer's
// target size, and uploads them through the table's file IO. It takes
// over the batches (each is released).
type engineFiles struct {
	ctx    context.Context
	w      *writer
	tbl    *table.Table
	opts   engine.ParquetOptions
	fs     iceio.WriteFileIO
	loc    table.LocationProvider
	task   *ice.Schema // sc, as the table's columns
	schOpt table.SchemaOptions
	uuid   string
	count  int

	pw    *engine.ParquetWriter
	out   iceio.FileWriter
	path  string
	bytes int64
	files []fileDesc
}

func (w *writer) newEngineFiles(ctx context.Context, tbl *table.Table, sc *arrow.Schema, opts engine.ParquetOptions) (*engineFiles, error) {
	fsys, err := tbl.FS(ctx)
	if err != nil {
		return nil, fmt.Errorf("iceberg: file IO of %v: %w", tbl.Identifier(), err)
	}
	wfs, ok := fsys.(iceio.WriteFileIO)
	if !ok {
		return nil, fmt.Errorf("iceberg: the file IO of %v can't write files", tbl.Identifier())
	}
	loc, err := tbl.LocationProvider()
	if err != nil {
		return nil, fmt.Errorf("iceberg: location of %v: %w", tbl.Identifier(), err)
	}
	props := tbl.Properties()
	task, err := table.ArrowSchemaToIcebergWithOptions(sc, table.ArrowToIcebergOptions{
		NameMapping: tbl.Schema().NameMapping(), TableSchema: tbl.Schema(), TableProperties: props})
	if err != nil {
		return nil, fmt.Errorf("iceberg: batch schema of %v: %w", tbl.Identifier(), err)
	}
	return &engineFiles{ctx: ctx, w: w, tbl: tbl, opts: opts, fs: wfs, loc: loc, task: task,
		schOpt: table.SchemaOptions{DowncastTimestamp: true, IncludeFieldIDs: true, UseWriteDefault: true, TableProperties: props},
		uuid:   writeUUID(w.pipeline).String()}, nil
}

// write encodes rec (released) into data files: a row group's worth at
// a time, so that a file rolls at the first row group that reaches the
// target size.
func (f *engineFiles) write(rec arrow.RecordBatch) error {
	conv, err := table.ToRequestedSchema(f.ctx, f.tbl.Schema(), f.task, rec, f.schOpt)
	rec.Release()
	if err != nil {
		return fmt.Errorf("iceberg: data file of %v: %w", f.tbl.Identifier(), err)
	}
	defer conv.Release()
	step := f.opts.RowGroupRows
	if step <= 0 {
		step = 131072
	}
	for at := int64(0); at < conv.NumRows(); at += step {
		part := conv
		if at > 0 || conv.NumRows() > step {
			part = conv.NewSlice(at, min(at+step, conv.NumRows()))
		}
		err := f.writePart(part)
		if part != conv {
			part.Release()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writePart encodes rec into the current file, opening one first, and
// rolls to a new file past the target size.
func (f *engineFiles) writePart(rec arrow.RecordBatch) error {
	var err error
	if f.pw == nil {
		if f.pw, err = engine.NewParquetWriter(rec.Schema(), f.opts); err != nil {
			return fmt.Errorf("iceberg: data file of %v: %w", f.tbl.Identifier(), err)
		}
		f.count++
		// The name iceberg-go's writer gives, so Collect knows the file
		// as this pipeline's (ownFile). The file is created with its
		// first bytes (put): a stream abandoned before then (its attempt
		// crashed) leaves no file behind, however late it runs on.
		f.path = f.loc.NewDataLocation(fmt.Sprintf("%05d-%d-%s-%05d.parquet", 0, 0, f.uuid, f.count))
		f.bytes = 0
	}
	b, err := f.pw.Write(rec)
	if err != nil {
		return fmt.Errorf("iceberg: encode %s: %w", f.path, err)
	}
	if err := f.put(b); err != nil {
		return err
	}
	if f.w.d.targetBytes > 0 && f.bytes >= f.w.d.targetBytes {
		return f.roll()
	}
	return nil
}

// put writes b to the current file, creating it first.
func (f *engineFiles) put(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if f.out == nil {
		out, err := f.fs.Create(f.path)
		if err != nil {
			return fmt.Errorf("iceberg: create %s: %w", f.path, err)
		}
		f.out = out
	}
	if _, err := f.out.Write(b); err != nil {
		return fmt.Errorf("iceberg: write %s: %w", f.path, err)
	}
	f.bytes += int64(len(b))
	return nil
}

// roll finishes the current file, if any, and describes it.
func (f *engineFiles) roll() error {
	if f.pw == nil {
		return nil
	}
	b, err := f.pw.Finish()
	var meta *metadata.FileMetaData
	if err == nil {
		err = f.put(b)
	}
	if err == nil {
		// Finish's bytes end with the whole footer; they alias the
		// writer's memory, so the footer is parsed before Close.
		if meta, err = footer(b); err != nil {
			err = fmt.Errorf("iceberg: footer of %s: %w", f.path, err)
		}
	}
	f.pw.Close()
	f.pw = nil
	out := f.out
	f.out = nil
	if out != nil {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("iceberg: close %s: %w", f.path, cerr)
		}
	}
	if err != nil {
		if out != nil {
			_ = f.fs.Remove(f.path)
		}
		return err
	}
	df, err := table.DataFileFromMetadata(table.DataFileArgs{
		Schema: f.tbl.Schema(), Spec: f.tbl.Spec(), Format: ice.ParquetFile, Metadata: meta,
		FilePath: f.path, FileSize: f.bytes, Content: ice.EntryContentData,
		Properties: f.tbl.Properties(), FormatVersion: f.tbl.Metadata().Version(),
	})
	if err != nil {
		return fmt.Errorf("iceberg: describe %s: %w", f.path, err)
	}
	fd, err := describe(df)
	if err != nil {
		return err
	}
	f.files = append(f.files, fd)
	return nil
}

// abort drops the file in progress (best effort).
func (f *engineFiles) abort() {
	if f.pw != nil {
		f.pw.Close()
		f.pw = nil
	}
	if f.out != nil {
		_ = f.out.Close()
		f.out = nil
		_ = f.fs.Remove(f.path)
	}
}

// footer parses the Parquet footer at the end of tail.
func footer(tail []byte) (*metadata.FileMetaData, error) {
	n := len(tail)
	if n < 12 || string(tail[n-4:]) != "PAR1" {
		return nil, errors.New("no Parquet footer at the end of the file")
	}
	size := int(binary.LittleEndian.Uint32(tail[n-8 : n-4]))
	if size <= 0 || size > n-8 {
		return nil, fmt.Errorf("footer of %d bytes in a final write of %d", size, n)
	}
	return metadata.NewFileMetaData(slices.Clone(tail[n-8-size:n-8]), nil)
}

// writeEngine is write (and a stream's body) with the engine's writer:
// the batches of seq, one Arrow schema sc, as data files of tbl.
func (w *writer) writeEngine(ctx context.Context, tbl *table.Table, sc *arrow.Schema, opts engine.ParquetOptions,
	seq func(yield func(arrow.RecordBatch) bool)) ([]fileDesc, error) {
	f, err := w.newEngineFiles(ctx, tbl, sc, opts)
	if err != nil {
		return nil, err
	}
	seq(func(rec arrow.RecordBatch) bool {
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			rec.Release()
			return false
		}
		err = f.write(rec)
		return err == nil
	})
	if err == nil {
		err = ctx.Err() // aborted (Close, a failure): no last file
	}
	if err == nil {
		err = f.roll()
	}
	if err != nil {
		f.abort()
		return f.files, err
	}
	return f.files, nil
}

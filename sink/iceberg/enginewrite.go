package iceberg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
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
	// iceberg-go's writer (arrow-go) otherwise: for partition specs with
	// transforms of other source types than int, long, date, timestamp
	// and string columns (or multi-argument ones), codecs the engine lacks (gzip, brotli, lz4), uuid and v3-only
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
	if d.encoder == EncoderIcebergGo || !engine.ParquetAvailable() {
		return engine.ParquetOptions{}, false
	}
	if spec := tbl.Spec(); !spec.IsUnpartitioned() {
		if _, ok := newPartitioner(spec, tbl.Schema()); !ok {
			return engine.ParquetOptions{}, false
		}
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
// tbl with the engine's writer, a file open per partition of the table's
// spec (one for an unpartitioned table), rolling to a new one at the
// writer's target size, and uploads them through the table's file IO.
// It takes over the batches (each is released).
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

	part  *partitioner      // nil: unpartitioned
	open  map[int]*openFile // by partition (0 when unpartitioned)
	files []fileDesc
	take  [][]int32 // rows of each partition in the batch
}

// openFile is the file in progress of one partition.
type openFile struct {
	pw     *engine.ParquetWriter
	out    iceio.FileWriter
	path   string
	bytes  int64
	dir    string      // the partition's path ("" unpartitioned)
	values map[int]any // its values, by partition field ID
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
	f := &engineFiles{ctx: ctx, w: w, tbl: tbl, opts: opts, fs: wfs, loc: loc, task: task,
		schOpt: table.SchemaOptions{DowncastTimestamp: true, IncludeFieldIDs: true, UseWriteDefault: true, TableProperties: props},
		uuid:   writeUUID(w.pipeline).String(), open: map[int]*openFile{}}
	if spec := tbl.Spec(); !spec.IsUnpartitioned() {
		if f.part, ok = newPartitioner(spec, tbl.Schema()); !ok {
			return nil, fmt.Errorf("iceberg: internal error: the engine's writer can't partition %v", tbl.Identifier())
		}
	}
	return f, nil
}

// write encodes rec (released) into data files: each partition's rows
// into its file, a row group's worth at a time, so that a file rolls at
// the first row group that reaches the target size. A partition's rows
// that come in a few runs are written as slices of the batch; rows of
// many partitions interleaved are gathered per partition first.
func (f *engineFiles) write(rec arrow.RecordBatch) error {
	conv, err := table.ToRequestedSchema(f.ctx, f.tbl.Schema(), f.task, rec, f.schOpt)
	rec.Release()
	if err != nil {
		return fmt.Errorf("iceberg: data file of %v: %w", f.tbl.Identifier(), err)
	}
	defer conv.Release()
	if f.part == nil {
		return f.writeRows(0, conv)
	}
	if err := f.part.assign(conv); err != nil {
		return err
	}
	rows := f.part.rows
	runs := 1
	for i := 1; i < len(rows); i++ {
		if rows[i] != rows[i-1] {
			runs++
		}
	}
	for len(f.take) < len(f.part.parts) {
		f.take = append(f.take, nil)
	}
	distinct := 0
	for i, pi := range rows {
		if len(f.take[pi]) == 0 {
			distinct++
		}
		f.take[pi] = append(f.take[pi], int32(i))
	}
	defer func() {
		for i := range f.take {
			f.take[i] = f.take[i][:0]
		}
	}()
	if runs <= 2*distinct {
		for at := 0; at < len(rows); {
			end := at + 1
			for end < len(rows) && rows[end] == rows[at] {
				end++
			}
			part := conv
			if at > 0 || end < len(rows) {
				part = conv.NewSlice(int64(at), int64(end))
			}
			err := f.writeRows(int(rows[at]), part)
			if part != conv {
				part.Release()
			}
			if err != nil {
				return err
			}
			at = end
		}
		return nil
	}
	for pi, idx := range f.take {
		if len(idx) == 0 {
			continue
		}
		sub, err := takeRows(f.ctx, conv, idx)
		if err != nil {
			return fmt.Errorf("iceberg: partition the batch of %v: %w", f.tbl.Identifier(), err)
		}
		err = f.writeRows(pi, sub)
		sub.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// takeRows returns rec's rows idx, in order.
func takeRows(ctx context.Context, rec arrow.RecordBatch, idx []int32) (arrow.RecordBatch, error) {
	b := array.NewInt32Builder(memory.DefaultAllocator)
	b.AppendValues(idx, nil)
	ind := b.NewArray()
	b.Release()
	defer ind.Release()
	out, err := compute.Take(ctx, *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(rec), compute.NewDatumWithoutOwning(ind))
	if err != nil {
		return nil, err
	}
	rd, ok := out.(*compute.RecordDatum)
	if !ok {
		out.Release()
		return nil, fmt.Errorf("take gave a %s", out.Kind())
	}
	return rd.Value, nil
}

// writeRows writes rec, all of partition pi, a row group's worth at a
// time.
func (f *engineFiles) writeRows(pi int, rec arrow.RecordBatch) error {
	of := f.open[pi]
	if of == nil {
		of = &openFile{}
		if f.part != nil {
			pv := f.part.parts[pi]
			of.dir, of.values = pv.path, pv.values
		}
		f.open[pi] = of
	}
	step := f.opts.RowGroupRows
	if step <= 0 {
		step = 131072
	}
	for at := int64(0); at < rec.NumRows(); at += step {
		part := rec
		if at > 0 || rec.NumRows() > step {
			part = rec.NewSlice(at, min(at+step, rec.NumRows()))
		}
		err := f.writePart(of, part)
		if part != rec {
			part.Release()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writePart encodes rec into of's file, opening one first, and rolls to
// a new file past the target size.
func (f *engineFiles) writePart(of *openFile, rec arrow.RecordBatch) error {
	var err error
	if of.pw == nil {
		if of.pw, err = engine.NewParquetWriter(rec.Schema(), f.opts); err != nil {
			return fmt.Errorf("iceberg: data file of %v: %w", f.tbl.Identifier(), err)
		}
		f.count++
		// The name iceberg-go's writer gives, so Collect knows the file
		// as this pipeline's (ownFile). The file is created with its
		// first bytes (put): a stream abandoned before then (its attempt
		// crashed) leaves no file behind, however late it runs on.
		name := fmt.Sprintf("%05d-%d-%s-%05d.parquet", 0, 0, f.uuid, f.count)
		if of.dir != "" {
			name = of.dir + "/" + name
		}
		of.path = f.loc.NewDataLocation(name)
		of.bytes = 0
	}
	b, err := of.pw.Write(rec)
	if err != nil {
		return fmt.Errorf("iceberg: encode %s: %w", of.path, err)
	}
	if err := f.put(of, b); err != nil {
		return err
	}
	if f.w.d.targetBytes > 0 && of.bytes >= f.w.d.targetBytes {
		return f.roll(of)
	}
	return nil
}

// put writes b to of's file, creating it first.
func (f *engineFiles) put(of *openFile, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if of.out == nil {
		out, err := f.fs.Create(of.path)
		if err != nil {
			return fmt.Errorf("iceberg: create %s: %w", of.path, err)
		}
		of.out = out
	}
	if _, err := of.out.Write(b); err != nil {
		return fmt.Errorf("iceberg: write %s: %w", of.path, err)
	}
	of.bytes += int64(len(b))
	return nil
}

// rollAll finishes every partition's file in progress, in partition order.
func (f *engineFiles) rollAll() error {
	keys := slices.Sorted(maps.Keys(f.open))
	for _, k := range keys {
		if err := f.roll(f.open[k]); err != nil {
			return err
		}
	}
	return nil
}

// roll finishes of's file, if any, and describes it.
func (f *engineFiles) roll(of *openFile) error {
	if of.pw == nil {
		return nil
	}
	b, err := of.pw.Finish()
	var meta *metadata.FileMetaData
	if err == nil {
		err = f.put(of, b)
	}
	if err == nil {
		// Finish's bytes end with the whole footer; they alias the
		// writer's memory, so the footer is parsed before Close.
		if meta, err = footer(b); err != nil {
			err = fmt.Errorf("iceberg: footer of %s: %w", of.path, err)
		}
	}
	of.pw.Close()
	of.pw = nil
	out := of.out
	of.out = nil
	if out != nil {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("iceberg: close %s: %w", of.path, cerr)
		}
	}
	if err != nil {
		if out != nil {
			_ = f.fs.Remove(of.path)
		}
		return err
	}
	df, err := table.DataFileFromMetadata(table.DataFileArgs{
		Schema: f.tbl.Schema(), Spec: f.tbl.Spec(), Format: ice.ParquetFile, Metadata: meta,
		FilePath: of.path, FileSize: of.bytes, Content: ice.EntryContentData, PartitionValues: of.values,
		Properties: f.tbl.Properties(), FormatVersion: f.tbl.Metadata().Version(),
	})
	if err != nil {
		return fmt.Errorf("iceberg: describe %s: %w", of.path, err)
	}
	fd, err := describe(df)
	if err != nil {
		return err
	}
	f.files = append(f.files, fd)
	return nil
}

// abort drops the files in progress (best effort).
func (f *engineFiles) abort() {
	for _, of := range f.open {
		if of.pw != nil {
			of.pw.Close()
			of.pw = nil
		}
		if of.out != nil {
			_ = of.out.Close()
			of.out = nil
			_ = f.fs.Remove(of.path)
		}
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
		err = f.rollAll()
	}
	if err != nil {
		f.abort()
		return f.files, err
	}
	return f.files, nil
}

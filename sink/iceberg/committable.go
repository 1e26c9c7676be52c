package iceberg

import (
	"encoding/json"
	"fmt"

	ice "github.com/apache/iceberg-go"

	"github.com/openetl/etl/sink"
)

// committable is the JSON form of a sink.Committable: the data and delete
// files one lane wrote for one epoch and, carried from earlier epochs,
// those not yet known to be in their tables (see Grouping), per table,
// described fully enough to add them to the table in another process.
type committable struct {
	Format   int          `json:"format"`
	Pipeline string       `json:"pipeline"`
	Lane     int          `json:"lane"`
	Epoch    uint64       `json:"epoch"`
	Nonce    string       `json:"nonce"`
	Tables   []tableFiles `json:"tables,omitempty"`
}

// tableFiles are one table's files of a committable.
type tableFiles struct {
	Table   string     `json:"table"`
	Rows    int64      `json:"rows"`
	Data    []fileDesc `json:"data,omitempty"`
	Deletes []fileDesc `json:"deletes,omitempty"` // equality deletes, or Locate keys
}

// fileDesc describes a data or equality-delete file (an iceberg.DataFile).
type fileDesc struct {
	Path string `json:"path"`
	// Epoch is the epoch that wrote the file; 0 (format 1) means the
	// committable's.
	Epoch        uint64         `json:"epoch,omitempty"`
	Content      int            `json:"content"`
	Rows         int64          `json:"rows"`
	Bytes        int64          `json:"bytes"`
	SpecID       int32          `json:"spec_id"`
	ColumnSizes  map[int]int64  `json:"column_sizes,omitempty"`
	ValueCounts  map[int]int64  `json:"value_counts,omitempty"`
	NullCounts   map[int]int64  `json:"null_counts,omitempty"`
	NaNCounts    map[int]int64  `json:"nan_counts,omitempty"`
	Lower        map[int][]byte `json:"lower,omitempty"`
	Upper        map[int][]byte `json:"upper,omitempty"`
	SplitOffsets []int64        `json:"split_offsets,omitempty"`
	EqualityIDs  []int          `json:"equality_ids,omitempty"`
	// Locate holds the field IDs of a Merge table's key when the epoch
	// removes its keys' older rows by position: Commit reads the keys of
	// the file (a data file, or a file of keys deleted for good that is
	// listed among the deletes but never added) and writes position
	// deletes for the rows earlier epochs wrote for them (format 3).
	Locate []int `json:"locate,omitempty"`
	// Patch marks a file of patch batches (patch.go), listed among the
	// deletes but never added to the table (format 4).
	Patch       bool `json:"patch,omitempty"`
	SortOrderID *int `json:"sort_order_id,omitempty"`
	// Partition holds the partition values by partition field ID, as
	// JSON; their Go types come back from the spec's result types.
	Partition map[int]json.RawMessage `json:"partition,omitempty"`
}

// committableFormat 2 added carried files (fileDesc.Epoch), 3 position
// deletes found at Commit (fileDesc.Locate); formats 1 and 2 still
// decode. A version that knows only 2 refuses format 3 instead of
// adding a Locate keys file as equality deletes and leaving older rows
// of updated keys visible.
const committableFormat = 3

func describe(df ice.DataFile) (fileDesc, error) {
	var part map[int]json.RawMessage
	for id, v := range df.Partition() {
		raw, err := json.Marshal(v)
		if err != nil {
			return fileDesc{}, fmt.Errorf("iceberg: data file %s: partition value %v: %w", df.FilePath(), v, err)
		}
		if part == nil {
			part = make(map[int]json.RawMessage)
		}
		part[id] = raw
	}
	if df.FileFormat() != ice.ParquetFile {
		return fileDesc{}, fmt.Errorf("iceberg: data file %s is %s, not Parquet", df.FilePath(), df.FileFormat())
	}
	return fileDesc{
		Path:         df.FilePath(),
		Content:      int(df.ContentType()),
		Rows:         df.Count(),
		Bytes:        df.FileSizeBytes(),
		SpecID:       df.SpecID(),
		ColumnSizes:  df.ColumnSizes(),
		ValueCounts:  df.ValueCounts(),
		NullCounts:   df.NullValueCounts(),
		NaNCounts:    df.NaNValueCounts(),
		Lower:        df.LowerBoundValues(),
		Upper:        df.UpperBoundValues(),
		SplitOffsets: df.SplitOffsets(),
		EqualityIDs:  df.EqualityFieldIDs(),
		SortOrderID:  df.SortOrderID(),
		Partition:    part,
	}, nil
}

// dataFile rebuilds the iceberg.DataFile f describes, for spec over sc.
func (f fileDesc) dataFile(spec ice.PartitionSpec, sc *ice.Schema) (ice.DataFile, error) {
	if spec.ID() != int(f.SpecID) {
		return nil, fmt.Errorf("iceberg: file %s was written for partition spec %d, the table's is %d: partition specs can't change under the pipeline",
			f.Path, f.SpecID, spec.ID())
	}
	part, err := partitionValues(spec, sc, f.Partition)
	if err != nil {
		return nil, fmt.Errorf("iceberg: file %s: %w", f.Path, err)
	}
	b, err := ice.NewDataFileBuilder(spec, ice.ManifestEntryContent(f.Content), f.Path, ice.ParquetFile, part, nil, nil, f.Rows, f.Bytes)
	if err != nil {
		return nil, fmt.Errorf("iceberg: file %s: %w", f.Path, err)
	}
	b.ColumnSizes(f.ColumnSizes).ValueCounts(f.ValueCounts).NullValueCounts(f.NullCounts).
		NaNValueCounts(f.NaNCounts).LowerBoundValues(f.Lower).UpperBoundValues(f.Upper)
	if len(f.SplitOffsets) > 0 {
		b.SplitOffsets(f.SplitOffsets)
	}
	if len(f.EqualityIDs) > 0 {
		b.EqualityFieldIDs(f.EqualityIDs)
	}
	if f.SortOrderID != nil {
		b.SortOrderID(*f.SortOrderID)
	}
	return b.Build(), nil
}

func decodeCommittable(c sink.Committable) (*committable, error) {
	var out committable
	if len(c) == 0 {
		return &out, nil
	}
	if err := json.Unmarshal(c, &out); err != nil {
		return nil, fmt.Errorf("iceberg: decode committable: %w", err)
	}
	if out.Format < 1 || out.Format > patchFormat {
		return nil, fmt.Errorf("iceberg: committable format %d, want at most %d: written by another version?", out.Format, patchFormat)
	}
	return &out, nil
}

// epochFiles are one table's files of an epoch, over every lane.
type epochFiles struct {
	rows    int64
	data    []fileDesc
	deletes []fileDesc
}

// decodeAll groups the committables' files by table, in lane order, each
// with the epoch that wrote it.
func (w *writer) decodeAll(epoch uint64, committables []sink.Committable) (map[string]*epochFiles, error) {
	out := make(map[string]*epochFiles)
	seen := make(map[string]bool)
	tag := func(dst []fileDesc, fs []fileDesc) ([]fileDesc, error) {
		for _, f := range fs {
			if f.Epoch == 0 {
				f.Epoch = epoch
			}
			if f.Epoch > epoch {
				return nil, fmt.Errorf("iceberg: committable of epoch %d carries file %s of a later epoch %d", epoch, f.Path, f.Epoch)
			}
			if seen[f.Path] {
				continue
			}
			seen[f.Path] = true
			dst = append(dst, f)
		}
		return dst, nil
	}
	for lane, raw := range committables {
		c, err := decodeCommittable(raw)
		if err != nil {
			return nil, fmt.Errorf("lane %d: %w", lane, err)
		}
		if len(c.Tables) == 0 {
			continue
		}
		if c.Epoch != epoch {
			return nil, fmt.Errorf("iceberg: lane %d's committable is for epoch %d, not %d", lane, c.Epoch, epoch)
		}
		if c.Pipeline != w.pipeline {
			return nil, fmt.Errorf("iceberg: lane %d's committable is for pipeline %q, not %q", lane, c.Pipeline, w.pipeline)
		}
		for _, t := range c.Tables {
			if err := checkName("table", t.Table); err != nil {
				return nil, fmt.Errorf("lane %d's committable: %w", lane, err)
			}
			e := out[t.Table]
			if e == nil {
				e = &epochFiles{}
				out[t.Table] = e
			}
			e.rows += t.Rows
			if e.data, err = tag(e.data, t.Data); err != nil {
				return nil, err
			}
			if e.deletes, err = tag(e.deletes, t.Deletes); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// partitionValues decodes a file's partition values into the Go types
// iceberg-go's writer gives them for each field's result type.
func partitionValues(spec ice.PartitionSpec, sc *ice.Schema, raw map[int]json.RawMessage) (map[int]any, error) {
	if spec.NumFields() == 0 {
		return nil, nil
	}
	out := make(map[int]any, spec.NumFields())
	for _, f := range spec.Fields() {
		r, ok := raw[f.FieldID]
		if !ok || string(r) == "null" {
			out[f.FieldID] = nil
			continue
		}
		src, ok := sc.FindFieldByID(f.SourceIDs[0])
		if !ok {
			return nil, fmt.Errorf("partition source column %d is not in the schema", f.SourceIDs[0])
		}
		var v any
		var err error
		switch f.Transform.ResultType(src.Type).(type) {
		case ice.Int32Type:
			v, err = decode[int32](r)
		case ice.Int64Type:
			v, err = decode[int64](r)
		case ice.DateType:
			v, err = decode[ice.Date](r)
		case ice.TimeType:
			v, err = decode[ice.Time](r)
		case ice.TimestampType, ice.TimestampTzType:
			v, err = decode[ice.Timestamp](r)
		case ice.StringType:
			v, err = decode[string](r)
		case ice.BinaryType, ice.FixedType:
			v, err = decode[[]byte](r)
		case ice.BooleanType:
			v, err = decode[bool](r)
		case ice.Float32Type:
			v, err = decode[float32](r)
		case ice.Float64Type:
			v, err = decode[float64](r)
		default:
			return nil, fmt.Errorf("partition field %s of type %s is not supported", f.Name, f.Transform.ResultType(src.Type))
		}
		if err != nil {
			return nil, fmt.Errorf("partition field %s: %w", f.Name, err)
		}
		out[f.FieldID] = v
	}
	return out, nil
}

func decode[T any](r json.RawMessage) (T, error) {
	var v T
	err := json.Unmarshal(r, &v)
	return v, err
}

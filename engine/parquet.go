package engine

import "runtime"

// ParquetOptions configures a ParquetWriter.
type ParquetOptions struct {
	// Codec is the column chunks' codec: "zstd" (the default when
	// empty), "snappy", "lz4_raw" or "uncompressed". Gzip is not built
	// into the engine.
	Codec string
	// Level is the Zstd level, 1 to 22; 0 means 1. Other codecs take 0.
	Level int
	// RowGroupRows is the most rows in a row group; the writer holds the
	// row group in progress, encoded, in memory. Default 131072.
	RowGroupRows int64
	// Dictionary is whether columns not named in DictionaryColumns get
	// Parquet dictionary encoding. Default false.
	Dictionary bool
	// DictionaryColumns overrides Dictionary for top-level columns, by
	// name.
	DictionaryColumns map[string]bool
	// CreatedBy is the footer's created_by. Default "openetl".
	CreatedBy string
}

// ParquetWriter encodes one Parquet file with the engine's writer
// (arrow-rs), in memory: Write and Finish return the bytes each call
// completed, and the caller writes them where the file goes, in order.
// The footer stores the Arrow schema (ARROW:schema), so readers get the
// record's Arrow types back, and each column chunk has statistics and a
// page index. It is not safe for concurrent use. Close frees it; a
// ParquetWriter garbage collected unclosed is freed by a cleanup, as a
// backstop only.
type ParquetWriter struct {
	h       *pqHandle // nil once closed
	cleanup runtime.Cleanup
}

// parquetOptionsJSON is the options object of openetl_parquet_new.
type parquetOptionsJSON struct {
	Codec      string          `json:"codec"`
	Level      int             `json:"level"`
	Rows       int64           `json:"row_group_rows"`
	Dictionary bool            `json:"dictionary"`
	Columns    map[string]bool `json:"dictionary_columns,omitempty"`
	CreatedBy  string          `json:"created_by"`
}

func (o ParquetOptions) json() parquetOptionsJSON {
	j := parquetOptionsJSON{Codec: o.Codec, Level: o.Level, Rows: o.RowGroupRows, Dictionary: o.Dictionary, Columns: o.DictionaryColumns, CreatedBy: o.CreatedBy}
	if j.Codec == "" {
		j.Codec = "zstd"
	}
	if j.Codec == "zstd" && j.Level == 0 {
		j.Level = 1
	}
	if j.Rows == 0 {
		j.Rows = 131072
	}
	if j.CreatedBy == "" {
		j.CreatedBy = "openetl"
	}
	return j
}

package parquet

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/internal/pqdict"
	"github.com/openetl/etl/sink"
)

// Encoder chooses the code that encodes the Parquet files.
type Encoder uint8

const (
	// EncoderAuto is the default: EncoderEngine when this build has the
	// engine (cgo on linux/amd64) and the codec is not Gzip, else
	// EncoderArrowGo. A build with CGO_ENABLED=0 thus writes with
	// arrow-go.
	EncoderAuto Encoder = iota
	// EncoderEngine encodes in the Rust engine with arrow-rs's writer,
	// one cgo call per batch: at the defaults, 0.41–0.50 of arrow-go's
	// CPU a row for files 1–2% larger (BENCHMARKS.md, "Parquet writer").
	// It has no Gzip. New fails when the build has no engine.
	EncoderEngine
	// EncoderArrowGo encodes in Go with arrow-go's pqarrow.
	EncoderArrowGo
)

// String returns the encoder's name.
func (e Encoder) String() string {
	switch e {
	case EncoderAuto:
		return "auto"
	case EncoderEngine:
		return "engine"
	case EncoderArrowGo:
		return "arrow-go"
	}
	return fmt.Sprintf("encoder(%d)", uint8(e))
}

// useEngine resolves cfg.Encoder for the build and the codec.
func useEngine(cfg Config) (bool, error) {
	switch cfg.Encoder {
	case EncoderAuto:
		return engine.ParquetAvailable() && cfg.Compression != Gzip, nil
	case EncoderEngine:
		if !engine.ParquetAvailable() {
			return false, fmt.Errorf("parquet: Config.Encoder is EncoderEngine: %w", engine.ErrUnavailable)
		}
		if cfg.Compression == Gzip {
			return false, fmt.Errorf("parquet: Config.Encoder is EncoderEngine, which has no %s: use EncoderArrowGo or another codec", cfg.Compression)
		}
		return true, nil
	case EncoderArrowGo:
		return false, nil
	}
	return false, fmt.Errorf("parquet: Config.Encoder: unknown encoder %d", uint8(cfg.Encoder))
}

// fileEncoder encodes one file, writing its bytes to the file's
// countingWriter as they are ready.
type fileEncoder interface {
	write(rec arrow.RecordBatch) error
	// finish writes the rest of the file; the encoder is done after it.
	finish() error
	// abort frees the encoder without finishing the file.
	abort()
}

// newEncoder starts the encoder of a file whose first batch is first.
func (d *Destination) newEncoder(schema *arrow.Schema, first arrow.RecordBatch, cw *countingWriter) (fileEncoder, error) {
	if !d.engine {
		fw, err := pqarrow.NewFileWriter(schema, cw, d.fileProps(first), d.arrowProps)
		if err != nil {
			return nil, err
		}
		return goEncoder{fw}, nil
	}
	opts := d.engineOpts
	switch d.dict {
	case DictionaryAuto:
		opts.DictionaryColumns = make(map[string]bool)
		for _, name := range pqdict.Columns(first) {
			opts.DictionaryColumns[name] = true
		}
	case DictionaryAll:
		opts.Dictionary = true
		opts.DictionaryColumns = map[string]bool{sink.ColumnID: false, sink.ColumnSeq: false}
	}
	pw, err := engine.NewParquetWriter(schema, opts)
	if err != nil {
		return nil, err
	}
	return &engineEncoder{pw: pw, cw: cw}, nil
}

type goEncoder struct{ fw *pqarrow.FileWriter }

func (e goEncoder) write(rec arrow.RecordBatch) error { return e.fw.WriteBuffered(rec) }
func (e goEncoder) finish() error                     { return e.fw.Close() }
func (e goEncoder) abort()                            {}

type engineEncoder struct {
	pw *engine.ParquetWriter
	cw *countingWriter
}

func (e *engineEncoder) write(rec arrow.RecordBatch) error {
	b, err := e.pw.Write(rec)
	if err == nil && len(b) > 0 {
		_, err = e.cw.Write(b)
	}
	return err
}

func (e *engineEncoder) finish() error {
	defer e.pw.Close()
	b, err := e.pw.Finish()
	if err == nil {
		_, err = e.cw.Write(b)
	}
	return err
}

func (e *engineEncoder) abort() { e.pw.Close() }

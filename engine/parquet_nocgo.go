//go:build !cgo || !(linux && amd64)

package engine

import "github.com/apache/arrow-go/v18/arrow"

type pqHandle struct{}

// ParquetAvailable reports whether this build has the engine's Parquet
// writer: false without cgo or off linux/amd64.
func ParquetAvailable() bool { return false }

// NewParquetWriter returns ErrUnavailable: this build has no Rust engine.
func NewParquetWriter(schema *arrow.Schema, opts ParquetOptions) (*ParquetWriter, error) {
	return nil, ErrUnavailable
}

// Write returns ErrUnavailable.
func (w *ParquetWriter) Write(rec arrow.RecordBatch) ([]byte, error) { return nil, ErrUnavailable }

// Finish returns ErrUnavailable.
func (w *ParquetWriter) Finish() ([]byte, error) { return nil, ErrUnavailable }

// Close does nothing.
func (w *ParquetWriter) Close() {}

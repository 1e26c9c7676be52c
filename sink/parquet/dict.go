package parquet

import (
	"github.com/apache/arrow-go/v18/arrow"
	pq "github.com/apache/arrow-go/v18/parquet"

	"github.com/openetl/etl/internal/pqdict"
)

// fileProps returns the writer properties of a file whose first batch is
// rec.
func (d *Destination) fileProps(rec arrow.RecordBatch) *pq.WriterProperties {
	if d.dict != DictionaryAuto {
		return d.props
	}
	opts := append(d.baseProps[:len(d.baseProps):len(d.baseProps)], pq.WithDictionaryDefault(false))
	for _, name := range pqdict.Columns(rec) {
		opts = append(opts, pq.WithDictionaryFor(name, true))
	}
	return pq.NewWriterProperties(opts...)
}

package kafka

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/openetl/etl/engine"
	"github.com/openetl/etl/source/kafka/internal/avrorow"
)

// The engine's Avro fast path: the values of an Avro writer schema that
// the engine can decode itself (avrorow's Decoder.FastPlan: flat records
// of scalar, nullable and logical types) are pushed as their Avro bodies
// (engine.AppendAvroRow), which the engine decodes straight into Arrow in
// the batch's one call, rather than as rows of text the engine then
// parses. The output is the same as the Go decoder's rows give (tested
// differentially: fast_internal_test.go); a batch holding a message the
// fast path can't give exactly as the Go path would (one that does not
// decode, or a value the engine would quarantine or hold as text) is
// turned into the Go decoder's rows by the engine package and pushed
// again, so a bad message is quarantined as before.

// fastOff turns the fast path off (tests and benchmarks compare both).
var fastOff bool

// goRowsN counts the messages of the fast path the Go decoder wrote
// after all (for tests).
var goRowsN atomic.Int64

// fastPath registers the fast path of dec (of schema s, schema ID id,
// into cols) and returns its registration; ok is false when its messages
// take the Go path.
func fastPath(s avrorow.RowSchema, cols []avrorow.Col, dec avrorow.RowDecoder, id int) (reg uint64, ok bool) {
	if fastOff {
		return 0, false
	}
	ad, ok := dec.(*avrorow.Decoder)
	as, ok2 := s.(*avrorow.Schema)
	if !ok || !ok2 {
		return 0, false
	}
	plan, ok := ad.FastPlan()
	if !ok {
		return 0, false
	}
	// The Go path's rows and bad records of a plan depend only on the
	// plan and the schema ID (in the bad records' text).
	own, err := avrorow.NewDecoder(as, cols)
	if err != nil {
		return 0, false
	}
	c := &goRows{dec: own, id: id}
	return engine.RegisterAvro(strconv.Itoa(id), plan, c.rows)
}

// goRows is the Go path of a fast path's messages, for the batches the
// engine leaves to it.
type goRows struct {
	mu  sync.Mutex
	dec *avrorow.Decoder
	id  int
}

func (g *goRows) rows(dst, body []byte) ([]byte, bool) {
	goRowsN.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	row, err := g.dec.Row(dst, body)
	if err != nil {
		return appendBad(dst, fmt.Sprintf("schema id %d: %v", g.id, err)), false
	}
	return row, true
}

package source

import (
	"encoding/binary"
	"errors"
)

// The payload of a FormatRow record is the concatenation, in the stream's
// declared column order, of one entry per column:
//
//	uvarint(0)                 the value is null
//	uvarint(1)                 unchanged: the source did not send the value
//	                           (a Postgres unchanged TOAST value); the engine
//	                           quarantines such a row (reason
//	                           "unchanged_value") until a later version can
//	                           fill it from the previous one
//	uvarint(len+2) ‖ bytes     a value in the source's text form
//
// A row's entry count must equal the number of declared columns. A delete
// may have an empty payload (a key-only delete).

// AppendRow appends the payload of one row to buf: values[i] is column i's
// text form, and null[i] (when null is not nil) says it is null. A nil
// value with null nil is a value of length zero, not a null.
func AppendRow(buf []byte, values [][]byte, null []bool) []byte {
	for i, v := range values {
		if null != nil && null[i] {
			buf = AppendRowNull(buf)
			continue
		}
		buf = AppendRowValue(buf, v)
	}
	return buf
}

// AppendRowValue appends one non-null value in its text form.
func AppendRowValue(buf, v []byte) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(v))+2)
	return append(buf, v...)
}

// AppendRowNull appends a null value.
func AppendRowNull(buf []byte) []byte { return append(buf, 0) }

// AppendRowUnchanged appends the marker of a value the source did not
// send (a Postgres unchanged TOAST value).
func AppendRowUnchanged(buf []byte) []byte { return append(buf, 1) }

// RowValue is one entry of a decoded row payload.
type RowValue struct {
	Null      bool
	Unchanged bool
	Text      []byte // aliases the payload
}

// ErrBadRow is returned by DecodeRow for a payload that is not a row.
var ErrBadRow = errors.New("source: malformed row payload")

// DecodeRow splits a row payload into its values, appending them to dst.
// The values alias payload.
func DecodeRow(dst []RowValue, payload []byte) ([]RowValue, error) {
	for len(payload) > 0 {
		h, n := binary.Uvarint(payload)
		if n <= 0 {
			return dst, ErrBadRow
		}
		payload = payload[n:]
		switch h {
		case 0:
			dst = append(dst, RowValue{Null: true})
		case 1:
			dst = append(dst, RowValue{Unchanged: true})
		default:
			l := h - 2
			if l > uint64(len(payload)) {
				return dst, ErrBadRow
			}
			dst = append(dst, RowValue{Text: payload[:l:l]})
			payload = payload[l:]
		}
	}
	return dst, nil
}

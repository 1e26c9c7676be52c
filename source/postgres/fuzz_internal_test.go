package postgres

import (
	"bytes"
	"testing"
)

// FuzzDecodeState: any bytes either fail with ErrBadState or decode to a
// state that encodes back to the same bytes.
func FuzzDecodeState(f *testing.F) {
	f.Add(state{lsn: 0x1574d88, snapshot: 0x1574d88}.encode())
	f.Add(state{lsn: 0x2000000, snapshot: 0x1574d88}.encode())
	f.Add([]byte{0xff})
	f.Add(append(state{lsn: 9, snapshot: 8}.encode(), "garbage"...))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeState(b)
		if err != nil {
			return
		}
		if !bytes.Equal(st.encode(), b) {
			t.Fatalf("%x decoded to %+v, which encodes to %x", b, st, st.encode())
		}
	})
}

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
	f.Add(state{lsn: 0x2000000, snapshot: 0x1574d88, tli: 2}.encode())
	f.Add(append([]byte{2}, make([]byte, 20)...)) // timeline 0: malformed
	// With re-snapshots (version 3), with and without a known timeline.
	f.Add(state{lsn: 0x2000000, snapshot: 0x1574d88, tli: 2, tail: []byte(`{"jobs":[]}`)}.encode())
	f.Add(state{lsn: 0x2000000, snapshot: 0x1574d88, tail: []byte(`{"jobs":[]}`)}.encode())
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

// TestTimelineEnd: where a timeline ended, from a history file's content
// as TIMELINE_HISTORY sends it.
func TestTimelineEnd(t *testing.T) {
	content := []byte("1\t0/15843B8\tno recovery target specified\n\n2\t0/3000000\tat restore point \"x\"\n")
	for _, tc := range []struct {
		tli   uint32
		want  string
		found bool
	}{{1, "0/15843B8", true}, {2, "0/3000000", true}, {3, "0/0", false}} {
		lsn, found, err := timelineEnd(content, tc.tli)
		if err != nil || found != tc.found || lsn.String() != tc.want {
			t.Errorf("timeline %d: %s %v %v, want %s %v", tc.tli, lsn, found, err, tc.want, tc.found)
		}
	}
	if _, _, err := timelineEnd([]byte("1\tnot-an-lsn\tx\n"), 1); err == nil {
		t.Error("a malformed LSN: no error")
	}
}

package mysql

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// position is a place in the binlog: a file and an offset in it, and
// the GTID position there when the server has GTIDs (MariaDB's
// domain-server-seq list, or MySQL's executed set uuid:1-N,...).
type position struct {
	file string
	pos  uint32
	idx  uint32 // the file's number: bin.000042 → 42
	gtid string
}

// parsePosition reads a file name and an offset as SHOW MASTER STATUS
// gives them.
func parsePosition(file, pos string) (position, error) {
	p, err := strconv.ParseUint(pos, 10, 32)
	if err != nil {
		return position{}, fmt.Errorf("mysql: binlog position %q: %w", pos, err)
	}
	idx, err := fileIndex(file)
	if err != nil {
		return position{}, err
	}
	return position{file: file, pos: uint32(p), idx: idx}, nil
}

// fileIndex is the number a binlog file's name ends with.
func fileIndex(file string) (uint32, error) {
	dot := strings.LastIndexByte(file, '.')
	n, err := strconv.ParseUint(file[dot+1:], 10, 31)
	if dot < 0 || err != nil || dot == len(file)-1 {
		return 0, fmt.Errorf("mysql: binlog file name %q does not end in .NUMBER", file)
	}
	return uint32(n), nil
}

// before reports whether p comes before q in the binlog.
func (p position) before(q position) bool {
	return p.idx < q.idx || p.idx == q.idx && p.pos < q.pos
}

// seq is the position as a record seq: the file number in the high 32
// bits, the offset in the low 32. Later positions have higher seqs, also
// across files.
func (p position) seq() int64 { return int64(p.idx)<<32 | int64(p.pos) }

// seqAt is the seq of offset pos in file number idx.
func seqAt(idx, pos uint32) int64 { return int64(idx)<<32 | int64(pos) }

// The binlog split's resume state, as JSON: the flavor, the binlog
// position after the last whole transaction, and the GTID position there
// (empty when the server has no GTIDs). Version 2 adds Copied, the
// tables the binlog split read whole itself (tables without a pageable
// key, see copyPending), and Skip: for each such table copied after the
// position, where its copy was taken; the table's row events before it
// are in the copy and are skipped. Version 1 states (written before
// snapshots were split) mean every table opened then was read. Origins
// is the origin of each keyed table's snapshot split as of the Open the
// binlog split streams for: a snapshot split that committed no state of
// its own yet resumes from that origin, not from this position, since
// the binlog split emitted the table's changes after it (absent in
// states written before it was recorded).
type stateJSON struct {
	V       int                     `json:"v"`
	Flavor  string                  `json:"flavor"`
	File    string                  `json:"file"`
	Pos     uint32                  `json:"pos"`
	GTID    string                  `json:"gtid,omitempty"`
	Copied  []string                `json:"copied,omitempty"`
	Skip    map[string]positionJSON `json:"skip,omitempty"`
	Origins map[string]positionJSON `json:"origins,omitempty"`
	Jobs    []job                   `json:"jobs,omitempty"`
}

type positionJSON struct {
	File string `json:"file"`
	Pos  uint32 `json:"pos"`
	GTID string `json:"gtid,omitempty"`
}

const stateVersion = 2

type state struct {
	flavor string
	at     position
	legacy bool                // a version 1 state
	copied []string            // sorted
	skip   map[string]position // by table name
	// origins is each keyed table's snapshot origin, by table name; never
	// changed once set (states share it).
	origins map[string]position
	// jobs are the re-snapshots queued, the first one being read
	// (resnapshot.go); never changed in place (states share it).
	jobs []job
}

func (st state) encode() []byte {
	j := stateJSON{V: stateVersion, Flavor: st.flavor, File: st.at.file, Pos: st.at.pos, GTID: st.at.gtid, Copied: st.copied, Jobs: st.jobs}
	if st.legacy {
		j.V = 1
	}
	if len(st.skip) > 0 {
		j.Skip = make(map[string]positionJSON, len(st.skip))
		for t, p := range st.skip {
			j.Skip[t] = positionJSON{File: p.file, Pos: p.pos}
		}
	}
	if len(st.origins) > 0 {
		j.Origins = make(map[string]positionJSON, len(st.origins))
		for t, p := range st.origins {
			j.Origins[t] = positionJSON{File: p.file, Pos: p.pos, GTID: p.gtid}
		}
	}
	b, _ := json.Marshal(j)
	return b
}

// decodeState reads a resume state, strictly: one JSON object with known
// fields, a known flavor, a binlog file with a number, an offset past
// the file's magic bytes and a GTID position of the flavor's form.
func decodeState(b []byte) (state, error) {
	var j stateJSON
	if err := decodeStrict(b, &j); err != nil {
		return state{}, err
	}
	if j.V != 1 && j.V != stateVersion {
		return state{}, fmt.Errorf("%w: version %d", ErrBadState, j.V)
	}
	at, err := checkPosition(j.Flavor, j.File, j.Pos, j.GTID)
	if err != nil {
		return state{}, err
	}
	st := state{flavor: j.Flavor, at: at, legacy: j.V == 1, copied: j.Copied, jobs: j.Jobs}
	for _, jb := range j.Jobs {
		if jb.Stream == "" {
			return state{}, fmt.Errorf("%w: a re-snapshot without a stream", ErrBadState)
		}
	}
	if st.legacy && (len(j.Copied) > 0 || len(j.Skip) > 0) {
		return state{}, fmt.Errorf("%w: version 1 with copied tables", ErrBadState)
	}
	if !slices.IsSorted(st.copied) {
		return state{}, fmt.Errorf("%w: copied tables not sorted", ErrBadState)
	}
	for t, p := range j.Skip {
		idx, err := fileIndex(p.File)
		if err != nil || p.Pos < 4 || p.GTID != "" {
			return state{}, fmt.Errorf("%w: skip position %q:%d of %q", ErrBadState, p.File, p.Pos, t)
		}
		if st.skip == nil {
			st.skip = map[string]position{}
		}
		st.skip[t] = position{file: p.File, pos: p.Pos, idx: idx}
	}
	if st.legacy && len(j.Origins) > 0 {
		return state{}, fmt.Errorf("%w: version 1 with snapshot origins", ErrBadState)
	}
	for t, p := range j.Origins {
		at, err := checkPosition(j.Flavor, p.File, p.Pos, p.GTID)
		if err != nil {
			return state{}, fmt.Errorf("%w (snapshot origin of %q)", err, t)
		}
		if st.origins == nil {
			st.origins = map[string]position{}
		}
		st.origins[t] = at
	}
	return st, nil
}

// decodeStrict decodes one JSON object with known fields and nothing
// after it.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the state", ErrBadState)
	}
	return nil
}

// checkPosition checks a state's flavor and position.
func checkPosition(flavor, file string, pos uint32, gtid string) (position, error) {
	if flavor != FlavorMySQL && flavor != FlavorMariaDB {
		return position{}, fmt.Errorf("%w: flavor %q", ErrBadState, flavor)
	}
	idx, err := fileIndex(file)
	if err != nil || pos < 4 {
		return position{}, fmt.Errorf("%w: position %q:%d", ErrBadState, file, pos)
	}
	if gtid != "" {
		g, err := parseGTID(flavor, gtid)
		if err != nil {
			return position{}, fmt.Errorf("%w: %v", ErrBadState, err)
		}
		if g.String() != gtid {
			return position{}, fmt.Errorf("%w: GTID position %q is not in canonical form", ErrBadState, gtid)
		}
	}
	return position{file: file, pos: pos, idx: idx, gtid: gtid}, nil
}

// snapStateJSON is a snapshot split's resume state. Flavor, File, Pos
// and GTID are the split's origin: the binlog position whose seq every
// row of the split carries, whatever snapshot it reads them under (see
// the package doc), and where the binlog split starts when it has no
// state of its own yet. After holds the last emitted row's key values
// (their text; bytes for binary columns); Done says the table is read;
// Rows counts the rows emitted up to the state, over all attempts. Cols
// are the columns the rows were read with (none in states written before
// they were recorded: nothing is compared then).
type snapStateJSON struct {
	V      int      `json:"v"`
	Flavor string   `json:"flavor"`
	File   string   `json:"file"`
	Pos    uint32   `json:"pos"`
	GTID   string   `json:"gtid,omitempty"`
	After  [][]byte `json:"after,omitempty"`
	Done   bool     `json:"done,omitempty"`
	Rows   int64    `json:"rows,omitempty"`
	Cols   []string `json:"cols,omitempty"`
}

const snapStateVersion = 1

type snapState struct {
	flavor string
	origin position
	after  [][]byte
	done   bool
	rows   int64
	cols   []string
}

func (st *snapState) encode() []byte {
	b, _ := json.Marshal(snapStateJSON{V: snapStateVersion, Flavor: st.flavor, File: st.origin.file, Pos: st.origin.pos,
		GTID: st.origin.gtid, After: st.after, Done: st.done, Rows: st.rows, Cols: st.cols})
	return b
}

func decodeSnapState(b []byte) (snapState, error) {
	var j snapStateJSON
	if err := decodeStrict(b, &j); err != nil {
		return snapState{}, err
	}
	if j.V != snapStateVersion || j.Rows < 0 {
		return snapState{}, fmt.Errorf("%w: snapshot state version %d, rows %d", ErrBadState, j.V, j.Rows)
	}
	at, err := checkPosition(j.Flavor, j.File, j.Pos, j.GTID)
	if err != nil {
		return snapState{}, err
	}
	return snapState{flavor: j.Flavor, origin: at, after: j.After, done: j.Done, rows: j.Rows, cols: j.Cols}, nil
}

// gtidSet is a flavor's GTID position, advanced one transaction at a
// time.
type gtidSet interface {
	String() string
	gomysql.GTIDSet
}

// parseGTID parses a GTID position of the flavor: MariaDB's
// "domain-server-seq[,...]" (one per domain) or MySQL's
// "uuid:1-5:7[,uuid:...]" (with tags, "uuid:tag:1-5", on MySQL 8.3+).
func parseGTID(flavor, s string) (gtidSet, error) {
	switch flavor {
	case FlavorMariaDB:
		g, err := gomysql.ParseMariadbGTIDSet(s)
		if err != nil {
			return nil, fmt.Errorf("MariaDB GTID position %q: %w", s, err)
		}
		return g.(*gomysql.MariadbGTIDSet), nil
	case FlavorMySQL:
		g, err := gomysql.ParseMysqlGTIDSet(s)
		if err != nil {
			return nil, fmt.Errorf("MySQL GTID set %q: %w", s, err)
		}
		return g.(*gomysql.MysqlGTIDSet), nil
	}
	return nil, fmt.Errorf("flavor %q", flavor)
}

// gtidTracker follows the GTID position through the binlog: the GTID of
// the transaction being read, added to the position when it commits.
type gtidTracker struct {
	flavor string
	set    gtidSet // nil when the server has no GTIDs
	str    string  // set.String(), cached between commits

	// the current transaction's GTID
	mariadb    gomysql.MariadbGTID
	hasMariadb bool
	sid        uuid.UUID
	tag        gomysql.Tag
	gno        int64
	hasMySQL   bool
}

func newGTIDTracker(flavor, pos string) (*gtidTracker, error) {
	t := &gtidTracker{flavor: flavor, str: pos}
	if pos == "" && flavor == FlavorMySQL {
		return t, nil // GTIDs off
	}
	set, err := parseGTID(flavor, pos)
	if err != nil {
		return nil, err
	}
	t.set = set
	return t, nil
}

// beginMariaDB notes the GTID of a MariaDB transaction.
func (t *gtidTracker) beginMariaDB(g gomysql.MariadbGTID) {
	t.mariadb, t.hasMariadb = g, true
}

// beginMySQL notes the GTID of a MySQL transaction; an anonymous one
// (GTIDs off: a zero SID) is not tracked.
func (t *gtidTracker) beginMySQL(sid []byte, tag gomysql.Tag, gno int64) error {
	if gno == 0 || allZero(sid) {
		t.hasMySQL = false
		return nil
	}
	u, err := uuid.FromBytes(sid)
	if err != nil {
		return fmt.Errorf("mysql: GTID event SID: %w", err)
	}
	t.sid, t.tag, t.gno, t.hasMySQL = u, tag, gno, true
	return nil
}

// commit adds the current transaction's GTID to the position.
func (t *gtidTracker) commit() error {
	switch {
	case t.hasMariadb:
		t.hasMariadb = false
		if t.set == nil {
			set, _ := parseGTID(FlavorMariaDB, "")
			t.set = set
		}
		g := t.mariadb
		if err := t.set.(*gomysql.MariadbGTIDSet).AddSet(&g); err != nil {
			return fmt.Errorf("mysql: GTID %s: %w", g.String(), err)
		}
		t.str = t.set.String()
	case t.hasMySQL:
		t.hasMySQL = false
		if t.set == nil {
			set, _ := parseGTID(FlavorMySQL, "")
			t.set = set
		}
		s := t.set.(*gomysql.MysqlGTIDSet)
		if t.tag != (gomysql.Tag{}) {
			s.AddGTIDWithTag(t.sid, t.tag, t.gno)
		} else {
			s.AddGTID(t.sid, t.gno)
		}
		t.str = t.set.String()
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

package mysql

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/openetl/etl/source"
)

// A snapshot split emits its table as of its origin O, exactly: each
// chunk is read under a consistent snapshot of its own, at binlog
// position C >= O, and the changes between O and C are taken back out of
// it with the binlog's before-images. The binlog split emits every
// change after O, so each row version reaches the destination once:
// the version a key had at O from the snapshot (seq O), every later one
// from the binlog. A chunk read again by a later attempt, under a later
// snapshot, yields the same rows, since the state at O does not change.
//
// undoLog is what the split learned from the binlog after O: for each
// key changed since, its row at O (none when its first change after O
// created it). Only a key's first change after O counts.
type undoLog struct {
	at    position            // the binlog is read from the origin up to here
	first map[string]*undoRow // by key (the key columns' encoded values)
}

// undoRow is one key's row at the origin.
type undoRow struct {
	row  []byte // the row at O (its payload); nil: the key had no row at O
	done bool   // a chunk has read the key: nothing more to emit for it
}

func newUndoLog(origin position) *undoLog {
	return &undoLog{at: origin, first: map[string]*undoRow{}}
}

// had notes that key had row just before a change (a delete's or an
// update's before-image), if the key has no earlier change after O.
func (u *undoLog) had(key, row []byte) {
	if _, ok := u.first[string(key)]; !ok {
		u.first[string(key)] = &undoRow{row: append([]byte{}, row...)}
	}
}

// hadNone notes that key had no row just before a change (an insert, or
// an update that moved a row to the key), if the key has no earlier
// change after O.
func (u *undoLog) hadNone(key []byte) {
	if _, ok := u.first[string(key)]; !ok {
		u.first[string(key)] = &undoRow{}
	}
}

// asOfOrigin returns what to emit for a row a chunk read (its key and
// payload as of the chunk's snapshot): the key's row at O, which is
// payload itself when the key did not change since; ok is false when
// the key had no row at O (the binlog split emits its insert).
func (u *undoLog) asOfOrigin(key, payload []byte) (row []byte, ok bool) {
	r, changed := u.first[string(key)]
	if !changed {
		return payload, true
	}
	if r.done {
		// A key is read by one chunk only: a second read is a bug in the
		// keyset pagination; emit nothing twice.
		return nil, false
	}
	row, r.row, r.done = r.row, nil, true
	return row, row != nil
}

// catchUp reads the binlog from u.at to to (a transaction end: the
// position of a consistent snapshot) and notes the changes of the
// split's table. It streams on a connection of its own, with a random
// replica server ID (Config.ServerID is the binlog split's).
func (ss *snapSplit) catchUp(ctx context.Context, to position) error {
	u := ss.undo
	if !u.at.before(to) {
		return nil
	}
	t := ss.t
	sp := &split{src: ss.src, id: ss.id, tables: []*table{t}, byName: map[string]*table{t.name: t},
		discovered: ss.discovered, gtidMode: ss.gtidMode, undo: u}
	if err := sp.stream(ctx, discardEmitter{}, state{flavor: ss.st.flavor, at: u.at}, true, to); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("mysql: snapshot of %s: read the binlog from its origin %s:%d to %s:%d: %w",
			t.name, u.at.file, u.at.pos, to.file, to.pos, err)
	}
	u.at = to
	return nil
}

// undoEmitter emits a chunk's rows as of the split's origin (see
// undoLog.asOfOrigin).
type undoEmitter struct {
	source.Emitter
	u *undoLog
}

func (e undoEmitter) Record(stream string, op source.Op, seq int64, key, payload []byte) error {
	row, ok := e.u.asOfOrigin(key, payload)
	if !ok {
		return nil
	}
	return e.Emitter.Record(stream, op, seq, key, row)
}

// discardEmitter takes the resume points of an undo scan.
type discardEmitter struct{}

func (discardEmitter) Record(string, source.Op, int64, []byte, []byte) error { return nil }
func (discardEmitter) ResumePoint([]byte) error                              { return nil }

// gone returns the keys, sorted, that had a row at the origin and that
// no chunk has read since (the key was deleted, or moved, after the
// origin), with those rows.
func (u *undoLog) gone() (keys []string) {
	for k, r := range u.first {
		if r.row != nil && !r.done {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// goneBatch is how many keys one query of emitGone compares.
const goneBatch = 256

// emitGone emits, as of the origin, the rows of keys in the range a
// chunk just read — after lo, up to and including hi (nil: no bound) —
// that had a row at the origin but none at the chunk's snapshot: the
// chunk could not see them. Keys not after lo are behind the split's
// frontier for good (read by an earlier chunk, or attempt): they are
// dropped. The server compares the keys with the bounds in the key's
// order (keyLiteral), on c.
func (sp *snapSplit) emitGone(ctx context.Context, c *client.Conn, e source.Emitter, lo, hi [][]byte, seq int64) error {
	u, t := sp.undo, sp.t
	keys := u.gone()
	if len(keys) == 0 {
		return nil
	}
	// Per key: after lo, after hi.
	afterLo, afterHi := make([]bool, len(keys)), make([]bool, len(keys))
	if lo == nil {
		for i := range afterLo {
			afterLo[i] = true
		}
	}
	if lo != nil || hi != nil {
		var vals []source.RowValue
		var sql []byte
		var err error
		for from := 0; from < len(keys); from += goneBatch {
			batch := keys[from:min(from+goneBatch, len(keys))]
			sql = append(sql[:0], "SELECT "...)
			for i, k := range batch {
				if vals, err = source.DecodeRow(vals[:0], u.first[k].row); err != nil {
					return err
				}
				key := func(b []byte, j int) ([]byte, error) { return t.keyLiteral(b, j, vals[t.key[j]].Text) }
				for n, bound := range [][][]byte{lo, hi} {
					if i > 0 || n > 0 {
						sql = append(sql, ", "...)
					}
					sql = append(sql, '(')
					if bound == nil {
						sql = append(sql, "FALSE"...)
					} else if sql, err = appendKeyAfter(sql, len(t.key), key, boundLiteral(t, bound)); err != nil {
						return err
					}
					sql = append(sql, ')')
				}
			}
			r, err := exec(ctx, c, string(sql))
			if err != nil {
				return fmt.Errorf("mysql: snapshot of %s: compare deleted keys with the chunk's range: %w", t.name, err)
			}
			rs := rows(r)
			if len(rs) != 1 || len(rs[0]) != 2*len(batch) {
				return fmt.Errorf("mysql: snapshot of %s: compare deleted keys with the chunk's range: %d rows", t.name, len(rs))
			}
			for i := range batch {
				if lo != nil {
					afterLo[from+i] = rs[0][2*i] == "1"
				}
				afterHi[from+i] = rs[0][2*i+1] == "1"
			}
		}
	}
	for i, k := range keys {
		r := u.first[k]
		switch {
		case !afterLo[i]:
			r.row, r.done = nil, true
		case !afterHi[i]:
			row := r.row
			r.row, r.done = nil, true
			if err := e.Record(t.stream.Name, source.OpInsert, seq, []byte(k), row); err != nil {
				return err
			}
		}
	}
	return nil
}

func boundLiteral(t *table, bound [][]byte) func(b []byte, j int) ([]byte, error) {
	return func(b []byte, j int) ([]byte, error) { return t.keyLiteral(b, j, bound[j]) }
}

// appendKeyAfter appends the condition "key a comes after key b" over n
// key columns, as (a1 > b1) OR (a1 = b1 AND a2 > b2) OR ...; a and b
// append column j's expression.
func appendKeyAfter(sql []byte, n int, a, b func([]byte, int) ([]byte, error)) ([]byte, error) {
	var err error
	for i := range n {
		if i > 0 {
			sql = append(sql, " OR "...)
		}
		sql = append(sql, '(')
		for j := 0; j <= i; j++ {
			if j > 0 {
				sql = append(sql, " AND "...)
			}
			if sql, err = a(sql, j); err != nil {
				return nil, err
			}
			if j < i {
				sql = append(sql, " = "...)
			} else {
				sql = append(sql, " > "...)
			}
			if sql, err = b(sql, j); err != nil {
				return nil, err
			}
		}
		sql = append(sql, ')')
	}
	return sql, nil
}

// keyLiteral appends key column j's value v (its text, as the snapshot
// and the binlog give it) as an SQL literal that compares with another
// such literal as the column's values do, without the column: numbers
// as numbers, dates and times cast to their type, text converted to the
// column's character set in its collation, binary strings byte by byte.
func (t *table) keyLiteral(b []byte, j int, v []byte) ([]byte, error) {
	var err error
	switch t.keyLits[j] {
	case litQuoted:
		typ := "DATETIME(6)"
		switch t.keyTypes[j] {
		case "date":
			typ = "DATE"
		case "time":
			typ = "TIME(6)"
		}
		b = append(b, "CAST("...)
		if b, err = appendLiteral(b, litQuoted, v); err != nil {
			return nil, err
		}
		return append(b, " AS "+typ+")"...), nil
	case litText:
		cs, coll := t.keyColls[j][0], t.keyColls[j][1]
		if !plainName(cs) || !plainName(coll) {
			return nil, fmt.Errorf("mysql: key column of %s: character set %q, collation %q", t.name, cs, coll)
		}
		b = append(b, "CONVERT("...)
		if b, err = appendLiteral(b, litText, v); err != nil {
			return nil, err
		}
		return append(b, " USING "+cs+") COLLATE "+coll...), nil
	}
	return appendLiteral(b, t.keyLits[j], v)
}

// plainName reports whether s is a character set or collation name
// (letters, digits, underscores).
func plainName(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

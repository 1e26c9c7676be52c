package iceberg

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// Grouping decides when Commit makes waiting epochs visible. Every epoch
// is durable on its own (PreCommit writes its files and the checkpoint
// record lists them), but tables are committed only once the files
// waiting for one of them reach Bytes, or the oldest of them has waited
// Interval, whichever comes first; then every table with waiting files
// is committed (so their epoch markers stay together). Until then Commit
// leaves them waiting and each lane carries them into its next
// committables. A knob of 0 is
// always reached: Grouping{} commits every epoch. The files still
// waiting when the attempt ends (a Sync's end, a Run's clean stop) are
// committed when the runner closes lane 0's writer; after a crash, the
// next attempt takes them over from the checkpoint HEAD.
//
// Grouping saves catalog commits, snapshots and manifests (one per group
// instead of one per epoch; a Merge table still gets one snapshot per
// epoch, committed together, because an epoch's deletes must
// apply to the rows of earlier epochs, and on a format v3 table one
// commit per epoch, see the package doc); it does not merge data files,
// which are written per epoch and lane: the pipeline's epoch size (etl's
// EpochEvery) and Maintain's compaction set the file size. Readers see a
// table up to Interval (plus an epoch) behind the checkpoint log.
//
// Maintain's OrphansOlderThan should exceed Interval plus the longest
// epoch: waiting files are not in the table yet, and removing them makes
// the next attempt read their epochs again (nothing is lost: the source
// is acknowledged only what is visible, see Writer's Visible).
type Grouping struct {
	// Bytes commits a table once its waiting data and delete files hold
	// this many bytes. Default (DefaultGrouping) 128 MiB.
	Bytes int64
	// Interval commits a table once its oldest waiting epoch has waited
	// this long (measured by lane 0's Commit calls, so it is checked at
	// each epoch). Default (DefaultGrouping) 60s.
	Interval time.Duration
}

// DefaultGrouping is the grouping of a Config whose Grouping is nil.
var DefaultGrouping = Grouping{Bytes: 128 << 20, Interval: time.Minute}

// pending are a table's files not yet in the table, over every lane.
type pending struct {
	data, deletes []fileDesc
	bytes, rows   int64
	minEpoch      uint64
}

// after returns the files of f with an epoch after applied.
func (f *epochFiles) after(applied uint64) pending {
	var p pending
	add := func(dst *[]fileDesc, fd fileDesc) {
		if fd.Epoch <= applied {
			return
		}
		*dst = append(*dst, fd)
		p.bytes += fd.Bytes
		if p.minEpoch == 0 || fd.Epoch < p.minEpoch {
			p.minEpoch = fd.Epoch
		}
	}
	for _, fd := range f.data {
		add(&p.data, fd)
		if fd.Epoch > applied {
			p.rows += fd.Rows
		}
	}
	for _, fd := range f.deletes {
		add(&p.deletes, fd)
	}
	return p
}

func (p pending) empty() bool { return len(p.data) == 0 && len(p.deletes) == 0 }

// byEpoch splits p into its epochs, ascending.
func (p pending) byEpoch() []pending {
	m := map[uint64]*pending{}
	get := func(e uint64) *pending {
		q := m[e]
		if q == nil {
			q = &pending{minEpoch: e}
			m[e] = q
		}
		return q
	}
	for _, fd := range p.data {
		q := get(fd.Epoch)
		q.data = append(q.data, fd)
	}
	for _, fd := range p.deletes {
		q := get(fd.Epoch)
		q.deletes = append(q.deletes, fd)
	}
	out := make([]pending, 0, len(m))
	for _, q := range m {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b pending) int { return cmp.Compare(a.minEpoch, b.minEpoch) })
	return out
}

// due reports whether table name's waiting files p are to be committed
// now (commit goroutine).
func (w *writer) due(name string, p pending, now time.Time) bool {
	g := w.d.group
	if p.bytes >= g.Bytes || g.Interval == 0 {
		return true
	}
	since, ok := w.waitSince[name]
	if !ok {
		w.waitSince[name] = now
		since = now
	}
	return now.Sub(since) >= g.Interval
}

func appliedKey(pipeline, table string) string { return pipeline + "\x00" + table }

// noteApplied records that table's markers say epoch is in it, so lanes
// stop carrying its files of epochs up to it.
func (d *Destination) noteApplied(pipeline, table string, epoch uint64) {
	d.appliedMu.Lock()
	defer d.appliedMu.Unlock()
	k := appliedKey(pipeline, table)
	if epoch > d.applied[k] {
		d.applied[k] = epoch
	}
}

// resetApplied records that table's markers went back to epoch (an
// epoch taken back by Recover).
func (d *Destination) resetApplied(pipeline, table string, epoch uint64) {
	d.appliedMu.Lock()
	defer d.appliedMu.Unlock()
	d.applied[appliedKey(pipeline, table)] = epoch
}

func (d *Destination) appliedEpoch(pipeline, table string) uint64 {
	d.appliedMu.Lock()
	defer d.appliedMu.Unlock()
	return d.applied[appliedKey(pipeline, table)]
}

// carried are one lane's files of one table that may not be in the table
// yet: it lists them in every committable until a Commit saw the table
// record an epoch at or after theirs. Files of a table's markers are
// never taken out of it (markers only grow), so a committable always
// lists every file of its lane not yet in the table.
type carried struct {
	data, deletes []fileDesc
}

// prune drops carried files the tables already hold (lane goroutine).
func (w *writer) prune() {
	for name, c := range w.carry {
		applied := w.d.appliedEpoch(w.pipeline, name)
		keep := func(fd fileDesc) bool { return fd.Epoch <= applied }
		c.data = slices.DeleteFunc(c.data, keep)
		c.deletes = slices.DeleteFunc(c.deletes, keep)
		if len(c.data) == 0 && len(c.deletes) == 0 {
			delete(w.carry, name)
		}
	}
}

// takeInherited moves files Recover found waiting in the HEAD's
// committables into this lane's carry (lane 0 only, first PreCommit).
func (w *writer) takeInherited() {
	w.inheritMu.Lock()
	inh := w.inherit
	w.inherit = nil
	w.inheritMu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(inh)) {
		p := inh[name]
		c := w.carry[name]
		if c == nil {
			c = &carried{}
			w.carry[name] = c
		}
		have := map[string]bool{}
		for _, fd := range append(slices.Clone(c.data), c.deletes...) {
			have[fd.Path] = true
		}
		for _, fd := range p.data {
			if !have[fd.Path] {
				c.data = append(c.data, fd)
			}
		}
		for _, fd := range p.deletes {
			if !have[fd.Path] {
				c.deletes = append(c.deletes, fd)
			}
		}
	}
}

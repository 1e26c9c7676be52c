package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/delivery"
	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
	"github.com/openetl/etl/source"
	"github.com/openetl/etl/source/sourcetest"
)

// maxReported bounds the violations one check reports per stream.
const maxReported = 5

// check runs every check on the final state.
func (s *sim) check() {
	s.checkHead()
	head := s.finalHead()
	if head == nil && s.rows() > 0 {
		s.violate("the log is empty although the source has %d records", s.rows())
	}
	s.checkLog(head)
	s.checkApplies()
	s.checkAcks(head)
	s.checkStaged(head)
	s.checkRoutes()
	for _, st := range s.w.streams {
		s.checkStream(st.Name, head)
	}
}

// checkStaged: the last attempt was clean and started once every
// zombie had returned, and collected, after its recovery, what failed
// attempts had staged: nothing is left staged that head doesn't name,
// neither the runner's side files under _staging/ in the checkpoint
// store nor the destination's staged data.
func (s *sim) checkStaged(head *checkpoint.Record) {
	named := map[string]bool{}
	if head != nil {
		for _, f := range head.Files {
			named[f.Path] = true
		}
	}
	if l, ok := s.store.inner.(checkpoint.FileLister); ok {
		files, err := l.ListFiles(context.Background(), pipelineName, "_staging/")
		if err != nil {
			s.violate("listing the staged side files: %v", err)
		}
		for _, f := range files {
			if !named[f] {
				s.violate("after the clean attempt, side file %s is staged although HEAD (%s) doesn't name it", f, refStr(refOf(head)))
			}
		}
	}
	left, err := s.dst.unnamed(head)
	if err != nil {
		s.violate("listing the destination's staged data: %v", err)
	}
	for i, u := range left {
		if i == maxReported {
			s.violate("... and %d more staged units HEAD doesn't name", len(left)-i)
			break
		}
		s.violate("after the clean attempt, %s holds %s staged although HEAD (%s) doesn't name it", s.dst.name(), u, refStr(refOf(head)))
	}
}

func refOf(r *checkpoint.Record) *checkpoint.Ref {
	if r == nil {
		return nil
	}
	ref := r.Ref()
	return &ref
}

func (s *sim) rows() int {
	n := 0
	for _, st := range s.w.streams {
		n += st.Rows * max(st.Splits, 1)
	}
	return n
}

// checkHead replays the recorded HEAD transitions: claims keep the record
// and raise the generation, commits move forward by the current
// generation, and only rewinds move back.
func (s *sim) checkHead() {
	var cur *checkpoint.Ref
	var gen checkpoint.Generation
	for _, t := range s.store.transitions() {
		s.logf("%v", t)
		switch t.Op {
		case "claim":
			if t.Gen <= gen {
				s.violate("%v: generation did not rise above %d", t, gen)
			}
			if !sameRef(t.Ref, cur) {
				s.violate("%v: a claim moved HEAD from %s", t, refStr(cur))
			}
			gen = t.Gen
		case "commit":
			if t.Gen != gen {
				s.violate("%v: a commit by generation %d landed while HEAD belongs to %d", t, t.Gen, gen)
			}
			if cur != nil && t.Ref.Epoch <= cur.Epoch {
				s.violate("%v: HEAD moved backwards from %s without a rewind", t, refStr(cur))
			}
		case "rewind":
			s.rep.Rewinds++
			if t.Gen != gen {
				s.violate("%v: a rewind by generation %d landed while HEAD belongs to %d", t, t.Gen, gen)
			}
			if cur == nil || t.Ref != nil && t.Ref.Epoch >= cur.Epoch {
				s.violate("%v: a rewind from %s did not move back", t, refStr(cur))
			}
		}
		cur = t.Ref
	}
}

func refStr(r *checkpoint.Ref) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("epoch %d (gen %d)", r.Epoch, r.Generation)
}

func (s *sim) finalHead() *checkpoint.Record {
	s.store.mu.Lock()
	ref := s.store.head()
	s.store.mu.Unlock()
	if ref == nil {
		return nil
	}
	rec, err := s.store.inner.Get(context.Background(), pipelineName, *ref)
	if err != nil {
		s.violate("reading HEAD's record %s: %v", refStr(ref), err)
		return nil
	}
	return rec
}

// checkLog walks the final log: every epoch applied at the destination,
// every quarantine file published, totals consistent.
func (s *sim) checkLog(head *checkpoint.Record) {
	ctx := context.Background()
	for rec := head; rec != nil; {
		if s.w.class != sink.DeliverAck && !s.dst.applied(rec.Epoch) {
			s.violate("epoch %d (gen %d) is in the final log but not applied at the destination", rec.Epoch, rec.Generation)
		}
		for _, f := range rec.Files {
			if f.Kind != "quarantine" {
				continue
			}
			b, err := s.store.inner.ReadFile(ctx, pipelineName, runner.QuarantineName(f.Stream, rec.Epoch))
			if err != nil {
				s.violate("epoch %d: quarantine file of stream %s not published: %v", rec.Epoch, f.Stream, err)
			} else if n := bytes.Count(b, []byte("\n")); int64(n) != f.Rows {
				s.violate("epoch %d: quarantine file of stream %s has %d lines, record says %d", rec.Epoch, f.Stream, n, f.Rows)
			}
		}
		for name, c := range rec.Totals {
			if c.Read+c.Added != c.Written+c.Filtered+c.Quarantined {
				s.violate("epoch %d: stream %s totals read %d + added %d != written %d + filtered %d + quarantined %d",
					rec.Epoch, name, c.Read, c.Added, c.Written, c.Filtered, c.Quarantined)
			}
		}
		if rec.Prev == nil {
			break
		}
		prev, err := s.store.inner.Get(ctx, pipelineName, *rec.Prev)
		if err != nil {
			s.violate("epoch %d: previous record %s: %v", rec.Epoch, refStr(rec.Prev), err)
			break
		}
		if prev.Epoch >= rec.Epoch {
			s.violate("epoch %d follows epoch %d", rec.Epoch, prev.Epoch)
			break
		}
		rec = prev
	}
}

// checkApplies checks the destination's own log of commits: each epoch
// applied once, never by a generation below the fence.
func (s *sim) checkApplies() {
	aps, ok := s.dst.applies()
	if !ok {
		s.logf("not checked: which Commits applied an epoch, and under which fence (%s keeps no such log; the rows read back show their effect)", s.dst.name())
		return
	}
	seen := map[uint64]int{}
	for _, ap := range aps {
		s.logf("destination applied epoch %d (gen %d, fence %d)", ap.Epoch, ap.Gen, ap.Fence)
		seen[ap.Epoch]++
		if ap.Gen < ap.Fence {
			s.violate("epoch %d applied by generation %d after the fence rose to %d: a zombie's Commit landed", ap.Epoch, ap.Gen, ap.Fence)
		}
		if seen[ap.Epoch] == 2 {
			s.violate("epoch %d applied twice: Commit is not idempotent", ap.Epoch)
		}
	}
}

// checkAcks checks that no acknowledged position is past the final HEAD's
// (an exact source's positions only move forward).
func (s *sim) checkAcks(head *checkpoint.Record) {
	if s.w.replay != source.ReplayExact {
		return
	}
	for i, ack := range s.src.Acks() {
		for id, st := range ack {
			pos, err := sourcetest.FakePosition(st)
			if err != nil {
				s.violate("ack %d: split %s: %v", i, id, err)
				continue
			}
			hp := 0
			if head != nil {
				if hs, ok := head.Resume[string(id)]; ok {
					hp, _ = sourcetest.FakePosition(hs)
				}
			}
			if pos > hp {
				s.violate("ack %d: split %s acknowledged at position %d, past the final HEAD's %d", i, id, pos, hp)
			}
		}
	}
}

// checkAcksAt checks, after attempt a's rewind to the record to (nil:
// none), that no position acknowledged so far is past to's: the source
// may have dropped what the next attempt, resuming from to, reads.
func (s *sim) checkAcksAt(a *attempt, to *checkpoint.Ref) {
	if s.w.replay != source.ReplayExact {
		return
	}
	var resume map[string][]byte
	if to != nil {
		rec, err := s.store.inner.Get(context.Background(), pipelineName, *to)
		if err != nil {
			s.violate("attempt %d: reading the record rewound to, %s: %v", a.n, refStr(to), err)
			return
		}
		resume = rec.Resume
	}
	for i, ack := range s.src.Acks() {
		for id, st := range ack {
			pos, err := sourcetest.FakePosition(st)
			if err != nil {
				continue // checkAcks reports it
			}
			hp := 0
			if hs, ok := resume[string(id)]; ok {
				hp, _ = sourcetest.FakePosition(hs)
			}
			if pos > hp {
				s.violate("attempt %d rewinds HEAD to %s, whose split %s resumes at position %d, before position %d acknowledged (ack %d): the source may have dropped it",
					a.n, refStr(to), id, hp, pos, i)
				return
			}
		}
	}
}

// RecordID returns the _openetl_id the engine gives a record version
// (engine package documentation, "Metadata columns").
func RecordID(stream string, key, payload []byte, seq int64) string {
	return runner.RecordID(stream, key, payload, seq)
}

func (s *sim) checkStream(name string, head *checkpoint.Record) {
	var ds delivery.Stream
	for _, d := range s.w.deliveryStreams() {
		if d.Name == name {
			ds = d
		}
	}
	g, err := delivery.Decide(ds, s.w.required)
	if err != nil {
		s.violate("stream %s: delivery.Decide: %v", name, err)
		return
	}
	recs := s.src.Records(name)
	bad := 0
	for _, r := range recs {
		if r.Bad {
			bad++
		}
	}
	e := s.expect(name, recs)
	want := e.want
	s.logf("stream %s: %v (%s); %d records, %d quarantined", name, g.Level, g.Reason, len(recs), bad)
	if k := s.w.transforms[name]; k != tfNone {
		s.logf("stream %s: transform %v: %d rejected, %d dropped, %d added", name, k, e.rejected, e.dropped, e.added)
	}

	// Totals: an exact source's records are each read once, a superset
	// source's at least once.
	var tot checkpoint.Counts
	if head != nil {
		tot = head.Totals[name]
	}
	quar := int64(bad + e.rejected)
	switch {
	case tot.Read+tot.Added != tot.Written+tot.Filtered+tot.Quarantined:
		s.violate("stream %s: final totals read %d + added %d != written %d + filtered %d + quarantined %d",
			name, tot.Read, tot.Added, tot.Written, tot.Filtered, tot.Quarantined)
	case s.w.replay == source.ReplayExact && (tot.Read != int64(len(recs)) || tot.Quarantined != quar ||
		tot.Filtered != int64(e.dropped) || tot.Added != int64(e.added)):
		s.violate("stream %s: exact source holds %d records (%d bad, %d rejected, %d dropped, %d added by the transform), final totals %+v",
			name, len(recs), bad, e.rejected, e.dropped, e.added, tot)
	case tot.Read < int64(len(recs)) || tot.Quarantined < quar || tot.Filtered < int64(e.dropped) || tot.Added < int64(e.added):
		s.violate("stream %s: source holds %d records (%d bad, %d rejected, %d dropped, %d added by the transform), final totals only %+v",
			name, len(recs), bad, e.rejected, e.dropped, e.added, tot)
	}

	merged := ds.Mode == delivery.Merge
	vis, live, err := s.contents(name, merged)
	if err != nil {
		s.violate("stream %s: %v", name, err)
		return
	}
	// A destination that only shows its rows as they are now has kept,
	// of a merged stream, the latest version of each key: the versions
	// before are checked by checkMerged, not one by one.
	onlyLatest := merged && !s.dst.history()
	var phantom, lost, dup []string
	for id, n := range vis {
		if _, ok := want[id]; !ok {
			phantom = append(phantom, fmt.Sprintf("%s x%d", id, n))
		}
	}
	for id, r := range want {
		n := vis[id]
		desc := fmt.Sprintf("%s (split %s #%d %v key %s seq %d) visible %d times", id, r.Split, r.Index, r.Op, r.Key, r.Seq, n)
		switch {
		case n == 0 && !onlyLatest:
			lost = append(lost, desc)
		case n > 1 && g.Level == delivery.ExactlyOnce:
			dup = append(dup, desc)
		}
	}
	report := func(what string, l []string) {
		if len(l) == 0 {
			return
		}
		sort.Strings(l)
		more := ""
		if len(l) > maxReported {
			more = fmt.Sprintf(" and %d more", len(l)-maxReported)
			l = l[:maxReported]
		}
		s.violate("stream %s (%v): %d %s: %v%s", name, g.Level, len(l), what, l, more)
	}
	report("rows the source never had", phantom)
	if g.Level >= delivery.AtLeastOnce {
		report("records lost", lost)
	}
	report("records duplicated", dup)

	if merged && g.Level >= delivery.EffectivelyOnce {
		s.checkMerged(name, g.Level, live, e.gone)
	} else if onlyLatest {
		s.logf("stream %s: not checked: lost versions (merged at %v: %s shows only each key's latest row)", name, g.Level, s.dst.name())
	}
}

// checkProgress reads every merged stream promised effectively once or
// better, as a reader between attempts would, and checks that no key's
// row went back to an older version than one visible before: the seq
// guard of a merge ("a repeat lands on the same key, guarded by
// _openetl_seq") means a replayed older version never replaces a newer
// one, not even until the newer one is replayed too.
func (s *sim) checkProgress(when string) {
	for _, st := range s.w.streams {
		ds := s.deliveryStream(st.Name)
		if ds.Mode != delivery.Merge {
			continue
		}
		g, err := delivery.Decide(ds, s.w.required)
		if err != nil || g.Level < delivery.EffectivelyOnce {
			continue
		}
		rows, err := s.keyed(st.Name)
		if err != nil {
			s.violate("stream %s: %s: %v", st.Name, when, err)
			continue
		}
		if s.seen == nil {
			s.seen = map[string]map[string]int64{}
		}
		seen := s.seen[st.Name]
		if seen == nil {
			seen = map[string]int64{}
			s.seen[st.Name] = seen
		}
		var back []string
		for _, r := range rows {
			if r.Key == "" {
				continue
			}
			if max, ok := seen[r.Key]; ok && r.Seq < max {
				back = append(back, fmt.Sprintf("key %s at seq %d (%s), seq %d was visible before", r.Key, r.Seq, r.Op, max))
			}
		}
		for _, r := range rows {
			if r.Key != "" && r.Seq > seen[r.Key] {
				seen[r.Key] = r.Seq
			}
		}
		if len(back) > 0 {
			slices.Sort(back)
			n := len(back)
			if n > maxReported {
				back = back[:maxReported]
			}
			s.violate("stream %s (%v): %s, %d keys went back to an older version (a replayed version replaced a newer one): %v",
				st.Name, g.Level, when, n, back)
		}
	}
}

func (s *sim) deliveryStream(name string) delivery.Stream {
	for _, d := range s.w.deliveryStreams() {
		if d.Name == name {
			return d
		}
	}
	return delivery.Stream{}
}

// checkMerged compares a merged stream's live rows with the source's
// latest version of each key, but for the keys its transform never lets
// through (gone).
func (s *sim) checkMerged(name string, level delivery.Level, rows []sinktest.FakeRow, gone map[string]bool) {
	latest := s.src.Latest(name)
	for k := range gone {
		delete(latest, k)
	}
	tagged := s.w.transforms[name] == tfFilter
	var diffs []string
	got := map[string]bool{}
	for _, r := range rows {
		if got[r.Key] {
			diffs = append(diffs, fmt.Sprintf("key %s has more than one live row (one seq %d, %s)", r.Key, r.Seq, r.Op))
			continue
		}
		got[r.Key] = true
		w, ok := latest[r.Key]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("key %s (seq %d, %s) is visible but deleted or absent at the source", r.Key, r.Seq, r.Op))
			continue
		}
		if r.Seq != w.Seq || r.Op != w.Op.String() {
			diffs = append(diffs, fmt.Sprintf("key %s: visible seq %d %s, source seq %d %v", r.Key, r.Seq, r.Op, w.Seq, w.Op))
			continue
		}
		var doc map[string]any
		dec := json.NewDecoder(bytes.NewReader(w.Payload))
		dec.UseNumber()
		if err := dec.Decode(&doc); err == nil {
			if tagged {
				doc["tag"] = "t" + valueStr(doc["id"])
			}
			for col, v := range r.Values {
				want := valueStr(doc[col])
				if gotv := valueStr(v); gotv != want {
					diffs = append(diffs, fmt.Sprintf("key %s column %s: visible %q, source %q", r.Key, col, gotv, want))
				}
			}
		}
	}
	for k := range latest {
		if !got[k] {
			diffs = append(diffs, fmt.Sprintf("key %s (seq %d) missing", k, latest[k].Seq))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		n := len(diffs)
		if n > maxReported {
			diffs = diffs[:maxReported]
		}
		s.violate("stream %s (%v): final rows differ from the source's latest in %d places: %v", name, level, n, diffs)
	}
}

func valueStr(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return fmt.Sprint(v)
}

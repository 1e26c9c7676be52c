package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/openetl/etl/internal/runner"
	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/sink/sinktest"
)

// drawRoutes routes some of the workload's streams (Options.Routes), from
// a random stream of its own so that the rest of the draw stays: streams
// alike in keyedness and mode (and without a transform) share a table
// "routed_<n>" half the time, by patterns naming each stream or, for a
// lone one, by a wildcard.
func (w *workload) drawRoutes(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x20a7e5))
	w.routed = map[string]string{}
	groups := map[string][]string{}
	var order []string
	for _, s := range w.streams {
		if w.transforms[s.Name] != tfNone {
			continue
		}
		k := fmt.Sprintf("keyed=%v mode=%v", !s.Unkeyed, w.modes[s.Name])
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s.Name)
	}
	for i, k := range order {
		if rng.IntN(4) == 0 {
			continue
		}
		table := fmt.Sprintf("routed_%d", i)
		names := groups[k]
		if len(names) == 1 {
			w.routes = append(w.routes, runner.Route{Pattern: names[0][:2] + "*", Table: table})
		} else {
			for _, n := range names {
				w.routes = append(w.routes, runner.Route{Pattern: n, Table: table})
			}
		}
		for _, n := range names {
			w.routed[n] = table
		}
	}
}

// owners returns which stream each _openetl_id of the streams routed to
// table belongs to, from the source's records.
func (s *sim) owners(table string) map[string]string {
	out := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(s.w.routed)) {
		if s.w.routed[name] != table {
			continue
		}
		for _, r := range s.src.Records(name) {
			out[RecordID(name, r.Key, r.Payload, r.Seq)] = name
		}
	}
	return out
}

// contents is dst.contents for a stream, routed or not: a routed
// stream's are its table's rows of its own IDs (the other shards' left
// out, so that a row no shard had stays a phantom), live rows with its
// _openetl_stream, that column dropped and the key without it.
func (s *sim) contents(stream string, merged bool) (map[string]int, []sinktest.FakeRow, error) {
	table, ok := s.w.routed[stream]
	if !ok {
		return s.dst.contents(stream, merged)
	}
	vis, live, err := s.dst.contents(table, merged)
	if err != nil {
		return nil, nil, err
	}
	own := s.owners(table)
	mine := map[string]int{}
	for id, n := range vis {
		if o, ok := own[id]; !ok || o == stream {
			mine[id] = n
		}
	}
	return mine, s.ownRows(stream, live), nil
}

// keyed is dst.keyed for a stream, routed or not (see contents).
func (s *sim) keyed(stream string) ([]sinktest.FakeRow, error) {
	table, ok := s.w.routed[stream]
	if !ok {
		return s.dst.keyed(stream)
	}
	rows, err := s.dst.keyed(table)
	if err != nil {
		return nil, err
	}
	return s.ownRows(stream, rows), nil
}

// ownRows returns rows of a routed table whose _openetl_stream is stream,
// as the stream's own rows would be.
func (s *sim) ownRows(stream string, rows []sinktest.FakeRow) []sinktest.FakeRow {
	var out []sinktest.FakeRow
	for _, r := range rows {
		if r.Values[sink.ColumnStream] != stream {
			continue
		}
		r.Values = maps.Clone(r.Values)
		delete(r.Values, sink.ColumnStream)
		r.Key = strings.TrimPrefix(r.Key, stream+"\x1f")
		r.Stream = stream
		out = append(out, r)
	}
	return out
}

// checkRoutes checks every row of each routed table: it carries
// _openetl_stream, naming the stream whose record it is.
func (s *sim) checkRoutes() {
	tables := map[string]bool{}
	for _, t := range s.w.routed {
		tables[t] = true
	}
	for _, table := range slices.Sorted(maps.Keys(tables)) {
		rows, err := s.dst.keyed(table)
		if err != nil {
			s.violate("routed table %s: %v", table, err)
			continue
		}
		own := s.owners(table)
		bad := 0
		for _, r := range rows {
			got, _ := r.Values[sink.ColumnStream].(string)
			if o, ok := own[r.ID]; got == "" || ok && got != o {
				if bad++; bad <= maxReported {
					s.violate("routed table %s: row %s (key %q) has %s %q, but is a record of %q", table, r.ID, r.Key, sink.ColumnStream, got, own[r.ID])
				}
			}
		}
		s.logf("routed table %s: %d rows, each with its origin", table, len(rows))
	}
}

// routeNote says in the workload line of a stream where it is routed.
func (w *workload) routeNote(stream string) string {
	if t, ok := w.routed[stream]; ok {
		return " routed=" + t
	}
	return ""
}

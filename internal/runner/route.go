package runner

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/openetl/etl/sink"
	"github.com/openetl/etl/source"
)

// Route sends every selected stream whose name matches Pattern (path.Match
// syntax) into the destination table Table; see etl.Builder.Route.
type Route struct {
	Pattern string
	Table   string
}

// routeOf returns the route stream matches, if any (Build refuses a
// stream that matches two).
func (c Config) routeOf(stream string) (Route, bool) {
	for _, rt := range c.Routes {
		if ok, _ := path.Match(rt.Pattern, stream); ok {
			return rt, true
		}
	}
	return Route{}, false
}

// validateRoutes checks the routes on their own: patterns, tables,
// repeats.
func validateRoutes(routes []Route) []error {
	var errs []error
	seen := map[string]bool{}
	for _, rt := range routes {
		if _, err := path.Match(rt.Pattern, ""); rt.Pattern == "" || err != nil {
			errs = append(errs, fmt.Errorf("route %q: the pattern is empty or malformed (path.Match syntax: *, ?, [a-z], \\)", rt.Pattern))
		}
		if seen[rt.Pattern] {
			errs = append(errs, fmt.Errorf("route %q: the pattern is given twice", rt.Pattern))
		}
		seen[rt.Pattern] = true
		if rt.Table == "" {
			errs = append(errs, fmt.Errorf("route %q: empty table name", rt.Pattern))
		} else if strings.HasPrefix(strings.ToLower(rt.Table), sink.ReservedPrefix) {
			errs = append(errs, fmt.Errorf("route %q: table %q uses the prefix %q, reserved for the pipeline's own names", rt.Pattern, rt.Table, sink.ReservedPrefix))
		}
	}
	return errs
}

// routeGroup is one routed table: the streams (shards) routed there, in
// selection order.
type routeGroup struct {
	table  string // as Route.Table spells it
	shards []string
}

// routeGroups returns the routed tables, in the order of their first
// shard in streams, and the errors of streams matching several routes
// and routes matching none.
func routeGroups(cfg Config, streams []string) ([]*routeGroup, []error) {
	var errs []error
	var groups []*routeGroup
	byTable := map[string]*routeGroup{}
	hits := map[string]int{}
	for _, s := range streams {
		var got []Route
		for _, rt := range cfg.Routes {
			if ok, _ := path.Match(rt.Pattern, s); ok {
				got = append(got, rt)
				hits[rt.Pattern]++
			}
		}
		if len(got) == 0 {
			continue
		}
		if len(got) > 1 {
			errs = append(errs, fmt.Errorf("route: stream %q matches %q and %q: a stream goes to one table (make the patterns disjoint)", s, got[0].Pattern, got[1].Pattern))
			continue
		}
		g := byTable[got[0].Table]
		if g == nil {
			g = &routeGroup{table: got[0].Table}
			byTable[got[0].Table] = g
			groups = append(groups, g)
		}
		g.shards = append(g.shards, s)
	}
	for _, rt := range cfg.Routes {
		if hits[rt.Pattern] == 0 {
			errs = append(errs, fmt.Errorf("route %q → %q: the pattern matches none of the streams read (streams are matched by their full name, as the source's catalog has it, with path.Match)", rt.Pattern, rt.Table))
		}
	}
	return groups, errs
}

// checkRoutes checks the routes against the catalog and the streams read:
// each stream matches at most one route, each route at least one stream;
// the shards of a table agree on format, type system, mode, deletes and
// key, their declared columns' types join, none has a Go transform, and
// no routed table takes the name of another table of the pipeline.
func checkRoutes(cfg Config, catalog source.Catalog, streams []string) error {
	if len(cfg.Routes) == 0 {
		return nil
	}
	caps := cfg.Destination.Capabilities()
	groups, errs := routeGroups(cfg, streams)
	specs := make([]sink.StreamSpec, 0, len(streams))
	for _, s := range streams {
		specs = append(specs, specOf(catalog, s, cfg, caps, nil))
	}
	if _, err := routeSpecs(cfg, catalog, caps, specs); err != nil {
		errs = append(errs, err)
	}
	for _, g := range groups {
		for _, s := range g.shards {
			if cfg.Transforms[s] != nil {
				errs = append(errs, fmt.Errorf("route %q: stream %q has a Go transform: routed streams can't have one yet (a transform's output is checked per stream, while a routed table's schema is the join of its shards' schemas, made before the lanes; transform the stream unrouted, or route without the transform)", g.table, s))
			}
		}
	}
	return errors.Join(errs...)
}

// routeSpecs returns specs with each routed table's shards' specs
// replaced by the table's one spec, where its first shard's was: Stream
// the route's table as given, Table that under the destination's naming
// rules, the shards' mode, deletes and type system, Key ColumnStream and
// then the shards' key, and Columns the union of the shards' declared
// columns, in order of first appearance, each of the joined type. It
// fails when shards disagree or a routed table's name is another table's.
func routeSpecs(cfg Config, catalog source.Catalog, caps sink.Capabilities, specs []sink.StreamSpec) ([]sink.StreamSpec, error) {
	if len(cfg.Routes) == 0 {
		return specs, nil
	}
	var errs []error
	out := make([]sink.StreamSpec, 0, len(specs))
	at := map[string]int{}       // route table → index in out
	first := map[string]string{} // route table → its first shard
	for _, spec := range specs {
		rt, ok := cfg.routeOf(spec.Stream)
		if !ok {
			out = append(out, spec)
			continue
		}
		st, _ := catalog.Stream(spec.Stream)
		i, seen := at[rt.Table]
		if !seen {
			rs := sink.StreamSpec{Stream: rt.Table, Table: baseName(caps, rt.Table), Mode: spec.Mode, Deletes: spec.Deletes,
				Types: spec.Types, Columns: slices.Clone(spec.Columns)}
			if len(spec.Key) > 0 {
				rs.Key = append([]string{sink.ColumnStream}, spec.Key...)
			}
			at[rt.Table], first[rt.Table] = len(out), spec.Stream
			out = append(out, rs)
			continue
		}
		rs, f := &out[i], first[rt.Table]
		fst, _ := catalog.Stream(f)
		why := func(what string, a, b any) {
			errs = append(errs, fmt.Errorf("route %q: stream %q has %s %v and stream %q %v: the streams of one table must agree", rt.Table, f, what, a, spec.Stream, b))
		}
		switch {
		case (fst.Format == source.FormatRow) != (st.Format == source.FormatRow):
			why("declared columns", fst.Format == source.FormatRow, st.Format == source.FormatRow)
		case rs.Types != spec.Types:
			why("type system", rs.Types, spec.Types)
		case rs.Mode != spec.Mode:
			why("mode", rs.Mode, spec.Mode)
		case rs.Deletes != spec.Deletes:
			why("deletes", rs.Deletes, spec.Deletes)
		case !slices.Equal(rs.Key[min(1, len(rs.Key)):], spec.Key):
			why("key", rs.Key[min(1, len(rs.Key)):], spec.Key)
		}
		for _, c := range spec.Columns {
			j := slices.IndexFunc(rs.Columns, func(d sink.Column) bool { return d.Name == c.Name })
			if j < 0 {
				c.Nullable = true // the other shards have none
				rs.Columns = append(rs.Columns, c)
				continue
			}
			typ, ok := joinDeclared(spec.Types, rs.Columns[j].Type, c.Type)
			if !ok {
				errs = append(errs, fmt.Errorf("route %q: column %q is %s in stream %q and %s in stream %q: the types don't join (only integers, floats, numerics and text widen into one another across routed streams)", rt.Table, c.Name, rs.Columns[j].Type, f, c.Type, spec.Stream))
				continue
			}
			rs.Columns[j].Type, rs.Columns[j].Nullable = typ, rs.Columns[j].Nullable || c.Nullable
		}
		for j := range rs.Columns {
			if !slices.ContainsFunc(spec.Columns, func(d sink.Column) bool { return d.Name == rs.Columns[j].Name }) {
				rs.Columns[j].Nullable = true
			}
		}
	}
	// A routed table must not be another table of the pipeline: readers
	// of most destinations fold case, so neither may differ by case only.
	tables := map[string]string{}
	for _, s := range out {
		k := strings.ToLower(s.Table)
		if other, ok := tables[k]; ok {
			errs = append(errs, fmt.Errorf("route: table %q of %q is also the table of %q: give the route another table, or route both", s.Table, s.Stream, other))
			continue
		}
		tables[k] = s.Stream
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// routeNote is what Guarantees adds to a routed stream's reason.
func routeNote(cfg Config, stream string) string {
	rt, ok := cfg.routeOf(stream)
	if !ok {
		return ""
	}
	return fmt.Sprintf("; routed by %q into table %q with the streams it matches: its rows carry %s = %q and, keyed, are merged by (%s, key)",
		rt.Pattern, rt.Table, sink.ColumnStream, stream, sink.ColumnStream)
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// A partitioned table is one stream under its root's name. With a
// publication that publishes via the partition root
// (publish_via_partition_root, Postgres 13+), pg_publication_tables
// lists the root, and pgoutput sends the changes of every partition as
// changes of the root (its relation, its columns). The rows live in the
// leaf partitions: each has a snapshot split of its own. Without
// publish_via_partition_root, the server lists and streams the
// partitions in the root's place, as separate tables: that is refused
// (*PartitionRootError), since it would make each partition a stream.

// part is a leaf partition of a partitioned table: where some of its
// rows live.
type part struct {
	schema, name string
	// gen names the partition's attachment: the pg_inherits rows (oid and
	// xmin) linking it to the root. A partition detached and attached
	// again, or another table attached under its name, has another.
	gen string
}

func (p part) ident() string { return quoteIdent(p.schema) + "." + quoteIdent(p.name) }

// PartitionRootError is returned by Discover and Open when the
// publication covers a partitioned table (FOR TABLE, FOR TABLES IN
// SCHEMA or FOR ALL TABLES) but publishes its changes as those of its
// partitions: publish_via_partition_root is off, Postgres's default.
// The source reads a partitioned table as one stream under its root's
// name, which needs the changes sent as the root's:
//
//	ALTER PUBLICATION name SET (publish_via_partition_root = true);
//
// (Postgres 13+). A publication the source creates
// (Config.CreatePublication) has it set. Partitions listed in a
// publication that does not cover their partitioned table are plain
// streams of their own, as any table. It wraps ErrNotViaRoot.
type PartitionRootError struct {
	Publication string
	Table       string   // the partitioned table, as a stream name
	Partitions  []string // its partitions the publication lists instead
}

func (e *PartitionRootError) Error() string {
	return fmt.Sprintf("postgres: publication %q sends the changes of partitioned table %s as those of its partitions (%s): "+
		"run ALTER PUBLICATION %s SET (publish_via_partition_root = true) so that the table is read as one stream",
		e.Publication, e.Table, strings.Join(e.Partitions, ", "), quoteIdent(e.Publication))
}

func (e *PartitionRootError) Unwrap() error { return ErrNotViaRoot }

// checkViaRoot returns a *PartitionRootError when the publication lists
// partitions of a partitioned table it covers, in the table's place
// (publish_via_partition_root off). Before Postgres 13 a publication
// can't hold a partitioned table: nothing to check.
func (s *Source) checkViaRoot(ctx context.Context, c *pgconn.PgConn) error {
	major := serverMajor(c)
	if major < 13 {
		return nil
	}
	// The topmost ancestor of each listed partition that the publication
	// covers: by name, by schema (15+), or as one of all tables.
	bySchema := ""
	if major >= 15 {
		bySchema = ` OR EXISTS (SELECT 1 FROM pg_publication_namespace pn JOIN pg_class x ON x.oid = a.relid
                          WHERE pn.pnpubid = p.oid AND pn.pnnspid = x.relnamespace)`
	}
	rows, err := queryText(ctx, c, `
SELECT rn.nspname, r.relname, n.nspname, c.relname
FROM pg_publication p
JOIN pg_publication_tables pt ON pt.pubname = p.pubname
JOIN pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
JOIN LATERAL (SELECT a.relid FROM pg_partition_ancestors(c.oid) WITH ORDINALITY a(relid, o)
              WHERE a.relid <> c.oid AND (p.puballtables
                 OR EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = a.relid)`+bySchema+`)
              ORDER BY a.o DESC LIMIT 1) top ON true
JOIN pg_class r ON r.oid = top.relid
JOIN pg_namespace rn ON rn.oid = r.relnamespace
WHERE p.pubname = `+quoteLiteral(s.cfg.Publication)+` AND NOT p.pubviaroot AND c.relispartition
ORDER BY 1, 2, 3, 4`)
	if err != nil {
		return fmt.Errorf("postgres: partitions of publication %q: %w", s.cfg.Publication, err)
	}
	if len(rows) == 0 {
		return nil
	}
	e := &PartitionRootError{Publication: s.cfg.Publication, Table: streamName(string(rows[0][0]), string(rows[0][1]))}
	for _, r := range rows {
		if streamName(string(r[0]), string(r[1])) == e.Table {
			e.Partitions = append(e.Partitions, streamName(string(r[2]), string(r[3])))
		}
	}
	return e
}

// tree is what the catalog says of one partitioned table's partitions.
type tree struct {
	leaves  []part
	members map[[2]string]bool // every partition under it, leaf or not
	foreign []string           // leaf partitions that are foreign tables
}

// partitions returns the partition trees of the partitioned tables that
// cond (a condition on pg_class c and pg_namespace n) selects, by
// schema and name. Leaves are in name order.
func partitions(ctx context.Context, c *pgconn.PgConn, cond string) (map[[2]string]*tree, error) {
	major := serverMajor(c)
	if major < 12 {
		return nil, nil
	}
	if major >= 14 {
		// A partition being detached concurrently (DETACH PARTITION ...
		// CONCURRENTLY, whose first transaction marks it) counts as
		// detached.
		cond = "(" + cond + ") AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = t.relid AND i.inhdetachpending)"
	}
	// One row per partition under each table: its link to its parent
	// (the pg_inherits row's xmin tells one attachment from another).
	rows, err := queryText(ctx, c, `
SELECT n.nspname, c.relname, c.oid, t.relid::oid, t.parentrelid::oid, ln.nspname, l.relname, l.relkind, t.isleaf,
       COALESCE((SELECT i.xmin::text FROM pg_inherits i WHERE i.inhrelid = t.relid AND i.inhparent = t.parentrelid), '')
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL pg_partition_tree(c.oid) t
JOIN pg_class l ON l.oid = t.relid
JOIN pg_namespace ln ON ln.oid = l.relnamespace
WHERE c.relkind = 'p' AND t.relid <> c.oid AND (`+cond+`)
ORDER BY 1, 2, 6, 7`)
	if err != nil {
		return nil, fmt.Errorf("postgres: partitions: %w", err)
	}
	type link struct{ parent, xmin string }
	out := map[[2]string]*tree{}
	links := map[[2]string]map[string]link{}
	roots := map[[2]string]string{}
	type leafRow struct {
		root [2]string
		oid  string
		p    part
	}
	var leaves []leafRow
	for _, r := range rows {
		root := [2]string{string(r[0]), string(r[1])}
		tr := out[root]
		if tr == nil {
			tr = &tree{members: map[[2]string]bool{}}
			out[root], links[root], roots[root] = tr, map[string]link{}, string(r[2])
		}
		links[root][string(r[3])] = link{string(r[4]), string(r[9])}
		p := part{schema: string(r[5]), name: string(r[6])}
		tr.members[[2]string{p.schema, p.name}] = true
		if string(r[8]) != "t" {
			continue
		}
		if string(r[7]) != "r" {
			tr.foreign = append(tr.foreign, streamName(p.schema, p.name))
			continue
		}
		leaves = append(leaves, leafRow{root, string(r[3]), p})
	}
	for _, l := range leaves {
		var gen []string
		detached := false
		for oid, n := l.oid, 0; oid != roots[l.root] && n < 100; n++ {
			k, ok := links[l.root][oid]
			if !ok {
				break
			}
			// pg_partition_tree reads the catalog under a snapshot of its
			// own, taken apart from the query's: a partition whose link
			// the query no longer sees was detached meanwhile (seen as
			// "attached again" with an empty xmin before). The next look
			// finds it gone.
			if k.xmin == "" {
				detached = true
				break
			}
			gen = append(gen, oid+"@"+k.xmin)
			oid = k.parent
		}
		if detached {
			continue
		}
		l.p.gen = strings.Join(gen, ",")
		out[l.root].leaves = append(out[l.root].leaves, l.p)
	}
	return out, nil
}

// addPartitions fills in the leaf partitions of the partitioned tables
// among ts (the publication's, published via their root), and drops
// from ts the partitions of those tables the publication also lists
// (their changes come as the root's).
func (s *Source) addPartitions(ctx context.Context, c *pgconn.PgConn, ts []*table) ([]*table, error) {
	var names []string
	for _, t := range ts {
		if t.partitioned {
			names = append(names, "("+quoteLiteral(t.schema)+", "+quoteLiteral(t.name)+")")
		}
	}
	if len(names) == 0 {
		return ts, nil
	}
	trees, err := partitions(ctx, c, "(n.nspname, c.relname) IN (VALUES "+strings.Join(names, ", ")+")")
	if err != nil {
		return nil, err
	}
	covered := map[[2]string]bool{}
	for _, t := range ts {
		tr := trees[[2]string{t.schema, t.name}]
		if tr == nil {
			continue
		}
		t.parts = tr.leaves
		for m := range tr.members {
			covered[m] = true
		}
		if len(tr.foreign) > 0 {
			s.log.WarnContext(ctx, "foreign-table partitions are not read: Postgres does not publish their changes",
				"stream", t.stream.Name, "partitions", tr.foreign)
		}
	}
	return slices.DeleteFunc(ts, func(t *table) bool { return covered[[2]string{t.schema, t.name}] }), nil
}

// partitionsChanged returns a *SchemaChangeError (source.ErrReopen)
// when a partition was attached to an opened partitioned table since
// Open read the catalog, or attached again (at is the stream's
// position, for the error): a new attempt snapshots it. Its rows from
// before the attach never pass through the change stream. A partition
// detached since is no change here: its rows stay at the destination,
// and its changes after the detach are not published.
func (sp *split) partitionsChanged(ctx context.Context, at pglogrepl.LSN) error {
	if len(sp.parts) == 0 {
		return nil
	}
	var names []string
	for _, t := range sp.tables {
		if t.partitioned {
			names = append(names, "("+quoteLiteral(t.schema)+", "+quoteLiteral(t.name)+")")
		}
	}
	s := sp.src
	s.mu.Lock()
	var trees map[[2]string]*tree
	err := s.withQuery(ctx, func(c *pgconn.PgConn) (err error) {
		trees, err = partitions(ctx, c, "(n.nspname, c.relname) IN (VALUES "+strings.Join(names, ", ")+")")
		return err
	})
	s.mu.Unlock()
	if err != nil {
		return err
	}
	for _, t := range sp.tables {
		tr := trees[[2]string{t.schema, t.name}]
		if tr == nil {
			continue
		}
		known := sp.parts[t]
		for _, p := range tr.leaves {
			switch gen, ok := known[[2]string{p.schema, p.name}]; {
			case !ok:
				return &SchemaChangeError{Stream: t.stream.Name, LSN: at,
					Detail: fmt.Sprintf("partition %s was attached: its rows are read by a new snapshot", streamName(p.schema, p.name))}
			case gen != p.gen:
				return &SchemaChangeError{Stream: t.stream.Name, LSN: at,
					Detail: fmt.Sprintf("partition %s was attached again (attachment %s, read under %s): its rows are read by a new snapshot",
						streamName(p.schema, p.name), p.gen, gen)}
			}
		}
	}
	return nil
}

// partitionCheck says when the change stream next looks for attached
// partitions between transactions: at most every interval.
type partitionCheck struct {
	next     time.Time
	interval time.Duration
}

// due reports whether a check is due at now, and if so schedules the
// next one.
func (pc *partitionCheck) due(now time.Time) bool {
	if now.Before(pc.next) {
		return false
	}
	pc.next = now.Add(pc.interval)
	return true
}

// partSplitID is the ID of the snapshot split of a partitioned table's
// leaf partition: "snapshot:" + the stream + "/" + the partition.
func partSplitID(t *table, p part) string {
	return snapshotIDPrefix + t.stream.Name + "/" + streamName(p.schema, p.name)
}

// isUndefinedTable reports a Postgres "undefined_table" error (a
// relation dropped, say).
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

package iceberg

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/openetl/etl/sink"
)

// Data files are named by iceberg-go, "{partition}-{task}-{uuid}-{n}.parquet",
// with the UUID the writer passes (table.WithWriteUUID). The writer's
// UUIDs are version 8 (RFC 9562: custom) and carry the pipeline in
// their first 8 bytes (a hash of its name, with the version nibble),
// so Collect can tell its files from the random version 4 ones of
// every other writer (compaction, another engine) and of another
// pipeline sharing the tables.

// pipelineMark is the first 8 bytes of the write UUIDs of pipeline's
// data files, version nibble included.
func pipelineMark(pipeline string) [8]byte {
	h := sha256.Sum256([]byte("openetl/" + pipeline))
	var m [8]byte
	copy(m[:], h[:8])
	m[6] = m[6]&0x0f | 0x80 // version 8
	return m
}

// writeUUID returns a fresh write UUID of pipeline's data files.
func writeUUID(pipeline string) uuid.UUID {
	var u uuid.UUID
	m := pipelineMark(pipeline)
	copy(u[:8], m[:])
	_, _ = rand.Read(u[8:])
	u[8] = u[8]&0x3f | 0x80 // the RFC variant
	return u
}

// ownFile reports whether the data file at p was written by pipeline's
// writer (its name carries a write UUID of pipeline's).
func ownFile(p, pipeline string) bool {
	base := path.Base(p)
	parts := strings.Split(strings.TrimSuffix(base, path.Ext(base)), "-")
	if len(parts) != 8 {
		return false
	}
	u, err := uuid.Parse(strings.Join(parts[2:7], "-"))
	if err != nil {
		return false
	}
	m := pipelineMark(pipeline)
	return [8]byte(u[:8]) == m
}

var _ sink.Collector = (*Destination)(nil)

// Collect implements sink.Collector: in each table of the namespace
// that carries req.Pipeline's markers, it removes the data files the
// pipeline's writers wrote that no snapshot of the table refers to and
// that req.Head's committables don't name: files of epochs whose
// checkpoint record was never written (an attempt crashed, failed or
// was fenced between PreCommit and its record). It lists first (an
// orphan scan of the table's location against every snapshot's
// manifests), then asks req.Held, and removes only what the listing
// found, so a newer attempt's files are never touched. Files it did not
// write — compaction's output, another writer's, metadata of failed
// commits, and a Merge table's equality-delete files, whose names
// iceberg-go picks at random — are left to Maintain (OrphansOlderThan).
// Removed and Bytes count the files removed; Kept counts those Head
// names.
func (d *Destination) Collect(ctx context.Context, req sink.CollectRequest) (sink.Collected, error) {
	keep := make(map[string]bool) // base names: scans and committables may spell the scheme differently
	if req.Head != nil {
		for lane, raw := range req.Head.Committables {
			c, err := decodeCommittable(raw)
			if err != nil {
				return sink.Collected{}, fmt.Errorf("iceberg: collect: lane %d of epoch %d: %w", lane, req.Head.Epoch, err)
			}
			for _, tf := range c.Tables {
				for _, f := range append(tf.Data, tf.Deletes...) {
					keep[path.Base(f.Path)] = true
				}
			}
		}
	}
	tables, err := d.pipelineTables(ctx, req.Pipeline)
	if err != nil {
		return sink.Collected{}, err
	}
	where := make(map[string]*table.Table)
	out, err := sink.CollectStaged(ctx, req,
		func(ctx context.Context) ([]sink.Staged, error) {
			var found []sink.Staged
			for _, tbl := range tables {
				plan, err := tbl.PlanOrphanFiles(ctx, table.WithFilesOlderThan(0), table.WithPrefixMismatchMode(table.PrefixMismatchIgnore))
				if err != nil {
					return nil, fmt.Errorf("iceberg: table %v: scan for unreferenced files: %w", tbl.Identifier(), err)
				}
				for _, f := range plan.OrphanFiles() {
					if ownFile(f.Path, req.Pipeline) {
						found = append(found, sink.Staged{Name: f.Path, Bytes: f.SizeBytes})
						where[f.Path] = tbl
					}
				}
			}
			return found, nil
		},
		func(s sink.Staged) bool { return keep[path.Base(s.Name)] },
		func(ctx context.Context, s sink.Staged) error {
			fsys, err := where[s.Name].FS(ctx)
			if err != nil {
				return err
			}
			if err := fsys.Remove(s.Name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		})
	if out.Removed > 0 {
		d.log.Info("iceberg: removed data files no checkpoint names", "pipeline", req.Pipeline,
			"files", out.Removed, "bytes", out.Bytes, "kept", out.Kept)
	}
	return out, err
}

// pipelineTables loads the tables of the namespace that carry
// pipeline's markers.
func (d *Destination) pipelineTables(ctx context.Context, pipeline string) ([]*table.Table, error) {
	ok, err := d.cat.CheckNamespaceExists(ctx, d.ns)
	if err != nil || !ok {
		return nil, err
	}
	var idents []table.Identifier
	for ident, err := range d.cat.ListTables(ctx, d.ns) {
		if err != nil {
			return nil, fmt.Errorf("iceberg: list tables of %v: %w", d.ns, err)
		}
		idents = append(idents, ident)
	}
	var out []*table.Table
	for _, ident := range idents {
		tbl, err := d.cat.LoadTable(ctx, ident)
		if errors.Is(err, catalog.ErrNoSuchTable) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("iceberg: load table %v: %w", ident, err)
		}
		if _, found, err := d.markersOf(tbl.Metadata(), pipeline); err == nil && found {
			out = append(out, tbl)
		}
	}
	return out, nil
}

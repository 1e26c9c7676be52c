package parquet

import (
	"context"
	"fmt"
	"io"

	"gocloud.dev/blob"

	"github.com/openetl/etl/sink"
)

// DefaultManifestHistory is Config.ManifestHistory's default.
const DefaultManifestHistory = 16

var _ sink.Collector = (*Destination)(nil)

// Collect implements sink.Collector: it removes the pipeline's staged
// files under _staging/{pipeline}/ that req.Head's committables don't
// name (files of epochs whose checkpoint record was never written:
// an attempt that crashed, failed or was fenced between PreCommit and
// its record), in the order sink.CollectStaged keeps, so a newer
// attempt's files are never touched. Then it removes, for each stream
// the pipeline writes, the manifest versions older than the current
// one's Config.ManifestHistory predecessors (left by versions of this
// package that kept them all, or by a Commit that crashed before it
// pruned). Applied data files are removed only once a release of held
// values replaced them and no kept manifest version lists them
// (package doc, Held values). A removed staged file counts in Removed
// and Bytes, a manifest version in Versions.
func (d *Destination) Collect(ctx context.Context, req sink.CollectRequest) (sink.Collected, error) {
	if err := checkName("pipeline", req.Pipeline); err != nil {
		return sink.Collected{}, err
	}
	keep, err := namedStaged(req)
	if err != nil {
		return sink.Collected{}, err
	}
	dir := d.prefix + stagingDir + "/" + req.Pipeline + "/"
	out, err := sink.CollectStaged(ctx, req,
		func(ctx context.Context) ([]sink.Staged, error) { return listFiles(ctx, d.bucket, dir) },
		func(s sink.Staged) bool { return keep[s.Name] },
		func(ctx context.Context, s sink.Staged) error {
			if err := d.bucket.Delete(ctx, s.Name); err != nil && !isNotFound(err) {
				return err
			}
			return nil
		})
	if out.Removed > 0 {
		d.log.Info("parquet: removed staged files no checkpoint names", "pipeline", req.Pipeline,
			"files", out.Removed, "bytes", out.Bytes, "kept", out.Kept)
	}
	if err != nil {
		return out, err
	}
	n, err := d.pruneAll(ctx, req.Pipeline)
	out.Versions += n
	if err != nil {
		return out, err
	}
	_, _, err = d.collectReplaced(ctx, req) // patch_collect.go
	return out, err
}

// namedStaged returns the staged keys req.Head's committables name.
func namedStaged(req sink.CollectRequest) (map[string]bool, error) {
	keep := make(map[string]bool)
	if req.Head == nil {
		return keep, nil
	}
	for lane, raw := range req.Head.Committables {
		c, err := decodeCommittable(raw)
		if err != nil {
			return nil, fmt.Errorf("parquet: collect: lane %d of epoch %d: %w", lane, req.Head.Epoch, err)
		}
		for _, f := range c.Files {
			keep[f.Staged] = true
		}
	}
	return keep, nil
}

// listFiles lists every object under dir, with its size.
func listFiles(ctx context.Context, b *blob.Bucket, dir string) ([]sink.Staged, error) {
	var out []sink.Staged
	it := b.List(&blob.ListOptions{Prefix: dir})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parquet: list %q: %w", dir, err)
		}
		if !obj.IsDir {
			out = append(out, sink.Staged{Name: obj.Key, Bytes: obj.Size})
		}
	}
}

// pruneAll prunes the manifests of every stream under the prefix that
// pipeline writes, and returns how many versions it removed.
func (d *Destination) pruneAll(ctx context.Context, pipeline string) (int, error) {
	if d.history < 0 {
		return 0, nil
	}
	names, err := streamDirs(ctx, d.bucket, d.prefix)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, s := range names {
		dir := manifestDir(d.prefix, s)
		vs, err := d.versions.list(ctx, dir)
		if err != nil {
			return removed, err
		}
		if len(vs) <= d.history+1 {
			continue
		}
		m, err := readManifest(ctx, d.versions, d.prefix, s, vs[len(vs)-1])
		if err != nil {
			return removed, err
		}
		if m == nil || m.Pipeline != pipeline {
			continue
		}
		for _, v := range vs {
			if v+uint64(d.history) >= m.Version {
				break
			}
			if err := d.versions.remove(ctx, dir, v); err != nil {
				return removed, err
			}
			removed++
		}
	}
	if removed > 0 {
		d.log.Info("parquet: removed old manifest versions", "pipeline", pipeline, "versions", removed, "history", d.history)
	}
	return removed, nil
}

// pruneBehind removes the manifest version that version's creation put
// beyond the history (best effort: Collect removes what is left).
func (d *Destination) pruneBehind(ctx context.Context, stream string, version uint64) {
	if d.history < 0 || version <= uint64(d.history)+1 {
		return
	}
	v := version - uint64(d.history) - 1
	if err := d.versions.remove(ctx, manifestDir(d.prefix, stream), v); err != nil {
		d.log.Warn("parquet: could not remove an old manifest version; the next attempt will", "stream", stream,
			"version", v, "err", err)
	}
}

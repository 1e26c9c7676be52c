package parquet

import (
	"context"
	"fmt"

	"github.com/openetl/etl/sink"
)

// collectReplaced removes the data files that releases of held values
// replaced (File.Replaced of an entry of a stream's manifest) once no
// kept manifest version lists them: a reader that follows the manifest
// can't reach them any more. It reads every kept version of a stream
// whose current manifest has such an entry, and nothing when every
// version is kept (Config.ManifestHistory -1). Only req.Pipeline's
// streams, and only after req.Held says the attempt still holds the
// pipeline. It returns the files removed and their bytes.
func (d *Destination) collectReplaced(ctx context.Context, req sink.CollectRequest) (files int, size int64, err error) {
	if d.history < 0 {
		return 0, 0, nil
	}
	names, err := streamDirs(ctx, d.bucket, d.prefix)
	if err != nil {
		return 0, 0, err
	}
	var gone []string
	for _, s := range names {
		cur, err := readManifest(ctx, d.versions, d.prefix, s, 0)
		if err != nil {
			return 0, 0, err
		}
		if cur == nil || cur.Pipeline != req.Pipeline {
			continue
		}
		replaced := map[string]bool{}
		for _, f := range cur.Files {
			if f.Replaced != nil {
				replaced[f.Replaced.Key] = true
			}
		}
		if len(replaced) == 0 {
			continue
		}
		dir := manifestDir(d.prefix, s)
		vs, err := d.versions.list(ctx, dir)
		if err != nil {
			return 0, 0, err
		}
		for _, v := range vs {
			data, err := d.versions.read(ctx, dir, v)
			if isNotFound(err) {
				continue // pruned meanwhile
			}
			if err != nil {
				return 0, 0, err
			}
			m, err := decodeManifest(dir, v, data)
			if err != nil {
				return 0, 0, err
			}
			for _, f := range m.Files {
				delete(replaced, f.Key) // still listed: a reader may read it
			}
		}
		for k := range replaced {
			gone = append(gone, k)
		}
	}
	if len(gone) == 0 {
		return 0, 0, nil
	}
	if req.Held != nil {
		if err := req.Held(ctx); err != nil {
			return 0, 0, err
		}
	}
	for _, k := range gone {
		a, err := d.bucket.Attributes(ctx, k)
		if isNotFound(err) {
			continue // removed by an earlier Collect
		}
		if err != nil {
			return files, size, fmt.Errorf("parquet: stat %s: %w", k, err)
		}
		if err := d.bucket.Delete(ctx, k); err != nil && !isNotFound(err) {
			return files, size, fmt.Errorf("parquet: delete %s: %w", k, err)
		}
		files++
		size += a.Size
	}
	if files > 0 {
		d.log.Info("parquet: removed files that released held values replaced", "pipeline", req.Pipeline, "files", files, "bytes", size)
	}
	return files, size, nil
}

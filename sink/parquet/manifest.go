package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/openetl/etl/checkpoint"
)

// Manifest is one version of a stream's manifest: the complete list of the
// stream's visible files. A reader that reads the files of the current
// manifest, and nothing else, sees every record once.
type Manifest struct {
	// Format is the manifest format's version, 1.
	Format int `json:"format"`
	// Stream is the stream's name.
	Stream string `json:"stream"`
	// Version numbers the manifest; the current one is the highest.
	Version uint64 `json:"version"`
	// Epoch is the last epoch applied to the stream.
	Epoch uint64 `json:"epoch"`
	// Generation is the attempt that applied it.
	Generation checkpoint.Generation `json:"generation"`
	// Pipeline is the pipeline that writes the stream.
	Pipeline string `json:"pipeline"`
	// Files are the stream's files, oldest epoch first.
	Files []File `json:"files"`
}

// File is one Parquet file of a stream.
type File struct {
	// Key is the file's full key in the bucket (prefix included).
	Key string `json:"key"`
	// Rows is the number of rows in the file.
	Rows int64 `json:"rows"`
	// Bytes is the file's size.
	Bytes int64 `json:"bytes"`
	// Epoch is the epoch that wrote its rows.
	Epoch uint64 `json:"epoch"`
	// Patched, when not 0, is the epoch that released held values into
	// the file's rows: the file is a copy of the one in Replaced, with
	// those values set (package doc, Held values).
	Patched uint64 `json:"patched,omitempty"`
	// Replaced is the entry of the file this one replaced when Patched
	// rewrote it, kept so that the epoch can be taken back.
	Replaced *File `json:"replaced,omitempty"`
}

const manifestFormat = 1

// Errors returned by the destination and its readers.
var (
	// ErrNoManifest is returned by ReadManifest for a stream that has no
	// manifest yet (nothing of it was committed).
	ErrNoManifest = errors.New("parquet: stream has no manifest")
	// ErrOwned is matched by the *OwnerError Recover returns when the
	// prefix belongs to another pipeline.
	ErrOwned = errors.New("parquet: prefix belongs to another pipeline")
)

// ReadManifest returns the current manifest of stream under prefix (as
// given in Config.Prefix), or an error wrapping ErrNoManifest when the
// stream has none. The manifest is immutable: the files it lists stay
// readable, and a later Commit only adds a newer version.
func ReadManifest(ctx context.Context, bucket *blob.Bucket, prefix, stream string) (*Manifest, error) {
	if err := checkName("stream", stream); err != nil {
		return nil, err
	}
	m, err := readManifest(ctx, blobVersions{bucket}, normPrefix(prefix), stream, 0)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("%w: %q under %q", ErrNoManifest, stream, prefix)
	}
	return m, nil
}

// Streams lists, sorted, the streams under prefix that have a manifest.
func Streams(ctx context.Context, bucket *blob.Bucket, prefix string) ([]string, error) {
	prefix = normPrefix(prefix)
	names, err := streamDirs(ctx, bucket, prefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range names {
		v, err := blobVersions{bucket}.latest(ctx, manifestDir(prefix, name), 0)
		if err != nil {
			return nil, err
		}
		if v > 0 {
			out = append(out, name)
		}
	}
	return out, nil
}

// streamDirs lists, sorted, the directories under prefix (normalized)
// that are named like a stream, with a manifest or not.
func streamDirs(ctx context.Context, bucket *blob.Bucket, prefix string) ([]string, error) {
	var out []string
	it := bucket.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parquet: list %q: %w", prefix, err)
		}
		if !obj.IsDir {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(obj.Key, prefix), "/")
		if checkName("stream", name) == nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// readManifest returns the current manifest of stream, nil if none. hint
// is a version known to exist, or 0.
func readManifest(ctx context.Context, vs versions, prefix, stream string, hint uint64) (*Manifest, error) {
	dir := manifestDir(prefix, stream)
	var v uint64
	var data []byte
	for try := 0; ; try++ {
		var err error
		v, err = vs.latest(ctx, dir, hint)
		if err != nil || v == 0 {
			return nil, err
		}
		data, err = vs.read(ctx, dir, v)
		if err == nil {
			break
		}
		// The hint is stale (the manifests were removed by hand), or
		// the version was pruned between the listing and the read
		// (Config.ManifestHistory commits came in between): list again.
		if !isNotFound(err) || try == maxRaces {
			return nil, err
		}
		hint = 0
	}
	return decodeManifest(dir, v, data)
}

// decodeManifest decodes data, version v of the manifests in dir.
func decodeManifest(dir string, v uint64, data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("parquet: manifest %s%020d.json: %w", dir, v, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("parquet: manifest %s%020d.json has format %d, want %d", dir, v, m.Format, manifestFormat)
	}
	if m.Version != v {
		return nil, fmt.Errorf("parquet: manifest %s%020d.json says version %d", dir, v, m.Version)
	}
	return &m, nil
}

// versions is a directory of immutable objects numbered from 1, the
// current one being the highest: the stream manifests and the fence
// markers. It is the one place that relies on a create-if-absent write.
//
// blobVersions does it with gocloud's WriterOptions.IfNotExist, which is
// atomic on S3, GCS, Azure and memblob but not on fileblob: there it
// checks for the file and then renames over it, so two processes racing
// for one version can both "win". On file:// buckets the fence check in
// Commit is what keeps a zombie out. A stronger local implementation
// (temp file + fsync + os.Link, EEXIST = lost) can replace it here.
type versions interface {
	// latest returns the highest version under dir, 0 when there is none.
	// hint, when not 0, is a version known to exist in a directory whose
	// versions are contiguous (manifests): then latest probes upwards from
	// it instead of listing the whole directory.
	latest(ctx context.Context, dir string, hint uint64) (uint64, error)
	// list returns every version under dir, ascending.
	list(ctx context.Context, dir string) ([]uint64, error)
	// read returns the content of version v under dir.
	read(ctx context.Context, dir string, v uint64) ([]byte, error)
	// create writes version v under dir unless it exists; created is
	// false when it did.
	create(ctx context.Context, dir string, v uint64, data []byte) (created bool, err error)
	// remove deletes version v under dir; a missing one is no error.
	remove(ctx context.Context, dir string, v uint64) error
}

type blobVersions struct{ b *blob.Bucket }

func versionKey(dir string, v uint64) string { return fmt.Sprintf("%s%020d.json", dir, v) }

// parseVersion parses the base name "{v:020d}.json"; ok is false for
// anything else (temp files, stray objects).
func parseVersion(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, ".json")
	if !ok || len(s) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil && v > 0
}

func (bv blobVersions) latest(ctx context.Context, dir string, hint uint64) (uint64, error) {
	if hint == 0 {
		vs, err := bv.list(ctx, dir)
		if err != nil || len(vs) == 0 {
			return 0, err
		}
		return vs[len(vs)-1], nil
	}
	v := hint
	for {
		key := versionKey(dir, v+1)
		ok, err := bv.b.Exists(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("parquet: stat %s: %w", key, err)
		}
		if !ok {
			return v, nil
		}
		v++
	}
}

func (bv blobVersions) list(ctx context.Context, dir string) ([]uint64, error) {
	var out []uint64
	it := bv.b.List(&blob.ListOptions{Prefix: dir, Delimiter: "/"})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			slices.Sort(out)
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parquet: list %s: %w", dir, err)
		}
		if v, ok := parseVersion(strings.TrimPrefix(obj.Key, dir)); ok && !obj.IsDir {
			out = append(out, v)
		}
	}
}

func (bv blobVersions) read(ctx context.Context, dir string, v uint64) ([]byte, error) {
	key := versionKey(dir, v)
	data, err := bv.b.ReadAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("parquet: read %s: %w", key, err)
	}
	return data, nil
}

func (bv blobVersions) create(ctx context.Context, dir string, v uint64, data []byte) (bool, error) {
	key := versionKey(dir, v)
	err := bv.b.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/json", IfNotExist: true})
	if err == nil {
		return true, nil
	}
	if gcerrors.Code(err) == gcerrors.FailedPrecondition {
		return false, nil
	}
	return false, fmt.Errorf("parquet: create %s: %w", key, err)
}

func (bv blobVersions) remove(ctx context.Context, dir string, v uint64) error {
	key := versionKey(dir, v)
	if err := bv.b.Delete(ctx, key); err != nil && !isNotFound(err) {
		return fmt.Errorf("parquet: delete %s: %w", key, err)
	}
	return nil
}

func isNotFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }

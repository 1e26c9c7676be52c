package checkpoint

import (
	"context"
	"fmt"
	"net/url"

	"github.com/openetl/etl/checkpoint/object"
)

// Open returns the store a URL names:
//
//	file:///abs/dir   a directory on the local file system, created if
//	                  missing; see OpenDir
//	mem://            a new, empty in-process store (every call returns a
//	                  fresh one); see NewMem
//
// Stores in S3, GCS and Azure Blob (s3://, gs://, azblob://) are opened by
// package checkpoint/cloud, so that programs which don't use them don't
// link the clouds' SDKs; Open names it for those schemes. ctx is unused
// by these backends.
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: store URL: %w", err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("checkpoint: store URL %q: host %q: a file URL needs an absolute path "+
				"(file:///abs/dir); use OpenDir for a relative one", rawURL, u.Host)
		}
		if u.Path == "" {
			return nil, fmt.Errorf("checkpoint: store URL %q: no directory", rawURL)
		}
		if u.RawQuery != "" {
			return nil, fmt.Errorf("checkpoint: store URL %q: file stores take no options", rawURL)
		}
		return OpenDir(u.Path)
	case "mem":
		return NewMem(), nil
	case "s3", "gs", "azblob":
		return nil, fmt.Errorf("checkpoint: store URL %q: open %s stores with github.com/openetl/etl/checkpoint/cloud (cloud.Open), which links the cloud SDKs", rawURL, u.Scheme)
	case "":
		return nil, fmt.Errorf("checkpoint: store URL %q has no scheme: use file:///abs/dir, mem://, "+
			"s3://, gs://, azblob://, or OpenDir for a plain path", rawURL)
	default:
		return nil, fmt.Errorf("checkpoint: store URL %q: unknown scheme %q: want file, mem, s3, gs or azblob",
			rawURL, u.Scheme)
	}
}

// OpenDir returns a store in the directory dir (absolute or relative to
// the working directory), creating it if missing. Records, HEAD and side
// files are plain files laid out as described in the package doc.
//
// HEAD writes are atomic across the processes of one host that open the
// same directory: record creation uses a hard link, which fails when the
// name is taken, and HEAD is replaced under an flock on
// {pipeline}/_checkpoints/HEAD.lock, by writing a temp file, fsyncing it,
// renaming it over HEAD and fsyncing the directory. Readers take no lock.
// Several hosts sharing a network file system are not supported: use an
// object store. Conditional writes need flock, so on systems other than
// unix ones Commit, Claim and Rewind fail.
func OpenDir(dir string) (Store, error) {
	b, err := object.NewDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open %q: %w", dir, err)
	}
	return newStore(b), nil
}

// NewMem returns an empty store held in memory, for tests and
// simulations. It is safe for concurrent use; nothing persists once it is
// dropped, and every NewMem is independent of the others.
func NewMem() Store { return newStore(object.NewMem()) }

// NewStore returns a store that runs the checkpoint protocol over an
// object layer: the built-in ones (object.NewDir, object.NewMem, and the
// cloud buckets of package checkpoint/cloud) or one of your own, which
// must keep object.Bucket's promises (Create and Replace with exactly one
// winner). The store's Close closes b.
func NewStore(b object.Bucket) Store { return newStore(b) }

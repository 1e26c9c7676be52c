// Package cloud keeps checkpoint logs in object stores: Amazon S3 (and
// S3-compatible servers with conditional writes), Google Cloud Storage and
// Azure Blob Storage, through gocloud.dev's drivers. It is a package of
// its own so that programs using only local or memory checkpoints don't
// link the clouds' SDKs.
//
// HEAD is replaced with a conditional write: If-Match on the ETag for S3
// and Azure, a generation match for GCS; records and a pipeline's first
// HEAD are created with If-None-Match (GCS: DoesNotExist). So any number
// of processes on any number of hosts can share a store.
package cloud

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"gocloud.dev/blob"
	// The URL openers Open uses for s3://, gs:// and azblob://.
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/checkpoint/internal/blobobj"
	"github.com/openetl/etl/checkpoint/object"
)

// NewBucketStore returns a store in an object-store bucket that the caller
// opened with gocloud.dev's s3blob, gcsblob or azureblob driver and
// configured as it needs (endpoint, TLS, credentials, retries, HTTP
// transport). The store keeps its pipelines under prefix ("" for the
// bucket's root; otherwise a slash-separated path without empty or
// dot-prefixed segments, e.g. "etl/prod"). The caller owns bucket: Close
// on the store does not close it.
//
// For S3-compatible servers, the server must support conditional writes
// (If-Match and If-None-Match on PutObject); AWS S3 does since 2024. It
// fails for other drivers: fileblob's create-if-absent is not atomic and
// neither fileblob nor memblob can replace conditionally; use
// checkpoint.OpenDir or checkpoint.NewMem instead.
func NewBucketStore(bucket *blob.Bucket, prefix string) (checkpoint.Store, error) {
	b, err := blobobj.NewBlob(bucket, prefix, false)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: bucket store: %w", err)
	}
	return checkpoint.NewStore(b), nil
}

// Open returns the store an object-store URL names:
//
//	s3://bucket/prefix?params      Amazon S3 or an S3-compatible server
//	gs://bucket/prefix?params      Google Cloud Storage
//	azblob://container/prefix?...  Azure Blob Storage
//
// For the object stores, the URL's path is the key prefix the store keeps
// its pipelines under (optional), and the rest goes to gocloud.dev's URL
// opener for the scheme (blob.OpenBucket), which takes credentials from
// the environment the way the cloud's SDK does. Query parameters (gocloud.dev
// v0.47):
//
//	s3      region, endpoint, use_path_style (or s3ForcePathStyle),
//	        disable_https, hostname_immutable, profile, anonymous, role,
//	        request_checksum_calculation and response_checksum_validation
//	        (when_supported, when_required), dualstack, fips, accelerate,
//	        rate_limiter_capacity, ssetype, kmskeyid. Credentials: the
//	        AWS SDK's default chain (AWS_ACCESS_KEY_ID and
//	        AWS_SECRET_ACCESS_KEY, shared config, roles).
//	gs      anonymous, access_id, private_key_path, universe_domain, grpc,
//	        zonal. Credentials: Application Default Credentials; with
//	        STORAGE_EMULATOR_HOST=host:port set, the emulator there,
//	        unauthenticated.
//	azblob  domain, protocol, localemu, cdn. Credentials: AZURE_STORAGE_KEY
//	        (with AZURE_STORAGE_ACCOUNT), AZURE_STORAGE_CONNECTION_STRING,
//	        AZURE_STORAGE_SAS_TOKEN, or azidentity's default chain.
//
// Against local servers (what scripts/servers.sh starts), these work:
//
//	s3://bucket/prefix?endpoint=http://127.0.0.1:PORT&use_path_style=true&region=us-east-1&disable_https=true
//	gs://bucket/prefix                        with STORAGE_EMULATOR_HOST=127.0.0.1:PORT
//	azblob://container/prefix?protocol=http&domain=127.0.0.1:PORT&localemu=true
//	                                          with Azurite's devstoreaccount1 key in the environment
//
// The "prefix" and "key" parameters of gocloud.dev's URL mux are refused:
// the path is the prefix. The bucket must exist; Open does not create it
// and makes no request (the first Claim reports a missing bucket or bad
// credentials). ctx is used only while opening. A store from an s3, gs or
// azblob URL closes its bucket on Close; file and mem URLs go to
// checkpoint.Open. To configure the client yourself
// (TLS, auth, retries, transport), use NewBucketStore.
func Open(ctx context.Context, rawURL string) (checkpoint.Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: store URL: %w", err)
	}
	switch u.Scheme {
	case "s3", "gs", "azblob":
	case "file", "mem", "":
		return checkpoint.Open(ctx, rawURL)
	default:
		return nil, fmt.Errorf("checkpoint: store URL %q: unknown scheme %q: want s3, gs or azblob (or file, mem)", rawURL, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("checkpoint: store URL %q: no bucket: want %s://bucket/prefix", rawURL, u.Scheme)
	}
	q := u.Query()
	for _, p := range []string{"prefix", "key"} {
		if q.Has(p) {
			return nil, fmt.Errorf("checkpoint: store URL %q: parameter %q is not supported: "+
				"put the prefix in the path (%s://%s/prefix)", rawURL, p, u.Scheme, u.Host)
		}
	}
	prefix := strings.Trim(u.Path, "/")
	bu := *u
	bu.Path, bu.RawPath = "", ""
	bucket, err := blob.OpenBucket(ctx, bu.String())
	if err != nil {
		return nil, fmt.Errorf("checkpoint: store URL %q: %w", rawURL, err)
	}
	b, err := blobobj.NewBlob(bucket, prefix, true)
	if err != nil {
		bucket.Close()
		return nil, fmt.Errorf("checkpoint: store URL %q: %w", rawURL, err)
	}
	return checkpoint.NewStore(b), nil
}

// NewBucket returns the object.Bucket a store made by NewBucketStore
// would keep its logs in: bucket (opened with s3blob, gcsblob or
// azureblob) under prefix, with conditional Create and Replace. Package
// shard keeps its leases in one. The caller owns bucket.
func NewBucket(bucket *blob.Bucket, prefix string) (object.Bucket, error) {
	b, err := blobobj.NewBlob(bucket, prefix, false)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: bucket: %w", err)
	}
	return b, nil
}

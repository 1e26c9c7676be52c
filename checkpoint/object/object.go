// Package object is the storage layer under the checkpoint store: a flat
// namespace of keys with the few conditional operations the checkpoint
// protocol needs. Each backend (a local directory and memory here, the
// gocloud.dev blob drivers for S3, GCS and Azure in package
// checkpoint/cloud, or one of your own) implements Bucket; the protocol
// itself lives once, in package checkpoint, on top of it
// (checkpoint.NewStore).
//
// The operations map onto object stores as follows:
//
//	Create   IfNotExist (S3 If-None-Match, GCS DoesNotExist, Azure If-None-Match)
//	Read     body plus its version token (ETag, GCS generation)
//	Replace  If-Match on S3 and Azure, GenerationMatch on GCS
//	Put      an unconditional write
//	List     a prefix listing
//	Delete   a delete (optional: Deleter)
package object

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Token identifies one version of an object, as read: an ETag, a GCS
// generation, a content hash. It is opaque and only compared for equality
// by the backend that issued it.
//
// Some backends (S3, and the file backend here) derive the token from the
// content, so writing the same bytes twice gives the same token (ABA).
// Callers that replace an object conditionally must make every write's
// bytes unique, e.g. with a sequence number and a nonce inside the object.
type Token string

// Errors returned by every Bucket.
var (
	// ErrNotExist is returned by Read for a key with no object.
	ErrNotExist = errors.New("object: does not exist")
	// ErrExists is returned by Create when the key already has an object.
	ErrExists = errors.New("object: already exists")
	// ErrPrecondition is returned by Replace when the object is no longer
	// the version the token names, or no longer exists: the caller lost
	// a race and should re-read.
	ErrPrecondition = errors.New("object: precondition failed")
	// ErrBadKey is returned for a key that ValidKey rejects.
	ErrBadKey = errors.New("object: invalid key")
)

// Bucket is a namespace of objects. Implementations are safe for
// concurrent use; Create and Replace have exactly one winner among
// concurrent callers, across processes where the backend is shared.
// Every write is atomic: a reader sees the old object or the new one,
// never a part. Data passed in and returned is never retained or shared.
type Bucket interface {
	// Create writes data at key if no object is there; ErrExists if one is.
	Create(ctx context.Context, key string, data []byte) error
	// Read returns the object at key and the token of that version;
	// ErrNotExist when there is none.
	Read(ctx context.Context, key string) ([]byte, Token, error)
	// Replace writes data at key if the object there is still the version
	// tok names; ErrPrecondition otherwise, including when it is gone.
	Replace(ctx context.Context, key string, data []byte, tok Token) error
	// Put writes data at key, replacing any object there.
	Put(ctx context.Context, key string, data []byte) error
	// List returns the keys that start with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Close releases the bucket's resources.
	Close(ctx context.Context) error
}

// Deleter is implemented by buckets that can remove an object: Dir, Mem
// and the cloud buckets of package checkpoint/cloud do. The checkpoint
// store removes side files it no longer needs through it (see
// checkpoint.FileDeleter); over a bucket without it they stay, unread.
type Deleter interface {
	// Delete removes the object at key; nil when there is none.
	Delete(ctx context.Context, key string) error
}

// ValidKey reports whether key can name an object in every backend: a
// slash-separated relative path of non-empty segments, none of which
// starts with '.' (that also rules out "." and "..", and leaves dot-names
// to backends for their own files) or ends in ".lock", and without
// backslashes or control characters.
func ValidKey(key string) error {
	if key == "" || len(key) > 1024 {
		return fmt.Errorf("%w %q: empty or longer than 1024 bytes", ErrBadKey, key)
	}
	for _, c := range key {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return fmt.Errorf("%w %q: control character or backslash", ErrBadKey, key)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w %q: empty segment or absolute path", ErrBadKey, key)
		case strings.HasPrefix(seg, "."):
			return fmt.Errorf("%w %q: segment %q starts with '.'", ErrBadKey, key, seg)
		case strings.HasSuffix(seg, ".lock"):
			return fmt.Errorf("%w %q: segment %q ends in .lock (reserved)", ErrBadKey, key, seg)
		}
	}
	return nil
}

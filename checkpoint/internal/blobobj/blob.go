// Package blobobj is the object layer over gocloud.dev buckets opened with
// the s3blob, gcsblob and azureblob drivers (see Blob). It is internal:
// package checkpoint/cloud is its public face.
package blobobj

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	azblobblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/openetl/etl/checkpoint/object"
)

// Driver names a gocloud.dev blob driver that Blob supports.
type Driver string

// The drivers Blob supports: each has a conditional replace that Blob
// reaches through the driver's own request types (see Blob).
const (
	S3    Driver = "s3"    // gocloud.dev/blob/s3blob
	GCS   Driver = "gcs"   // gocloud.dev/blob/gcsblob
	Azure Driver = "azure" // gocloud.dev/blob/azureblob
)

// contentType is what every object is written with. The azureblob writer
// needs blob.Bucket.Upload, and Upload needs a content type.
const contentType = "application/octet-stream"

// conflictRetries bounds the retries of a write that S3 rejected with 409
// ConditionalRequestConflict: another conditional write to the key was in
// flight, and this one was not applied.
const conflictRetries = 8

// Blob is an object.Bucket over a gocloud.dev *blob.Bucket opened with s3blob,
// gcsblob or azureblob, under a key prefix.
//
// gocloud.dev has create-if-absent (WriterOptions.IfNotExist) but no
// If-Match, so Blob reaches the driver's request through
// WriterOptions.BeforeWrite and As:
//
//	S3     *transfermanager.UploadObjectInput: IfMatch = ETag
//	GCS    **storage.ObjectHandle: .If(GenerationMatch: generation)
//	Azure  *azblob.UploadStreamOptions: IfMatch = ETag
//
// and takes the token from the same response as the body (Reader.As:
// the GetObject ETag, the storage.Reader's generation, the download's
// ETag), never from a later request. If the driver does not let Blob set
// the condition, the write fails rather than going out unconditionally.
//
// A failed precondition (gcerrors.FailedPrecondition, and NotFound for an
// If-Match on a missing S3 key) is object.ErrPrecondition from Replace and
// object.ErrExists from Create. An SDK that retries a write whose response was
// lost can report a failed precondition for a write that landed: callers
// that need to know re-read and look for their own bytes, as the
// checkpoint store does.
//
// Writes go through blob.Bucket.Upload, never Writer.Write: azureblob v0.47.0
// dereferences a nil pipe in Writer.Close when an upload fails. A panic
// from a driver during a write is still recovered and returned as an error.
type Blob struct {
	b      *blob.Bucket
	prefix string
	driver Driver
	owned  bool
}

// NewBlob returns an object.Bucket over b that keeps its objects under prefix
// ("" or a valid key: "a/b"; a slash is added). It fails for a driver
// other than s3blob, gcsblob and azureblob: fileblob's create-if-absent
// is not atomic and neither it nor memblob can replace conditionally (use
// NewDir and NewMem). Close closes b only when owned is true.
func NewBlob(b *blob.Bucket, prefix string, owned bool) (*Blob, error) {
	if b == nil {
		return nil, errors.New("object: nil *blob.Bucket")
	}
	d, err := DriverOf(b)
	if err != nil {
		return nil, err
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		if err := object.ValidKey(prefix); err != nil {
			return nil, fmt.Errorf("object: prefix: %w", err)
		}
		prefix += "/"
	}
	return &Blob{b: b, prefix: prefix, driver: d, owned: owned}, nil
}

// DriverOf reports which supported driver b was opened with.
func DriverOf(b *blob.Bucket) (Driver, error) {
	var s3c *s3.Client
	var gcs *storage.Client
	var az *container.Client
	switch {
	case b.As(&s3c):
		return S3, nil
	case b.As(&gcs):
		return GCS, nil
	case b.As(&az):
		return Azure, nil
	}
	return "", errors.New("object: unsupported blob driver: conditional writes need s3blob, gcsblob or " +
		"azureblob (fileblob and memblob cannot replace conditionally: use a directory or memory store)")
}

// Driver returns the bucket's driver.
func (b *Blob) Driver() Driver { return b.driver }

// Create implements object.Bucket.
func (b *Blob) Create(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	err := b.upload(ctx, key, data, &blob.WriterOptions{ContentType: contentType, IfNotExist: true})
	switch gcerrors.Code(err) {
	case gcerrors.OK:
		return nil
	case gcerrors.FailedPrecondition:
		return object.ErrExists
	}
	return fmt.Errorf("object: create %s: %w", key, err)
}

// Read implements object.Bucket.
func (b *Blob) Read(ctx context.Context, key string) ([]byte, object.Token, error) {
	if err := check(ctx, key); err != nil {
		return nil, "", err
	}
	r, err := b.b.NewReader(ctx, b.prefix+key, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, "", object.ErrNotExist
	}
	if err != nil {
		return nil, "", fmt.Errorf("object: read %s: %w", key, err)
	}
	defer r.Close()
	// The token comes from the response that carries the body, so it is
	// the version of exactly these bytes.
	tok, err := b.token(r)
	if err != nil {
		return nil, "", fmt.Errorf("object: read %s: %w", key, err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, "", fmt.Errorf("object: read %s: %w", key, err)
	}
	return data, tok, nil
}

func (b *Blob) token(r *blob.Reader) (object.Token, error) {
	switch b.driver {
	case S3:
		var out s3.GetObjectOutput
		if r.As(&out) && out.ETag != nil && *out.ETag != "" {
			return object.Token(*out.ETag), nil
		}
	case GCS:
		var sr *storage.Reader
		if r.As(&sr) && sr != nil && sr.Attrs.Generation > 0 {
			return object.Token(strconv.FormatInt(sr.Attrs.Generation, 10)), nil
		}
	case Azure:
		var resp azblobblob.DownloadStreamResponse
		if r.As(&resp) && resp.ETag != nil && *resp.ETag != "" {
			return object.Token(*resp.ETag), nil
		}
	}
	return "", fmt.Errorf("the %s driver returned no version token with the object", b.driver)
}

// Replace implements object.Bucket.
func (b *Blob) Replace(ctx context.Context, key string, data []byte, tok object.Token) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	cond, err := b.condition(tok)
	if err != nil {
		return err
	}
	err = b.upload(ctx, key, data, &blob.WriterOptions{ContentType: contentType, BeforeWrite: cond})
	switch gcerrors.Code(err) {
	case gcerrors.OK:
		return nil
	case gcerrors.FailedPrecondition, gcerrors.NotFound:
		// NotFound: If-Match on a key that is gone (S3). A missing bucket
		// also lands here; the caller's next Read or Create reports it.
		return object.ErrPrecondition
	}
	return fmt.Errorf("object: replace %s: %w", key, err)
}

var errNoCondition = errors.New("object: the blob driver did not accept a write condition; nothing was written")

// condition returns the BeforeWrite hook that makes a write conditional
// on tok. A token that cannot be a current version (empty, or a GCS
// generation of 0, which GCS reads as "no condition") is object.ErrPrecondition
// without a request.
func (b *Blob) condition(tok object.Token) (func(as func(any) bool) error, error) {
	if tok == "" {
		return nil, object.ErrPrecondition
	}
	switch b.driver {
	case S3:
		etag := string(tok)
		return func(as func(any) bool) error {
			var in *transfermanager.UploadObjectInput
			if !as(&in) || in == nil {
				return errNoCondition
			}
			in.IfMatch = &etag
			return nil
		}, nil
	case GCS:
		gen, err := strconv.ParseInt(string(tok), 10, 64)
		if err != nil || gen <= 0 {
			return nil, object.ErrPrecondition
		}
		return func(as func(any) bool) error {
			var obj **storage.ObjectHandle
			if !as(&obj) || obj == nil || *obj == nil {
				return errNoCondition
			}
			*obj = (*obj).If(storage.Conditions{GenerationMatch: gen})
			return nil
		}, nil
	case Azure:
		etag := azcore.ETag(tok)
		return func(as func(any) bool) error {
			var opts *azblob.UploadStreamOptions
			if !as(&opts) || opts == nil {
				return errNoCondition
			}
			opts.AccessConditions = &azblob.AccessConditions{
				ModifiedAccessConditions: &azblobblob.ModifiedAccessConditions{IfMatch: &etag},
			}
			return nil
		}, nil
	}
	return nil, errNoCondition
}

// Put implements object.Bucket.
func (b *Blob) Put(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	if err := b.upload(ctx, key, data, &blob.WriterOptions{ContentType: contentType}); err != nil {
		return fmt.Errorf("object: put %s: %w", key, err)
	}
	return nil
}

// upload writes data with object.Bucket.Upload, retrying S3's 409
// ConditionalRequestConflict (the write was not applied) with backoff.
func (b *Blob) upload(ctx context.Context, key string, data []byte, opts *blob.WriterOptions) error {
	wait := 5 * time.Millisecond
	for i := 0; ; i++ {
		err := b.uploadOnce(ctx, key, data, opts)
		if i == conflictRetries || !b.conflict(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func (b *Blob) uploadOnce(ctx context.Context, key string, data []byte, opts *blob.WriterOptions) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("object: %s driver panicked writing %s: %v", b.driver, key, p)
		}
	}()
	return b.b.Upload(ctx, b.prefix+key, bytes.NewReader(data), opts)
}

func (b *Blob) conflict(err error) bool {
	var ae smithy.APIError
	return err != nil && b.driver == S3 && b.b.ErrorAs(err, &ae) && ae.ErrorCode() == "ConditionalRequestConflict"
}

// Delete implements object.Deleter.
func (b *Blob) Delete(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	if err := b.b.Delete(ctx, b.prefix+key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("object: delete %s: %w", key, err)
	}
	return nil
}

// List implements object.Bucket.
func (b *Blob) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	it := b.b.List(&blob.ListOptions{Prefix: b.prefix + prefix})
	var keys []string
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("object: list %q: %w", prefix, err)
		}
		if !o.IsDir {
			keys = append(keys, strings.TrimPrefix(o.Key, b.prefix))
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// Close implements object.Bucket: it closes the *blob.Bucket if NewBlob was told
// the Blob owns it.
func (b *Blob) Close(context.Context) error {
	if b.owned {
		return b.b.Close()
	}
	return nil
}

// check fails when ctx is done or key is not a valid object key.
func check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return object.ValidKey(key)
}

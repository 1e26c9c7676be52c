package parquet

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/openetl/etl/sink"
)

// A stream under a prefix belongs to one pipeline: its manifest's epochs
// and generations are that pipeline's. Pipelines may share a prefix as
// long as each writes streams of its own. A stream's owner is recorded
// in {stream}/_owner.json (create-if-absent) by Recover, for every stream
// of the writer's spec, before anything is read, and by a writer's first
// Write of a stream its spec lacks. Recover or Write of any other
// pipeline's writer then fails with an *OwnerError, before that pipeline
// commits an epoch. (Before, the second pipeline's first epoch failed at
// its Commit, after its checkpoint record was HEAD, and every later
// attempt failed there again.)

// ownerFile is the owner marker's name in a stream's directory.
const ownerFile = "_owner.json"

// ownerMarker is the content of a stream's owner marker.
type ownerMarker struct {
	Stream   string    `json:"stream"`
	Pipeline string    `json:"pipeline"`
	Time     time.Time `json:"time"`
}

// OwnerError is returned by Recover (and Write) when a stream of the
// writer under the destination's prefix belongs to another pipeline: the
// first pipeline whose writer recovered or wrote it (or, for a stream
// written before owners were recorded, the pipeline its manifest names).
// Nothing is written, no owner recorded, no fence raised. It
// matches ErrOwned, and etl.IsPermanent reports it: give one of the
// pipelines a Config.Prefix of its own, or leave the stream to one of
// them.
type OwnerError struct {
	Prefix   string // the destination's prefix ("" for the bucket's root)
	Stream   string // the stream
	Owner    string // the pipeline the stream belongs to
	Pipeline string // the pipeline refused
}

func (e *OwnerError) Error() string {
	where := ""
	if e.Prefix != "" {
		where = fmt.Sprintf(" under prefix %q", e.Prefix)
	}
	return fmt.Sprintf("parquet: stream %q%s belongs to pipeline %q, not %q: two pipelines can't write one stream "+
		"(their epochs and fences would mix); give pipeline %q a Config.Prefix of its own", e.Stream, where, e.Owner, e.Pipeline, e.Pipeline)
}

// Is makes errors.Is(err, ErrOwned) true.
func (e *OwnerError) Is(target error) bool { return target == ErrOwned }

// Permanent is true: every attempt fails the same way until the
// configuration changes.
func (e *OwnerError) Permanent() bool { return true }

func (d *Destination) ownerKey(stream string) string { return d.prefix + stream + "/" + ownerFile }

// claimStreams makes w's pipeline the owner of every stream of its
// spec (WriterConfig.Streams), or returns an *OwnerError for the first
// stream another pipeline owns. It checks every stream before it
// records any owner, so a refused pipeline claims nothing.
func (w *writer) claimStreams(ctx context.Context) error {
	var unowned []string
	for _, t := range w.tables {
		if err := checkName("stream", t); err != nil {
			return err
		}
		owner, marked, err := w.d.ownerOf(ctx, t)
		if err != nil {
			return err
		}
		if owner != "" && owner != w.pipeline {
			return &OwnerError{Prefix: w.d.prefix, Stream: t, Owner: owner, Pipeline: w.pipeline}
		}
		if !marked {
			unowned = append(unowned, t)
		}
	}
	for _, t := range unowned {
		if err := w.mark(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// claimStream makes w's pipeline the owner of stream, or returns an
// *OwnerError naming the owner. gocloud's fileblob driver makes the
// create-if-absent write a check and a rename: two pipelines claiming
// one new stream at once on a file:// bucket may both win, and the
// loser's first Commit fails then (as it did before owners).
func (w *writer) claimStream(ctx context.Context, stream string) error {
	owner, marked, err := w.d.ownerOf(ctx, stream)
	if err != nil {
		return err
	}
	if owner != "" && owner != w.pipeline {
		return &OwnerError{Prefix: w.d.prefix, Stream: stream, Owner: owner, Pipeline: w.pipeline}
	}
	if marked {
		return nil
	}
	return w.mark(ctx, stream)
}

// ownerOf returns the pipeline stream belongs to: the one its owner
// marker names (marked), or, for a stream written before owners were
// recorded, the one its manifest names; "" when neither exists.
func (d *Destination) ownerOf(ctx context.Context, stream string) (owner string, marked bool, err error) {
	if owner, err = d.streamOwner(ctx, stream); err != nil || owner != "" {
		return owner, owner != "", err
	}
	m, err := readManifest(ctx, d.versions, d.prefix, stream, 0)
	if err != nil || m == nil {
		return "", false, err
	}
	return m.Pipeline, false, nil
}

// mark records w's pipeline as stream's owner unless another pipeline's
// writer did first (then it returns an *OwnerError).
func (w *writer) mark(ctx context.Context, stream string) error {
	data, err := json.Marshal(ownerMarker{Stream: stream, Pipeline: w.pipeline, Time: time.Now().UTC()})
	if err != nil {
		return err
	}
	key := w.d.ownerKey(stream)
	err = w.d.bucket.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/json", IfNotExist: true})
	if err != nil && gcerrors.Code(err) != gcerrors.FailedPrecondition {
		return fmt.Errorf("parquet: create %s: %w", key, err)
	}
	// Created, or another pipeline's writer created it first: read back
	// which.
	owner, err := w.d.streamOwner(ctx, stream)
	if err != nil {
		return err
	}
	if owner != w.pipeline {
		return &OwnerError{Prefix: w.d.prefix, Stream: stream, Owner: owner, Pipeline: w.pipeline}
	}
	return nil
}

// streamOwner returns the pipeline stream's owner marker names, "" when
// there is none.
func (d *Destination) streamOwner(ctx context.Context, stream string) (string, error) {
	key := d.ownerKey(stream)
	data, err := d.bucket.ReadAll(ctx, key)
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("parquet: read %s: %w", key, err)
	}
	var m ownerMarker
	if err := json.Unmarshal(data, &m); err != nil || m.Pipeline == "" {
		return "", fmt.Errorf("parquet: %s is not an owner marker (%v): was it written by hand?", key, err)
	}
	return m.Pipeline, nil
}

var _ sink.PipelineChecker = (*Destination)(nil)

// CheckPipeline returns an *OwnerError when a stream of cfg belongs to
// another pipeline under the destination's prefix, so Build refuses the
// second of two pipelines sharing a prefix and a stream before either
// claims anything (sink.PipelineChecker). It only reads the streams'
// owner markers (and, for streams written before owners were recorded,
// their manifests).
func (d *Destination) CheckPipeline(ctx context.Context, cfg sink.WriterConfig) error {
	for _, s := range cfg.Streams {
		t := s.Table
		if err := checkName("stream", t); err != nil {
			return err
		}
		owner, _, err := d.ownerOf(ctx, t)
		if err != nil {
			return err
		}
		if owner != "" && owner != cfg.Pipeline {
			return &OwnerError{Prefix: d.prefix, Stream: t, Owner: owner, Pipeline: cfg.Pipeline}
		}
	}
	return nil
}

package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/openetl/etl/checkpoint"
	"github.com/openetl/etl/internal/obs"
	"github.com/openetl/etl/sink"
)

// maxRaces bounds how often Commit re-reads a manifest after losing the
// race to create the next version. Within one attempt commits are serial,
// so a lost race means another attempt is committing too; it is fenced or
// done after a few rounds.
const maxRaces = 16

// Commit applies epoch: for each stream with files in committables it
// copies the staged files to their final keys and creates the stream's next
// manifest version, then deletes the staged copies (best effort). A stream
// whose current manifest already records epoch or a later one is skipped,
// so Commit is idempotent, also across processes and writers. It fails
// with an error wrapping sink.ErrFenced when a newer generation's Recover
// has raised the fence. Streams are applied one by one: after a failure,
// some may be applied and others not, and calling Commit again (or
// Recover, then Commit) finishes the rest. Cancelling ctx stops it between
// requests with the same effect.
//
// Commit may run while the lane's goroutine writes later epochs: it shares
// no state with Write and PreCommit beyond the bucket.
func (w *writer) Commit(ctx context.Context, epoch uint64, committables []sink.Committable) error {
	gen := checkpoint.Generation(w.gen.Load())
	if err := w.checkFence(ctx, gen); err != nil {
		return err
	}
	byStream, err := w.decodeAll(epoch, committables)
	if err != nil {
		return err
	}
	for _, s := range slices.Sorted(maps.Keys(byStream)) {
		if err := w.apply(ctx, epoch, gen, s, byStream[s]); err != nil {
			return err
		}
	}
	w.d.log.Debug("parquet: epoch committed", "pipeline", w.pipeline, "epoch", epoch, "streams", len(byStream))
	return nil
}

// decodeAll groups the committables' files by stream, in lane order.
func (w *writer) decodeAll(epoch uint64, committables []sink.Committable) (map[string][]stagedFile, error) {
	byStream := make(map[string][]stagedFile)
	for lane, raw := range committables {
		c, err := decodeCommittable(raw)
		if err != nil {
			return nil, fmt.Errorf("lane %d: %w", lane, err)
		}
		if len(c.Files) == 0 {
			continue
		}
		if c.Epoch != epoch {
			return nil, fmt.Errorf("parquet: lane %d's committable is for epoch %d, not %d", lane, c.Epoch, epoch)
		}
		if c.Pipeline != w.pipeline {
			return nil, fmt.Errorf("parquet: lane %d's committable is for pipeline %q, not %q", lane, c.Pipeline, w.pipeline)
		}
		for _, f := range c.Files {
			if err := checkName("stream", f.Stream); err != nil {
				return nil, fmt.Errorf("lane %d's committable: %w", lane, err)
			}
			byStream[f.Stream] = append(byStream[f.Stream], f)
		}
	}
	return byStream, nil
}

// apply makes one stream's files of epoch visible.
func (w *writer) apply(ctx context.Context, epoch uint64, gen checkpoint.Generation, stream string, files []stagedFile) (err error) {
	ctx, span := obs.Start(ctx, "openetl.parquet.apply", attribute.String("openetl.stream", stream), attribute.Int("openetl.files", len(files)))
	defer func() { obs.End(span, err) }()
	copied := false
	files, patches := splitPatchFiles(files)
	for range maxRaces {
		prev, err := w.current(ctx, stream)
		if err != nil {
			return err
		}
		if prev != nil && prev.Pipeline != w.pipeline {
			return &OwnerError{Prefix: w.d.prefix, Stream: stream, Owner: prev.Pipeline, Pipeline: w.pipeline}
		}
		if prev != nil && prev.Epoch >= epoch {
			// Applied before, by this attempt or an earlier one that may
			// have died before cleaning up.
			w.deleteStaged(ctx, files)
			w.deleteStaged(ctx, patches)
			return nil
		}
		if !copied {
			if err := w.copyFiles(ctx, files); err != nil {
				return err
			}
			copied = true
		}
		// Patched copies of the files that hold patched rows, listed in
		// place of the files they replace (patch.go).
		patched, err := w.applyPatches(ctx, epoch, stream, prev, patches)
		if err != nil {
			return err
		}
		// Check the fence again right before the manifest write: the
		// copies can take long, and a newer attempt may have recovered
		// meanwhile. What's left is a window of one request, which a
		// create-if-absent write closes on every store but fileblob.
		if err := w.checkFence(ctx, gen); err != nil {
			return err
		}
		next := Manifest{Format: manifestFormat, Stream: stream, Version: 1, Epoch: epoch, Generation: gen, Pipeline: w.pipeline}
		seen := make(map[string]bool)
		if prev != nil {
			next.Version = prev.Version + 1
			next.Files = slices.Grow(slices.Clone(prev.Files), len(files))
			for i, f := range next.Files {
				if p, ok := patched[f.Key]; ok {
					next.Files[i] = p
				}
				seen[next.Files[i].Key] = true
			}
		}
		for _, f := range files {
			if !seen[f.Final] { // no file twice, whatever the committables say
				seen[f.Final] = true
				next.Files = append(next.Files, File{Key: f.Final, Rows: f.Rows, Bytes: f.Bytes, Epoch: epoch})
			}
		}
		data, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("parquet: encode manifest: %w", err)
		}
		dir := manifestDir(w.d.prefix, stream)
		created, err := w.d.versions.create(ctx, dir, next.Version, data)
		if err != nil {
			return err
		}
		if created {
			w.setHint(stream, next.Version)
			w.deleteStaged(ctx, files)
			w.deleteStaged(ctx, patches)
			w.d.pruneBehind(ctx, stream, next.Version)
			if len(patched) > 0 {
				w.d.log.Info("parquet: held values released: files rewritten", "pipeline", w.pipeline, "stream", stream,
					"epoch", epoch, "files", len(patched))
			}
			return nil
		}
		// Someone else created that version: re-read and decide again.
		w.d.log.Warn("parquet: lost the race for a manifest version; re-reading",
			"pipeline", w.pipeline, "stream", stream, "version", next.Version)
	}
	return fmt.Errorf("parquet: stream %q: lost the race for the next manifest version %d times: is another attempt running with the same generation?", stream, maxRaces)
}

// current returns the stream's current manifest, nil if none.
func (w *writer) current(ctx context.Context, stream string) (*Manifest, error) {
	w.hintMu.Lock()
	hint := w.hints[stream]
	w.hintMu.Unlock()
	m, err := readManifest(ctx, w.d.versions, w.d.prefix, stream, hint)
	if err != nil {
		return nil, err
	}
	if m != nil {
		w.setHint(stream, m.Version)
	}
	return m, nil
}

func (w *writer) setHint(stream string, v uint64) {
	w.hintMu.Lock()
	if v > w.hints[stream] {
		w.hints[stream] = v
	}
	w.hintMu.Unlock()
}

// copyFiles copies each staged file to its final key. A staged file that
// is gone while its final copy exists was applied and cleaned up by a
// committer racing this one: staged files are deleted only after a
// manifest lists their final copies, so the final copy is whole.
func (w *writer) copyFiles(ctx context.Context, files []stagedFile) error {
	for _, f := range files {
		err := w.d.bucket.Copy(ctx, f.Final, f.Staged, nil)
		if err == nil {
			continue
		}
		if !isNotFound(err) {
			return fmt.Errorf("parquet: copy %s to %s: %w", f.Staged, f.Final, err)
		}
		ok, xerr := w.d.bucket.Exists(ctx, f.Final)
		if xerr != nil {
			return fmt.Errorf("parquet: stat %s: %w", f.Final, xerr)
		}
		if !ok {
			return fmt.Errorf("parquet: staged file %s is gone and was never applied: the epoch is lost", f.Staged)
		}
	}
	return nil
}

func (w *writer) deleteStaged(ctx context.Context, files []stagedFile) {
	for _, f := range files {
		if err := w.d.bucket.Delete(ctx, f.Staged); err != nil && !isNotFound(err) {
			w.d.log.Warn("parquet: could not delete a staged file; it is harmless but takes space",
				"key", f.Staged, "err", err)
		}
	}
}

// fenceMarker is the content of a fence marker; the marker's version is
// the generation.
type fenceMarker struct {
	Pipeline   string                `json:"pipeline"`
	Generation checkpoint.Generation `json:"generation"`
	Time       time.Time             `json:"time"`
}

// fence returns the pipeline's fence: the highest generation that
// recovered, 0 if none.
func (w *writer) fence(ctx context.Context) (checkpoint.Generation, error) {
	v, err := w.d.versions.latest(ctx, w.d.fenceDir(w.pipeline), 0)
	return checkpoint.Generation(v), err
}

func (w *writer) checkFence(ctx context.Context, gen checkpoint.Generation) error {
	f, err := w.fence(ctx)
	if err != nil {
		return err
	}
	if f > gen {
		return fmt.Errorf("parquet: pipeline %q: generation %d is fenced by generation %d: %w", w.pipeline, gen, f, sink.ErrFenced)
	}
	return nil
}

// Recover raises the pipeline's fence to gen and reports what became of
// head's epoch: Applied when every stream of it has a manifest at that
// epoch or later (or it had no files, or head is nil), Recoverable when
// every file not yet applied is still there (staged, or already copied to
// its final key), Lost otherwise. It fails with an error wrapping
// sink.ErrFenced when a newer generation has recovered. When it reports
// Lost after a Commit cut short between streams, the streams that had
// the epoch give it back (a new manifest version without its files): the
// runner writes that epoch's number again from the record before, and
// the new epoch must not be skipped as applied.
//
// First it records the pipeline as the owner of each stream of the
// writer's spec (WriterConfig.Streams) that has none, or fails with an
// *OwnerError when another pipeline owns one.
//
// Before it raises the fence it fails with a *sink.AheadError when a
// stream of the pipeline under the prefix has a manifest at an epoch
// after head's (any epoch when head is nil): the checkpoint log was lost
// or replaced, and the destination holds epochs it doesn't know. That
// takes a listing of the prefix and a manifest read per stream.
//
// The fence is the highest marker under _openetl/{pipeline}/fence/: a
// marker per generation rather than one object overwritten, so that two
// attempts recovering at once can't lower it; markers below gen are then
// deleted (best effort).
func (w *writer) Recover(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	if gen == 0 {
		return 0, errors.New("parquet: Recover with generation 0")
	}
	if err := w.claimStreams(ctx); err != nil {
		return 0, err
	}
	// A zombie learns it is one first: a newer generation may have
	// applied epochs after this one's head.
	if err := w.checkFence(ctx, gen); err != nil {
		return 0, err
	}
	if err := w.checkAhead(ctx, gen, head); err != nil {
		return 0, err
	}
	if err := w.raiseFence(ctx, gen); err != nil {
		return 0, err
	}
	w.gen.Store(uint64(gen))
	out, err := w.outcome(ctx, gen, head)
	if err != nil {
		return 0, err
	}
	var epoch uint64
	if head != nil {
		epoch = head.Epoch
	}
	w.d.log.Info("parquet: recovered", "pipeline", w.pipeline, "generation", gen, "epoch", epoch, "outcome", out.String())
	return out, nil
}

// checkAhead fails with a *sink.AheadError when a stream of the
// pipeline has a manifest at an epoch after head's.
func (w *writer) checkAhead(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) error {
	names, err := streamDirs(ctx, w.d.bucket, w.d.prefix)
	if err != nil {
		return err
	}
	for _, s := range names {
		m, err := w.current(ctx, s)
		if err != nil {
			return err
		}
		if m == nil || m.Pipeline != w.pipeline {
			continue
		}
		where := fmt.Sprintf("stream %q", s)
		if w.d.prefix != "" {
			where += fmt.Sprintf(" under prefix %q", w.d.prefix)
		}
		if err := sink.CheckAhead(w.pipeline, where, m.Epoch, m.Generation, gen, head); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) raiseFence(ctx context.Context, gen checkpoint.Generation) error {
	dir := w.d.fenceDir(w.pipeline)
	if err := w.checkFence(ctx, gen); err != nil {
		return err
	}
	data, err := json.Marshal(fenceMarker{Pipeline: w.pipeline, Generation: gen, Time: time.Now().UTC()})
	if err != nil {
		return err
	}
	// Not created means it exists: this generation recovered before.
	if _, err := w.d.versions.create(ctx, dir, uint64(gen), data); err != nil {
		return err
	}
	// A newer generation may have raised it between the check and the
	// create: then this attempt is already a zombie.
	if err := w.checkFence(ctx, gen); err != nil {
		return err
	}
	vs, err := w.d.versions.list(ctx, dir)
	if err != nil {
		return nil // pruning is best effort
	}
	for _, v := range vs {
		if v < uint64(gen) {
			_ = w.d.versions.remove(ctx, dir, v)
		}
	}
	return nil
}

func (w *writer) outcome(ctx context.Context, gen checkpoint.Generation, head *checkpoint.Record) (sink.Outcome, error) {
	if head == nil {
		return sink.Applied, nil
	}
	if head.Pipeline != "" && head.Pipeline != w.pipeline {
		return 0, fmt.Errorf("parquet: Recover of pipeline %q given a record of pipeline %q", w.pipeline, head.Pipeline)
	}
	cs := make([]sink.Committable, len(head.Committables))
	for i, c := range head.Committables {
		cs[i] = c
	}
	byStream, err := w.decodeAll(head.Epoch, cs)
	if err != nil {
		return 0, err
	}
	out := sink.Applied
	var applied []string // streams that have the head epoch
	for _, s := range slices.Sorted(maps.Keys(byStream)) {
		m, err := w.current(ctx, s)
		if err != nil {
			return 0, err
		}
		if m != nil && m.Epoch >= head.Epoch {
			applied = append(applied, s)
			continue
		}
		if out == sink.Lost {
			continue
		}
		out = sink.Recoverable
		for _, f := range byStream[s] {
			ok, err := w.exists(ctx, f.Staged, f.Final)
			if err != nil {
				return 0, err
			}
			if !ok {
				w.d.log.Warn("parquet: staged file of the head epoch is gone", "pipeline", w.pipeline, "epoch", head.Epoch, "key", f.Staged)
				out = sink.Lost
				break
			}
		}
	}
	if out == sink.Lost {
		// The runner rewinds and writes this epoch's number again, from
		// the previous record's positions: streams that had it (a Commit
		// cut short between streams) give it back, or the new epoch of
		// the same number would be skipped as applied and its records
		// lost.
		for _, s := range applied {
			if err := w.rollback(ctx, gen, s, head.Epoch); err != nil {
				return 0, err
			}
		}
	}
	return out, nil
}

// rollback removes epoch's files from stream's manifest (a new version,
// Epoch set to the one before), when the manifest's last epoch is epoch.
// The files stay in the bucket (a reader of the older manifest version
// may be reading them), unlisted.
func (w *writer) rollback(ctx context.Context, gen checkpoint.Generation, stream string, epoch uint64) error {
	for range maxRaces {
		prev, err := w.current(ctx, stream)
		if err != nil {
			return err
		}
		if prev == nil || prev.Epoch < epoch {
			return nil
		}
		if prev.Epoch > epoch {
			return fmt.Errorf("parquet: stream %q has epoch %d, past the lost head epoch %d", stream, prev.Epoch, epoch)
		}
		if err := w.checkFence(ctx, gen); err != nil {
			return err
		}
		next := *prev
		next.Version, next.Epoch, next.Generation = prev.Version+1, epoch-1, gen
		next.Files = nil
		var removed []File
		for _, f := range prev.Files {
			switch {
			case f.Patched == epoch && f.Replaced != nil:
				// Rewritten with epoch's patches: the file it replaced
				// is listed again.
				removed = append(removed, f)
				next.Files = append(next.Files, *f.Replaced)
			case f.Epoch == epoch:
				removed = append(removed, f)
			default:
				next.Files = append(next.Files, f)
			}
		}
		data, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("parquet: encode manifest: %w", err)
		}
		created, err := w.d.versions.create(ctx, manifestDir(w.d.prefix, stream), next.Version, data)
		if err != nil {
			return err
		}
		if created {
			w.setHint(stream, next.Version)
			w.d.pruneBehind(ctx, stream, next.Version)
			keys := make([]string, len(removed))
			for i, f := range removed {
				keys[i] = f.Key
			}
			w.d.log.Warn("parquet: epoch lost after some streams had it: taken back from them (files left unlisted)", "pipeline", w.pipeline,
				"stream", stream, "epoch", epoch, "files", keys)
			return nil
		}
	}
	return fmt.Errorf("parquet: stream %q: lost the race for the next manifest version %d times while taking back epoch %d", stream, maxRaces, epoch)
}

// exists reports whether any of keys exists.
func (w *writer) exists(ctx context.Context, keys ...string) (bool, error) {
	for _, k := range keys {
		ok, err := w.d.bucket.Exists(ctx, k)
		if err != nil {
			return false, fmt.Errorf("parquet: stat %s: %w", k, err)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/openetl/etl/checkpoint/object"
)

// The optional capabilities of a Store. The runner asserts them and does
// without when a store lacks one.

// FileDeleter is implemented by stores that can remove a side file. The
// runner removes an epoch's staged side files (the copies under
// _staging/ its record lists) once their published copies are written;
// a store without it keeps them, unread. Every store of this package
// implements it, over a bucket that implements object.Deleter (the
// built-in ones do; over one that doesn't, DeleteFile returns an error
// wrapping errors.ErrUnsupported).
type FileDeleter interface {
	// DeleteFile removes the side file name, which WriteFile wrote; nil
	// when there is none. ErrBadName for a name WriteFile refuses.
	DeleteFile(ctx context.Context, pipeline, name string) error
}

var _ FileDeleter = (*logStore)(nil)

// DeleteFile implements FileDeleter.
func (s *logStore) DeleteFile(ctx context.Context, pipeline, name string) error {
	if err := validPipeline(pipeline); err != nil {
		return err
	}
	if err := validSideFile(name); err != nil {
		return err
	}
	d, ok := s.b.(object.Deleter)
	if !ok {
		return fmt.Errorf("checkpoint: delete file %q %s: the bucket can't delete (object.Deleter): %w", pipeline, name, errors.ErrUnsupported)
	}
	if err := d.Delete(ctx, pipeline+"/"+name); err != nil {
		return fmt.Errorf("checkpoint: delete file %q %s: %w", pipeline, name, err)
	}
	return nil
}

// FileLister is implemented by stores that can list side files. The
// runner lists the staged side files (under _staging/) that failed
// attempts left, after its recovery, and removes those no record it
// resumes from names (with FileDeleter); a store without it keeps them.
// Every store of this package implements it.
type FileLister interface {
	// ListFiles returns, sorted, the names (as WriteFile takes them) of
	// the pipeline's side files that start with prefix, a
	// slash-separated relative path ("_staging/"); none for a pipeline
	// that has none. It never lists _checkpoints/.
	ListFiles(ctx context.Context, pipeline, prefix string) ([]string, error)
}

var _ FileLister = (*logStore)(nil)

// ListFiles implements FileLister.
func (s *logStore) ListFiles(ctx context.Context, pipeline, prefix string) ([]string, error) {
	if err := validPipeline(pipeline); err != nil {
		return nil, err
	}
	keys, err := s.b.List(ctx, pipeline+"/"+prefix)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list files %q %s: %w", pipeline, prefix, err)
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		name := strings.TrimPrefix(k, pipeline+"/")
		if first, _, _ := strings.Cut(name, "/"); first == checkpointsDir {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}

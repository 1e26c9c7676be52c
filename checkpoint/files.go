package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/openetl/etl/checkpoint/object"
)

// ReadFile implements Store.
func (s *logStore) ReadFile(ctx context.Context, pipeline, name string) ([]byte, error) {
	if err := validPipeline(pipeline); err != nil {
		return nil, err
	}
	if err := validSideFile(name); err != nil {
		return nil, err
	}
	data, _, err := s.b.Read(ctx, pipeline+"/"+name)
	if errors.Is(err, object.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: read file %q %s: %w", pipeline, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read file %q %s: %w", pipeline, name, err)
	}
	return data, nil
}

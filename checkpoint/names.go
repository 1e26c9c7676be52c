package checkpoint

import (
	"fmt"
	"strings"

	"github.com/openetl/etl/checkpoint/object"
)

// checkpointsDir is the directory, under a pipeline's, that holds its
// records and HEAD. Side files may not be written into it.
const checkpointsDir = "_checkpoints"

// ValidPipeline returns nil if name can name a pipeline in every store:
// 1 to 200 bytes of ASCII letters, digits, '-', '_' and '.', not starting
// with '.' and not ending in ".lock"; otherwise an error wrapping
// ErrBadName that says which rule it breaks.
func ValidPipeline(name string) error { return validPipeline(name) }

func validPipeline(name string) error {
	if name == "" || len(name) > 200 {
		return fmt.Errorf("%w %q: must be 1 to 200 bytes", ErrBadName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w %q: byte %q is not a letter, digit, '-', '_' or '.'", ErrBadName, name, c)
		}
	}
	if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".lock") {
		return fmt.Errorf("%w %q: must not start with '.' or end in \".lock\"", ErrBadName, name)
	}
	return nil
}

// validSideFile returns nil if name can name a side file under a
// pipeline's directory: a relative slash-separated path whose segments are
// non-empty, don't start with '.' (so no ".."), don't end in ".lock", and
// that is not inside _checkpoints.
func validSideFile(name string) error {
	if err := object.ValidKey(name); err != nil {
		return fmt.Errorf("%w: side file %q: must be a relative slash-separated path without empty, "+
			"dot-prefixed or .lock segments", ErrBadName, name)
	}
	if first, _, _ := strings.Cut(name, "/"); first == checkpointsDir {
		return fmt.Errorf("%w: side file %q: %s/ is reserved for the checkpoint log", ErrBadName, name, checkpointsDir)
	}
	return nil
}

func headKey(pipeline string) string { return pipeline + "/" + checkpointsDir + "/HEAD" }

func recordKey(pipeline string, ref Ref) string {
	return fmt.Sprintf("%s/%s/%020d-%020d.json", pipeline, checkpointsDir, ref.Epoch, uint64(ref.Generation))
}

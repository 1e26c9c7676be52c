package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/openetl/etl/checkpoint"
)

// Head reads HEAD without claiming: the running generation keeps
// committing after it, on every backend.
func TestHeadDoesNotFence(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		gen, rec, err := s.Head(ctx, "p")
		if err != nil || gen != 0 || rec != nil {
			t.Fatalf("Head of a new pipeline = %d, %v, %v; want 0, nil, nil", gen, rec, err)
		}
		g, _ := claim(t, s, "p")
		if gen, rec, err = s.Head(ctx, "p"); err != nil || gen != g || rec != nil {
			t.Fatalf("Head after Claim = %d, %v, %v; want %d, nil, nil", gen, rec, err, g)
		}
		first := commit(t, s, g, nil)
		gen, rec, err = s.Head(ctx, "p")
		if err != nil || gen != g {
			t.Fatalf("Head after Commit = %d, %v; want generation %d", gen, err, g)
		}
		equalRef(t, "Head's record", rec, first)
		// Still g's: Head fenced nothing.
		commit(t, s, g, first)
		if _, _, err := s.Head(ctx, "bad.lock"); !errors.Is(err, checkpoint.ErrBadName) {
			t.Fatalf("Head(bad.lock) = %v, want ErrBadName", err)
		}
	})
}

// A fenced zombie learns who holds the newer generation: HEAD records the
// claimer's host and process.
func TestFencedNamesHolder(t *testing.T) {
	forEach(t, func(t *testing.T, s checkpoint.Store) {
		ctx := context.Background()
		old, _ := claim(t, s, "p")
		first := commit(t, s, old, nil)
		newer, _ := claim(t, s, "p")
		err := s.Commit(ctx, old, next("p", old, first))
		if !errors.Is(err, checkpoint.ErrFenced) {
			t.Fatalf("zombie Commit = %v, want ErrFenced", err)
		}
		host, _ := os.Hostname()
		for _, want := range []string{fmt.Sprintf("generation %d", newer), "host " + host, fmt.Sprintf("pid %d", os.Getpid())} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("fenced error %q does not say %q", err, want)
			}
		}
	})
}

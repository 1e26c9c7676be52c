//go:build cgo && linux && amd64

package engine

import (
	"errors"
	"strings"
	"testing"
)

// TestPanicDoesNotCrossTheBoundary makes Rust panic inside the engine's
// guard: the panic must come back as an error wrapping ErrPanic, with the
// panic's message, and the process must carry on. It needs a library
// built with the test hook (`make engine ENGINE_FEATURES=debug-panic`);
// the committed one has none, and CI proves the guard in Rust instead
// (ffi::tests::guard_catches_panics, and c_surface::debug_panic_is_caught
// calling the hook through its C symbol under make test-rust).
func TestPanicDoesNotCrossTheBoundary(t *testing.T) {
	if errors.Is(debugPanic(), errNoDebugHook) {
		t.Skip("engine library built without the debug-panic feature: make engine ENGINE_FEATURES=debug-panic")
	}
	for i := 0; i < 3; i++ {
		err := debugPanic()
		if !errors.Is(err, ErrPanic) {
			t.Fatalf("debugPanic: %v, want ErrPanic", err)
		}
		if !strings.Contains(err.Error(), "debug panic requested") {
			t.Errorf("message lost: %v", err)
		}
	}
}

func TestStatusTable(t *testing.T) {
	want := map[int]error{1: ErrInvalidInput, 2: ErrState, 3: ErrPanic, 4: ErrInternal, 5: ErrClosed, 77: ErrInternal}
	for code, sentinel := range want {
		if err := errorForStatus(code, "boom"); !errors.Is(err, sentinel) || !strings.HasSuffix(err.Error(), ": boom") {
			t.Errorf("status %d: %v, want %v", code, err, sentinel)
		}
	}
}

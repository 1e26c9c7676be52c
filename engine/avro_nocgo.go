//go:build !cgo || !(linux && amd64)

package engine

// registerAvroPlan fails: this build has no Rust engine.
func registerAvroPlan([]byte) (uint32, error) { return 0, ErrUnavailable }

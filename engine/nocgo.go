//go:build !cgo || !(linux && amd64)

package engine

// New returns ErrUnavailable: this build has no Rust engine (it needs
// CGO_ENABLED=1 on linux/amd64, where the prebuilt library is linked).
func New(cfg Config) (Engine, error) { return nil, ErrUnavailable }

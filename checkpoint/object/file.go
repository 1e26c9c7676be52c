package object

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Dir is a Bucket in a local directory, atomic across the processes of
// one host (not across hosts: use an object store for that).
//
//   - Create writes a temp file in the target's directory, fsyncs it and
//     hard-links it into place: link fails with EEXIST when the name is
//     taken, so exactly one creator wins, and nobody sees a partial file.
//   - Replace takes an exclusive flock on "{key}.lock", re-reads the
//     object and compares its token, then writes a temp file, fsyncs it,
//     renames it over the object and fsyncs the directory.
//   - Readers take no lock: rename and link are atomic.
//
// Tokens are SHA-256 hashes of the content, so, as on S3, a conditional
// writer must make every version's bytes unique.
type Dir struct {
	root string
}

// NewDir returns a Bucket rooted at the directory root, creating it if
// needed.
func NewDir(root string) (*Dir, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("object: directory %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("object: create directory: %w", err)
	}
	return &Dir{root: abs}, nil
}

// Root returns the absolute path of the bucket's directory.
func (d *Dir) Root() string { return d.root }

func (d *Dir) path(key string) string { return filepath.Join(d.root, filepath.FromSlash(key)) }

// Create implements Bucket.
func (d *Dir) Create(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	p := d.path(key)
	dir := filepath.Dir(p)
	tmp, err := tempIn(dir, data)
	if err != nil {
		return err
	}
	err = os.Link(tmp, p)
	os.Remove(tmp)
	if errors.Is(err, fs.ErrExist) {
		return ErrExists
	}
	if err != nil {
		return fmt.Errorf("object: create %s: %w", key, err)
	}
	return syncDir(dir)
}

// Read implements Bucket.
func (d *Dir) Read(ctx context.Context, key string) ([]byte, Token, error) {
	if err := check(ctx, key); err != nil {
		return nil, "", err
	}
	data, err := readFile(d.path(key))
	if err != nil {
		return nil, "", fmt.Errorf("object: read %s: %w", key, err)
	}
	return data, contentToken(data), nil
}

// Replace implements Bucket. It holds the key's lock only for one read and
// one write, so ctx is checked before waiting for it, not while.
func (d *Dir) Replace(ctx context.Context, key string, data []byte, tok Token) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	p := d.path(key)
	dir := filepath.Dir(p)
	lock, err := os.OpenFile(p+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return ErrPrecondition // no directory, so no object to replace
	}
	if err != nil {
		return fmt.Errorf("object: replace %s: %w", key, err)
	}
	defer lock.Close() // closing the file releases the lock
	if err := lockFile(lock); err != nil {
		return fmt.Errorf("object: replace %s: lock: %w", key, err)
	}
	cur, err := readFile(p)
	if errors.Is(err, ErrNotExist) {
		return ErrPrecondition
	}
	if err != nil {
		return fmt.Errorf("object: replace %s: %w", key, err)
	}
	if contentToken(cur) != tok {
		return ErrPrecondition
	}
	return d.rename(key, dir, p, data)
}

// Put implements Bucket.
func (d *Dir) Put(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	p := d.path(key)
	return d.rename(key, filepath.Dir(p), p, data)
}

func (d *Dir) rename(key, dir, p string, data []byte) error {
	tmp, err := tempIn(dir, data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("object: write %s: %w", key, err)
	}
	return syncDir(dir)
}

// Delete implements Deleter. It also removes the directories the object
// leaves empty, up to the bucket's root (a writer whose directory is
// removed under it makes it again).
func (d *Dir) Delete(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	p := d.path(key)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("object: delete %s: %w", key, err)
	}
	for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty
		}
	}
	return nil
}

// List implements Bucket. Files the backend keeps for itself (temp files,
// locks) are left out.
func (d *Dir) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := d.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = d.path(prefix[:i])
	}
	var keys []string
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == start && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		name := e.Name()
		if p != start && (strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".lock")) {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		if key := filepath.ToSlash(rel); strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("object: list %q: %w", prefix, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// Close implements Bucket.
func (d *Dir) Close(context.Context) error { return nil }

func contentToken(data []byte) Token {
	sum := sha256.Sum256(data)
	return Token(hex.EncodeToString(sum[:]))
}

func readFile(p string) ([]byte, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, ErrNotExist
	}
	return data, err
}

// tempIn is writeTemp in dir, made first (again, when a Delete removed
// it as empty between the two).
func tempIn(dir string, data []byte) (string, error) {
	for i := 0; ; i++ {
		if err := mkdirs(dir); err != nil {
			return "", err
		}
		tmp, err := writeTemp(dir, data)
		if err == nil || i == 2 || !errors.Is(err, fs.ErrNotExist) {
			return tmp, err
		}
	}
}

// writeTemp writes data to a new temp file in dir and fsyncs it, so that
// linking or renaming it into place publishes complete, durable bytes.
func writeTemp(dir string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("object: temp file: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("object: temp file: %w", err)
	}
	return f.Name(), nil
}

// mkdirs is os.MkdirAll that also fsyncs the parent of every directory it
// creates, so a committed object's path survives a crash.
func mkdirs(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("object: %s is not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("object: create directory: %w", err)
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("object: sync directory: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("object: sync directory: %w", err)
	}
	return nil
}

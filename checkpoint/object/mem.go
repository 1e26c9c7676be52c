package object

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Mem is an in-process Bucket: a mutex-guarded map. Tokens are per-key
// version numbers, like GCS generations, so they never repeat.
type Mem struct {
	mu      sync.Mutex
	objects map[string]memObject
	version uint64
}

type memObject struct {
	data    []byte
	version uint64
}

// NewMem returns an empty in-process bucket.
func NewMem() *Mem { return &Mem{objects: make(map[string]memObject)} }

func (m *Mem) put(key string, data []byte) {
	m.version++
	m.objects[key] = memObject{data: slices.Clone(data), version: m.version}
}

// Create implements Bucket.
func (m *Mem) Create(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objects[key]; ok {
		return ErrExists
	}
	m.put(key, data)
	return nil
}

// Read implements Bucket.
func (m *Mem) Read(ctx context.Context, key string) ([]byte, Token, error) {
	if err := check(ctx, key); err != nil {
		return nil, "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return nil, "", ErrNotExist
	}
	return slices.Clone(o.data), Token(strconv.FormatUint(o.version, 10)), nil
}

// Replace implements Bucket.
func (m *Mem) Replace(ctx context.Context, key string, data []byte, tok Token) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok || Token(strconv.FormatUint(o.version, 10)) != tok {
		return ErrPrecondition
	}
	m.put(key, data)
	return nil
}

// Put implements Bucket.
func (m *Mem) Put(ctx context.Context, key string, data []byte) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.put(key, data)
	return nil
}

// Delete implements Deleter.
func (m *Mem) Delete(ctx context.Context, key string) error {
	if err := check(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, key)
	return nil
}

// List implements Bucket.
func (m *Mem) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// Close implements Bucket. A closed Mem keeps working; it holds nothing
// that needs releasing.
func (m *Mem) Close(context.Context) error { return nil }

func check(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ValidKey(key)
}

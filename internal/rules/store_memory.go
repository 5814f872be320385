package rules

import (
	"context"
	"fmt"
	"sync"
)

var _ Store = (*MemoryStore)(nil)

// MemoryStore is the Store of one process (embedded mode, tests).
type MemoryStore struct {
	mu    sync.Mutex
	kinds map[string]*memoryKind
}

type memoryKind struct {
	head     int64
	versions map[int64]Document
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{kinds: map[string]*memoryKind{}} }

func (s *MemoryStore) kind(kind string) *memoryKind {
	k := s.kinds[kind]
	if k == nil {
		k = &memoryKind{versions: map[int64]Document{}}
		s.kinds[kind] = k
	}
	return k
}

// Push implements Store.
func (s *MemoryStore) Push(_ context.Context, kind string, body []byte, m Meta) (Version, error) {
	if err := checkKind(kind); err != nil {
		return Version{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.kind(kind)
	k.head++
	v := describe(k.head, body, m)
	k.versions[k.head] = Document{Version: v, Body: append([]byte(nil), body...)}
	delete(k.versions, k.head-KeepVersions)
	return v, nil
}

// Head implements Store.
func (s *MemoryStore) Head(_ context.Context, kind string) (int64, error) {
	if err := checkKind(kind); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kind(kind).head, nil
}

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, kind string, version int64) (Document, error) {
	if err := checkKind(kind); err != nil {
		return Document{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.kind(kind)
	if version == 0 {
		version = k.head
	}
	d, ok := k.versions[version]
	if !ok {
		return Document{}, fmt.Errorf("%w: %s version %d", ErrNoVersion, kind, version)
	}
	d.Body = append([]byte(nil), d.Body...)
	return d, nil
}

// History implements Store.
func (s *MemoryStore) History(_ context.Context, kind string, n int) ([]Version, error) {
	if err := checkKind(kind); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.kind(kind)
	var out []Version
	for v := k.head; v > 0 && len(out) < n; v-- {
		if d, ok := k.versions[v]; ok {
			out = append(out, d.Version)
		}
	}
	return out, nil
}

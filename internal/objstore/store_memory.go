package objstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"path"
	"strings"
	"sync"
)

var _ Store = (*MemoryStore)(nil)

// MemoryStore keeps objects in a map.
type MemoryStore struct {
	mu   sync.Mutex
	objs map[string]*Object
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{objs: map[string]*Object{}} }

// CheckKey rejects keys that could escape a directory or a bucket prefix.
func CheckKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || path.Clean(key) != key || strings.Contains(key, "\\") {
		return ErrBadKey
	}
	for _, part := range strings.Split(key, "/") {
		if part == ".." || part == "." || part == "" {
			return ErrBadKey
		}
	}
	return nil
}

// ETagOf is the ETag stores give a body: its quoted MD5, as S3 does for
// single-part uploads.
func ETagOf(body []byte) string {
	sum := md5.Sum(body)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

// Put implements Store.
func (s *MemoryStore) Put(ctx context.Context, key string, body []byte, opts PutOptions) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.objs[key]
	if opts.IfNoneMatch && exists {
		return "", ErrPrecondition
	}
	if opts.IfMatch != "" && (!exists || cur.ETag != opts.IfMatch) {
		return "", ErrPrecondition
	}
	o := &Object{Body: append([]byte(nil), body...), ContentType: opts.ContentType, CacheControl: opts.CacheControl, ETag: ETagOf(body)}
	s.objs[key] = o
	return o.ETag, nil
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, key string) (*Object, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key]
	if !ok {
		return nil, ErrNotFound
	}
	cp := *o
	// The caller owns what it gets, as with any store that reads from I/O.
	cp.Body = append([]byte(nil), o.Body...)
	return &cp, nil
}

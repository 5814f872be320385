package objstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

var _ Store = (*DirStore)(nil)

// DirStore keeps objects as files under a directory, with a small JSON
// sidecar ("<file>.meta") holding the headers. Writes go to a temporary file
// and are renamed into place, so a reader never sees half an object. The
// conditions are checked under a process-wide lock: one process owns the
// directory (embedded mode). Keys with a path component ending in ".meta"
// are refused with ErrBadKey: they would name another key's sidecar.
type DirStore struct {
	root string
	mu   sync.Mutex
}

// metaSuffix names the sidecar of an object file.
const metaSuffix = ".meta"

// notExist reports whether err means the object is not there: a missing file,
// or a key below another object ("a/b" when "a" is a file).
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

type dirMeta struct {
	ContentType  string `json:"content_type"`
	CacheControl string `json:"cache_control"`
	ETag         string `json:"etag"`
}

// NewDirStore returns a store rooted at dir, creating it if needed.
func NewDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: dir: %w", err)
	}
	return &DirStore{root: dir}, nil
}

func (s *DirStore) path(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	for _, part := range strings.Split(key, "/") {
		if strings.HasSuffix(part, metaSuffix) {
			return "", ErrBadKey
		}
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

func (s *DirStore) meta(p string) (*dirMeta, error) {
	b, err := os.ReadFile(p + metaSuffix)
	if notExist(err) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("objstore: read meta: %w", err)
	}
	var m dirMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("objstore: bad meta: %w", err)
	}
	return &m, nil
}

func writeAtomic(p string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), p)
}

// Put implements Store. The body is renamed into place before its meta, and
// Get treats an object without meta as missing, so a crash between the two
// leaves nothing visible.
func (s *DirStore) Put(ctx context.Context, key string, body []byte, opts PutOptions) (string, error) {
	p, err := s.path(key)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.meta(p)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return "", err
	}
	if opts.IfNoneMatch && cur != nil {
		return "", ErrPrecondition
	}
	if opts.IfMatch != "" && (cur == nil || cur.ETag != opts.IfMatch) {
		return "", ErrPrecondition
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("objstore: put %s: %w", key, err)
	}
	m := dirMeta{ContentType: opts.ContentType, CacheControl: opts.CacheControl, ETag: ETagOf(body)}
	mb, _ := json.Marshal(m)
	if err := writeAtomic(p, body); err != nil {
		return "", fmt.Errorf("objstore: put %s: %w", key, err)
	}
	if err := writeAtomic(p+metaSuffix, mb); err != nil {
		return "", fmt.Errorf("objstore: put %s meta: %w", key, err)
	}
	return m.ETag, nil
}

// Get implements Store.
func (s *DirStore) Get(ctx context.Context, key string) (*Object, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.meta(p)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if notExist(err) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("objstore: get %s: %w", key, err)
	}
	return &Object{Body: b, ContentType: m.ContentType, CacheControl: m.CacheControl, ETag: m.ETag}, nil
}

package objstore_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"danmaku/internal/objstore"
	"danmaku/internal/objstore/objstoretest"
)

func TestMemoryStore(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return objstore.NewMemoryStore() })
}

func TestDirStore(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newDirStore(t, t.TempDir()) })
}

func newDirStore(t *testing.T, dir string) *objstore.DirStore {
	t.Helper()
	s, err := objstore.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"rooms/r1/s/1700000000.msgpack", true},
		{"rooms/r1/live.json", true},
		{".hidden/a", true},
		{"a..b", true},
		{"", false},
		{"/abs", false},
		{"a/../b", false},
		{"..", false},
		{"../a", false},
		{"a//b", false},
		{"./a", false},
		{"a/.", false},
		{"a/", false},
		{`a\b`, false},
		{`..\a`, false},
	}
	for _, tt := range tests {
		err := objstore.CheckKey(tt.key)
		if tt.ok && err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", tt.key, err)
		}
		if !tt.ok && !errors.Is(err, objstore.ErrBadKey) {
			t.Errorf("CheckKey(%q) = %v, want ErrBadKey", tt.key, err)
		}
	}
}

func TestETagOf(t *testing.T) {
	// S3's ETag of a single-part upload: the quoted hex MD5.
	if got, want := objstore.ETagOf(nil), `"d41d8cd98f00b204e9800998ecf8427e"`; got != want {
		t.Fatalf("ETagOf(nil) = %s, want %s", got, want)
	}
	if objstore.ETagOf([]byte("a")) == objstore.ETagOf([]byte("b")) {
		t.Fatal("different bodies share an ETag")
	}
}

func TestDirStoreSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const key = "rooms/r1/s/1700000000.msgpack"
	s1 := newDirStore(t, dir)
	etag, err := s1.Put(ctx, key, []byte("segment"), objstore.PutOptions{
		ContentType: "application/msgpack", CacheControl: "public, max-age=31536000, immutable", IfNoneMatch: true,
	})
	if err != nil {
		t.Fatal(err)
	}

	s2 := newDirStore(t, dir)
	o, err := s2.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Body) != "segment" || o.ContentType != "application/msgpack" ||
		o.CacheControl != "public, max-age=31536000, immutable" || o.ETag != etag {
		t.Fatalf("after reopen: %+v (ETag want %s)", o, etag)
	}
	// The conditions see what the first store wrote.
	if _, err := s2.Put(ctx, key, []byte("again"), objstore.PutOptions{IfNoneMatch: true}); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("IfNoneMatch after reopen: %v, want ErrPrecondition", err)
	}
	if _, err := s2.Put(ctx, key, []byte("moved"), objstore.PutOptions{IfMatch: etag}); err != nil {
		t.Fatalf("IfMatch with the ETag from before reopen: %v", err)
	}
}

// A crash between renaming the body and writing its sidecar leaves a file
// without meta: it must stay invisible, and a retried conditional put must
// succeed over it.
func TestDirStoreStrayFileIsNotFound(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newDirStore(t, dir)
	const key = "rooms/r1/s/1700000000.msgpack"
	p := filepath.Join(dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("half written"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get of a file without sidecar: %v, want ErrNotFound", err)
	}
	if _, err := s.Put(ctx, key, []byte("segment"), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("IfNoneMatch Put over a stray file: %v", err)
	}
	o, err := s.Get(ctx, key)
	if err != nil || string(o.Body) != "segment" {
		t.Fatalf("Get after recovery: %v, %v", o, err)
	}
}

// Keys must never reach another key's sidecar: "x.meta" is where the headers
// of "x" live, and "x.meta/y" would need a directory there.
func TestDirStoreMetaKeysDoNotCollide(t *testing.T) {
	ctx := context.Background()
	s := newDirStore(t, t.TempDir())
	opts := objstore.PutOptions{ContentType: "application/json", CacheControl: "public, max-age=1"}
	etag, err := s.Put(ctx, "a", []byte("object a"), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a.meta", "a.meta/b", "dir/x.meta", ".meta"} {
		if _, err := s.Put(ctx, key, []byte(`{"content_type":"text/html","etag":"forged"}`), objstore.PutOptions{}); !errors.Is(err, objstore.ErrBadKey) {
			t.Errorf("Put(%q): %v, want ErrBadKey", key, err)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrBadKey) {
			t.Errorf("Get(%q): %v, want ErrBadKey", key, err)
		}
	}
	o, err := s.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Body) != "object a" || o.ContentType != "application/json" || o.ETag != etag {
		t.Fatalf("object a changed: %+v", o)
	}
	// ".meta" inside a name is fine.
	if _, err := s.Put(ctx, "a.metadata", []byte("x"), opts); err != nil {
		t.Fatalf(`Put("a.metadata"): %v`, err)
	}
}

// A key naming a directory (a prefix of other keys) is simply missing.
func TestDirStoreDirectoryIsNotFound(t *testing.T) {
	ctx := context.Background()
	s := newDirStore(t, t.TempDir())
	if _, err := s.Put(ctx, "rooms/r1/live.json", []byte("{}"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"rooms", "rooms/r1"} {
		if _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get(%q): %v, want ErrNotFound", key, err)
		}
	}
}

func TestDirStoreLeavesNoTempFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newDirStore(t, dir)
	for i := range 5 {
		if _, err := s.Put(ctx, "rooms/r1/live.json", []byte{byte(i)}, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

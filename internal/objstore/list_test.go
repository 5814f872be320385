package objstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"danmaku/internal/objstore"
	"danmaku/internal/testenv"
)

// listStore is a store that can also list; every implementation runs the
// same cases.
type listStore interface {
	objstore.Store
	objstore.Lister
}

func listAll(t *testing.T, s objstore.Lister, prefix, after string) []string {
	t.Helper()
	var out []string
	if err := s.List(context.Background(), prefix, after, func(k string) bool {
		out = append(out, k)
		return true
	}); err != nil {
		t.Fatalf("List(%q, %q): %v", prefix, after, err)
	}
	return out
}

func testLister(t *testing.T, open func(t *testing.T) listStore) {
	ctx := context.Background()
	keys := []string{
		"audit/a/20261201T1100Z/n1.x",
		"audit/a/20261201T1100Z/n2.x",
		"audit/a/20261201T1101Z/n1.x",
		"audit/ab/20261201T1100Z/n1.x",
		"audit/b/20261201T1102Z/n1.x",
		"rooms/a/s/1.msgpack",
	}
	fill := func(t *testing.T) listStore {
		s := open(t)
		for _, k := range slices.Backward(keys) { // written out of order
			if _, err := s.Put(ctx, k, []byte(k), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	cases := []struct {
		name, prefix, after string
		want                []string
	}{
		{"everything", "", "", keys},
		{"a prefix ending in /", "audit/a/", "", keys[:3]},
		{"a prefix inside a name", "audit/a", "", keys[:4]},
		// A minute's keys sort after the bare minute: all are listed.
		{"start after a minute", "audit/a/", "audit/a/20261201T1100Z", keys[:3]},
		{"start after a key", "audit/a/", "audit/a/20261201T1100Z/n1.x", keys[1:3]},
		{"start after everything", "audit/", "audit/c", nil},
		{"no such prefix", "nothing/", "", nil},
	}
	s := fill(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := listAll(t, s, c.prefix, c.after); !slices.Equal(got, c.want) {
				t.Fatalf("List(%q, %q) = %q, want %q", c.prefix, c.after, got, c.want)
			}
		})
	}
	t.Run("stops when told", func(t *testing.T) {
		n := 0
		if err := s.List(ctx, "audit/", "", func(string) bool { n++; return n < 2 }); err != nil || n != 2 {
			t.Fatalf("saw %d keys (err %v), want to stop at 2", n, err)
		}
	})
	t.Run("bad prefix", func(t *testing.T) {
		for _, p := range []string{"/abs", "../up/", "a/../../b"} {
			if err := s.List(ctx, p, "", func(string) bool { return true }); !errors.Is(err, objstore.ErrBadKey) {
				t.Fatalf("List(%q): %v, want ErrBadKey", p, err)
			}
		}
	})
	t.Run("delete", func(t *testing.T) {
		s := fill(t)
		if err := s.Delete(ctx, keys[0]); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, keys[0]); err != nil {
			t.Fatalf("deleting a missing key: %v", err)
		}
		if _, err := s.Get(ctx, keys[0]); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("Get after Delete: %v", err)
		}
		if got := listAll(t, s, "audit/a/", ""); !slices.Equal(got, keys[1:3]) {
			t.Fatalf("after Delete: %q", got)
		}
		if err := s.Delete(ctx, "../x"); !errors.Is(err, objstore.ErrBadKey) {
			t.Fatalf("Delete(../x): %v", err)
		}
	})
}

func TestMemoryStoreLister(t *testing.T) {
	testLister(t, func(*testing.T) listStore { return objstore.NewMemoryStore() })
}

func TestDirStoreLister(t *testing.T) {
	testLister(t, func(t *testing.T) listStore { return newDirStore(t, t.TempDir()) })
}

func TestS3StoreLister(t *testing.T) {
	env := testenv.S3(t)
	testLister(t, func(t *testing.T) listStore { return newS3Store(t, env, testPrefix(), nil) })
}

// TestDirStoreListSkipsNonObjects: sidecars, temporary files and a file
// without its sidecar are not listed, and Delete leaves no empty
// directories behind.
func TestDirStoreListSkipsNonObjects(t *testing.T) {
	dir := t.TempDir()
	s := newDirStore(t, dir)
	ctx := context.Background()
	if _, err := s.Put(ctx, "audit/r/m/obj", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"audit/r/m/.tmp-123", "audit/r/m/stray"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("y"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := listAll(t, s, "audit/", ""); !slices.Equal(got, []string{"audit/r/m/obj"}) {
		t.Fatalf("listed %q", got)
	}
	for _, f := range []string{"audit/r/m/.tmp-123", "audit/r/m/stray"} {
		os.Remove(filepath.Join(dir, f))
	}
	if err := s.Delete(ctx, "audit/r/m/obj"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "audit")); !os.IsNotExist(err) {
		t.Fatalf("emptied directories left behind: %v", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the root went too: %v", err)
	}
}

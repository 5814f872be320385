package rules_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/rules"
	"danmaku/internal/testenv"
)

// backends are the Store implementations the conformance suite runs on:
// memory, Redis on one server and on a cluster, and the object store on a
// directory and on S3 (versitygw, one server for the suite, a fresh prefix
// a store).
func backends(t *testing.T) []struct {
	name string
	open func(t *testing.T) rules.Store
} {
	out := []struct {
		name string
		open func(t *testing.T) rules.Store
	}{{"memory", func(*testing.T) rules.Store { return rules.NewMemoryStore() }}}
	for _, k := range redistest.Kinds() {
		out = append(out, struct {
			name string
			open func(t *testing.T) rules.Store
		}{k.Name, func(t *testing.T) rules.Store { return rules.NewRedisStore(k.Client(t)) }})
	}
	dir := func(t *testing.T) rules.Store {
		d, err := objstore.NewDirStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return rules.NewObjectStore(d, "rules/")
	}
	env := testenv.S3(t)
	if err := testenv.SetupBucket(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	s3 := func(t *testing.T) rules.Store {
		o, err := objstore.NewS3Store(context.Background(), objstore.S3Config{
			Bucket: env.Bucket, Prefix: "t-" + strings.ToLower(rand.Text()) + "/", Endpoint: env.Endpoint, Region: env.Region,
			PathStyle: true, AccessKey: env.AccessKey, SecretKey: env.SecretKey,
		})
		if err != nil {
			t.Fatal(err)
		}
		return rules.NewObjectStore(o, "rules/")
	}
	return append(out, struct {
		name string
		open func(t *testing.T) rules.Store
	}{"dir", dir}, struct {
		name string
		open func(t *testing.T) rules.Store
	}{"s3", s3})
}

// TestStoreConformance runs every Store through the same cases, each on an
// empty store.
func TestStoreConformance(t *testing.T) {
	ctx := context.Background()
	at := time.Unix(1_800_000_000, 0).UTC()
	meta := func(note string) rules.Meta { return rules.Meta{By: "sha256:0123456789abcdef", At: at, Note: note} }
	cases := []struct {
		name string
		run  func(t *testing.T, s rules.Store)
	}{
		{"empty", func(t *testing.T, s rules.Store) {
			if h, err := s.Head(ctx, rules.KindWords); err != nil || h != 0 {
				t.Fatalf("Head = %d, %v; want 0", h, err)
			}
			if _, err := s.Get(ctx, rules.KindWords, 0); !errors.Is(err, rules.ErrNoVersion) {
				t.Fatalf("Get(head) of nothing: %v, want ErrNoVersion", err)
			}
			if h, err := s.History(ctx, rules.KindWords, 10); err != nil || len(h) != 0 {
				t.Fatalf("History = %v, %v", h, err)
			}
			if _, err := rules.Rollback(ctx, s, rules.KindWords, 0, meta(""), nil); !errors.Is(err, rules.ErrNoVersion) {
				t.Fatalf("Rollback of nothing: %v", err)
			}
		}},
		{"push, get, history; kinds apart", func(t *testing.T, s rules.Store) {
			for i, body := range []string{"spam\n", "spam\nscam\n", ""} {
				v, err := s.Push(ctx, rules.KindWords, []byte(body), meta(fmt.Sprint("push ", i)))
				if err != nil || v.Version != int64(i+1) || v.Size != len(body) || len(v.SHA256) != 64 || v.By == "" || !v.At.Equal(at) {
					t.Fatalf("Push %d = %+v, %v", i, v, err)
				}
			}
			if _, err := s.Push(ctx, rules.KindLimits, []byte(`{"rules":[]}`), meta("")); err != nil {
				t.Fatal(err)
			}
			if h, _ := s.Head(ctx, rules.KindWords); h != 3 {
				t.Fatalf("words head %d, want 3", h)
			}
			if h, _ := s.Head(ctx, rules.KindLimits); h != 1 {
				t.Fatalf("limits head %d, want 1: kinds count apart", h)
			}
			d, err := s.Get(ctx, rules.KindWords, 2)
			if err != nil || string(d.Body) != "spam\nscam\n" || d.Version.Version != 2 || d.Note != "push 1" {
				t.Fatalf("Get(2) = %+v %q, %v", d.Version, d.Body, err)
			}
			if d, err := s.Get(ctx, rules.KindWords, 0); err != nil || d.Version.Version != 3 || len(d.Body) != 0 {
				t.Fatalf("Get(head) = %+v %q, %v: an empty list is a version", d.Version, d.Body, err)
			}
			h, err := s.History(ctx, rules.KindWords, 2)
			if err != nil || len(h) != 2 || h[0].Version != 3 || h[1].Version != 2 || h[1].Note != "push 1" {
				t.Fatalf("History(2) = %+v, %v", h, err)
			}
			if _, err := s.Get(ctx, rules.KindWords, 9); !errors.Is(err, rules.ErrNoVersion) {
				t.Fatalf("Get(9): %v, want ErrNoVersion", err)
			}
		}},
		{"rollback is a new version", func(t *testing.T, s rules.Store) {
			for _, body := range []string{"a\n", "b\n", "c\n"} {
				if _, err := s.Push(ctx, rules.KindWords, []byte(body), meta("")); err != nil {
					t.Fatal(err)
				}
			}
			v, err := rules.Rollback(ctx, s, rules.KindWords, 0, meta("undo"), nil)
			if err != nil || v.Version != 4 || v.RollbackOf != 2 || v.Note != "undo" {
				t.Fatalf("Rollback() = %+v, %v; want version 4 copying 2", v, err)
			}
			if d, _ := s.Get(ctx, rules.KindWords, 0); string(d.Body) != "b\n" {
				t.Fatalf("head body %q after rollback, want b", d.Body)
			}
			v, err = rules.Rollback(ctx, s, rules.KindWords, 1, meta(""), nil)
			if err != nil || v.RollbackOf != 1 {
				t.Fatalf("Rollback(1) = %+v, %v", v, err)
			}
			if d, _ := s.Get(ctx, rules.KindWords, 0); string(d.Body) != "a\n" {
				t.Fatalf("head body %q after rollback to 1, want a", d.Body)
			}
			refuse := errors.New("no")
			if _, err := rules.Rollback(ctx, s, rules.KindWords, 3, meta(""), func([]byte) error { return refuse }); !errors.Is(err, refuse) {
				t.Fatalf("Rollback past a refusing check: %v", err)
			}
			if h, _ := s.Head(ctx, rules.KindWords); h != 5 {
				t.Fatalf("head %d after a refused rollback, want 5", h)
			}
		}},
		{"keeps the last versions", func(t *testing.T, s rules.Store) {
			n := rules.KeepVersions + 5
			for i := range n {
				if _, err := s.Push(ctx, rules.KindLimits, []byte(fmt.Sprint(i)), meta("")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Get(ctx, rules.KindLimits, 5); !errors.Is(err, rules.ErrNoVersion) {
				t.Fatalf("Get(5) of %d versions: %v, want ErrNoVersion", n, err)
			}
			if d, err := s.Get(ctx, rules.KindLimits, 6); err != nil || string(d.Body) != "5" {
				t.Fatalf("Get(6) = %q, %v", d.Body, err)
			}
			h, err := s.History(ctx, rules.KindLimits, 1000)
			if err != nil || len(h) != rules.KeepVersions || h[0].Version != int64(n) {
				t.Fatalf("History = %d versions from %d, %v", len(h), h[0].Version, err)
			}
		}},
		{"concurrent pushes take distinct numbers", func(t *testing.T, s rules.Store) {
			const pushers, each = 4, 5
			var wg sync.WaitGroup
			errs := make(chan error, pushers*each)
			for p := range pushers {
				wg.Go(func() {
					for i := range each {
						if _, err := s.Push(ctx, rules.KindWords, []byte(fmt.Sprintf("p%d-%d\n", p, i)), meta("")); err != nil {
							errs <- err
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			h, err := s.History(ctx, rules.KindWords, 100)
			if err != nil || len(h) != pushers*each || h[0].Version != pushers*each {
				t.Fatalf("History after %d concurrent pushes: %d versions, %v", pushers*each, len(h), err)
			}
			seen := map[string]bool{}
			for _, v := range h {
				seen[v.SHA256] = true
			}
			if len(seen) != pushers*each {
				t.Fatalf("%d distinct documents among %d versions: a push overwrote another", len(seen), len(h))
			}
		}},
		{"bad kind", func(t *testing.T, s rules.Store) {
			if _, err := s.Push(ctx, "Words!", nil, meta("")); !errors.Is(err, rules.ErrBadKind) {
				t.Fatalf("Push of a bad kind: %v", err)
			}
		}},
	}
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, b.open(t)) })
			}
		})
	}
}

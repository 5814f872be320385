package rules_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"danmaku/internal/redisx/redistest"
	"danmaku/internal/rules"
)

// backends are the Store implementations the conformance suite runs on:
// memory, Redis on one server and on a cluster.
func backends() []struct {
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
	return out
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
		{"bad kind", func(t *testing.T, s rules.Store) {
			if _, err := s.Push(ctx, "Words!", nil, meta("")); !errors.Is(err, rules.ErrBadKind) {
				t.Fatalf("Push of a bad kind: %v", err)
			}
		}},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, b.open(t)) })
			}
		})
	}
}

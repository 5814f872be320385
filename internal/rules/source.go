package rules

import (
	"context"
	"sync"

	"danmaku/internal/ratelimit"
)

// Follower reads the version of one kind in force in a Store, as a node
// polls it: the head's number every call, the body only when the number
// moved. Safe for concurrent use.
type Follower struct {
	store Store
	kind  string
	mu    sync.Mutex
	last  Document // the last body read
}

// NewFollower follows kind in store.
func NewFollower(store Store, kind string) *Follower {
	return &Follower{store: store, kind: kind}
}

// Load returns the version in force and its body; version 0 (and no body)
// when nothing was pushed.
func (f *Follower) Load(ctx context.Context) (int64, []byte, error) {
	head, err := f.store.Head(ctx, f.kind)
	if err != nil || head == 0 {
		return 0, nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if head == f.last.Version.Version {
		return head, f.last.Body, nil
	}
	d, err := f.store.Get(ctx, f.kind, head)
	if err != nil {
		return 0, nil, err
	}
	f.last = d
	return head, d.Body, nil
}

var _ ratelimit.RuleSource = (*LimitSource)(nil)

// LimitSource is the rate-limit rules in force in a Store, as a Limiter
// reads them (ratelimit.RuleSource).
type LimitSource struct{ f *Follower }

// NewLimitSource follows the KindLimits documents of store.
func NewLimitSource(store Store) *LimitSource {
	return &LimitSource{f: NewFollower(store, KindLimits)}
}

// Load implements ratelimit.RuleSource. Nothing pushed yet is
// ratelimit.ErrNoRules: the node keeps the rules it started with.
func (l *LimitSource) Load(ctx context.Context) ([]byte, error) {
	v, body, err := l.f.Load(ctx)
	if err == nil && v == 0 {
		return nil, ratelimit.ErrNoRules
	}
	return body, err
}

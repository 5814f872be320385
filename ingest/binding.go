package ingest

import (
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"danmaku/auth"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
)

// defaultBindingStale is how long after its newest report a primary still
// counts as live. Three of this node's load syncs (one a second): a sync
// that fails or comes late, or a reporter's clock a little behind, does not
// make a live primary look dead and split its users' buckets; a dead one
// lets its users go to their fallbacks within about four seconds.
const defaultBindingStale = 3 * time.Second

// Verdict is a Binding's decision on one user's barrage.
type Verdict uint8

// Verdicts. Allowed tells which take the barrage.
const (
	// Unbound: the token names no ingest addresses (signed before they
	// were written), or this node does not know its own address: any node
	// the token names takes it.
	Unbound Verdict = iota
	// Primary: this node is the user's own.
	Primary
	// Fallback: this node is one of the user's fallbacks and the primary is
	// not live (stale, draining, absent from the load table) — or this node
	// has not read the load table yet, and so cannot tell.
	Fallback
	// NotPrimary: this node is a fallback and the primary is live; the
	// barrage belongs there (421 not_primary).
	NotPrimary
	// NotIngest: the token names this node's address, but not as one of its
	// ingest addresses (403 wrong_node).
	NotIngest
)

var verdictNames = [...]string{"unbound", "primary", "fallback", "not_primary", "not_ingest"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "unknown"
}

// Allowed reports whether v takes the barrage.
func (v Verdict) Allowed() bool { return v <= Fallback }

// Binding keeps each user on one ingest node, so that the per-user bucket,
// kept locally, is the user's only one: the token's first ingest address is
// the user's primary (the gslb's rendezvous choice), and another node the
// token names takes the user's barrage only while the primary is not live
// in this node's last load snapshot. When the primary dies, its users move
// to a fallback, whose bucket starts full: the users' limit is exact per
// node, and at most briefly doubled when a node dies.
//
// Liveness is judged at request time from the newest report time of each
// ingest node in the last snapshot, so a primary that stops reporting is let
// go Stale after its last report however long ago the snapshot was taken,
// and a snapshot that can no longer be read (the load table is down) lets
// every fallback take its users: barrage keeps flowing, with per-node
// buckets. A Binding is safe for concurrent use: Update swaps in an
// immutable map.
type Binding struct {
	self  string
	stale time.Duration
	live  atomic.Pointer[map[string]time.Time] // ingest addr → newest report; nil before the first Update
}

// NewBinding returns the binding of the ingest node handed out as self
// (Config.Addr; empty: every verdict is Unbound). stale is how long after
// its newest report a node counts as live; zero: 3 s.
func NewBinding(self string, stale time.Duration) *Binding {
	if stale <= 0 {
		stale = defaultBindingStale
	}
	return &Binding{self: self, stale: stale}
}

// Update records the ingest nodes of a load snapshot: each address's newest
// report, draining nodes left out (they take no new users, and their users
// should move).
func (b *Binding) Update(loads []loadtable.NodeLoad) {
	m := make(map[string]time.Time, len(loads))
	for _, l := range loads {
		if l.Kind != loadtable.KindIngest || l.Draining || l.Addr == "" {
			continue
		}
		// Seen: by this node's clock (the view's), not the reporter's.
		if at, ok := m[l.Addr]; !ok || l.Seen().After(at) {
			m[l.Addr] = l.Seen()
		}
	}
	b.live.Store(&m)
}

// Check decides whether this node takes the barrage of the user whose
// verified token is c, at now (this node's clock).
func (b *Binding) Check(c *auth.Claims, now time.Time) Verdict {
	if c.Ingests <= 0 || c.Ingests > len(c.Addrs) || b.self == "" {
		return Unbound
	}
	ingests := c.IngestAddrs()
	if ingests[0] == b.self {
		return Primary
	}
	if !slices.Contains(ingests[1:], b.self) {
		return NotIngest
	}
	live := b.live.Load()
	if live == nil {
		return Fallback
	}
	if at, ok := (*live)[ingests[0]]; ok && now.Sub(at) <= b.stale {
		return NotPrimary
	}
	return Fallback
}

// refusal is the client's answer to a verdict that does not take the
// barrage: 421 not_primary with Retry-After (the SDK goes back to the first
// ingest address), or 403 wrong_node.
func (v Verdict) refusal() *httpx.Error {
	if v == NotIngest {
		return httpx.Errorf(http.StatusForbidden, "wrong_node", "token was not issued for this node as an ingest")
	}
	e := httpx.Errorf(http.StatusMisdirectedRequest, "not_primary", "this user's ingest node is live: send to the first ingest address of the entry")
	e.RetryAfter = time.Second
	return e
}

package gslb

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/netip"
	"sort"
	"sync/atomic"
	"time"

	"danmaku/internal/clock"
)

// Allocator defaults.
const (
	defaultSync     = 5 * time.Millisecond
	defaultStale    = time.Second
	defaultHandOut  = 16
	defaultOverload = 0.95
	defaultMaxCPU   = 0.90
	defaultFallback = 2
)

// ErrNoNodes is returned when no healthy node of a kind serves the client.
var ErrNoNodes = errors.New("gslb: no healthy node")

// AllocatorConfig configures an Allocator.
type AllocatorConfig struct {
	// Table is the load table to sync. Required.
	Table LoadTable
	// Sync is how often the table is synced. Zero: 5 ms.
	Sync time.Duration
	// Stale drops a node whose newest report is older than this. Zero: 1 s.
	Stale time.Duration
	// HandOut is how many times an edge address is handed out before the
	// next one in load order is used. Zero: 16.
	HandOut int
	// Overload drops a node whose Conns/Capacity reaches it. Zero: 0.95.
	Overload float64
	// MaxCPU drops a node whose CPU reaches it. Zero: 0.90.
	MaxCPU float64
	// Fallbacks is how many extra addresses follow the chosen one. Zero: 2;
	// negative: none.
	Fallbacks int
	// Classify maps a client IP to its line ("" = unknown, served by BGP
	// nodes). Nil: every client is unknown.
	Classify func(netip.Addr) string
	// Clock tells the time. Nil: real clock.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Allocator chooses addresses from a periodically synced load table.
type Allocator struct {
	cfg  AllocatorConfig
	snap atomic.Pointer[snapshot]
	// handed counts edge hand-outs; its value picks the position in the
	// sorted list, so consecutive requests walk the list HandOut at a time.
	handed atomic.Uint64
	// syncFailures counts failed syncs; the last good snapshot stays in use.
	syncFailures atomic.Uint64
}

type snapNode struct {
	NodeLoad
	key      uint64  // hash64 of ID, for rendezvous hashing
	headroom float64 // free share of capacity, > 0
}

// snapshot is immutable once published.
type snapshot struct {
	edges   map[string][]snapNode // by line, sorted by load; "" holds BGP nodes
	ingests map[string][]snapNode
	at      time.Time
}

// NewAllocator checks cfg and returns an Allocator. It starts nothing; call
// Run, or SyncOnce in tests.
func NewAllocator(cfg AllocatorConfig) (*Allocator, error) {
	if cfg.Table == nil {
		return nil, errors.New("gslb: allocator: Table is required")
	}
	if cfg.Sync == 0 {
		cfg.Sync = defaultSync
	}
	if cfg.Stale == 0 {
		cfg.Stale = defaultStale
	}
	if cfg.HandOut == 0 {
		cfg.HandOut = defaultHandOut
	}
	if cfg.Overload == 0 {
		cfg.Overload = defaultOverload
	}
	if cfg.MaxCPU == 0 {
		cfg.MaxCPU = defaultMaxCPU
	}
	if cfg.Fallbacks == 0 {
		cfg.Fallbacks = defaultFallback
	}
	if cfg.Fallbacks < 0 {
		cfg.Fallbacks = 0
	}
	if cfg.Sync < 0 || cfg.Stale < cfg.Sync || cfg.HandOut < 0 {
		return nil, errors.New("gslb: allocator: need 0 < Sync <= Stale and HandOut >= 0")
	}
	if cfg.Overload <= 0 || cfg.Overload > 1 || cfg.MaxCPU <= 0 || cfg.MaxCPU > 1 {
		return nil, errors.New("gslb: allocator: Overload and MaxCPU must be in (0, 1]")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Allocator{cfg: cfg}
	a.snap.Store(&snapshot{edges: map[string][]snapNode{}, ingests: map[string][]snapNode{}})
	return a, nil
}

// Pruner is a LoadTable that can forget old reports. Nodes that die
// without removing themselves would otherwise stay in the table, and every
// sync would read them.
type Pruner interface {
	Prune(ctx context.Context, cutoff time.Time) (int, error)
}

// pruneEvery and pruneAge: reports older than a minute (far beyond Stale,
// so reporter clock skew cannot prune a live node) are removed twice a minute.
const (
	pruneEvery = 30 * time.Second
	pruneAge   = time.Minute
)

// Run syncs the table every Sync interval until ctx is done, and prunes
// long-dead nodes when the table supports it.
func (a *Allocator) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Sync)
	defer t.Stop()
	pruner, _ := a.cfg.Table.(Pruner)
	lastPrune := a.cfg.Clock.Now()
	for {
		if err := a.SyncOnce(ctx); err != nil && ctx.Err() == nil {
			if a.syncFailures.Add(1)%1000 == 1 {
				a.cfg.Logger.Warn("gslb: load table sync failed; keeping last good table", "err", err)
			}
		}
		if now := a.cfg.Clock.Now(); pruner != nil && now.Sub(lastPrune) >= pruneEvery {
			lastPrune = now
			if n, err := pruner.Prune(ctx, now.Add(-pruneAge)); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("gslb: prune failed", "err", err)
			} else if n > 0 {
				a.cfg.Logger.Info("gslb: pruned dead nodes from the load table", "count", n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// SyncOnce reads the table and publishes a new snapshot. On error the
// previous snapshot stays in use.
func (a *Allocator) SyncOnce(ctx context.Context) error {
	loads, err := a.cfg.Table.Snapshot(ctx)
	if err != nil {
		return err
	}
	now := a.cfg.Clock.Now()
	s := &snapshot{edges: map[string][]snapNode{}, ingests: map[string][]snapNode{}, at: now}
	for _, l := range loads {
		if l.Draining || now.Sub(l.At) > a.cfg.Stale || l.CPU >= a.cfg.MaxCPU {
			continue
		}
		use := l.CPU
		if l.Capacity > 0 {
			use = max(use, float64(l.Conns)/float64(l.Capacity))
		}
		if use >= a.cfg.Overload {
			continue
		}
		n := snapNode{NodeLoad: l, key: hash64(l.ID), headroom: 1 - use}
		switch l.Kind {
		case KindEdge:
			s.edges[l.Line] = append(s.edges[l.Line], n)
		case KindIngest:
			s.ingests[l.Line] = append(s.ingests[l.Line], n)
		}
	}
	for _, m := range []map[string][]snapNode{s.edges, s.ingests} {
		for _, ns := range m {
			sort.SliceStable(ns, func(i, j int) bool {
				if ns[i].headroom != ns[j].headroom {
					return ns[i].headroom > ns[j].headroom
				}
				return ns[i].ID < ns[j].ID
			})
		}
	}
	a.snap.Store(s)
	return nil
}

// Allocation is the addresses chosen for one client, best first. Ingest[0]
// is the user's own ingest node (the rendezvous choice): the one that keeps
// the user's bucket, and the only one that takes the user's barrage while
// it is live; the rest are fallbacks for when it is not.
type Allocation struct {
	Ingest []string
	Edge   []string
}

// Addrs returns the addresses a token binds the client to — the ingests in
// order, then the edges — and how many of them, from the first, are
// ingests: auth.Claims.Addrs and auth.Claims.Ingests.
func (a Allocation) Addrs() (addrs []string, ingests int) {
	addrs = make([]string, 0, len(a.Ingest)+len(a.Edge))
	addrs = append(append(addrs, a.Ingest...), a.Edge...)
	return addrs, len(a.Ingest)
}

// candidates returns the nodes serving line: the line's own, then BGP.
func candidates(m map[string][]snapNode, line string) (own, bgp []snapNode) {
	if line != "" {
		own = m[line]
	}
	return own, m[""]
}

// Allocate chooses addresses for user at ip. It does not allocate on the
// happy path beyond the returned slices.
func (a *Allocator) Allocate(user string, ip netip.Addr) (Allocation, error) {
	s := a.snap.Load()
	line := ""
	if a.cfg.Classify != nil && ip.IsValid() {
		line = a.cfg.Classify(ip)
	}
	var out Allocation
	own, bgp := candidates(s.edges, line)
	out.Edge = a.pickEdges(own, bgp)
	own, bgp = candidates(s.ingests, line)
	out.Ingest = a.pickIngests(user, own, bgp)
	if len(out.Edge) == 0 || len(out.Ingest) == 0 {
		return Allocation{}, ErrNoNodes
	}
	return out, nil
}

// pickEdges walks the load-sorted list HandOut hand-outs per address, so a
// burst of allocations spreads over the least loaded nodes instead of all
// landing on the one that looked least loaded at the last sync.
func (a *Allocator) pickEdges(own, bgp []snapNode) []string {
	n := len(own) + len(bgp)
	if n == 0 {
		return nil
	}
	at := func(i int) string {
		if i < len(own) {
			return own[i].Addr
		}
		return bgp[i-len(own)].Addr
	}
	pool := own
	if len(pool) == 0 {
		pool = bgp
	}
	c := a.handed.Add(1) - 1
	first := int((c / uint64(a.cfg.HandOut)) % uint64(len(pool)))
	k := min(n, 1+a.cfg.Fallbacks)
	out := make([]string, 0, k)
	out = append(out, at(first))
	for i := 0; len(out) < k && i < n; i++ {
		if i != first {
			out = append(out, at(i))
		}
	}
	return out
}

// pickIngests ranks nodes by weighted rendezvous hashing: score =
// headroom / -ln(u) with u uniform in (0,1) from hash(user, node). A user
// stays on the same node while it is healthy (per-user limits stay local and
// exact), and a node's share follows its headroom.
func (a *Allocator) pickIngests(user string, own, bgp []snapNode) []string {
	pool := own
	if len(pool) == 0 {
		pool = bgp
	}
	if len(pool) == 0 {
		return nil
	}
	uh := hash64(user)
	k := min(len(pool), 1+a.cfg.Fallbacks)
	type scored struct {
		addr  string
		score float64
	}
	best := make([]scored, 0, k+1)
	for i := range pool {
		h := mix(uh ^ pool[i].key)
		u := (float64(h>>11) + 0.5) / (1 << 53)
		sc := pool[i].headroom / -math.Log(u)
		// Insertion into a short sorted list: k is tiny.
		j := len(best)
		best = append(best, scored{pool[i].Addr, sc})
		for j > 0 && best[j-1].score < sc {
			best[j] = best[j-1]
			j--
		}
		best[j] = scored{pool[i].Addr, sc}
		if len(best) > k {
			best = best[:k]
		}
	}
	out := make([]string, len(best))
	for i, b := range best {
		out[i] = b.addr
	}
	return out
}

// hash64 is FNV-1a: fixed, so every gslb process (and every restart)
// ranks a user's ingest nodes the same way and the user stays on one node.
// mix spreads its output before use.
func hash64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is a 64-bit finaliser (splitmix64) so that xor-ed hashes are uniform.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// SnapshotAge returns how old the snapshot in use is.
func (a *Allocator) SnapshotAge() time.Duration {
	return a.cfg.Clock.Now().Sub(a.snap.Load().at)
}

package gslb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
)

// Allocator defaults.
const (
	defaultSync     = 5 * time.Millisecond
	defaultMaxSync  = 50 * time.Millisecond
	defaultStale    = time.Second
	defaultMaxAge   = 3 * time.Second
	defaultOverload = loadtable.DefaultOverload
	defaultMaxCPU   = loadtable.DefaultMaxCPU
	defaultFallback = 2
)

// maxFallbacks bounds Fallbacks: the ranking keeps its scores in a fixed
// array so that an allocation does not allocate, and every address handed
// out is bound into the dynamic token, which has to stay small.
const maxFallbacks = 8

// ageCheckEvery: one allocation in this many per line reads the clock to
// find a table that has outlived MaxAge. Reading the clock on every
// allocation would cost more than the rest of the decision; the sync loop
// catches an old table when allocations are few.
const ageCheckEvery = 64

// maxLines bounds the line labels of danmaku_gslb_allocations_total, "bgp"
// and "other" included: lines beyond it (a misconfigured fleet) share the
// label "other" (and its hand-out sequence).
const maxLines = 64

// Line labels of the allocation counter for clients served by BGP nodes and
// for lines beyond maxLines.
const (
	lineBGP   = "bgp"
	lineOther = "other"
)

var (
	// ErrNoNodes is returned when no healthy node of a kind serves the client.
	ErrNoNodes = errors.New("gslb: no healthy node")
	// ErrTableStale is returned while the table in use is older than
	// MaxAge (syncs have failed for that long) or before the first good
	// sync: loads that old no longer say where clients fit.
	ErrTableStale = errors.New("gslb: load table too old")
)

// AllocatorConfig configures an Allocator.
type AllocatorConfig struct {
	// Table is the load table to sync. Required.
	Table loadtable.Table
	// Sync is how often the table is synced while it brings news. Zero:
	// 5 ms.
	Sync time.Duration
	// MaxSync is the longest time between two syncs. After a sync that
	// read no news (loadtable.SyncStats.News: no node came, went, or moved
	// what the allocator decides from — keep-alives are not news) the
	// interval doubles, from Sync up to MaxSync; a sync that read news, or
	// failed, brings it back to Sync. A load written to the table is in
	// the snapshot within MaxSync (and the read's own time) of its write.
	// The loop also wakes Sync after the first healthy node could turn
	// stale, so a dead node is dropped within Stale + Sync as before.
	// Zero: 50 ms; below Sync: every Sync whatever was read (the allocator
	// as it was, kept for comparisons).
	MaxSync time.Duration
	// Stale drops a node whose newest report is older than this. Zero: 1 s.
	Stale time.Duration
	// MaxAge is how long the last good table is used while syncs fail;
	// past it Allocate returns ErrTableStale. Zero: 3 s.
	MaxAge time.Duration
	// Overload drops a node whose Conns/Capacity reaches it. Zero: 0.95.
	Overload float64
	// MaxCPU drops a node whose CPU reaches it. Zero: 0.90.
	MaxCPU float64
	// Fallbacks is how many extra addresses follow the chosen one, at most
	// 8. Zero: 2; negative: none.
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
	cfg     AllocatorConfig
	created time.Time
	snap    atomic.Pointer[snapshot]

	// handed holds each line's hand-out counter, by metric label. A
	// counter outlives the snapshots (every sync would otherwise restart
	// every line's sequence at the same node) and is the line's allocation
	// count for the metrics. Allocations never take mu.
	mu     sync.Mutex
	handed map[string]*counter

	// view is the allocator's copy of the table, read by SyncOnce only.
	viewMu sync.Mutex
	view   *loadtable.View

	syncErrors   atomic.Uint64
	syncDuration prometheus.Histogram
	// What syncs read: bytes of reports, reports and removals, whole
	// reads, undecodable records skipped.
	syncBytes, syncChanged, syncFull, syncSkipped atomic.Uint64
}

// counter is padded to a cache line of its own: lines' counters are hot
// and written from every core.
type counter struct {
	n     atomic.Uint64
	label string
	_     [40]byte
}

// snapNode is what an allocation reads of a node: small, so that ranking
// every node of a line stays within a few cache lines.
type snapNode struct {
	id, addr string
	key      uint64 // hash64 of id, for rendezvous hashing
	// weight is the node's headroom, > 0: for an edge, the connections it
	// can still take before the allocator drops it; for an ingest, the free
	// share of its capacity.
	weight    float64
	invWeight float64 // 1/weight
}

// pool is one line's nodes of one kind, by ID.
type pool struct {
	nodes []snapNode
	cum   []float64 // cum[i] = sum of nodes[:i+1] weights (edges only)
}

// lineState is what a snapshot holds for one line.
type lineState struct {
	edges, ingests pool
	handed         *counter
}

// Node states counted at each sync (danmaku_gslb_nodes).
const (
	stateHealthy = iota
	stateStale
	stateDraining
	stateOverloaded
	numStates
)

var stateNames = [numStates]string{"healthy", "stale", "draining", "overloaded"}

// snapshot is immutable once published, but for expired.
type snapshot struct {
	lines map[string]*lineState // by line; "" holds BGP nodes
	bgp   *lineState            // lines[""], never nil
	at    time.Time             // when the table was read; zero: never
	// expired is set once the snapshot is older than MaxAge; a good sync
	// replaces the snapshot and with it the flag.
	expired atomic.Bool
	// nodes counts the table's nodes by kind (edge, ingest) and state.
	nodes [2][numStates]int
	// rebuildBy is when the first healthy node turns stale: until then a
	// sync that read no change may keep this snapshot's nodes.
	rebuildBy time.Time
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
	if cfg.MaxAge == 0 {
		cfg.MaxAge = defaultMaxAge
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
	if cfg.Sync < 0 || cfg.Stale < cfg.Sync || cfg.MaxAge <= cfg.Sync {
		return nil, errors.New("gslb: allocator: need 0 < Sync <= Stale and Sync < MaxAge")
	}
	if cfg.MaxSync == 0 {
		// Within the bounds below for a short Stale or MaxAge.
		cfg.MaxSync = max(cfg.Sync, min(defaultMaxSync, cfg.Stale, cfg.MaxAge/2))
	}
	if cfg.MaxSync < cfg.Sync {
		cfg.MaxSync = cfg.Sync // every Sync
	}
	if cfg.Stale < cfg.MaxSync || cfg.MaxAge <= cfg.MaxSync {
		return nil, errors.New("gslb: allocator: need MaxSync <= Stale and MaxSync < MaxAge")
	}
	if cfg.Fallbacks > maxFallbacks {
		return nil, fmt.Errorf("gslb: allocator: Fallbacks %d over %d", cfg.Fallbacks, maxFallbacks)
	}
	if cfg.Overload <= 0 || cfg.Overload > 1 || cfg.MaxCPU <= 0 || cfg.MaxCPU > 1 {
		return nil, errors.New("gslb: allocator: Overload and MaxCPU must be in (0, 1]")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Allocator{
		cfg:     cfg,
		created: cfg.Clock.Now(),
		handed:  map[string]*counter{},
		view:    loadtable.NewView(cfg.Table),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "danmaku_gslb_sync_duration_seconds",
			Help: "Time to read the load table and publish a snapshot, failed syncs included.",
			// 100 µs .. 1.6 s: a sync should take well under the 5 ms interval.
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}),
	}
	// A quiet allocator syncs every MaxSync: it must not read whole each
	// time.
	a.view.WholeAfterGap = max(loadtable.DefaultWholeAfterGap, 2*cfg.MaxSync)
	a.view.News = func(l, last loadtable.NodeLoad) bool {
		return loadtable.News(l, last, cfg.Overload, cfg.MaxCPU)
	}
	// No table yet: allocations answer ErrTableStale, not ErrNoNodes, until
	// the first good sync.
	s := &snapshot{bgp: &lineState{handed: a.counterFor("")}}
	s.lines = map[string]*lineState{"": s.bgp}
	s.expired.Store(true)
	a.snap.Store(s)
	return a, nil
}

// counterFor returns line's hand-out counter, creating it on first use.
// Counters are kept by label, so a line that is named like a label shares
// that label's counter rather than making a second series of it.
func (a *Allocator) counterFor(line string) *counter {
	label := line
	if line == "" {
		label = lineBGP
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.handed[label]; c != nil {
		return c
	}
	if len(a.handed) >= maxLines-1 { // one left for "other"
		label = lineOther
		if c := a.handed[label]; c != nil {
			return c
		}
	}
	c := &counter{label: label}
	a.handed[label] = c
	return c
}

// pruneEvery and pruneAge: reports older than a minute (far beyond Stale,
// so reporter clock skew cannot prune a live node) are removed twice a minute.
const (
	pruneEvery = 30 * time.Second
	pruneAge   = time.Minute
)

// Run syncs the table until ctx is done — every Sync while syncs read
// news, backing off to every MaxSync while they do not (AllocatorConfig) —
// and prunes long-dead nodes when the table supports it.
func (a *Allocator) Run(ctx context.Context) error {
	t := time.NewTimer(a.cfg.Sync)
	defer t.Stop()
	pruner, _ := a.cfg.Table.(loadtable.Pruner)
	lastPrune := a.cfg.Clock.Now()
	// A table call that hangs must not hold the loop past MaxAge: the loop
	// is what finds an old table while allocations are few.
	timeout := a.cfg.MaxAge / 2
	wait := a.cfg.Sync
	for {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		news, err := a.syncOnce(sctx)
		cancel()
		wait = a.nextWait(wait, news, err)
		if err != nil && ctx.Err() == nil && a.syncErrors.Load()%1000 == 1 {
			a.cfg.Logger.Warn("gslb: load table sync failed; keeping last good table", "err", err, "age", a.SnapshotAge())
		}
		if now := a.cfg.Clock.Now(); pruner != nil && now.Sub(lastPrune) >= pruneEvery {
			lastPrune = now
			pctx, cancel := context.WithTimeout(ctx, timeout)
			if n, err := pruner.Prune(pctx, now.Add(-pruneAge)); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("gslb: prune failed", "err", err)
			} else if n > 0 {
				a.cfg.Logger.Info("gslb: pruned dead nodes from the load table", "count", n)
			}
			cancel()
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// nextWait is how long Run waits after a sync that read news (or not) or
// failed, when it waited wait before it: Sync after news or a failure,
// else twice wait up to MaxSync — but no later than Sync after the
// snapshot's first healthy node could turn stale, so that a dead node is
// dropped on time.
func (a *Allocator) nextWait(wait time.Duration, news bool, err error) time.Duration {
	if news || err != nil {
		return a.cfg.Sync
	}
	wait = min(2*wait, a.cfg.MaxSync)
	if s := a.snap.Load(); !s.at.IsZero() {
		wait = min(wait, max(a.cfg.Sync, s.rebuildBy.Sub(a.cfg.Clock.Now())+a.cfg.Sync))
	}
	return wait
}

// SyncOnce reads the table and publishes a new snapshot. On error the
// previous snapshot stays in use until it is older than MaxAge.
func (a *Allocator) SyncOnce(ctx context.Context) error {
	_, err := a.syncOnce(ctx)
	return err
}

// syncOnce is SyncOnce, also saying whether the read carried news
// (loadtable.SyncStats.News) — every read does when MaxSync is Sync.
func (a *Allocator) syncOnce(ctx context.Context) (news bool, err error) {
	a.viewMu.Lock()
	defer a.viewMu.Unlock()
	start := a.cfg.Clock.Now()
	loads, st, err := a.view.Sync(ctx, start)
	if err != nil {
		now := a.cfg.Clock.Now()
		a.syncDuration.Observe(now.Sub(start).Seconds())
		a.syncErrors.Add(1)
		if s := a.snap.Load(); now.Sub(s.at) > a.cfg.MaxAge {
			s.expired.Store(true)
		}
		return false, fmt.Errorf("gslb: sync: %w", err)
	}
	a.syncBytes.Add(uint64(st.Bytes))
	a.syncChanged.Add(uint64(st.Changed))
	a.syncSkipped.Add(uint64(st.Skipped))
	if st.Full {
		a.syncFull.Add(1)
	}
	now := a.cfg.Clock.Now()
	if prev := a.snap.Load(); st.Changed == 0 && !st.Full && !prev.at.IsZero() && now.Before(prev.rebuildBy) {
		// Nothing changed and nobody turned stale: the same nodes, read
		// now. Building a thousand nodes' snapshot costs more than the
		// read that found nothing new.
		a.snap.Store(&snapshot{lines: prev.lines, bgp: prev.bgp, at: now, nodes: prev.nodes, rebuildBy: prev.rebuildBy})
	} else {
		a.snap.Store(a.build(loads, now))
	}
	a.syncDuration.Observe(a.cfg.Clock.Now().Sub(start).Seconds())
	return st.News > 0 || a.cfg.MaxSync == a.cfg.Sync, nil
}

// build turns the table's reports into a snapshot.
func (a *Allocator) build(loads []loadtable.NodeLoad, now time.Time) *snapshot {
	s := &snapshot{lines: map[string]*lineState{}, at: now, rebuildBy: now.Add(a.cfg.Stale)}
	line := func(name string) *lineState {
		ls := s.lines[name]
		if ls == nil {
			ls = &lineState{handed: a.counterFor(name)}
			s.lines[name] = ls
		}
		return ls
	}
	s.bgp = line("")
	// An edge that reports no capacity counts as the largest reported, so
	// that its headroom weighs like its neighbours'.
	refCap := 1
	for _, l := range loads {
		if l.Kind == loadtable.KindEdge {
			refCap = max(refCap, l.Capacity)
		}
	}
	for _, l := range loads {
		kind := 0
		switch l.Kind {
		case loadtable.KindEdge:
		case loadtable.KindIngest:
			kind = 1
		default:
			continue
		}
		room, ok := loadtable.Headroom(l, a.cfg.Overload, a.cfg.MaxCPU)
		switch {
		case l.Age(now) > a.cfg.Stale: // by this gslb's clock, not the node's
			s.nodes[kind][stateStale]++
			continue
		case l.Draining:
			s.nodes[kind][stateDraining]++
			continue
		case !ok:
			s.nodes[kind][stateOverloaded]++
			continue
		}
		s.nodes[kind][stateHealthy]++
		if by := l.Seen().Add(a.cfg.Stale); by.Before(s.rebuildBy) {
			s.rebuildBy = by
		}
		n := snapNode{id: l.ID, addr: l.Addr, key: hash64(l.ID), weight: room}
		ls := line(l.Line)
		if l.Kind == loadtable.KindIngest {
			ls.ingests.nodes = append(ls.ingests.nodes, n)
			continue
		}
		n.weight *= float64(cmp.Or(l.Capacity, refCap))
		ls.edges.nodes = append(ls.edges.nodes, n)
	}
	for _, ls := range s.lines {
		for _, p := range []*pool{&ls.edges, &ls.ingests} {
			for i := range p.nodes {
				p.nodes[i].invWeight = 1 / p.nodes[i].weight
			}
			// The table sorts by ID; sort again so that the snapshot does
			// not depend on a loadtable.Table keeping its word.
			sort.Slice(p.nodes, func(i, j int) bool { return p.nodes[i].id < p.nodes[j].id })
		}
		ls.edges.cum = make([]float64, len(ls.edges.nodes))
		sum := 0.0
		for i, n := range ls.edges.nodes {
			sum += n.weight
			ls.edges.cum[i] = sum
		}
	}
	return s
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

// Allocate chooses addresses for user at ip: ErrTableStale while the table
// is too old, ErrNoNodes when no healthy edge or ingest serves the client.
// Its one allocation is the returned addresses.
func (a *Allocator) Allocate(user string, ip netip.Addr) (Allocation, error) {
	k := 1 + a.cfg.Fallbacks
	buf := make([]string, 2*k)
	out := Allocation{Ingest: buf[:0:k], Edge: buf[k:k]}
	if err := a.AllocateTo(&out, user, ip); err != nil {
		return Allocation{}, err
	}
	return out, nil
}

// AllocateTo is Allocate writing into dst, whose slices it reuses (their
// contents are overwritten): a caller that keeps one Allocation per worker
// allocates nothing. It reads one atomic pointer and adds to one atomic
// counter; it takes no lock.
func (a *Allocator) AllocateTo(dst *Allocation, user string, ip netip.Addr) error {
	s := a.snap.Load()
	if s.expired.Load() {
		return ErrTableStale
	}
	var own *lineState
	if a.cfg.Classify != nil && ip.IsValid() {
		if line := a.cfg.Classify(ip); line != "" {
			own = s.lines[line]
		}
	}
	edges, ingests := s.bgp, &s.bgp.ingests
	if own != nil && len(own.edges.nodes) > 0 {
		edges = own
	}
	if own != nil && len(own.ingests.nodes) > 0 {
		ingests = &own.ingests
	}
	if len(edges.edges.nodes) == 0 || len(ingests.nodes) == 0 {
		return ErrNoNodes
	}
	c := edges.handed.n.Add(1) - 1
	if c%ageCheckEvery == 0 && a.cfg.Clock.Now().Sub(s.at) > a.cfg.MaxAge {
		s.expired.Store(true)
		return ErrTableStale
	}
	first := edges.edges.pick(c)
	uh := hash64(user)
	dst.Edge = append(dst.Edge[:0], edges.edges.nodes[first].addr)
	dst.Edge = edges.edges.draw(dst.Edge, uh, first, a.cfg.Fallbacks)
	if edges != s.bgp {
		dst.Edge = s.bgp.edges.draw(dst.Edge, uh, -1, 1+a.cfg.Fallbacks-len(dst.Edge))
	}
	dst.Ingest = rank(dst.Ingest[:0], ingests.nodes, uh, 1+a.cfg.Fallbacks)
	return nil
}

// pick returns the node of the c-th hand-out of this pool. Each node owns
// a slice of [0, total) as long as its headroom, and the c-th hand-out goes
// to the node owning frac(c/φ)·total. That golden-ratio sequence covers
// every slice in proportion to its length over any run of consecutive
// hand-outs, within a couple of hand-outs: between two syncs a node gets
// its share of what this allocator hands out and no burst beyond it, so a
// small node is not overshot, and "least loaded" is never handed out
// wholesale on data up to a sync old. The counter carries on across syncs,
// so a new snapshot does not restart the sequence at the same node.
func (p *pool) pick(c uint64) int {
	x := c * 0x9E3779B97F4A7C15 // 2^64/φ: frac(c/φ) in 64-bit fixed point
	return p.find(float64(x>>11) * 0x1p-53 * p.cum[len(p.cum)-1])
}

// find returns the node whose slice of [0, total) holds t.
func (p *pool) find(t float64) int {
	lo, hi := 0, len(p.cum)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.cum[mid] > t {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// draw appends to dst up to k edge fallbacks for the user (uh), drawn from
// the pool without replacement, each with probability proportional to its
// headroom, leaving out nodes[skip] (the primary). The draws come from the
// user's hash, so a user's fallbacks are the same on every allocation
// between two syncs, while the viewers of any one edge have their first
// fallbacks spread over the others in proportion to headroom: when an edge
// dies its viewers do not all land on one node. A weighted rendezvous
// ranking (rank) would give the same spread, but costs a hash and often a
// logarithm per node; this is a few binary searches. Unlike the ingest
// choice, fallbacks need not stick across syncs: an entry is taken afresh on
// every reconnect.
func (p *pool) draw(dst []string, uh uint64, skip, k int) []string {
	if len(p.nodes) == 0 {
		return dst
	}
	var ex [maxFallbacks + 1]int // excluded nodes, by position
	ne, exW := 0, 0.0
	if skip >= 0 {
		ex[0], ne, exW = skip, 1, p.nodes[skip].weight
	}
	total := p.cum[len(p.cum)-1]
	for d := uint64(1); k > 0 && ne < len(p.nodes); d++ {
		h := mix(uh + d*0x9E3779B97F4A7C15) // one independent draw per d
		t := float64(h>>11) * 0x1p-53 * (total - exW)
		// Map t over the excluded slices, lowest first.
		for _, i := range ex[:ne] {
			if t < p.cum[i]-p.nodes[i].weight {
				break
			}
			t += p.nodes[i].weight
		}
		j := p.find(t)
		// Rounding can land t on an excluded slice's edge: take the next
		// node that is not excluded, wrapping around.
		for slices.Contains(ex[:ne], j) {
			j = (j + 1) % len(p.nodes)
		}
		dst = append(dst, p.nodes[j].addr)
		exW += p.nodes[j].weight
		at, _ := slices.BinarySearch(ex[:ne], j)
		copy(ex[at+1:ne+1], ex[at:ne])
		ex[at] = j
		ne++
		k--
	}
	return dst
}

// rank appends to dst the addresses of the k nodes that rank highest for
// the user by weighted rendezvous hashing: score = weight / -ln(u), u
// uniform in (0,1) from hash(user, node). A node ranks first with
// probability proportional to its weight, and a user keeps its ranking
// while the nodes stay healthy (an ingest primary keeps the user's bucket
// local and exact; a node that leaves moves only its own users). It ranks
// by the reciprocal, -ln(u)/weight, lowest first, to multiply instead of
// divide.
func rank(dst []string, nodes []snapNode, uh uint64, k int) []string {
	k = min(k, len(nodes))
	if k <= 0 {
		return dst
	}
	// The best k so far, sorted: positions and keys, not addresses, so
	// that reordering moves no strings.
	var (
		key [maxFallbacks + 1]float64
		at  [maxFallbacks + 1]int
	)
	insert := func(n int, sc float64, i int) {
		j := n
		for j > 0 && key[j-1] > sc {
			key[j], at[j] = key[j-1], at[j-1]
			j--
		}
		key[j], at[j] = sc, i
	}
	for i := range k {
		insert(i, negLog(unit(mix(uh^nodes[i].key)))*nodes[i].invWeight, i)
	}
	// cut: a node must rank under the k-th so far; the margin covers
	// negLog's error, so that the result is the one ranking every node
	// would give.
	cut := key[k-1] * (1 + rankMargin)
	for i := k; i < len(nodes); i++ {
		u := unit(mix(uh ^ nodes[i].key))
		inv := nodes[i].invWeight
		// -ln(u) >= 2(1-u)/(1+u), closely where it matters (u near 1), so
		// most nodes are out of the running without a logarithm.
		if 2*(1-u)*inv >= cut*(1+u) {
			continue
		}
		if sc := negLog(u) * inv; sc < key[k-1] {
			insert(k-1, sc, i)
			cut = key[k-1] * (1 + rankMargin)
		}
	}
	for _, i := range at[:k] {
		dst = append(dst, nodes[i].addr)
	}
	return dst
}

// unit maps a hash to (0, 1), never 0 (whose logarithm is infinite).
func unit(h uint64) float64 { return (float64(h>>11) + 0.5) * 0x1p-53 }

// rankMargin is well above negLog's relative error (under 1e-5).
const rankMargin = 1e-4

// lnTable[i] = ln(1 + i/1024), for negLog's interpolation.
var lnTable = func() (t [1<<lnBits + 1]float64) {
	for i := range t {
		t[i] = math.Log1p(float64(i) / (1 << lnBits))
	}
	return t
}()

const lnBits = 10

// negLog returns -ln(u) for u in (0, 1) within a relative 1e-5, in a few
// nanoseconds where math.Log takes tens on the machines we measured: ranking
// takes a dozen of them per allocation. Below 63/64: u = m·2^e, ln m
// interpolated from lnTable (absolute error under 2^-23); above, where that
// error would be a large share of the result, the series of -ln(1-d).
func negLog(u float64) float64 {
	if d := 1 - u; d < 1.0/64 {
		return d + d*d*(1.0/2+d*(1.0/3+d*(1.0/4)))
	}
	b := math.Float64bits(u)
	e := int(b>>52) - 1023
	frac := b & (1<<52 - 1)
	i := frac >> (52 - lnBits)
	r := float64(frac&(1<<(52-lnBits)-1)) * 0x1p-42
	lnm := lnTable[i] + r*(lnTable[i+1]-lnTable[i])
	return -(float64(e)*math.Ln2 + lnm)
}

// hash64 is FNV-1a: fixed, so every gslb process (and every restart)
// ranks a user's nodes the same way and the user stays on one ingest node.
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

// SnapshotAge returns how old the table in use is; before the first good
// sync, how long the allocator has gone without one.
func (a *Allocator) SnapshotAge() time.Duration {
	at := a.snap.Load().at
	if at.IsZero() {
		at = a.created
	}
	return a.cfg.Clock.Now().Sub(at)
}

// Collector returns the allocator's metrics, for the entry server to
// register: hand-outs per line, the last sync's nodes by kind and state,
// sync duration and errors, and the table's age. They are read from the
// allocator's own counters at scrape time, so the hot path never touches
// a metric.
func (a *Allocator) Collector() prometheus.Collector { return allocatorCollector{a} }

var (
	descAllocations = prometheus.NewDesc("danmaku_gslb_allocations_total",
		"Edge hand-outs by the line whose nodes served them (bgp: the BGP nodes).", []string{"line"}, nil)
	descNodes = prometheus.NewDesc("danmaku_gslb_nodes",
		"Nodes in the last good sync by kind and state (healthy, stale, draining, overloaded: by connections or CPU).", []string{"kind", "state"}, nil)
	descSyncErrors = prometheus.NewDesc("danmaku_gslb_sync_errors_total",
		"Load table syncs that failed; the last good table stays in use until it is too old.", nil, nil)
	descTableAge = prometheus.NewDesc("danmaku_gslb_table_age_seconds",
		"Age of the load table in use; over the allocator's MaxAge entries answer 503 table_stale.", nil, nil)
	descSyncBytes = prometheus.NewDesc("danmaku_gslb_sync_bytes_total",
		"Bytes of node reports the load table syncs read (only what changed since the previous sync, but for whole reads).", nil, nil)
	descSyncChanged = prometheus.NewDesc("danmaku_gslb_sync_changes_total",
		"Node reports and removals the load table syncs read.", nil, nil)
	descSyncFull = prometheus.NewDesc("danmaku_gslb_sync_full_total",
		"Load table syncs that read the whole table (the first, then one every few seconds, or after the store lost its log).", nil, nil)
	descSyncSkipped = prometheus.NewDesc("danmaku_gslb_sync_skipped_total",
		"Node records the syncs left out because they did not decode (a newer or broken reporter).", nil, nil)
)

type allocatorCollector struct{ a *Allocator }

func (c allocatorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAllocations
	ch <- descNodes
	ch <- descSyncErrors
	ch <- descTableAge
	ch <- descSyncBytes
	ch <- descSyncChanged
	ch <- descSyncFull
	ch <- descSyncSkipped
	c.a.syncDuration.Describe(ch)
}

func (c allocatorCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.mu.Lock()
	for _, h := range a.handed {
		ch <- prometheus.MustNewConstMetric(descAllocations, prometheus.CounterValue, float64(h.n.Load()), h.label)
	}
	a.mu.Unlock()
	s := a.snap.Load()
	for kind, name := range []loadtable.NodeKind{loadtable.KindEdge, loadtable.KindIngest} {
		for state, n := range s.nodes[kind] {
			ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n), string(name), stateNames[state])
		}
	}
	ch <- prometheus.MustNewConstMetric(descSyncErrors, prometheus.CounterValue, float64(a.syncErrors.Load()))
	ch <- prometheus.MustNewConstMetric(descTableAge, prometheus.GaugeValue, a.SnapshotAge().Seconds())
	ch <- prometheus.MustNewConstMetric(descSyncBytes, prometheus.CounterValue, float64(a.syncBytes.Load()))
	ch <- prometheus.MustNewConstMetric(descSyncChanged, prometheus.CounterValue, float64(a.syncChanged.Load()))
	ch <- prometheus.MustNewConstMetric(descSyncFull, prometheus.CounterValue, float64(a.syncFull.Load()))
	ch <- prometheus.MustNewConstMetric(descSyncSkipped, prometheus.CounterValue, float64(a.syncSkipped.Load()))
	a.syncDuration.Collect(ch)
}

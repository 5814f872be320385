package gslb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/gslb"
	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
)

var (
	t0      = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	discard = slog.New(slog.NewTextHandler(io.Discard, nil))
	anyIP   = netip.MustParseAddr("192.0.2.10")
)

func edge(id string, conns, capacity int) loadtable.NodeLoad {
	return loadtable.NodeLoad{ID: id, Kind: loadtable.KindEdge, Addr: "ws://" + id, Conns: conns, Capacity: capacity}
}

func ingest(id string, conns, capacity int) loadtable.NodeLoad {
	return loadtable.NodeLoad{ID: id, Kind: loadtable.KindIngest, Addr: "http://" + id, Conns: conns, Capacity: capacity}
}

func onLine(l loadtable.NodeLoad, line string) loadtable.NodeLoad { l.Line = line; return l }

// fixture is an allocator over a memory load table on a fake clock.
type fixture struct {
	clk   *clock.Fake
	table *loadtable.MemoryTable
	alloc *gslb.Allocator
}

func newFixture(t testing.TB, cfg gslb.AllocatorConfig, nodes ...loadtable.NodeLoad) *fixture {
	t.Helper()
	return newFixtureOn(t, loadtable.NewMemoryTable(), cfg, nodes...)
}

// newFixtureOn reports into mem; the allocator reads cfg.Table (default mem),
// which may wrap mem.
func newFixtureOn(t testing.TB, mem *loadtable.MemoryTable, cfg gslb.AllocatorConfig, nodes ...loadtable.NodeLoad) *fixture {
	t.Helper()
	f := &fixture{clk: clock.NewFake(t0), table: mem}
	if cfg.Table == nil {
		cfg.Table = f.table
	}
	cfg.Clock = f.clk
	cfg.Logger = discard
	a, err := gslb.NewAllocator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.alloc = a
	f.report(t, nodes...)
	f.sync(t)
	return f
}

// report stamps nodes without an At with the current fake time.
func (f *fixture) report(t testing.TB, nodes ...loadtable.NodeLoad) {
	t.Helper()
	for _, n := range nodes {
		if n.At.IsZero() {
			n.At = f.clk.Now()
		}
		if err := f.table.Report(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) sync(t testing.TB) {
	t.Helper()
	if err := f.alloc.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) allocate(t testing.TB, user string) gslb.Allocation {
	t.Helper()
	a, err := f.alloc.Allocate(user, anyIP)
	if err != nil {
		t.Fatalf("Allocate(%q): %v", user, err)
	}
	return a
}

func TestAllocatorFiltersNodes(t *testing.T) {
	stale := func(l loadtable.NodeLoad, age time.Duration) loadtable.NodeLoad { l.At = t0.Add(-age); return l }
	draining := func(l loadtable.NodeLoad) loadtable.NodeLoad { l.Draining = true; return l }
	cpu := func(l loadtable.NodeLoad, c float64) loadtable.NodeLoad { l.CPU = c; return l }
	for _, tc := range []struct {
		name string
		node loadtable.NodeLoad
		kept bool
	}{
		{"fresh", edge("e", 10, 100), true},
		{"reported exactly Stale ago", stale(edge("e", 10, 100), time.Second), true},
		{"stale", stale(edge("e", 10, 100), time.Second+time.Millisecond), false},
		{"very stale", stale(edge("e", 10, 100), time.Hour), false},
		{"draining", draining(edge("e", 10, 100)), false},
		{"conns at 94%", edge("e", 94, 100), true},
		{"conns at 95%", edge("e", 95, 100), false},
		{"conns over capacity", edge("e", 150, 100), false},
		{"unlimited capacity", edge("e", 1_000_000, 0), true},
		{"cpu 0.89", cpu(edge("e", 0, 100), 0.89), true},
		{"cpu 0.90", cpu(edge("e", 0, 100), 0.90), false},
		{"stale ingest", stale(ingest("i", 0, 0), 2*time.Second), false},
		{"draining ingest", draining(ingest("i", 0, 0)), false},
		{"overloaded ingest", ingest("i", 96, 100), false},
		{"busy cpu ingest", cpu(ingest("i", 0, 0), 0.95), false},
		{"healthy ingest", cpu(ingest("i", 50, 100), 0.5), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The node under test plus a healthy node of the other kind.
			other := ingest("other", 0, 0)
			if tc.node.Kind == loadtable.KindIngest {
				other = edge("other", 0, 0)
			}
			f := newFixture(t, gslb.AllocatorConfig{}, tc.node, other)
			a, err := f.alloc.Allocate("u1", anyIP)
			if !tc.kept {
				if !errors.Is(err, gslb.ErrNoNodes) {
					t.Fatalf("Allocate = %+v, %v; want ErrNoNodes", a, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			got := a.Edge
			if tc.node.Kind == loadtable.KindIngest {
				got = a.Ingest
			}
			if !slices.Equal(got, []string{tc.node.Addr}) {
				t.Fatalf("addresses = %v, want [%s]", got, tc.node.Addr)
			}
		})
	}
}

// A node that stops reporting drops out once its last report is older than
// Stale, without anyone removing it.
func TestAllocatorNodeGoesStale(t *testing.T) {
	f := newFixture(t, gslb.AllocatorConfig{Stale: time.Second}, edge("e1", 0, 100), edge("e2", 0, 100), ingest("i1", 0, 0))
	f.clk.Advance(800 * time.Millisecond)
	f.report(t, edge("e1", 0, 100), ingest("i1", 0, 0)) // e2 falls silent
	f.sync(t)
	if got := edgesSeen(t, f, 64); len(got) != 2 {
		t.Fatalf("edges = %v, want both while e2's report is 800ms old", got)
	}
	f.clk.Advance(400 * time.Millisecond)
	f.report(t, edge("e1", 0, 100), ingest("i1", 0, 0))
	f.sync(t)
	if got := edgesSeen(t, f, 64); !slices.Equal(got, []string{"ws://e1"}) {
		t.Fatalf("edges = %v, want only ws://e1 once e2 is 1.2s silent", got)
	}
}

// edgesSeen returns the sorted set of first-choice edges over n allocations.
func edgesSeen(t testing.TB, f *fixture, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	for i := range n {
		seen[f.allocate(t, "u"+strconv.Itoa(i)).Edge[0]] = true
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// flakyTable fails Snapshot while broken is set.
type flakyTable struct {
	loadtable.Table
	broken atomic.Bool
}

var errTableDown = errors.New("load table down")

func (t *flakyTable) Snapshot(ctx context.Context) ([]loadtable.NodeLoad, error) {
	if t.broken.Load() {
		return nil, errTableDown
	}
	return t.Table.Snapshot(ctx)
}

func TestAllocatorFailedSyncKeepsLastGoodSnapshot(t *testing.T) {
	mem := loadtable.NewMemoryTable()
	flaky := &flakyTable{Table: mem}
	f := newFixtureOn(t, mem, gslb.AllocatorConfig{Table: flaky}, edge("e1", 0, 100), ingest("i1", 0, 0))
	before := f.allocate(t, "u1")

	flaky.broken.Store(true)
	if err := f.table.Remove(context.Background(), "e1"); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(300 * time.Millisecond)
	if err := f.alloc.SyncOnce(context.Background()); !errors.Is(err, errTableDown) {
		t.Fatalf("SyncOnce: err = %v, want the table's error", err)
	}
	after := f.allocate(t, "u1")
	if !slices.Equal(before.Edge, after.Edge) || !slices.Equal(before.Ingest, after.Ingest) {
		t.Fatalf("allocation changed after a failed sync: %+v -> %+v", before, after)
	}
	if age := f.alloc.SnapshotAge(); age != 300*time.Millisecond {
		t.Errorf("SnapshotAge = %v, want 300ms (the failed sync must not refresh it)", age)
	}

	// Once the table answers again the removal takes effect.
	flaky.broken.Store(false)
	f.sync(t)
	if _, err := f.alloc.Allocate("u1", anyIP); !errors.Is(err, gslb.ErrNoNodes) {
		t.Fatalf("Allocate after recovery: err = %v, want ErrNoNodes", err)
	}
	if age := f.alloc.SnapshotAge(); age != 0 {
		t.Errorf("SnapshotAge = %v after a good sync", age)
	}
}

func TestAllocatorRunSyncsAndStops(t *testing.T) {
	f := newFixture(t, gslb.AllocatorConfig{Sync: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.alloc.Run(ctx) }()
	f.report(t, edge("e1", 0, 100), ingest("i1", 0, 0))
	// Wait (without asserting how long) for Run to pick up the report.
	for {
		if _, err := f.alloc.Allocate("u1", anyIP); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// handOuts counts the first-choice edges of n allocations.
func handOuts(t testing.TB, f *fixture, n int) map[string]int {
	t.Helper()
	count := map[string]int{}
	for i := range n {
		count[f.allocate(t, "u"+strconv.Itoa(i)).Edge[0]]++
	}
	return count
}

// Each edge is handed out in proportion to the connections it can still
// take before it is dropped — up to 95 % of capacity by connections, 90 % by
// CPU (CPU counts as a share of capacity) — over any run of consecutive
// allocations, within a couple of hand-outs: a constant count per address
// would send a nearly full node as many clients as an empty one.
func TestEdgeHandOutFollowsHeadroom(t *testing.T) {
	cpu := func(l loadtable.NodeLoad, c float64) loadtable.NodeLoad { l.CPU = c; return l }
	for _, tc := range []struct {
		name  string
		nodes []loadtable.NodeLoad
		room  map[string]float64 // connections each can still take
	}{
		{"equal", []loadtable.NodeLoad{edge("e1", 0, 100), edge("e2", 0, 100), edge("e3", 0, 100)},
			map[string]float64{"ws://e1": 90, "ws://e2": 90, "ws://e3": 90}},
		{"by free connections", []loadtable.NodeLoad{edge("e1", 10, 100), edge("e2", 45, 100), edge("e3", 85, 100)},
			map[string]float64{"ws://e1": 85, "ws://e2": 50, "ws://e3": 10}},
		{"by capacity", []loadtable.NodeLoad{edge("big", 0, 10_000), edge("mid", 0, 1000), edge("small", 0, 100)},
			map[string]float64{"ws://big": 9000, "ws://mid": 900, "ws://small": 90}},
		{"one nearly full", []loadtable.NodeLoad{edge("big", 5000, 10_000), edge("full", 940, 1000)},
			map[string]float64{"ws://big": 4500, "ws://full": 10}},
		{"cpu bound", []loadtable.NodeLoad{cpu(edge("hot", 0, 1000), 0.85), edge("cool", 0, 1000)},
			map[string]float64{"ws://hot": 50, "ws://cool": 900}},
		{"uncapped counts as the largest", []loadtable.NodeLoad{edge("capped", 0, 1000), edge("open", 123, 0)},
			map[string]float64{"ws://capped": 900, "ws://open": 900}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gslb.AllocatorConfig{Fallbacks: -1}, append(slices.Clone(tc.nodes), ingest("i1", 0, 0))...)
			total := 0.0
			for _, r := range tc.room {
				total += r
			}
			// Several windows, the later ones starting deep in the sequence.
			for _, n := range []int{int(total), 997, 5000} {
				count := handOuts(t, f, n)
				for addr, r := range tc.room {
					want := float64(n) * r / total
					if got := float64(count[addr]); math.Abs(got-want) > 2 {
						t.Errorf("window of %d: %s handed out %v times, want %.1f ± 2", n, addr, got, want)
					}
				}
			}
		})
	}
}

// A drained edge gets no new clients; restarted (the same id reporting
// again, empty), it takes its share back at once — the largest, as the
// emptiest — through the same hand-out, and its neighbours' shrink.
func TestDrainedEdgeShareReturns(t *testing.T) {
	busy := []loadtable.NodeLoad{edge("e1", 6000, 10_000), edge("e2", 6000, 10_000), ingest("i1", 0, 0)}
	drained := edge("e3", 6000, 10_000)
	drained.Draining = true
	f := newFixture(t, gslb.AllocatorConfig{Fallbacks: -1}, append(slices.Clone(busy), drained)...)
	if n := handOuts(t, f, 1000)["ws://e3"]; n != 0 {
		t.Fatalf("a draining edge was handed out %d times", n)
	}
	// Drained and gone: its report removed, then back empty.
	if err := f.table.Remove(context.Background(), "e3"); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(10 * time.Millisecond)
	f.sync(t)
	if n := handOuts(t, f, 1000)["ws://e3"]; n != 0 {
		t.Fatalf("a removed edge was handed out %d times", n)
	}
	f.clk.Advance(10 * time.Millisecond)
	f.report(t, append(slices.Clone(busy), edge("e3", 0, 10_000))...)
	f.sync(t)
	// Headroom 3,500 + 3,500 + 9,000 (the CPU bound, 90 %, comes first for
	// an empty edge): e3 takes 9,000/16,000 of the next ones.
	count := handOuts(t, f, 1600)
	if got := count["ws://e3"]; math.Abs(float64(got)-900) > 2 {
		t.Fatalf("restarted edge handed out %d of 1,600, want 900 ± 2 (its headroom share)", got)
	}
}

// Between two syncs, a node with little headroom gets its share of the
// allocations, not a block: handing out as many as the table can take gives
// the small node no more than its headroom, wherever the window starts.
func TestEdgeHandOutDoesNotOvershootSmallNode(t *testing.T) {
	f := newFixture(t, gslb.AllocatorConfig{Fallbacks: -1},
		edge("big1", 0, 1000), edge("big2", 0, 1000), edge("small", 90, 100), ingest("i1", 0, 0))
	// 900 + 900 + 5 connections until the nodes are dropped.
	const total = 1805
	for start := range 5 {
		count := handOuts(t, f, total)
		if n := count["ws://small"]; n > 5+1 || n < 5-1 {
			t.Errorf("window %d: small node handed out %d times, its headroom is 5", start, n)
		}
	}
}

// The hand-out sequence carries on across syncs, so that a new snapshot
// every 5 ms does not send the first clients after each sync to the same
// node.
func TestEdgeHandOutAcrossSyncs(t *testing.T) {
	nodes := []loadtable.NodeLoad{edge("e1", 0, 100), edge("e2", 0, 100), edge("e3", 0, 100), edge("e4", 0, 100), ingest("i1", 0, 0)}
	f := newFixture(t, gslb.AllocatorConfig{Fallbacks: -1}, nodes...)
	count := map[string]int{}
	for range 100 {
		f.clk.Advance(5 * time.Millisecond)
		f.report(t, nodes...)
		f.sync(t)
		for addr, n := range handOuts(t, f, 2) {
			count[addr] += n
		}
	}
	for _, a := range []string{"ws://e1", "ws://e2", "ws://e3", "ws://e4"} {
		if n := count[a]; n < 48 || n > 52 {
			t.Errorf("%s handed out %d of 200 times over 100 syncs, want 50 ± 2", a, n)
		}
	}
}

// Concurrent allocations take distinct positions of the sequence: they hand
// out exactly what the same number of sequential allocations would.
func TestEdgeHandOutConcurrent(t *testing.T) {
	nodes := []loadtable.NodeLoad{edge("e1", 10, 100), edge("e2", 20, 100), edge("e3", 70, 100), ingest("i1", 0, 0)}
	const workers, per = 8, 300
	want := handOuts(t, newFixture(t, gslb.AllocatorConfig{}, nodes...), workers*per)
	f := newFixture(t, gslb.AllocatorConfig{}, nodes...)
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			local := map[string]int{}
			for i := range per {
				a, err := f.alloc.Allocate(fmt.Sprintf("u%d-%d", w, i), anyIP)
				if err != nil {
					t.Error(err)
					return
				}
				local[a.Edge[0]]++
			}
			mu.Lock()
			for k, v := range local {
				count[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if !maps.Equal(count, want) {
		t.Errorf("concurrent hand-outs %v, sequential %v", count, want)
	}
}

func TestFallbacks(t *testing.T) {
	nodes := []loadtable.NodeLoad{
		edge("e1", 10, 100), edge("e2", 20, 100), edge("e3", 30, 100), edge("e4", 40, 100),
		ingest("i1", 0, 0), ingest("i2", 0, 0), ingest("i3", 0, 0), ingest("i4", 0, 0),
	}
	for _, tc := range []struct {
		name      string
		fallbacks int
		nodes     []loadtable.NodeLoad
		want      int
	}{
		{"default two", 0, nodes, 3},
		{"none", -1, nodes, 1},
		{"one", 1, nodes, 2},
		{"more than there are nodes", 8, nodes, 4},
		{"single node of each kind", 2, []loadtable.NodeLoad{edge("e1", 0, 0), ingest("i1", 0, 0)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gslb.AllocatorConfig{Fallbacks: tc.fallbacks}, tc.nodes...)
			fallbacks := map[string][]string{} // user + primary -> fallbacks
			for i := range 64 {
				u := "u" + strconv.Itoa(i%8)
				a := f.allocate(t, u)
				for kind, addrs := range map[string][]string{"edge": a.Edge, "ingest": a.Ingest} {
					if len(addrs) != tc.want {
						t.Fatalf("%s addresses = %v, want %d", kind, addrs, tc.want)
					}
					if !distinct(addrs) {
						t.Fatalf("%s addresses repeat: %v", kind, addrs)
					}
				}
				// Between syncs a user's fallbacks depend on the user and the
				// primary alone.
				key := u + " " + a.Edge[0]
				if was, ok := fallbacks[key]; ok && !slices.Equal(was, a.Edge[1:]) {
					t.Fatalf("%s: fallbacks %v, then %v", key, was, a.Edge[1:])
				}
				fallbacks[key] = a.Edge[1:]
			}
		})
	}
}

// The viewers of any one edge have their first fallbacks spread over the
// other edges in proportion to their headroom, so the viewers of an edge
// that dies do not all land on one node.
func TestEdgeFallbacksSpreadByHeadroom(t *testing.T) {
	// What each edge can take: 90 % of capacity (the CPU bound, CPU being
	// 0 here) or up to 95 % by connections, whichever is less.
	room := map[string]float64{"ws://e1": 900, "ws://e2": 450, "ws://e3": 180, "ws://e4": 90, "ws://e5": 850}
	f := newFixture(t, gslb.AllocatorConfig{},
		edge("e1", 0, 1000), edge("e2", 500, 1000), edge("e3", 0, 200), edge("e4", 5, 100), edge("e5", 100, 1000),
		ingest("i1", 0, 0))
	const users = 60_000
	first := map[string]map[string]int{} // primary -> first fallback -> viewers
	for i := range users {
		a := f.allocate(t, fmt.Sprintf("viewer-%d", i))
		if first[a.Edge[0]] == nil {
			first[a.Edge[0]] = map[string]int{}
		}
		first[a.Edge[0]][a.Edge[1]]++
	}
	for primary, fb := range first {
		viewers, others := 0, 0.0
		for _, n := range fb {
			viewers += n
		}
		for addr, r := range room {
			if addr != primary {
				others += r
			}
		}
		if fb[primary] != 0 {
			t.Errorf("%s is its own viewers' fallback %d times", primary, fb[primary])
		}
		for addr, r := range room {
			if addr == primary {
				continue
			}
			p := r / others
			want := p * float64(viewers)
			// 4.5 standard deviations of a binomial count: the users and
			// the hash are fixed, so this either always passes or never.
			tol := 4.5 * math.Sqrt(float64(viewers)*p*(1-p))
			if got := float64(fb[addr]); math.Abs(got-want) > tol {
				t.Errorf("viewers of %s (%d): %s first fallback of %v, want %.0f ± %.0f", primary, viewers, addr, got, want, tol)
			}
		}
	}
	if len(first) != len(room) {
		t.Errorf("primaries %d, want every edge", len(first))
	}
}

// Addrs is what a token binds: ingests first, primary first, then edges,
// and the number of ingests, so a node can tell the user's primary apart.
func TestAllocationAddrs(t *testing.T) {
	f := newFixture(t, gslb.AllocatorConfig{},
		edge("e1", 0, 100), edge("e2", 0, 100), ingest("i1", 0, 100), ingest("i2", 0, 100), ingest("i3", 0, 100))
	a := f.allocate(t, "u1")
	addrs, n := a.Addrs()
	if n != len(a.Ingest) || !slices.Equal(addrs[:n], a.Ingest) || !slices.Equal(addrs[n:], a.Edge) {
		t.Fatalf("Addrs() = %v, %d for %+v", addrs, n, a)
	}
	addrs[0] = "changed"
	if a.Ingest[0] == "changed" {
		t.Fatal("Addrs shares the allocation's slices")
	}
	if addrs, n := (gslb.Allocation{}).Addrs(); len(addrs) != 0 || n != 0 {
		t.Fatalf("empty allocation: %v, %d", addrs, n)
	}
}

func distinct(s []string) bool {
	c := slices.Clone(s)
	slices.Sort(c)
	return len(slices.Compact(c)) == len(s)
}

func ingestOwners(t testing.TB, f *fixture, users int) map[string]string {
	t.Helper()
	out := make(map[string]string, users)
	for i := range users {
		u := "user-" + strconv.Itoa(i)
		out[u] = f.allocate(t, u).Ingest[0]
	}
	return out
}

func TestIngestStickyAndMinimalMoves(t *testing.T) {
	ingests := []loadtable.NodeLoad{ingest("i1", 10, 100), ingest("i2", 10, 100), ingest("i3", 10, 100), ingest("i4", 10, 100)}
	f := newFixture(t, gslb.AllocatorConfig{}, append(ingests, edge("e1", 0, 0))...)
	const users = 4000
	first := ingestOwners(t, f, users)

	// Healthy nodes keep reporting; syncs come and go; nobody moves.
	for range 5 {
		f.clk.Advance(5 * time.Millisecond)
		f.report(t, append(ingests, edge("e1", 0, 0))...)
		f.sync(t)
		if again := ingestOwners(t, f, users); !mapsEqual(first, again) {
			t.Fatal("users moved between syncs while every node stayed healthy")
		}
	}

	// i3 disappears: only its users move, and they spread over the others.
	if err := f.table.Remove(context.Background(), "i3"); err != nil {
		t.Fatal(err)
	}
	f.sync(t)
	after := ingestOwners(t, f, users)
	moved := map[string]int{}
	for u, was := range first {
		now := after[u]
		switch {
		case was != "http://i3" && now != was:
			t.Fatalf("user %s moved from healthy %s to %s", u, was, now)
		case was == "http://i3" && now == "http://i3":
			t.Fatalf("user %s still on the removed node", u)
		case was == "http://i3":
			moved[now]++
		}
	}
	if len(moved) != 3 {
		t.Errorf("i3's users went to %v, want all three remaining nodes", moved)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestIngestRendezvousBalance(t *testing.T) {
	f := newFixture(t, gslb.AllocatorConfig{},
		ingest("i1", 0, 100), ingest("i2", 0, 100), ingest("i3", 0, 100), ingest("i4", 0, 100), edge("e1", 0, 0))
	const users = 10_000
	count := map[string]int{}
	for _, a := range ingestOwners(t, f, users) {
		count[a]++
	}
	if len(count) != 4 {
		t.Fatalf("users spread over %v, want 4 nodes", count)
	}
	// ±10% is ~5.8 standard deviations of a fair split.
	for a, n := range count {
		if n < 2250 || n > 2750 {
			t.Errorf("%s got %d users, want 2500 ± 10%%", a, n)
		}
	}
}

// A node's share of users follows its headroom: 80% free gets twice the
// users of 40% free.
func TestIngestWeightedByHeadroom(t *testing.T) {
	f := newFixture(t, gslb.AllocatorConfig{}, ingest("roomy", 20, 100), ingest("busy", 60, 100), edge("e1", 0, 0))
	const users = 9000
	count := map[string]int{}
	for _, a := range ingestOwners(t, f, users) {
		count[a]++
	}
	share := float64(count["http://roomy"]) / users
	if math.Abs(share-2.0/3) > 0.04 {
		t.Errorf("roomy node share = %.3f (%v), want 2/3 ± 0.04", share, count)
	}
}

func TestLines(t *testing.T) {
	lineA := netip.MustParsePrefix("10.0.0.0/8")
	lineB := netip.MustParsePrefix("172.16.0.0/12")
	classify := func(ip netip.Addr) string {
		switch {
		case lineA.Contains(ip):
			return "A"
		case lineB.Contains(ip):
			return "B" // a line without nodes of its own
		}
		return ""
	}
	nodes := []loadtable.NodeLoad{
		onLine(edge("a-e1", 10, 100), "A"), onLine(edge("a-e2", 20, 100), "A"),
		edge("bgp-e1", 0, 100), edge("bgp-e2", 5, 100),
		onLine(ingest("a-i1", 0, 100), "A"), onLine(ingest("a-i2", 0, 100), "A"),
		ingest("bgp-i1", 0, 100), ingest("bgp-i2", 0, 100),
		onLine(edge("c-e1", 0, 100), "C"), onLine(ingest("c-i1", 0, 100), "C"),
	}
	isA := func(s string) bool {
		return s == "ws://a-e1" || s == "ws://a-e2" || s == "http://a-i1" || s == "http://a-i2"
	}
	isBGP := func(s string) bool {
		return s == "ws://bgp-e1" || s == "ws://bgp-e2" || s == "http://bgp-i1" || s == "http://bgp-i2"
	}

	for _, tc := range []struct {
		name string
		ip   netip.Addr
		line string // "A" or "" (BGP)
	}{
		{"line A client", netip.MustParseAddr("10.1.2.3"), "A"},
		{"unknown client", netip.MustParseAddr("203.0.113.7"), ""},
		{"line without nodes", netip.MustParseAddr("172.16.0.1"), ""},
		{"no IP", netip.Addr{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gslb.AllocatorConfig{Fallbacks: 3, Classify: classify}, nodes...)
			for i := range 16 {
				a, err := f.alloc.Allocate("u"+strconv.Itoa(i), tc.ip)
				if err != nil {
					t.Fatal(err)
				}
				if tc.line == "A" {
					// Own line first (both A edges), then BGP fallbacks; never line C.
					if !isA(a.Edge[0]) || !isA(a.Edge[1]) || !isBGP(a.Edge[2]) || !isBGP(a.Edge[3]) {
						t.Fatalf("edges = %v, want two line-A then two BGP", a.Edge)
					}
					if !isA(a.Ingest[0]) {
						t.Fatalf("ingest = %v, want a line-A node first", a.Ingest)
					}
					for _, s := range a.Ingest {
						if !isA(s) && !isBGP(s) {
							t.Fatalf("ingest = %v holds another line's node", a.Ingest)
						}
					}
					continue
				}
				for _, s := range append(slices.Clone(a.Edge), a.Ingest...) {
					if !isBGP(s) {
						t.Fatalf("allocation %+v holds a non-BGP node %s", a, s)
					}
				}
			}
		})
	}
}

// When every node of a line is gone, its clients fall back to BGP nodes.
func TestLineFallsBackToBGP(t *testing.T) {
	classify := func(netip.Addr) string { return "A" }
	f := newFixture(t, gslb.AllocatorConfig{Classify: classify},
		onLine(edge("a-e1", 0, 100), "A"), onLine(ingest("a-i1", 0, 100), "A"),
		edge("bgp-e1", 0, 100), ingest("bgp-i1", 0, 100))
	if a := f.allocate(t, "u1"); a.Edge[0] != "ws://a-e1" || a.Ingest[0] != "http://a-i1" {
		t.Fatalf("allocation = %+v, want line-A nodes first", a)
	}
	for _, id := range []string{"a-e1", "a-i1"} {
		if err := f.table.Remove(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	f.sync(t)
	if a := f.allocate(t, "u1"); !slices.Equal(a.Edge, []string{"ws://bgp-e1"}) || !slices.Equal(a.Ingest, []string{"http://bgp-i1"}) {
		t.Fatalf("allocation = %+v, want the BGP nodes", a)
	}
}

func TestAllocatorNoNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []loadtable.NodeLoad
	}{
		{"empty table", nil},
		{"edges only", []loadtable.NodeLoad{edge("e1", 0, 0)}},
		{"ingests only", []loadtable.NodeLoad{ingest("i1", 0, 0)}},
		{"unknown kind", []loadtable.NodeLoad{{ID: "x", Kind: "slicer", Addr: "x"}, ingest("i1", 0, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gslb.AllocatorConfig{}, tc.nodes...)
			if a, err := f.alloc.Allocate("u", anyIP); !errors.Is(err, gslb.ErrNoNodes) {
				t.Fatalf("Allocate = %+v, %v; want ErrNoNodes", a, err)
			}
		})
	}
}

func TestAllocatorConfig(t *testing.T) {
	table := loadtable.NewMemoryTable()
	for _, tc := range []struct {
		name string
		cfg  gslb.AllocatorConfig
		ok   bool
	}{
		{"defaults", gslb.AllocatorConfig{Table: table}, true},
		{"no table", gslb.AllocatorConfig{}, false},
		{"negative sync", gslb.AllocatorConfig{Table: table, Sync: -time.Millisecond}, false},
		{"stale under sync", gslb.AllocatorConfig{Table: table, Sync: time.Second, Stale: time.Millisecond}, false},
		{"eight fallbacks", gslb.AllocatorConfig{Table: table, Fallbacks: 8}, true},
		{"nine fallbacks", gslb.AllocatorConfig{Table: table, Fallbacks: 9}, false},
		{"max age", gslb.AllocatorConfig{Table: table, MaxAge: time.Minute}, true},
		{"negative max age", gslb.AllocatorConfig{Table: table, MaxAge: -time.Second}, false},
		{"max age not over sync", gslb.AllocatorConfig{Table: table, Sync: time.Second, MaxAge: time.Second}, false},
		// MaxSync: at most Stale, under MaxAge; its default fits a short
		// Stale or MaxAge rather than refusing what worked before it.
		{"every sync", gslb.AllocatorConfig{Table: table, MaxSync: time.Nanosecond}, true},
		{"max sync", gslb.AllocatorConfig{Table: table, MaxSync: 200 * time.Millisecond}, true},
		{"max sync over stale", gslb.AllocatorConfig{Table: table, MaxSync: 2 * time.Second}, false},
		{"max sync at max age", gslb.AllocatorConfig{Table: table, MaxSync: time.Second, Stale: 2 * time.Second, MaxAge: time.Second}, false},
		{"default max sync, short stale", gslb.AllocatorConfig{Table: table, Stale: 20 * time.Millisecond}, true},
		{"default max sync, short max age", gslb.AllocatorConfig{Table: table, MaxAge: 30 * time.Millisecond}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gslb.NewAllocator(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewAllocator: err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// Allocate allocates only its result (one array for both address lists);
// AllocateTo, given an Allocation to reuse, nothing.
func TestAllocateAllocs(t *testing.T) {
	f := newFixture(t, gslb.AllocatorConfig{},
		edge("e1", 0, 100), edge("e2", 0, 100), edge("e3", 0, 100), ingest("i1", 0, 100), ingest("i2", 0, 100), ingest("i3", 0, 100))
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := f.alloc.Allocate("user-1", anyIP); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("Allocate allocates %v times per call, want ≤ 1", n)
	}
	var dst gslb.Allocation
	if n := testing.AllocsPerRun(1000, func() {
		if err := f.alloc.AllocateTo(&dst, "user-1", anyIP); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("AllocateTo allocates %v times per call, want 0", n)
	}
	want := f.allocate(t, "user-1")
	if err := f.alloc.AllocateTo(&dst, "user-1", anyIP); err != nil || !slices.Equal(dst.Ingest, want.Ingest) || len(dst.Edge) != len(want.Edge) {
		t.Errorf("AllocateTo = %+v, %v; Allocate = %+v", dst, err, want)
	}
}

// A failed sync keeps the last good table only until it is MaxAge old;
// then allocations answer ErrTableStale until a sync succeeds. No table at
// all (before the first sync) is stale too.
func TestAllocatorTableAges(t *testing.T) {
	nodes := []loadtable.NodeLoad{edge("e1", 0, 100), ingest("i1", 0, 0)}
	for _, tc := range []struct {
		name    string
		maxAge  time.Duration
		advance time.Duration // after the last good sync
		failed  bool          // a failed sync after advancing
		stale   bool
	}{
		{"fresh", 0, 0, false, false},
		{"failed sync, young table", 0, 2 * time.Second, true, false},
		{"failed sync, exactly max age", 0, 3 * time.Second, true, false},
		{"failed sync, past max age", 0, 3*time.Second + time.Millisecond, true, true},
		{"failed sync, configured age", time.Second, 1500 * time.Millisecond, true, true},
		// No sync at all (a hung sync loop): allocations find it out.
		{"no sync, past max age", 0, 4 * time.Second, false, true},
		{"no sync, young", 0, 2 * time.Second, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := loadtable.NewMemoryTable()
			flaky := &flakyTable{Table: mem}
			f := newFixtureOn(t, mem, gslb.AllocatorConfig{Table: flaky, MaxAge: tc.maxAge}, nodes...)
			f.clk.Advance(tc.advance)
			if tc.failed {
				flaky.broken.Store(true)
				if err := f.alloc.SyncOnce(context.Background()); !errors.Is(err, errTableDown) {
					t.Fatalf("SyncOnce: %v", err)
				}
			}
			if age := f.alloc.SnapshotAge(); age != tc.advance {
				t.Errorf("SnapshotAge = %v, want %v", age, tc.advance)
			}
			// Without a failed sync, one allocation in 64 reads the clock.
			var err error
			for i := range 64 {
				if _, err = f.alloc.Allocate("u"+strconv.Itoa(i), anyIP); err != nil {
					break
				}
			}
			if tc.stale != errors.Is(err, gslb.ErrTableStale) || (!tc.stale && err != nil) {
				t.Fatalf("Allocate: err = %v, want stale=%v", err, tc.stale)
			}
			if !tc.stale {
				return
			}
			// Stale stays stale, and a good sync brings the table back.
			if _, err := f.alloc.Allocate("u", anyIP); !errors.Is(err, gslb.ErrTableStale) {
				t.Fatalf("second Allocate: %v", err)
			}
			flaky.broken.Store(false)
			f.report(t, nodes...)
			f.sync(t)
			if _, err := f.alloc.Allocate("u", anyIP); err != nil {
				t.Fatalf("Allocate after a good sync: %v", err)
			}
		})
	}
	t.Run("before the first sync", func(t *testing.T) {
		clk := clock.NewFake(t0)
		a, err := gslb.NewAllocator(gslb.AllocatorConfig{Table: loadtable.NewMemoryTable(), Clock: clk, Logger: discard})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Allocate("u", anyIP); !errors.Is(err, gslb.ErrTableStale) {
			t.Fatalf("Allocate: %v, want ErrTableStale", err)
		}
		clk.Advance(time.Second)
		if age := a.SnapshotAge(); age != time.Second {
			t.Errorf("SnapshotAge = %v, want the time since NewAllocator", age)
		}
		if err := a.SyncOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Allocate("u", anyIP); !errors.Is(err, gslb.ErrNoNodes) {
			t.Fatalf("Allocate of an empty table: %v, want ErrNoNodes", err)
		}
	})
}

// metricValues gathers reg and returns every sample of the named family by
// its labels ("k=v,k=v" in label order; "" without labels). A histogram's
// value is its sample count.
func metricValues(t testing.TB, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			out[strings.Join(ls, ",")] = v
		}
	}
	return out
}

func TestAllocatorMetrics(t *testing.T) {
	stale := func(l loadtable.NodeLoad) loadtable.NodeLoad { l.At = t0.Add(-time.Hour); return l }
	draining := func(l loadtable.NodeLoad) loadtable.NodeLoad { l.Draining = true; return l }
	classify := func(ip netip.Addr) string {
		if ip.Is4() && ip.As4()[0] == 10 {
			return "telecom"
		}
		if ip.Is4() && ip.As4()[0] == 11 {
			return "unicom" // no nodes of its own: served by BGP
		}
		return ""
	}
	mem := loadtable.NewMemoryTable()
	flaky := &flakyTable{Table: mem}
	f := newFixtureOn(t, mem, gslb.AllocatorConfig{Table: flaky, Classify: classify},
		edge("e1", 0, 100), onLine(edge("t1", 0, 100), "telecom"), stale(edge("e2", 0, 100)), draining(edge("e3", 0, 100)),
		edge("e4", 99, 100), ingest("i1", 0, 0), stale(ingest("i2", 0, 0)))
	reg := prometheus.NewRegistry()
	if err := reg.Register(f.alloc.Collector()); err != nil {
		t.Fatal(err)
	}
	for i, ip := range []string{"10.0.0.1", "10.0.0.2", "11.0.0.1", "192.0.2.1", "192.0.2.2"} {
		if _, err := f.alloc.Allocate("u"+strconv.Itoa(i), netip.MustParseAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	flaky.broken.Store(true)
	f.clk.Advance(1500 * time.Millisecond)
	_ = f.alloc.SyncOnce(context.Background())
	_ = f.alloc.SyncOnce(context.Background())

	for _, tc := range []struct {
		name string
		want map[string]float64
	}{
		{"danmaku_gslb_allocations_total", map[string]float64{"line=bgp": 3, "line=telecom": 2}},
		{"danmaku_gslb_nodes", map[string]float64{
			"kind=edge,state=healthy": 2, "kind=edge,state=stale": 1, "kind=edge,state=draining": 1, "kind=edge,state=overloaded": 1,
			"kind=ingest,state=healthy": 1, "kind=ingest,state=stale": 1, "kind=ingest,state=draining": 0, "kind=ingest,state=overloaded": 0,
		}},
		{"danmaku_gslb_sync_errors_total", map[string]float64{"": 2}},
		{"danmaku_gslb_sync_duration_seconds", map[string]float64{"": 3}}, // count: one good, two failed
		{"danmaku_gslb_table_age_seconds", map[string]float64{"": 1.5}},
	} {
		if got := metricValues(t, reg, tc.name); !maps.Equal(got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Lines beyond the bound share one label, so a fleet misconfigured with a
// line per node cannot blow up the allocation counter.
func TestAllocationLinesBounded(t *testing.T) {
	var nodes []loadtable.NodeLoad
	for i := range 100 {
		nodes = append(nodes, onLine(edge(fmt.Sprintf("e%d", i), 0, 100), fmt.Sprintf("line%d", i)))
	}
	f := newFixture(t, gslb.AllocatorConfig{Classify: func(ip netip.Addr) string { return fmt.Sprintf("line%d", ip.As4()[3]) }},
		append(nodes, ingest("i1", 0, 0))...)
	reg := prometheus.NewRegistry()
	if err := reg.Register(f.alloc.Collector()); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := f.alloc.Allocate("u", netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	got := metricValues(t, reg, "danmaku_gslb_allocations_total")
	total := 0.0
	for _, v := range got {
		total += v
	}
	if len(got) > 64 || got["line=other"] == 0 || total != 100 {
		t.Errorf("%d line labels (other: %v), %v allocations; want at most 64 labels and all 100 counted", len(got), got["line=other"], total)
	}
}

// BenchmarkAllocate measures allocation decisions (AllocateTo, reusing one
// Allocation per worker) over 20 edges and 10 ingests of unequal load while
// the table is synced every 5 ms in the background, and reports how closely
// the edges were handed out in proportion to their headroom
// (edge-max/expected: the most over-served edge's hand-outs over its share;
// 1 is perfect).
func BenchmarkAllocate(b *testing.B) {
	f := newFixture(b, gslb.AllocatorConfig{})
	var nodes []loadtable.NodeLoad
	room := map[string]float64{}
	total := 0.0
	for i := range 20 {
		n := edge(fmt.Sprintf("e%02d", i), 400*i, 10_000)
		nodes = append(nodes, n)
		room[n.Addr] = min(0.90, 0.95-float64(n.Conns)/10_000) * 10_000
		total += room[n.Addr]
	}
	for i := range 10 {
		nodes = append(nodes, ingest(fmt.Sprintf("i%02d", i), 10*i, 1_000))
	}
	f.report(b, nodes...)
	f.sync(b)
	users := make([]string, 10_000)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.alloc.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var (
		mu     sync.Mutex
		counts = map[string]int{}
		worker atomic.Int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		local := map[string]int{}
		i := int(worker.Add(1)) * 7919
		ip := netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
		var a gslb.Allocation
		for pb.Next() {
			if err := f.alloc.AllocateTo(&a, users[i%len(users)], ip); err != nil {
				b.Error(err)
				return
			}
			local[a.Edge[0]]++
			i++
		}
		mu.Lock()
		for k, v := range local {
			counts[k] += v
		}
		mu.Unlock()
	})
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "allocations/s")
	}
	n, worst := 0, 0.0
	for _, c := range counts {
		n += c
	}
	for addr, c := range counts {
		worst = max(worst, float64(c)/(float64(n)*room[addr]/total))
	}
	b.ReportMetric(worst, "edge-max/expected")
}

// Every gslb process ranks a user's ingest nodes the same way (no per-process
// hash seed), so a user re-entering through another gslb, or after a
// restart, keeps its ingest node and its per-user bucket.
func TestIngestChoiceSameAcrossAllocators(t *testing.T) {
	nodes := []loadtable.NodeLoad{edge("e1", 1, 100), ingest("i1", 1, 100), ingest("i2", 1, 100), ingest("i3", 1, 100), ingest("i4", 1, 100)}
	a := newFixture(t, gslb.AllocatorConfig{}, nodes...)
	b := newFixture(t, gslb.AllocatorConfig{}, nodes...)
	for i := range 200 {
		u := fmt.Sprintf("user-%d", i)
		if x, y := a.allocate(t, u).Ingest[0], b.allocate(t, u).Ingest[0]; x != y {
			t.Fatalf("user %s: %s from one allocator, %s from another", u, x, y)
		}
	}
}

// TestAllocatorNodeClockSkew: staleness is judged by the gslb's clock, from
// when it first read each report, not by the reporter's stamp — an edge
// whose clock is 2 s behind is handed out from its second report on (by
// its stamps every report was over the 1 s staleness old: it was never
// handed out, the fault table's "edge-2 clock 2 s behind"), one 2 s ahead
// goes stale 1 s after its last report was read (not 3 s), and a dead
// node's report found at the first read is stale at once.
func TestAllocatorNodeClockSkew(t *testing.T) {
	behind, ahead := edge("behind", 0, 100), edge("ahead", 0, 100)
	dead := edge("dead", 0, 100)
	f := newFixture(t, gslb.AllocatorConfig{Stale: time.Second}, edge("e1", 0, 100), ingest("i1", 0, 0))
	reportAll := func(withAhead bool) {
		b, a := behind, ahead
		b.At, a.At = f.clk.Now().Add(-2*time.Second), f.clk.Now().Add(2*time.Second)
		f.report(t, edge("e1", 0, 100), ingest("i1", 0, 0), b)
		if withAhead {
			f.report(t, a)
		}
	}
	dead.At = f.clk.Now().Add(-30 * time.Second)
	f.report(t, dead)
	reportAll(true)
	f.sync(t)
	if got := edgesSeen(t, f, 64); !slices.Equal(got, []string{"ws://ahead", "ws://e1"}) {
		t.Fatalf("first read: edges %v, want ahead and e1 (behind's first report looks 2 s old, dead's 30 s)", got)
	}
	for range 4 {
		f.clk.Advance(250 * time.Millisecond)
		reportAll(true)
		f.sync(t)
	}
	if got := edgesSeen(t, f, 64); !slices.Equal(got, []string{"ws://ahead", "ws://behind", "ws://e1"}) {
		t.Fatalf("reporting every 250 ms: edges %v, want ahead, behind and e1", got)
	}
	f.clk.Advance(800 * time.Millisecond)
	reportAll(false) // ahead falls silent
	f.sync(t)
	if got := edgesSeen(t, f, 64); !slices.Equal(got, []string{"ws://ahead", "ws://behind", "ws://e1"}) {
		t.Fatalf("ahead silent 800 ms: edges %v, want all three", got)
	}
	f.clk.Advance(400 * time.Millisecond)
	reportAll(false)
	f.sync(t)
	if got := edgesSeen(t, f, 64); !slices.Equal(got, []string{"ws://behind", "ws://e1"}) {
		t.Fatalf("ahead silent 1.2 s (its stamp still 0.8 s ahead): edges %v, want behind and e1", got)
	}
}

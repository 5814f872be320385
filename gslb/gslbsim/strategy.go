package gslbsim

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sort"
	"time"

	"danmaku/gslb"
	"danmaku/internal/clock"
)

// Picker is one allocator instance: it reads the shared load table when
// synced and answers from what it read until the next sync.
type Picker interface {
	// Sync reads the load table. The simulator calls it every Sync interval
	// of simulated time.
	Sync(ctx context.Context) error
	// Pick returns the edge addresses for one viewer: the one to dial, then
	// the fallbacks in the order the viewer tries them.
	Pick(user string) ([]string, error)
}

// Strategy is a way of choosing edges.
type Strategy struct {
	// Name labels the strategy's row in the results.
	Name string
	// New returns one allocator instance reading table on clk. seed differs
	// per instance, for strategies that draw at random.
	New func(table gslb.LoadTable, clk clock.Clock, seed uint64) (Picker, error)
}

// Strategies returns the three strategies the balance target is stated
// against: the allocator, always-least-loaded and two random choices.
func Strategies() []Strategy {
	return []Strategy{Allocator(gslb.AllocatorConfig{}), LeastLoaded(), TwoChoices()}
}

// Allocator is gslb.Allocator with cfg; Table, Clock and Logger are set per
// instance. The zero cfg is the allocator as production runs it.
func Allocator(cfg gslb.AllocatorConfig) Strategy {
	return Strategy{
		Name: "gslb.Allocator",
		New: func(table gslb.LoadTable, clk clock.Clock, _ uint64) (Picker, error) {
			c := cfg
			c.Table, c.Clock = table, clk
			if c.Logger == nil {
				c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			}
			a, err := gslb.NewAllocator(c)
			if err != nil {
				return nil, err
			}
			return allocatorPicker{a}, nil
		},
	}
}

type allocatorPicker struct{ a *gslb.Allocator }

func (p allocatorPicker) Sync(ctx context.Context) error { return p.a.SyncOnce(ctx) }

// Pick passes no client IP: every simulated viewer is on the BGP line, the
// case that concentrates the most viewers on one candidate list.
func (p allocatorPicker) Pick(user string) ([]string, error) {
	al, err := p.a.Allocate(user, netip.Addr{})
	return al.Edge, err
}

// The baselines filter the table as the allocator does with its defaults, so
// that every strategy chooses among the same live edges: a crashed edge
// stays a candidate until its report is a second old, a full one drops out
// at 95 %. The values copy gslb's unexported defaults (stale 1 s, overload
// 0.95, CPU 0.90).
const (
	viewStale    = time.Second
	viewOverload = 0.95
	viewMaxCPU   = 0.90
	// viewFallbacks matches the allocator's default of two fallbacks.
	viewFallbacks = 2
)

type viewNode struct {
	id, addr string
	use      float64 // conns/capacity as last reported
}

// view is an instance's stale copy of the live edges.
type view struct {
	table gslb.LoadTable
	clk   clock.Clock
	nodes []viewNode
}

func (v *view) sync(ctx context.Context) error {
	loads, err := v.table.Snapshot(ctx)
	if err != nil {
		return err
	}
	now := v.clk.Now()
	// A new slice, not v.nodes[:0]: nothing outside holds it, but a
	// failed sync must leave the last good view intact, as the allocator's does.
	nodes := make([]viewNode, 0, len(loads))
	for _, l := range loads {
		if l.Kind != gslb.KindEdge || l.Draining || now.Sub(l.At) > viewStale || l.CPU >= viewMaxCPU {
			continue
		}
		use := l.CPU
		if l.Capacity > 0 {
			use = max(use, float64(l.Conns)/float64(l.Capacity))
		}
		if use >= viewOverload {
			continue
		}
		nodes = append(nodes, viewNode{id: l.ID, addr: l.Addr, use: use})
	}
	v.nodes = nodes
	return nil
}

// LeastLoaded hands every viewer the edge with the lowest utilisation in the
// instance's view, then the next two as fallbacks: the stampede the
// allocator's hand-out walk exists to avoid, measured for comparison.
func LeastLoaded() Strategy {
	return Strategy{
		Name: "least-loaded",
		New: func(table gslb.LoadTable, clk clock.Clock, _ uint64) (Picker, error) {
			return &leastLoaded{view: view{table: table, clk: clk}}, nil
		},
	}
}

type leastLoaded struct{ view }

func (p *leastLoaded) Sync(ctx context.Context) error {
	if err := p.sync(ctx); err != nil {
		return err
	}
	sort.SliceStable(p.nodes, func(i, j int) bool {
		if p.nodes[i].use != p.nodes[j].use {
			return p.nodes[i].use < p.nodes[j].use
		}
		return p.nodes[i].id < p.nodes[j].id
	})
	return nil
}

func (p *leastLoaded) Pick(string) ([]string, error) {
	if len(p.nodes) == 0 {
		return nil, gslb.ErrNoNodes
	}
	k := min(len(p.nodes), 1+viewFallbacks)
	out := make([]string, k)
	for i := range out {
		out[i] = p.nodes[i].addr
	}
	return out, nil
}

// TwoChoices draws two distinct edges uniformly (capacity plays no part in
// the draw) and hands out the one less utilised in the instance's view; each
// fallback is another such draw among the edges not yet chosen.
func TwoChoices() Strategy {
	return Strategy{
		Name: "two-choices",
		New: func(table gslb.LoadTable, clk clock.Clock, seed uint64) (Picker, error) {
			return &twoChoices{view: view{table: table, clk: clk}, rng: rand.New(rand.NewPCG(seed, 0x2c))}, nil
		},
	}
}

type twoChoices struct {
	view
	rng *rand.Rand
}

func (p *twoChoices) Sync(ctx context.Context) error { return p.sync(ctx) }

func (p *twoChoices) Pick(string) ([]string, error) {
	n := len(p.nodes)
	if n == 0 {
		return nil, gslb.ErrNoNodes
	}
	k := min(n, 1+viewFallbacks)
	chosen := make([]int, 0, k)
	taken := func(i int) bool {
		for _, c := range chosen {
			if c == i {
				return true
			}
		}
		return false
	}
	// draw rejects what is already chosen; k is at most 3, so a retry is rare.
	draw := func() int {
		for {
			if i := p.rng.IntN(n); !taken(i) {
				return i
			}
		}
	}
	for len(chosen) < k {
		i := draw()
		if n-len(chosen) > 1 {
			chosen = append(chosen, i) // held while drawing the second, so they differ
			j := draw()
			chosen = chosen[:len(chosen)-1]
			if p.nodes[j].use < p.nodes[i].use {
				i = j
			}
		}
		chosen = append(chosen, i)
	}
	out := make([]string, k)
	for x, i := range chosen {
		out[x] = p.nodes[i].addr
	}
	return out, nil
}

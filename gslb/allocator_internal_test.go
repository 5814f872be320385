package gslb

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// negLog stands in for -math.Log in ranking; its error must stay far below
// rankMargin, or pruning could change a ranking.
func TestNegLogAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	check := func(u float64) {
		want := -math.Log(u)
		got := negLog(u)
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	for range 1_000_000 {
		check((float64(rng.Uint64()>>11) + 0.5) * 0x1p-53)
	}
	// The edges: the smallest u, around the switch to the series, the
	// largest.
	for _, u := range []float64{0x1p-54, 1e-9, 0.5, 1 - 1.0/64, 1 - 1.0/64 + 1e-12, 1 - 1.0/64 - 1e-12, 1 - 0x1p-54} {
		check(u)
	}
	if worst > 1e-5 {
		t.Fatalf("negLog relative error %g, want ≤ 1e-5", worst)
	}
}

// rank, with its pruning, gives the ranking that scoring every node gives.
func TestRankMatchesFullScoring(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		nodes := make([]snapNode, 1+rng.IntN(40))
		for i := range nodes {
			w := 1 + rng.Float64()*1000
			id := fmt.Sprintf("n%d", i)
			nodes[i] = snapNode{id: id, addr: id, key: hash64(id), weight: w, invWeight: 1 / w}
		}
		k := 1 + rng.IntN(maxFallbacks+1)
		for u := range 50 {
			uh := hash64(fmt.Sprintf("user-%d-%d", trial, u))
			got := rank(nil, nodes, uh, k)
			type scored struct {
				addr string
				key  float64
			}
			var all []scored
			for _, n := range nodes {
				h := mix(uh ^ n.key)
				all = append(all, scored{n.addr, negLog((float64(h>>11)+0.5)*0x1p-53) * n.invWeight})
			}
			sort.SliceStable(all, func(i, j int) bool { return all[i].key < all[j].key })
			var want []string
			for _, s := range all[:min(k, len(all))] {
				want = append(want, s.addr)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d user %d: rank = %v, full scoring = %v", trial, u, got, want)
			}
		}
	}
}

// draw returns distinct nodes, never the skipped one, as many as asked for
// or as there are, whatever the weights (rounding at the slices' edges
// included).
func TestDrawDistinct(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 2000 {
		var p pool
		sum := 0.0
		for i := range 1 + rng.IntN(12) {
			w := math.Ldexp(1+rng.Float64(), rng.IntN(40)-20) // weights over 12 orders of magnitude
			p.nodes = append(p.nodes, snapNode{addr: fmt.Sprint(i), weight: w})
			sum += w
			p.cum = append(p.cum, sum)
		}
		skip := rng.IntN(len(p.nodes)+1) - 1
		k := rng.IntN(maxFallbacks + 1)
		got := p.draw(nil, rng.Uint64(), skip, k)
		avail := len(p.nodes)
		if skip >= 0 {
			avail--
		}
		if len(got) != min(k, avail) {
			t.Fatalf("trial %d: %d of %d nodes (skip %d), asked %d: %v", trial, len(got), len(p.nodes), skip, k, got)
		}
		seen := map[string]bool{}
		for _, a := range got {
			if seen[a] || (skip >= 0 && a == p.nodes[skip].addr) {
				t.Fatalf("trial %d: %v repeats or holds the skipped %d", trial, got, skip)
			}
			seen[a] = true
		}
	}
}

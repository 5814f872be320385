package gslbsim

import (
	"context"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// small is a run that takes well under a second under -race: 20,000 joins
// (40 ms of trace) on capacities scaled down to match, with short sessions
// so that departures happen too.
var small = Config{
	Seed:         7,
	Arrivals:     20_000,
	BaseCapacity: 300,
	MeanSession:  100 * time.Millisecond,
	Sample:       2 * time.Millisecond,
}

// TestBalanceSimulation checks the simulator's own invariants on a small run
// of every strategy. It asserts nothing about balance: that is measured by
// the full run (TestBalanceSimulationFull), not enforced.
func TestBalanceSimulation(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill string
	}{
		{"largest edge dies", ""},
		// Index 0 is also the zero value of a viewer's edge: viewers yet
		// to join must not be taken for its viewers.
		{"edge-000 dies", "edge-000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small
			cfg.Kill = tc.kill
			checkInvariants(t, cfg)
		})
	}
}

func checkInvariants(t *testing.T, cfg Config) {
	rs, err := Run(context.Background(), cfg, Strategies()...)
	if err != nil {
		t.Fatal(err)
	}
	liveCap := 0
	moved := 0 // the dead edge's viewers, over every strategy
	for _, r := range rs {
		t.Run(r.Strategy, func(t *testing.T) {
			if r.Arrivals != cfg.Arrivals {
				t.Errorf("arrivals = %d, want %d", r.Arrivals, cfg.Arrivals)
			}
			// Half the capacity is free at the end: an allocator that
			// refuses a join here is wrong, not overloaded.
			if r.Placed != r.Arrivals || r.Refused != 0 {
				t.Errorf("placed %d, refused %d of %d arrivals", r.Placed, r.Refused, r.Arrivals)
			}
			if r.Departed == 0 {
				t.Error("no departures: sessions are not modelled")
			}
			k := r.Killed
			if k.Edge == "" || cfg.Kill != "" && k.Edge != cfg.Kill {
				t.Fatalf("%q died, want %q", k.Edge, cfg.Kill)
			}
			moved += k.Viewers
			if r.PlacedOnDead != 0 {
				t.Errorf("%d viewers connected to %s after it died", r.PlacedOnDead, k.Edge)
			}
			if k.Lost != 0 || k.Reconnected+k.Left != k.Viewers {
				t.Errorf("the dead edge's %d viewers: %d reconnected, %d left, %d lost", k.Viewers, k.Reconnected, k.Left, k.Lost)
			}
			if k.Spread.Viewers != k.Reconnected {
				t.Errorf("spread counts %d reconnections, want %d", k.Spread.Viewers, k.Reconnected)
			}
			if r.RedirectedSpread.Viewers != r.Redirected {
				t.Errorf("redirected spread counts %d, want %d", r.RedirectedSpread.Viewers, r.Redirected)
			}
			// Connected viewers over the final mean is the live capacity:
			// the total less the dead edge's.
			liveCap = 0
			for _, e := range mustCluster(t, cfg).edges {
				if e.ID != k.Edge {
					liveCap += e.Capacity
				}
			}
			if got := float64(r.Connected) / float64(liveCap); !near(got, r.Final.Mean) {
				t.Errorf("final mean %.6f, want connected/live capacity %.6f", r.Final.Mean, got)
			}
			if r.Final.Max < r.Final.Mean {
				t.Errorf("final max %.3f below the mean %.3f", r.Final.Max, r.Final.Mean)
			}
			for i := 1; i < len(r.Samples); i++ {
				if r.Samples[i].At <= r.Samples[i-1].At {
					t.Fatalf("samples out of order at %d: %v after %v", i, r.Samples[i].At, r.Samples[i-1].At)
				}
			}
			if r.P50 > r.P95 || r.P95 > r.Worst.Ratio() {
				t.Errorf("p50 %.3f, p95 %.3f, worst %.3f out of order", r.P50, r.P95, r.Worst.Ratio())
			}
		})
	}
	// Least-loaded may leave the victim empty in so short a run; the
	// others must not, or the reconnection path went untested.
	if moved == 0 {
		t.Error("the dead edge had no viewers under any strategy")
	}
	var b strings.Builder
	if err := WriteTable(&b, rs, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}

// TestBalanceSimulationDeterministic: the same seed gives the same run, so a
// number in the docs can be reproduced and a change to the allocator is the
// only thing that moves it.
func TestBalanceSimulationDeterministic(t *testing.T) {
	cfg := small
	cfg.Arrivals = 5_000
	a, err := Run(context.Background(), cfg, Strategies()...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), cfg, Strategies()...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("two runs of one seed differ")
	}
}

func TestBalanceSimulationConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"one edge", Config{Edges: 1}},
		{"negative rate", Config{Rate: -1}},
		{"too many allocators", Config{Allocators: 300}},
		{"unknown victim", Config{Arrivals: 10, Kill: "edge-999"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Run(context.Background(), tc.cfg, LeastLoaded()); err == nil {
				t.Error("no error")
			}
		})
	}
	if _, err := Run(context.Background(), Config{Arrivals: 10}); err == nil {
		t.Error("no strategy: no error")
	}
}

// TestBalanceSimulationFull is the full run the balance target is
// measured with: DANMAKU_SIM=1 go test -run TestBalanceSimulationFull -v ./gslb/gslbsim
// (DANMAKU_SIM_SEED=n replays another trace; DANMAKU_SIM_UNGATED=1 writes
// every look, as reports were before they went through a gslb.ReportGate).
func TestBalanceSimulationFull(t *testing.T) {
	if os.Getenv("DANMAKU_SIM") == "" {
		t.Skip("the full simulation: set DANMAKU_SIM=1")
	}
	var cfg Config
	if s := os.Getenv("DANMAKU_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("DANMAKU_SIM_SEED: %v", err)
		}
		cfg.Seed = seed
	}
	cfg.Ungated = os.Getenv("DANMAKU_SIM_UNGATED") != ""
	start := time.Now()
	rs, err := Run(context.Background(), cfg, Strategies()...)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteTable(&b, rs, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Logf("1,000,000 joins at 500,000/s, 100 edges, 8 allocators, seed %d, ungated %v (%v wall)\n%s",
		max(cfg.Seed, defaultSeed), cfg.Ungated, time.Since(start).Round(time.Millisecond), b.String())
}

func mustCluster(t testing.TB, cfg Config) *cluster {
	t.Helper()
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := newCluster(c)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// BenchmarkBalanceSimulation runs the full simulation once per iteration
// and reports each strategy's balance as metrics, for benchstat:
// go test -run '^$' -bench BalanceSimulation -benchtime 1x ./gslb/gslbsim
func BenchmarkBalanceSimulation(b *testing.B) {
	var rs []Result
	for b.Loop() {
		var err error
		if rs, err = Run(context.Background(), Config{}, Strategies()...); err != nil {
			b.Fatal(err)
		}
	}
	for _, r := range rs {
		b.ReportMetric(r.P95, "p95-max/mean:"+r.Strategy)
		b.ReportMetric(r.Final.Ratio(), "final-max/mean:"+r.Strategy)
		b.ReportMetric(100*r.Killed.Spread.MaxShare, "killed-max-share-%:"+r.Strategy)
	}
	var s strings.Builder
	if err := WriteTable(&s, rs, 0); err != nil {
		b.Fatal(err)
	}
	b.Log("\n" + s.String())
}

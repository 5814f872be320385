package loadtable_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
)

// written is one load a gate let through.
type written struct {
	at   time.Duration // since the start
	load loadtable.NodeLoad
	ok   bool
}

// gateRun drives a ReportGate with a fake clock for d, looking when Wait
// says, as Reporter.Run does; load gives the node's load at each look and
// fail, when set, fails writes. It returns the writes and the looks.
func gateRun(t *testing.T, g *loadtable.ReportGate, d time.Duration, load func(at time.Duration) loadtable.NodeLoad, fail func(at time.Duration) bool) (ws []written, looks int) {
	t.Helper()
	clk := clock.NewFake(t0)
	for {
		now := clk.Now()
		at := now.Sub(t0)
		if at > d {
			return ws, looks
		}
		looks++
		if l, ok := g.Look(load(at), now); ok {
			good := fail == nil || !fail(at)
			g.Done(l, now, good)
			ws = append(ws, written{at: at, load: l, ok: good})
		}
		wait := g.Wait(now)
		if wait <= 0 {
			t.Fatalf("at %v: Wait %v after a look", at, wait)
		}
		clk.Advance(wait)
	}
}

// gaps returns the shortest and longest time between two writes that
// succeeded.
func gaps(ws []written) (shortest, longest time.Duration) {
	shortest = time.Hour
	var prev *written
	for i := range ws {
		if !ws[i].ok {
			continue
		}
		if prev != nil {
			shortest, longest = min(shortest, ws[i].at-prev.at), max(longest, ws[i].at-prev.at)
		}
		prev = &ws[i]
	}
	return shortest, longest
}

// ingestAt is an ingest without a capacity at CPU cpu.
func ingestAt(cpu float64) loadtable.NodeLoad {
	return loadtable.NodeLoad{ID: "i1", Kind: loadtable.KindIngest, Addr: "http://i1", CPU: cpu}
}

// TestReportGateQuiet: a load that says nothing new to the allocators is
// written every MaxInterval (the keep-alive) and no more often, and looked
// at about eight times a second: an idle node, a node whose CPU wobbles
// under a steady load, a node without a capacity whose connections come
// and go.
func TestReportGateQuiet(t *testing.T) {
	const d = 60 * time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	var cpu float64 // the sampler's: a new figure every 100 ms
	var sampled time.Duration = -1
	for _, tc := range []struct {
		name string
		load func(at time.Duration) loadtable.NodeLoad
	}{
		{"idle", func(time.Duration) loadtable.NodeLoad { return ingestAt(0.01) }},
		{"CPU 0.30 ± 0.04 every 100 ms", func(at time.Duration) loadtable.NodeLoad {
			if s := at / (100 * time.Millisecond); s != sampled {
				sampled, cpu = s, 0.30+0.08*(rng.Float64()-0.5)
			}
			return ingestAt(cpu)
		}},
		{"connections without a capacity", func(time.Duration) loadtable.NodeLoad {
			l := ingestAt(0.2)
			l.Conns = rng.IntN(500)
			return l
		}},
		{"edge of 100k connections, a few arriving", func(at time.Duration) loadtable.NodeLoad {
			return loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge, Addr: "ws://e1", Capacity: 100_000, Conns: 40_000 + int(at/time.Second)*10, CPU: 0.2}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, looks := gateRun(t, loadtable.NewReportGate(0, 0, 0), d, tc.load, nil)
			keepAlives := int(d/(250*time.Millisecond)) + 1
			if shortest, longest := gaps(ws); len(ws) != keepAlives || shortest != 250*time.Millisecond || longest != 250*time.Millisecond {
				t.Errorf("%d writes (gaps %v..%v), want %d: one every 250 ms", len(ws), shortest, longest, keepAlives)
			}
			if perSec := float64(looks) / d.Seconds(); perSec > 9 {
				t.Errorf("%.1f looks a second, want about 8", perSec)
			}
		})
	}
}

// TestReportGateNews: what the allocators decide from is written at the
// look that finds it, once MinInterval since the last write has passed,
// and the reported load then says it.
func TestReportGateNews(t *testing.T) {
	edge := func(conns int) loadtable.NodeLoad {
		return loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge, Addr: "ws://e1", Capacity: 1000, Conns: conns, CPU: 0.1}
	}
	const change = 2100 * time.Millisecond // between two keep-alives
	for _, tc := range []struct {
		name   string
		before loadtable.NodeLoad
		after  loadtable.NodeLoad
	}{
		{"draining", edge(300), func() loadtable.NodeLoad { l := edge(300); l.Draining = true; return l }()},
		{"capacity", edge(300), func() loadtable.NodeLoad { l := edge(300); l.Capacity = 2000; return l }()},
		{"line", edge(300), func() loadtable.NodeLoad { l := edge(300); l.Line = "telecom"; return l }()},
		{"region", edge(300), func() loadtable.NodeLoad { l := edge(300); l.Region = "east"; return l }()},
		{"address", edge(300), func() loadtable.NodeLoad { l := edge(300); l.Addr = "ws://e1b"; return l }()},
		{"headroom by a step", edge(300), edge(340)}, // 0.65 → 0.61
		{"the 95 % bound", edge(940), edge(950)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, _ := gateRun(t, loadtable.NewReportGate(0, 0, 0), 3*time.Second, func(at time.Duration) loadtable.NodeLoad {
				if at >= change {
					return tc.after
				}
				return tc.before
			}, nil)
			var first *written
			for i := range ws {
				if ws[i].at >= change {
					first = &ws[i]
					break
				}
			}
			// Looks come at most 125 ms apart, and the last write was at
			// least 50 ms before.
			if first == nil || first.at-change > 125*time.Millisecond {
				t.Fatalf("writes %+v: the change at %v was not written within 125 ms", ws, change)
			}
			if l := first.load; l.Draining != tc.after.Draining || l.Capacity != tc.after.Capacity || l.Line != tc.after.Line ||
				l.Region != tc.after.Region || l.Addr != tc.after.Addr || l.Conns != tc.after.Conns {
				t.Errorf("written %+v, want %+v", l, tc.after)
			}
		})
	}
	t.Run("below a step", func(t *testing.T) {
		ws, _ := gateRun(t, loadtable.NewReportGate(0, 0, 0), 3*time.Second, func(at time.Duration) loadtable.NodeLoad {
			if at >= change {
				return edge(320) // 0.65 → 0.63
			}
			return edge(300)
		}, nil)
		if len(ws) != 13 {
			t.Errorf("%d writes, want the 13 keep-alives", len(ws))
		}
	})
}

// TestReportGateBoundHysteresis: a node past its bound is news at once;
// back under it, only once a point below, so that a load at the bound
// does not flap in and out of the hand-out.
func TestReportGateBoundHysteresis(t *testing.T) {
	conns := func(at time.Duration) int {
		switch {
		case at < 1100*time.Millisecond: // changes between keep-alives
			return 900
		case at < 2100*time.Millisecond:
			return 950 // at the bound
		case at < 3100*time.Millisecond:
			return 945 // under it, within a point
		default:
			return 930 // clear
		}
	}
	// No keep-alive within the run: every write is news.
	ws, _ := gateRun(t, loadtable.NewReportGate(0, 0, time.Minute), 4*time.Second, func(at time.Duration) loadtable.NodeLoad {
		return loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge, Addr: "ws://e1", Capacity: 1000, Conns: conns(at)}
	}, nil)
	byConns := map[int]int{}
	for _, w := range ws {
		byConns[w.load.Conns]++
	}
	if want := map[int]int{900: 1, 950: 1, 930: 1}; !maps.Equal(byConns, want) {
		t.Errorf("writes by connections: %v, want %v", byConns, want)
	}
}

// TestReportGateBounded: however the load moves, writes come at least
// MinInterval apart, attempts that failed included; a failure is tried
// again then.
func TestReportGateBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 0
	wild := func(time.Duration) loadtable.NodeLoad { // news at every look
		n++
		return loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge, Addr: "ws://e" + strconv.Itoa(n), Capacity: 1000, Conns: rng.IntN(1000), CPU: rng.Float64(), Draining: rng.IntN(2) == 0}
	}
	for _, tc := range []struct {
		name string
		min  time.Duration
		want time.Duration
		fail func(time.Duration) bool
	}{
		{"default", 0, 50 * time.Millisecond, nil},
		{"20 ms", 20 * time.Millisecond, 20 * time.Millisecond, nil},
		{"table failing half the time", 0, 50 * time.Millisecond, func(at time.Duration) bool { return at/time.Second%2 == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, _ := gateRun(t, loadtable.NewReportGate(0, tc.min, 0), 10*time.Second, wild, tc.fail)
			for i := 1; i < len(ws); i++ {
				if gap := ws[i].at - ws[i-1].at; gap < tc.want {
					t.Fatalf("attempts %v apart at %v, want at least %v", gap, ws[i].at, tc.want)
				}
			}
			if perSec := float64(len(ws)) / 10; perSec < 0.9*float64(time.Second/tc.want) {
				t.Errorf("%.1f attempts a second for a load that changes at every look, want about %d", perSec, time.Second/tc.want)
			}
		})
	}
}

// TestReportGateCPUStep: a step in CPU reaches the table through the
// moving average in a few steps of headroom, not a write per look, and the
// table ends within a step of it.
func TestReportGateCPUStep(t *testing.T) {
	ws, _ := gateRun(t, loadtable.NewReportGate(0, 0, 0), 5*time.Second, func(at time.Duration) loadtable.NodeLoad {
		if at < time.Second {
			return ingestAt(0.10)
		}
		return ingestAt(0.60)
	}, nil)
	news := 0
	for i := 1; i < len(ws); i++ {
		if ws[i].at-ws[i-1].at < 250*time.Millisecond {
			news++
		}
	}
	// Headroom 0.90 → 0.40 in steps of 5 %: 16 at most.
	if news == 0 || news > 16 {
		t.Errorf("%d writes ahead of the keep-alive for a step of CPU, want a few", news)
	}
	if last := ws[len(ws)-1].load.CPU; last < 0.59 || last > 0.60 {
		t.Errorf("last written CPU %.3f, want about 0.60", last)
	}
	for _, w := range ws {
		if w.at < time.Second && w.load.CPU != 0.10 {
			t.Errorf("written CPU %.3f at %v before the step, want 0.10", w.load.CPU, w.at)
		}
	}
}

// TestReportGateEveryLook: MaxInterval below Interval writes every look,
// Interval apart (the reporter as it first was).
func TestReportGateEveryLook(t *testing.T) {
	ws, looks := gateRun(t, loadtable.NewReportGate(5*time.Millisecond, 0, time.Nanosecond), time.Second, func(time.Duration) loadtable.NodeLoad { return ingestAt(0.1) }, nil)
	if shortest, longest := gaps(ws); len(ws) != looks || shortest != 5*time.Millisecond || longest != 5*time.Millisecond {
		t.Errorf("%d writes of %d looks, %v..%v apart", len(ws), looks, shortest, longest)
	}
}

// TestReporterRun: on the bubble's clock, the reporter writes nothing
// until Ready, then the load at once, stamped with its clock, then a
// keep-alive every 250 ms while nothing changes, waking about eight times a
// second; it removes the node when stopped.
func TestReporterRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := loadtable.NewMemoryTable()
		var ready atomic.Bool
		var looks atomic.Int64
		r := &loadtable.Reporter{
			Table: table, Ready: ready.Load, Now: time.Now,
			Load: func() loadtable.NodeLoad {
				looks.Add(1)
				return loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge, Addr: "ws://e1", Conns: 3}
			},
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(time.Second) // the bubble's clock: a second with nothing ready
		synctest.Wait()
		if got, _ := table.Snapshot(ctx); len(got) != 0 || r.Sent.Load() != 0 || looks.Load() != 0 {
			t.Fatalf("before Ready: table %+v, %d sent, %d looks", got, r.Sent.Load(), looks.Load())
		}
		ready.Store(true)
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		start := time.Now()
		got, _ := table.Snapshot(ctx)
		if len(got) != 1 || got[0].Conns != 3 || got[0].At.After(start) || r.Sent.Load() != 1 {
			t.Fatalf("after Ready: table %+v, %d sent", got, r.Sent.Load())
		}
		looks.Store(0)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := r.Sent.Load(); n != 41 {
			t.Errorf("%d reports in 10 s of an unchanged load, want 41 (one every 250 ms)", n)
		}
		if n := looks.Load(); n > 90 {
			t.Errorf("%d looks in 10 s, want about 80", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got, _ := table.Snapshot(context.Background()); len(got) != 0 {
			t.Fatalf("after stop: %+v, want the node removed", got)
		}
	})
}

// TestReporterRunFailing: a table that refuses writes is tried again at
// most every MinInterval, and the reporter still stops.
func TestReporterRunFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := &failingTable{Table: loadtable.NewMemoryTable()}
		r := &loadtable.Reporter{Table: table, Now: time.Now, Load: func() loadtable.NodeLoad { return ingestAt(0.1) }}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := table.tries.Load(); n < 19 || n > 21 {
			t.Errorf("%d attempts in a second, want one every 50 ms", n)
		}
		cancel()
		<-done
	})
}

type failingTable struct {
	loadtable.Table
	tries atomic.Int64
}

func (f *failingTable) Report(context.Context, loadtable.NodeLoad) error {
	f.tries.Add(1)
	return errors.New("down")
}

// TestReporterSilence: on the bubble's clock, Silence is 0 before Run,
// grows from Run's start while nothing is written (not ready, then a
// table that refuses: a node cut off from the store), and is back under a
// keep-alive interval once writes go through.
func TestReporterSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := &switchTable{Table: loadtable.NewMemoryTable()}
		table.down.Store(true)
		var ready atomic.Bool
		r := &loadtable.Reporter{Table: table, Now: time.Now, Ready: ready.Load, Load: func() loadtable.NodeLoad { return ingestAt(0.1) }}
		if d := r.Silence(time.Now()); d != 0 {
			t.Fatalf("before Run: silence %v, want 0", d)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if d := r.Silence(time.Now()); d != time.Second {
			t.Errorf("not ready for 1 s: silence %v, want 1s", d)
		}
		ready.Store(true)
		time.Sleep(2 * time.Second) // refused: still silent
		synctest.Wait()
		if d := r.Silence(time.Now()); d != 3*time.Second {
			t.Errorf("refused for 2 s more: silence %v, want 3s", d)
		}
		table.down.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		if d := r.Silence(time.Now()); d > 250*time.Millisecond {
			t.Errorf("writing again for 1 s: silence %v, want at most the 250 ms keep-alive", d)
		}
		cancel()
		<-done
	})
}

type switchTable struct {
	loadtable.Table
	down atomic.Bool
}

func (s *switchTable) Report(ctx context.Context, l loadtable.NodeLoad) error {
	if s.down.Load() {
		return errors.New("down")
	}
	return s.Table.Report(ctx, l)
}

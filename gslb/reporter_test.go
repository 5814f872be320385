package gslb_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/gslb"
)

// runReporter runs r for d of real time and returns after it stopped.
func runReporter(t *testing.T, r *gslb.Reporter, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	time.Sleep(d)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReporterQuietWhenIdle: an unchanged load is reported at most every
// MaxInterval, however often the ticker fires.
func TestReporterQuietWhenIdle(t *testing.T) {
	var calls atomic.Int64
	r := &gslb.Reporter{
		Table: gslb.NewMemoryLoadTable(), Interval: time.Millisecond, MaxInterval: 50 * time.Millisecond,
		Load: func() gslb.NodeLoad {
			calls.Add(1)
			return gslb.NodeLoad{ID: "e1", Kind: gslb.KindEdge, Conns: 7, CPU: 0.301}
		},
	}
	start := time.Now()
	runReporter(t, r, 300*time.Millisecond)
	most := int64(time.Since(start)/(50*time.Millisecond)) + 1
	if n := r.Sent.Load(); n < 1 || n > most {
		t.Fatalf("idle: %d reports over %v (%d looks), want 1..%d", n, time.Since(start), calls.Load(), most)
	}
}

// TestReporterEveryChange: a load that changes on every look is reported
// on every look (a CPU wobble under 1 % is not a change).
func TestReporterEveryChange(t *testing.T) {
	var calls atomic.Int64
	r := &gslb.Reporter{
		Table: gslb.NewMemoryLoadTable(), Interval: time.Millisecond, MaxInterval: time.Hour,
		Load: func() gslb.NodeLoad {
			n := calls.Add(1)
			return gslb.NodeLoad{ID: "e1", Kind: gslb.KindEdge, Conns: int(n), CPU: 0.3 + float64(n%2)*0.001}
		},
	}
	runReporter(t, r, 100*time.Millisecond)
	if sent, looked := r.Sent.Load(), calls.Load(); sent != looked || sent < 2 {
		t.Fatalf("%d reports of %d changed loads", sent, looked)
	}
	wobble := &gslb.Reporter{
		Table: gslb.NewMemoryLoadTable(), Interval: time.Millisecond, MaxInterval: time.Hour,
		Load: func() gslb.NodeLoad {
			n := calls.Add(1)
			return gslb.NodeLoad{ID: "e2", Kind: gslb.KindEdge, Conns: 5, CPU: 0.3 + float64(n%2)*0.001}
		},
	}
	runReporter(t, wobble, 100*time.Millisecond)
	if n := wobble.Sent.Load(); n != 1 {
		t.Fatalf("a CPU wobble of 0.1 %% made %d reports, want 1", n)
	}
}

// TestReporterWaitsUntilReady: nothing reaches the table until Ready says
// so (a node whose keyring has not loaded is not handed to clients).
func TestReporterWaitsUntilReady(t *testing.T) {
	table := gslb.NewMemoryLoadTable()
	var ready atomic.Bool
	r := &gslb.Reporter{
		Table: table, Interval: time.Millisecond, Ready: ready.Load,
		Load: func() gslb.NodeLoad { return gslb.NodeLoad{ID: "e1", Kind: gslb.KindEdge} },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	time.Sleep(30 * time.Millisecond)
	if got, _ := table.Snapshot(ctx); len(got) != 0 || r.Sent.Load() != 0 {
		t.Fatalf("reported before ready: %+v", got)
	}
	ready.Store(true)
	for r.Sent.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
}

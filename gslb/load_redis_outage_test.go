package gslb_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"danmaku/gslb"
	"danmaku/internal/breaker"
	"danmaku/internal/breaker/breakertest"
	"danmaku/internal/loadtable"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/testenv"
	"danmaku/internal/testwait"
)

// TestRedisOutageKeepsLastGoodTable cuts the path to the Redis load table
// (requests hang, as with a paused server) for DANMAKU_OUTAGE (default
// 3 s) while an allocator syncs every 5 ms and answers allocations: the
// Redis breaker opens, syncs then fail at once, allocations go on from the
// last good table until it is MaxAge old and are then refused with
// ErrTableStale (503 table_stale), and once Redis is back the breaker
// closes and allocations resume.
func TestRedisOutageKeepsLastGoodTable(t *testing.T) {
	if testing.Short() {
		t.Skip("an outage of seconds against a real Redis")
	}
	outage := breakertest.Outage(t, 3*time.Second)
	const maxAge = time.Second // below the outage, to see both fallbacks
	proxy := breakertest.NewProxy(t, testenv.Redis(t))
	rdb := redistest.Dial(t, redisx.Config{URL: proxy.Addr()})
	table := loadtable.NewRedisTable(rdb)
	b, _ := breaker.For(breaker.Config{Dep: "redis", Target: proxy.Addr()})
	alloc, err := gslb.NewAllocator(gslb.AllocatorConfig{Table: table, MaxAge: maxAge, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// Two nodes reporting every 100 ms, as reporters do (each report is a
	// Redis call that hangs or is refused in the outage, as in production).
	wg.Go(func() {
		for ctx.Err() == nil {
			for _, l := range []loadtable.NodeLoad{edge("e1", 0, 100), ingest("i1", 0, 100)} {
				l.At = time.Now()
				_ = table.Report(ctx, l)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	wg.Go(func() { _ = alloc.Run(ctx) })

	// allocate answers one allocation: "ok", "stale" or the error.
	allocate := func() string {
		a, err := alloc.Allocate("u1", anyIP)
		switch {
		case errors.Is(err, gslb.ErrTableStale):
			return "stale"
		case err != nil:
			return err.Error()
		case len(a.Edge) == 0 || a.Edge[0] != "ws://e1":
			return "wrong edge"
		}
		return "ok"
	}
	for deadline := time.Now().Add(testwait.Limit); allocate() != "ok"; time.Sleep(10 * time.Millisecond) { // a guard against a hung wait, not a measurement
		if time.Now().After(deadline) {
			t.Fatalf("no allocation before the outage: %s", allocate())
		}
	}

	cut := time.Now()
	proxy.Cut()
	var (
		opened, lastOK, firstStale time.Duration
		others                     = map[string]int{}
	)
	for time.Since(cut) < outage {
		el := time.Since(cut)
		if opened == 0 && b.State() == breaker.Open {
			opened = el
		}
		switch r := allocate(); r {
		case "ok":
			if firstStale == 0 {
				lastOK = el
			} else {
				others["ok after stale"]++
			}
		case "stale":
			if firstStale == 0 {
				firstStale = el
			}
		default:
			others[r]++
		}
		time.Sleep(time.Millisecond)
	}
	proxy.Restore()
	restored := time.Now()
	var closed, resumed time.Duration
	for deadline := restored.Add(testwait.Limit); closed == 0 || resumed == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after recovery: breaker %v, allocation %q", b.State(), allocate())
		}
		if closed == 0 && b.State() == breaker.Closed {
			closed = time.Since(restored)
		}
		if resumed == 0 && allocate() == "ok" {
			resumed = time.Since(restored)
		}
	}
	t.Logf("outage %v, MaxAge %v: breaker open after %v; last good table served until %v, table_stale from %v; after recovery breaker closed in %v, allocations resumed in %v",
		outage, maxAge, opened.Round(time.Millisecond), lastOK.Round(time.Millisecond), firstStale.Round(time.Millisecond), closed.Round(time.Millisecond), resumed.Round(time.Millisecond))
	if opened == 0 {
		t.Error("the Redis breaker never opened during the outage")
	}
	if lastOK == 0 {
		t.Error("no allocation was served from the last good table")
	}
	if firstStale == 0 {
		t.Errorf("allocations never turned stale within an outage of %v (MaxAge %v)", outage, maxAge)
	}
	if len(others) > 0 {
		t.Errorf("unexpected answers during the outage: %v", others)
	}
}

package slicer

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
)

// countingLease counts the renewals (Acquire calls) a Lease is asked for.
type countingLease struct {
	Lease
	acquires atomic.Int64
}

func (l *countingLease) Acquire(ctx context.Context, room, holder string, ttl time.Duration) (bool, error) {
	l.acquires.Add(1)
	return l.Lease.Acquire(ctx, room, holder, ttl)
}

// TestRenewLoopOnFakeClock: the renewer alone — every room loop stuck, so
// nothing else renews — keeps a lease for ten lease lives on the injected
// clock. It renews a lease only once half a TTL has passed since the last
// renewal (it ticks every quarter TTL), so a lease never comes within half
// a TTL of lapsing and another holder never gets it; a lease another
// holder took is marked lost and never asked for again. The fake clock's
// ticker moves only when the test advances it, and synctest.Wait lets the
// renewer finish each tick: no real time passes.
func TestRenewLoopOnFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := clock.NewFake(time.Unix(1_700_000_000, 0))
		lease := &countingLease{Lease: NewMemoryLease(fake)}
		s, err := New(Config{NodeID: "leader", Streams: stream.NewMemoryStore(fake), Objects: objstore.NewMemoryStore(),
			Lease: lease, Clock: fake, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		ttl := s.cfg.LeaseTTL
		held := &heldLease{}
		if ok, err := lease.Acquire(ctx, "kept", s.holder, ttl); !ok || err != nil {
			t.Fatalf("first acquire: %v %v", ok, err)
		}
		held.renewed.Store(fake.Now().UnixNano())
		s.hold("kept", held)
		lease.acquires.Store(0)
		done := make(chan struct{})
		go func() { defer close(done); s.renewLoop(ctx) }()
		synctest.Wait()

		quarter := ttl / 4
		for step := 1; step <= 40; step++ { // ten lease lives, a tick at a time
			fake.Advance(quarter)
			synctest.Wait()
			// Renewed at every second tick: half a TTL after the last.
			if want := int64(step / 2); lease.acquires.Load() != want {
				t.Fatalf("after %d quarter TTLs: %d renewals, want %d", step, lease.acquires.Load(), want)
			}
			if since := fake.Now().Sub(held.at()); since >= ttl/2+quarter {
				t.Fatalf("after %d quarter TTLs: last renewal %v ago, a TTL is %v", step, since, ttl)
			}
			if ok, err := lease.Lease.Acquire(ctx, "kept", "standby", ttl); ok || err != nil {
				t.Fatalf("after %d quarter TTLs the standby took the lease (%v, %v)", step, ok, err)
			}
		}
		if held.lost.Load() {
			t.Fatal("the renewed lease is marked lost")
		}

		// Another holder took the lease (it lapsed elsewhere): the renewer
		// finds it gone once, marks it lost and stops asking.
		taken := &heldLease{}
		taken.renewed.Store(fake.Now().UnixNano())
		if ok, err := lease.Lease.Acquire(ctx, "taken", "standby", ttl); !ok || err != nil {
			t.Fatalf("the standby's acquire: %v %v", ok, err)
		}
		s.hold("taken", taken)
		before := lease.acquires.Load()
		for range 8 {
			fake.Advance(quarter)
			synctest.Wait()
		}
		if !taken.lost.Load() {
			t.Fatal("a lease another holder took is not marked lost")
		}
		// Two quarter-TTL ticks reach it, half a TTL after its renewal: one
		// ask for it; "kept" is renewed four times over the eight ticks.
		if got := lease.acquires.Load() - before; got != 4+1 {
			t.Errorf("%d renewals over two TTLs with one lease taken, want 5 (kept 4, taken asked once)", got)
		}
		cancel()
		<-done
	})
}

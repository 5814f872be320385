package slicer_test

import (
	"context"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/redisx/redistest"
	"danmaku/slicer"
)

// leaseBackend is one Lease implementation under test. pass lets d of the
// lease's time go by: the memory lease runs on a fake clock, the Redis lease
// on Redis's own clock, so there pass sleeps.
type leaseBackend struct {
	name string
	open func(t *testing.T) (l slicer.Lease, pass func(d time.Duration))
}

func leaseBackends() []leaseBackend {
	return []leaseBackend{
		{"memory", func(t *testing.T) (slicer.Lease, func(time.Duration)) {
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			return slicer.NewMemoryLease(c), c.Advance
		}},
		{"redis", func(t *testing.T) (slicer.Lease, func(time.Duration)) {
			return slicer.NewRedisLease(redistest.Client(t)), time.Sleep
		}},
		{"redis-cluster", func(t *testing.T) (slicer.Lease, func(time.Duration)) {
			return slicer.NewRedisLease(redistest.Cluster(t)), time.Sleep
		}},
	}
}

// TestLeaseConformance runs every Lease implementation through the same
// cases. Each case uses its own room, so cases share one backend.
func TestLeaseConformance(t *testing.T) {
	const (
		long  = time.Minute            // never lapses during a case
		short = 200 * time.Millisecond // lapses while a case waits for it
	)
	cases := []struct {
		name string
		run  func(t *testing.T, l slicer.Lease, pass func(time.Duration), room string)
	}{
		{"exclusive", func(t *testing.T, l slicer.Lease, _ func(time.Duration), room string) {
			mustAcquire(t, l, room, "a", long, true)
			mustAcquire(t, l, room, "b", long, false)
			mustAcquire(t, l, room+"-other", "b", long, true) // rooms are independent
			mustAcquire(t, l, room, "b", long, false)
		}},
		{"renew by holder", func(t *testing.T, l slicer.Lease, _ func(time.Duration), room string) {
			mustAcquire(t, l, room, "a", long, true)
			for range 3 {
				mustAcquire(t, l, room, "a", long, true)
				mustAcquire(t, l, room, "b", long, false)
			}
		}},
		{"renewal outlives the first ttl", func(t *testing.T, l slicer.Lease, pass func(time.Duration), room string) {
			mustAcquire(t, l, room, "a", short, true)
			mustAcquire(t, l, room, "a", long, true) // renewed with a long ttl
			pass(2 * short)
			mustAcquire(t, l, room, "b", long, false)
		}},
		{"expiry hands over", func(t *testing.T, l slicer.Lease, pass func(time.Duration), room string) {
			mustAcquire(t, l, room, "a", short, true)
			// b polls as a standby does. Its failed attempts must not
			// extend a's lease, or this never ends.
			waitFor(t, pass, 25*time.Millisecond, 10*time.Second, func() bool {
				return acquire(t, l, room, "b", long)
			})
			mustAcquire(t, l, room, "a", long, false) // a's renewal after the lapse fails
		}},
		{"release only by holder", func(t *testing.T, l slicer.Lease, _ func(time.Duration), room string) {
			mustAcquire(t, l, room, "a", long, true)
			mustRelease(t, l, room, "b")
			mustAcquire(t, l, room, "b", long, false)
			mustRelease(t, l, room, "a")
			mustAcquire(t, l, room, "b", long, true)
			mustRelease(t, l, room, "a") // a's late release leaves b's lease alone
			mustAcquire(t, l, room, "a", long, false)
		}},
		{"release of a free lease", func(t *testing.T, l slicer.Lease, _ func(time.Duration), room string) {
			mustRelease(t, l, room, "a")
			mustAcquire(t, l, room, "a", long, true)
		}},
	}
	for _, b := range leaseBackends() {
		t.Run(b.name, func(t *testing.T) {
			l, pass := b.open(t)
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					c.run(t, l, pass, "room"+string(rune('a'+i)))
				})
			}
		})
	}
}

func acquire(t *testing.T, l slicer.Lease, room, holder string, ttl time.Duration) bool {
	t.Helper()
	ok, err := l.Acquire(context.Background(), room, holder, ttl)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", room, holder, err)
	}
	return ok
}

func mustAcquire(t *testing.T, l slicer.Lease, room, holder string, ttl time.Duration, want bool) {
	t.Helper()
	if got := acquire(t, l, room, holder, ttl); got != want {
		t.Fatalf("Acquire(%s, %s) = %v, want %v", room, holder, got, want)
	}
}

func mustRelease(t *testing.T, l slicer.Lease, room, holder string) {
	t.Helper()
	if err := l.Release(context.Background(), room, holder); err != nil {
		t.Fatalf("Release(%s, %s): %v", room, holder, err)
	}
}

// waitFor calls cond, letting step go by between calls, until it reports
// true; it fails t once limit has gone by. limit is a generous bound on a
// wait, not a measurement.
func waitFor(t *testing.T, pass func(time.Duration), step, limit time.Duration, cond func() bool) {
	t.Helper()
	for waited := time.Duration(0); !cond(); waited += step {
		if waited >= limit {
			t.Fatalf("condition still false after %v", limit)
		}
		pass(step)
	}
}

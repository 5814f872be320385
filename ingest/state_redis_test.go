package ingest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/redisx/redistest"
)

// stateBackend is one implementation of the ingest's shared state under
// test. pass lets d of the backend's time go by: the memory ones run on a
// fake clock, the Redis ones on Redis's own clock, so there pass sleeps. rdb
// is set for Redis, to check the key layout.
type stateBackend struct {
	name string
	open func(t *testing.T) (lim ingest.RoomLimiter, pass func(time.Duration), rdb redis.UniversalClient)
}

func stateBackends() []stateBackend {
	return []stateBackend{
		{"memory", func(t *testing.T) (ingest.RoomLimiter, func(time.Duration), redis.UniversalClient) {
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			return ingest.NewMemoryRoomLimiter(c), c.Advance, nil
		}},
		{"redis", func(t *testing.T) (ingest.RoomLimiter, func(time.Duration), redis.UniversalClient) {
			rdb := redistest.Client(t)
			return ingest.NewRedisRoomLimiter(rdb), time.Sleep, rdb
		}},
		{"redis-cluster", func(t *testing.T) (ingest.RoomLimiter, func(time.Duration), redis.UniversalClient) {
			rdb := redistest.Cluster(t)
			return ingest.NewRedisRoomLimiter(rdb), time.Sleep, rdb
		}},
	}
}

// tiny is a refill rate that adds no token while a case runs.
const tiny = 1e-6

// TestRoomLimiterConformance runs every RoomLimiter implementation through
// the same cases. Each case uses its own rooms, so cases share one backend.
func TestRoomLimiterConformance(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, lim ingest.RoomLimiter, pass func(time.Duration), rdb redis.UniversalClient)
	}{
		{"capacity respected", func(t *testing.T, lim ingest.RoomLimiter, _ func(time.Duration), _ redis.UniversalClient) {
			for i := range 5 {
				mustTake(t, lim, "cap", 5, tiny, 1, true, "take %d of 5", i+1)
			}
			mustTake(t, lim, "cap", 5, tiny, 1, false, "take beyond capacity")
			mustTake(t, lim, "cap-other", 5, tiny, 5, true, "another room's bucket")
		}},
		{"takes n at once", func(t *testing.T, lim ingest.RoomLimiter, _ func(time.Duration), _ redis.UniversalClient) {
			mustTake(t, lim, "multi", 5, tiny, 3, true, "3 of 5")
			mustTake(t, lim, "multi", 5, tiny, 3, false, "3 of 2")
			mustTake(t, lim, "multi", 5, tiny, 2, true, "2 of 2")
			mustTake(t, lim, "multi-big", 5, tiny, 6, false, "more than capacity")
		}},
		{"capacity follows the call", func(t *testing.T, lim ingest.RoomLimiter, _ func(time.Duration), _ redis.UniversalClient) {
			mustTake(t, lim, "shrink", 10, tiny, 1, true, "first take at capacity 10")
			// 9 tokens are left, but the room's capacity fell to 2.
			mustTake(t, lim, "shrink", 2, tiny, 2, true, "2 at capacity 2")
			mustTake(t, lim, "shrink", 2, tiny, 1, false, "beyond the new capacity")
		}},
		{"refills", func(t *testing.T, lim ingest.RoomLimiter, pass func(time.Duration), _ redis.UniversalClient) {
			const capacity, perSec = 2, 10 // a token every 100 ms
			mustTake(t, lim, "refill", capacity, perSec, 2, true, "drain")
			waitFor(t, pass, 20*time.Millisecond, 10*time.Second, func() bool {
				return take(t, lim, "refill", capacity, perSec, 1)
			})
			// Idle for five tokens' time, the bucket holds its capacity, no
			// more. (The last take passes a tiny rate so that the moment
			// between the two takes refills nothing.)
			pass(500 * time.Millisecond)
			mustTake(t, lim, "refill", capacity, perSec, 2, true, "take a full bucket")
			mustTake(t, lim, "refill", capacity, tiny, 1, false, "take beyond capacity")
		}},
		{"concurrent takes never over-grant", func(t *testing.T, lim ingest.RoomLimiter, _ func(time.Duration), _ redis.UniversalClient) {
			const capacity, workers, each = 20, 8, 10
			var granted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for range workers {
				wg.Go(func() {
					for range each {
						ok, err := lim.Take(context.Background(), "race", capacity, tiny, 1)
						if err != nil {
							errs <- err
							return
						}
						if ok {
							granted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			// The rate adds no whole token while the workers run, so every
			// token is granted exactly once.
			if got := granted.Load(); got != capacity {
				t.Fatalf("%d workers × %d takes granted %d tokens from a bucket of %d", workers, each, got, capacity)
			}
		}},
		{"idle rooms vanish", func(t *testing.T, lim ingest.RoomLimiter, _ func(time.Duration), rdb redis.UniversalClient) {
			mustTake(t, lim, "idle", 100, 1, 1, true, "take")
			if rdb == nil {
				return // the memory limiter forgets nothing by itself
			}
			// The bucket is full again after a second; then it may go.
			const key = "danmaku:{room:idle}:bucket"
			ttl, err := rdb.PTTL(context.Background(), key).Result()
			if err != nil || ttl <= 0 || ttl > 2*time.Second {
				t.Fatalf("PTTL %s = %v, %v; want an expiry of about a second", key, ttl, err)
			}
		}},
	}
	for _, b := range stateBackends() {
		t.Run(b.name, func(t *testing.T) {
			lim, pass, rdb := b.open(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, lim, pass, rdb) })
			}
		})
	}
}

func take(t *testing.T, lim ingest.RoomLimiter, room string, capacity, perSec float64, n int) bool {
	t.Helper()
	ok, err := lim.Take(context.Background(), room, capacity, perSec, n)
	if err != nil {
		t.Fatalf("Take(%s): %v", room, err)
	}
	return ok
}

func mustTake(t *testing.T, lim ingest.RoomLimiter, room string, capacity, perSec float64, n int, want bool, what string, args ...any) {
	t.Helper()
	if got := take(t, lim, room, capacity, perSec, n); got != want {
		t.Fatalf("%s: Take(%s, cap %v, n %d) = %v, want %v", fmtArgs(what, args), room, capacity, n, got, want)
	}
}

func fmtArgs(f string, args []any) string {
	if len(args) == 0 {
		return f
	}
	return fmt.Sprintf(f, args...)
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

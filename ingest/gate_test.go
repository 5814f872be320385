package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// gateBackend is one RoomGate implementation under test, with the stream
// store it appends to. pass lets d of the backend's time go by: the memory
// gate runs on a fake clock, the Redis ones on Redis's own clock, so there
// pass sleeps. rdb is set for Redis, to check the key layout.
type gateBackend struct {
	name string
	open func(t *testing.T) (gate ingest.RoomGate, streams stream.Store, pass func(time.Duration), rdb redis.UniversalClient)
}

func gateBackends() []gateBackend {
	redisGate := func(t *testing.T, rdb redis.UniversalClient) (ingest.RoomGate, stream.Store, func(time.Duration), redis.UniversalClient) {
		store := newRedisStore(t, rdb)
		g, err := ingest.NewRedisRoomGate(ingest.RedisRoomGateConfig{Client: rdb, Streams: store, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return g, store, time.Sleep, rdb
	}
	return []gateBackend{
		{"memory", func(t *testing.T) (ingest.RoomGate, stream.Store, func(time.Duration), redis.UniversalClient) {
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			store := stream.NewMemoryStore(c)
			return ingest.NewMemoryRoomGate(store, c), store, c.Advance, nil
		}},
		{"redis", func(t *testing.T) (ingest.RoomGate, stream.Store, func(time.Duration), redis.UniversalClient) {
			return redisGate(t, redistest.Client(t))
		}},
		{"redis-cluster", func(t *testing.T) (ingest.RoomGate, stream.Store, func(time.Duration), redis.UniversalClient) {
			return redisGate(t, redistest.Cluster(t))
		}},
	}
}

// tiny is a refill rate that adds no token while a case runs.
const tiny = 1e-6

var batchSeq atomic.Int64

// batch builds a batch of n comments "room-1".."room-n", the first admitted
// of them admitted.
func batch(room string, n, admitted int, capacity, perSec float64) ingest.Batch {
	b := ingest.Batch{ID: fmt.Sprintf("test-%d", batchSeq.Add(1)), Admitted: admitted, Capacity: capacity, PerSec: perSec}
	for i := range n {
		b.Msgs = append(b.Msgs, wire.Message{Kind: wire.KindBarrage, User: fmt.Sprintf("u%d", i), Nick: "昵称", Text: fmt.Sprintf("%s-%d", room, i+1)})
	}
	return b
}

func flush(t *testing.T, g ingest.RoomGate, room string, b ingest.Batch) ingest.FlushResult {
	t.Helper()
	r, err := g.Flush(context.Background(), room, b)
	if err != nil {
		t.Fatalf("Flush(%s, %s): %v", room, b.ID, err)
	}
	return r
}

// texts returns the texts of room's Barrage lane, oldest first.
func texts(t *testing.T, streams stream.Store, room string) []string {
	t.Helper()
	es, err := streams.Read(context.Background(), stream.Key{Room: room, Lane: stream.Barrage}, "0", 100_000, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Text
	}
	return out
}

func wantTexts(t *testing.T, streams stream.Store, room string, want ...string) {
	t.Helper()
	got := texts(t, streams, room)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("room %s holds %q, want %q", room, got, want)
	}
}

// TestRoomGateConformance runs every RoomGate through the same cases. Each
// case uses its own rooms, so cases share one backend.
func TestRoomGateConformance(t *testing.T) {
	type env struct {
		g       ingest.RoomGate
		streams stream.Store
		pass    func(time.Duration)
		rdb     redis.UniversalClient
	}
	cases := []struct {
		name string
		run  func(t *testing.T, e env)
	}{
		{"capacity respected, in order", func(t *testing.T, e env) {
			if r := flush(t, e.g, "cap", batch("cap", 7, 0, 5, tiny)); r.Granted != 5 || r.Replayed {
				t.Fatalf("7 undecided into a bucket of 5: %+v", r)
			}
			wantTexts(t, e.streams, "cap", "cap-1", "cap-2", "cap-3", "cap-4", "cap-5")
			if r := flush(t, e.g, "cap", batch("cap", 3, 0, 5, tiny)); r.Granted != 0 {
				t.Fatalf("dry bucket granted %d", r.Granted)
			}
			if r := flush(t, e.g, "cap-other", batch("cap-other", 5, 0, 5, tiny)); r.Granted != 5 {
				t.Fatalf("another room's bucket granted %d of 5", r.Granted)
			}
		}},
		{"admitted are stored and charged", func(t *testing.T, e env) {
			// 3 admitted take 3 of 5 tokens; 2 of the 4 undecided fit.
			if r := flush(t, e.g, "adm", batch("adm", 7, 3, 5, tiny)); r.Granted != 2 {
				t.Fatalf("granted %d, want 2", r.Granted)
			}
			// Admitted beyond the bucket are stored all the same.
			if r := flush(t, e.g, "adm", batch("adm", 4, 4, 5, tiny)); r.Granted != 0 {
				t.Fatalf("granted %d to an all-admitted batch", r.Granted)
			}
			if n := len(texts(t, e.streams, "adm")); n != 9 {
				t.Fatalf("stored %d, want 5 + 4", n)
			}
		}},
		{"a batch sent again is stored once", func(t *testing.T, e env) {
			b := batch("again", 6, 1, 4, tiny)
			first := flush(t, e.g, "again", b)
			second := flush(t, e.g, "again", b)
			if first.Granted != 3 || first.Replayed || second.Granted != 3 || !second.Replayed {
				t.Fatalf("first %+v, second %+v; want 3 granted, then the same replayed", first, second)
			}
			if n := len(texts(t, e.streams, "again")); n != 4 {
				t.Fatalf("stored %d, want 4 once", n)
			}
			// The same id in another room is another batch.
			if r := flush(t, e.g, "again-2", b); r.Replayed || r.Granted != 3 {
				t.Fatalf("same id, other room: %+v", r)
			}
		}},
		{"capacity follows the call", func(t *testing.T, e env) {
			flush(t, e.g, "shrink", batch("shrink", 1, 0, 10, tiny))
			// 9 tokens are left, but the room's capacity fell to 2.
			if r := flush(t, e.g, "shrink", batch("shrink", 5, 0, 2, tiny)); r.Granted != 2 {
				t.Fatalf("granted %d at capacity 2", r.Granted)
			}
		}},
		{"refills", func(t *testing.T, e env) {
			const capacity, perSec = 2, 10 // a token every 100 ms
			flush(t, e.g, "refill", batch("refill", 2, 0, capacity, perSec))
			for waited := time.Duration(0); flush(t, e.g, "refill", batch("refill", 1, 0, capacity, perSec)).Granted == 0; waited += 20 * time.Millisecond {
				if waited > 10*time.Second {
					t.Fatal("no refill in 10 s")
				}
				e.pass(20 * time.Millisecond)
			}
			// Idle for five tokens' time, the bucket holds its capacity.
			e.pass(500 * time.Millisecond)
			if r := flush(t, e.g, "refill", batch("refill", 5, 0, capacity, perSec)); r.Granted != 2 {
				t.Fatalf("a refilled bucket of 2 granted %d", r.Granted)
			}
		}},
		{"concurrent flushes never over-grant", func(t *testing.T, e env) {
			const capacity, workers, each = 20, 8, 5
			var granted atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for range workers {
				wg.Go(func() {
					for range each {
						r, err := e.g.Flush(context.Background(), "race", batch("race", 2, 0, capacity, tiny))
						if err != nil {
							errs <- err
							return
						}
						granted.Add(int64(r.Granted))
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if got := granted.Load(); got != capacity {
				t.Fatalf("%d workers × %d flushes of 2 granted %d from a bucket of %d", workers, each, got, capacity)
			}
			if n := len(texts(t, e.streams, "race")); n != capacity {
				t.Fatalf("stored %d, want %d", n, capacity)
			}
		}},
		{"entries read back as sent", func(t *testing.T, e env) {
			b := batch("read", 1, 0, 5, tiny)
			b.Msgs[0].Avatar = "a7"
			flush(t, e.g, "read", b)
			es, err := e.streams.Read(context.Background(), stream.Key{Room: "read", Lane: stream.Barrage}, "0", 10, 0)
			if err != nil || len(es) != 1 {
				t.Fatalf("read %v, %v", es, err)
			}
			got, want := es[0], b.Msgs[0]
			want.ID = got.ID
			if got.ID == "" || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("read back %+v, want %+v", got, want)
			}
		}},
		{"bad batches store nothing", func(t *testing.T, e env) {
			for name, tc := range map[string]struct {
				room string
				b    ingest.Batch
			}{
				"no id":         {"bad", ingest.Batch{Msgs: batch("bad", 1, 0, 1, 1).Msgs, Capacity: 1, PerSec: 1}},
				"admitted > n":  {"bad", batch("bad", 1, 2, 1, 1)},
				"negative":      {"bad", batch("bad", 1, -1, 1, 1)},
				"NaN capacity":  {"bad", batch("bad", 1, 0, nan(), 1)},
				"negative rate": {"bad", batch("bad", 1, 0, 1, -1)},
				"bad room":      {"no room!", batch("bad", 1, 0, 1, 1)},
				"empty room":    {"", batch("bad", 1, 0, 1, 1)},
				"infinite rate": {"bad", batch("bad", 1, 0, 1, inf())},
			} {
				if _, err := e.g.Flush(context.Background(), tc.room, tc.b); !errors.Is(err, ingest.ErrBadBatch) {
					t.Errorf("%s: %v, want ErrBadBatch", name, err)
				}
			}
			wantTexts(t, e.streams, "bad")
		}},
		{"idle buckets vanish, batch records expire", func(t *testing.T, e env) {
			b := batch("idle", 1, 0, 100, 1)
			flush(t, e.g, "idle", b)
			if e.rdb == nil {
				return
			}
			ctx := context.Background()
			// The bucket is full again after a second; then it may go.
			if ttl, err := e.rdb.PTTL(ctx, "danmaku:{room:idle}:bucket").Result(); err != nil || ttl <= 0 || ttl > 2*time.Second {
				t.Fatalf("bucket PTTL = %v, %v; want about a second", ttl, err)
			}
			if ttl, err := e.rdb.PTTL(ctx, "danmaku:{room:idle}:batch:"+b.ID).Result(); err != nil || ttl <= 9*time.Minute || ttl > 10*time.Minute {
				t.Fatalf("batch record PTTL = %v, %v; want 10 minutes", ttl, err)
			}
		}},
	}
	for _, b := range gateBackends() {
		t.Run(b.name, func(t *testing.T) {
			g, streams, pass, rdb := b.open(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, env{g, streams, pass, rdb}) })
			}
		})
	}
}

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }

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

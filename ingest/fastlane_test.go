package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// fastBackend is one FastLane implementation under test. open returns a
// constructor of fast lanes over one shared store (several of them stand
// for several ingest nodes), the store, and pass, which lets d of the
// backend's time go by (a fake clock in memory, a sleep on Redis's own
// clock). rdb is set for Redis, to check the key layout.
type fastBackend struct {
	name string
	open func(t *testing.T) (newLane func() ingest.FastLane, streams stream.Store, pass func(time.Duration), rdb redis.UniversalClient)
}

func fastBackends() []fastBackend {
	onRedis := func(t *testing.T, rdb redis.UniversalClient) (func() ingest.FastLane, stream.Store, func(time.Duration), redis.UniversalClient) {
		store := newRedisStore(t, rdb)
		return func() ingest.FastLane {
			f, err := ingest.NewRedisFastLane(ingest.RedisFastLaneConfig{Client: rdb, Streams: store, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}, store, time.Sleep, rdb
	}
	return []fastBackend{
		{"memory", func(t *testing.T) (func() ingest.FastLane, stream.Store, func(time.Duration), redis.UniversalClient) {
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			store := stream.NewMemoryStore(c)
			// One in-process lane is the whole truth: every "node" is it.
			f := ingest.NewMemoryFastLane(store, c)
			return func() ingest.FastLane { return f }, store, c.Advance, nil
		}},
		{"redis", func(t *testing.T) (func() ingest.FastLane, stream.Store, func(time.Duration), redis.UniversalClient) {
			return onRedis(t, redistest.Client(t))
		}},
		{"redis-cluster", func(t *testing.T) (func() ingest.FastLane, stream.Store, func(time.Duration), redis.UniversalClient) {
			return onRedis(t, redistest.Cluster(t))
		}},
	}
}

func fastAnnouncement(text string) wire.Message {
	return wire.Message{Kind: wire.KindSystem, User: "host-1", Nick: "主播", Role: "host", Text: text}
}

// perSecond counts room's entries on both lanes by the second of their
// entry ids: the second the slicer puts them in.
func fastPerSecond(t *testing.T, streams stream.Store, room string) map[int64]int {
	t.Helper()
	out := map[int64]int{}
	for _, lane := range []stream.Lane{stream.Barrage, stream.Live} {
		es, err := streams.Read(context.Background(), stream.Key{Room: room, Lane: lane}, "0", 1_000_000, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			ms, _, err := wire.ParseID(e.ID)
			if err != nil {
				t.Fatal(err)
			}
			out[ms/1000]++
		}
	}
	return out
}

func wantAtMostPerSecond(t *testing.T, streams stream.Store, room string, limit int) int {
	t.Helper()
	total := 0
	for sec, n := range fastPerSecond(t, streams, room) {
		if n > limit {
			t.Errorf("room %s shows %d in second %d, over the cap of %d", room, n, sec, limit)
		}
		total += n
	}
	return total
}

func showFast(t *testing.T, f ingest.FastLane, room string, lane stream.Lane, text string, capPerSec int) ingest.Shown {
	t.Helper()
	s, err := f.Show(context.Background(), room, lane, fastAnnouncement(text), capPerSec)
	if err != nil {
		t.Fatalf("Show(%s, %s): %v", room, text, err)
	}
	if s.OK() == (s.RetryAfter > 0) {
		t.Fatalf("Show(%s, %s) = %+v: exactly one of an id and a retry-after", room, text, s)
	}
	if !s.OK() && s.RetryAfter > time.Second {
		t.Fatalf("Show(%s, %s): retry after %v, beyond the next second", room, text, s.RetryAfter)
	}
	return s
}

// TestFastLaneConformance runs every FastLane through the same cases. On
// Redis a burst may straddle a second boundary, so the cases check the cap
// per second of the entry ids and ask for "some refused" where a fake
// clock could ask for exact counts.
func TestFastLaneConformance(t *testing.T) {
	type env struct {
		newLane func() ingest.FastLane
		streams stream.Store
		pass    func(time.Duration)
		rdb     redis.UniversalClient
	}
	cases := []struct {
		name string
		run  func(t *testing.T, e env)
	}{
		{"cap per second", func(t *testing.T, e env) {
			f := e.newLane()
			refused := 0
			for i := range 12 {
				if !showFast(t, f, "cap", stream.Live, fmt.Sprint("a", i), 4).OK() {
					refused++
				}
			}
			// 12 calls span at most two seconds: at most 8 shown.
			if refused < 4 {
				t.Fatalf("%d of 12 refused with a cap of 4", refused)
			}
			if n := wantAtMostPerSecond(t, e.streams, "cap", 4); n != 12-refused {
				t.Fatalf("stored %d, answered %d shown", n, 12-refused)
			}
		}},
		{"lanes share the cap", func(t *testing.T, e env) {
			f := e.newLane()
			refused := 0
			for i := range 12 {
				lane := stream.Live
				if i%2 == 1 {
					lane = stream.Barrage
				}
				if !showFast(t, f, "lanes", lane, fmt.Sprint("b", i), 3).OK() {
					refused++
				}
			}
			if refused < 6 {
				t.Fatalf("%d of 12 refused with a shared cap of 3", refused)
			}
			wantAtMostPerSecond(t, e.streams, "lanes", 3)
		}},
		{"rooms have their own cap", func(t *testing.T, e env) {
			f := e.newLane()
			for i := range 3 {
				showFast(t, f, "own-a", stream.Live, fmt.Sprint(i), 3)
			}
			// Room a may be full; room b is not, whatever the second.
			if !showFast(t, f, "own-b", stream.Live, "b", 3).OK() {
				t.Fatal("another room's announcement refused")
			}
		}},
		{"the next second opens", func(t *testing.T, e env) {
			f := e.newLane()
			var last ingest.Shown
			for i := 0; i < 10 && (i == 0 || last.OK()); i++ {
				last = showFast(t, f, "next", stream.Live, fmt.Sprint(i), 2)
			}
			if last.OK() {
				t.Fatal("never refused with a cap of 2")
			}
			e.pass(last.RetryAfter)
			if !showFast(t, f, "next", stream.Live, "after", 2).OK() {
				t.Fatal("refused after waiting its Retry-After")
			}
			wantAtMostPerSecond(t, e.streams, "next", 2)
		}},
		{"global across nodes", func(t *testing.T, e env) {
			nodes := []ingest.FastLane{e.newLane(), e.newLane(), e.newLane()}
			var wg sync.WaitGroup
			errs := make(chan error, 3*40)
			for n, f := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 40 {
						if _, err := f.Show(context.Background(), "global", stream.Live, fastAnnouncement(fmt.Sprint(n, "-", i)), 5); err != nil {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if n := wantAtMostPerSecond(t, e.streams, "global", 5); n == 0 {
				t.Fatal("nothing shown")
			}
		}},
		{"stored as the stream store stores", func(t *testing.T, e env) {
			s := showFast(t, e.newLane(), "enc", stream.Live, "公告 hello", 30)
			es, err := e.streams.Read(context.Background(), stream.Key{Room: "enc", Lane: stream.Live}, "0", 10, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := fastAnnouncement("公告 hello")
			want.ID = s.ID
			if len(es) != 1 || !reflect.DeepEqual(es[0], want) {
				t.Fatalf("lane holds %+v, want %+v", es, want)
			}
			rooms, err := e.streams.Rooms(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, r := range rooms {
				found = found || r.ID == "enc"
			}
			if !found {
				t.Fatalf("room not registered: %+v", rooms)
			}
			if e.rdb != nil {
				// The counter sits under the room's hash tag and expires.
				ttl, err := e.rdb.PTTL(context.Background(), redisx.RoomKey("enc", "fastlane")).Result()
				if err != nil || ttl <= 0 || ttl > 2*time.Second {
					t.Fatalf("counter TTL %v, %v; want (0, 2 s]", ttl, err)
				}
			}
		}},
		{"bad calls", func(t *testing.T, e env) {
			f := e.newLane()
			for _, c := range []struct {
				room string
				lane stream.Lane
				cap  int
			}{{"", stream.Live, 30}, {"bad room!", stream.Live, 30}, {"ok", stream.Lane(9), 30}, {"ok", stream.Live, 0}, {"ok", stream.Live, -1}, {"ok", stream.Live, 1 << 30}} {
				if _, err := f.Show(context.Background(), c.room, c.lane, fastAnnouncement("x"), c.cap); !errors.Is(err, ingest.ErrBadShow) {
					t.Errorf("Show(%q, %v, cap %d) = %v, want ErrBadShow", c.room, c.lane, c.cap, err)
				}
			}
		}},
	}
	for _, b := range fastBackends() {
		t.Run(b.name, func(t *testing.T) {
			newLane, streams, pass, rdb := b.open(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, env{newLane, streams, pass, rdb}) })
			}
		})
	}
}

func TestNewRedisFastLaneNeedsClientAndStreams(t *testing.T) {
	if _, err := ingest.NewRedisFastLane(ingest.RedisFastLaneConfig{}); err == nil {
		t.Fatal("no error without Client and Streams")
	}
}

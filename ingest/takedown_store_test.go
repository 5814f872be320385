package ingest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/clock"
	"danmaku/internal/redisx/redistest"
	"danmaku/sdk/wire"
)

// takedownBackends are the TakedownStores under the conformance suite, each
// with a way to let its expiry pass.
func takedownBackends() []struct {
	name string
	open func(t *testing.T) (TakedownStore, func(room string))
} {
	onRedis := func(t *testing.T, rdb redis.UniversalClient) (TakedownStore, func(string)) {
		return NewRedisTakedownStore(rdb), func(room string) {
			// Redis expires by its own clock: move the expiry instead.
			if err := rdb.PExpire(context.Background(), TakedownsKey(room), time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			for rdb.Exists(context.Background(), TakedownsKey(room)).Val() != 0 {
				time.Sleep(time.Millisecond) // expiry, not synchronisation: Redis's clock runs on its own
			}
		}
	}
	return []struct {
		name string
		open func(t *testing.T) (TakedownStore, func(room string))
	}{
		{"memory", func(t *testing.T) (TakedownStore, func(string)) {
			// The stores are given expiries by the real clock, as Redis
			// judges them.
			c := clock.NewFake(time.Now())
			return NewMemoryTakedownStore(c), func(string) { c.Advance(48 * time.Hour) }
		}},
		{"redis", func(t *testing.T) (TakedownStore, func(string)) { return onRedis(t, redistest.Client(t)) }},
		{"redis-cluster", func(t *testing.T) (TakedownStore, func(string)) { return onRedis(t, redistest.Cluster(t)) }},
	}
}

func TestTakedownStoreConformance(t *testing.T) {
	for _, b := range takedownBackends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			store, expire := b.open(t)
			rm := "td-" + b.name + "-" + t0.Format("150405")
			exp := time.Now().Add(24 * time.Hour)
			td := func(id string, k wire.Kind, by string) Takedown {
				return Takedown{ID: id, Kind: k, By: by, Reason: "r " + by, AtMs: 1}
			}
			if l, err := store.List(ctx, rm); err != nil || len(l) != 0 {
				t.Fatalf("empty room: %v, %v", l, err)
			}
			if _, ok, n, err := store.Lookup(ctx, rm, "1-0", wire.KindBarrage); err != nil || ok || n != 0 {
				t.Fatalf("lookup in an empty room: %v %d %v", ok, n, err)
			}
			a := td("5-0", wire.KindBarrage, "alice")
			if got, created, err := store.Add(ctx, rm, a, 3, exp); err != nil || !created || got != a {
				t.Fatalf("add: %+v %v %v", got, created, err)
			}
			// The same message again, by someone else: the first stands.
			if got, created, err := store.Add(ctx, rm, td("5-0", wire.KindBarrage, "bob"), 3, exp); err != nil || created || got != a {
				t.Fatalf("add again: %+v %v %v", got, created, err)
			}
			// The same id in the live lane is another message.
			g := td("5-0", wire.KindGift, "bob")
			if _, created, err := store.Add(ctx, rm, g, 3, exp); err != nil || !created {
				t.Fatalf("gift: %v %v", created, err)
			}
			s := td("1-0", wire.KindSystem, "carol")
			if _, created, err := store.Add(ctx, rm, s, 3, exp); err != nil || !created {
				t.Fatalf("system: %v %v", created, err)
			}
			// Full: a new one is refused, a repeat still answered.
			if _, _, err := store.Add(ctx, rm, td("9-0", wire.KindBarrage, "x"), 3, exp); !errors.Is(err, ErrTakedownsFull) {
				t.Fatalf("over the bound: %v", err)
			}
			if got, created, err := store.Add(ctx, rm, td("5-0", wire.KindGift, "y"), 3, exp); err != nil || created || got != g {
				t.Fatalf("repeat when full: %+v %v %v", got, created, err)
			}
			if got, ok, n, err := store.Lookup(ctx, rm, "5-0", wire.KindGift); err != nil || !ok || n != 3 || got != g {
				t.Fatalf("lookup: %+v %v %d %v", got, ok, n, err)
			}
			if _, ok, n, err := store.Lookup(ctx, rm, "9-0", wire.KindBarrage); err != nil || ok || n != 3 {
				t.Fatalf("lookup of another: %v %d %v", ok, n, err)
			}
			l, err := store.List(ctx, rm)
			if err != nil || len(l) != 3 || l[0] != a || l[1] != g || l[2] != s {
				t.Fatalf("list (oldest first): %+v, %v", l, err)
			}
			if l, err := store.List(ctx, "other"+rm); err != nil || len(l) != 0 {
				t.Fatalf("another room: %v, %v", l, err)
			}
			// Bad input stores nothing.
			for _, bad := range []Takedown{td("x", wire.KindBarrage, "a"), td("1-0", 0, "a"), td("1-0", wire.KindBarrage, "")} {
				if _, _, err := store.Add(ctx, rm, bad, 10, exp); !errors.Is(err, ErrBadTakedown) {
					t.Fatalf("add %+v: %v", bad, err)
				}
			}
			if _, _, err := store.Add(ctx, "a:b", a, 10, exp); !errors.Is(err, ErrBadTakedown) {
				t.Fatalf("bad room: %v", err)
			}
			// Expiry with the event.
			expire(rm)
			if l, err := store.List(ctx, rm); err != nil || len(l) != 0 {
				t.Fatalf("after expiry: %v, %v", l, err)
			}
		})
	}
}

// TestTakedownStoreConcurrentAdds: nodes taking the same message down at
// once record it once; the bound holds across them.
func TestTakedownStoreConcurrentAdds(t *testing.T) {
	for _, b := range takedownBackends() {
		t.Run(b.name, func(t *testing.T) {
			store, _ := b.open(t)
			rm := "tdc-" + b.name
			exp := time.Now().Add(time.Hour)
			var wg sync.WaitGroup
			created := make(chan bool, 40)
			for i := range 40 {
				wg.Go(func() {
					id := wire.FormatID(1, uint64(i%10))
					_, c, err := store.Add(context.Background(), rm, Takedown{ID: id, Kind: wire.KindBarrage, By: "m"}, 5, exp)
					if err != nil && !errors.Is(err, ErrTakedownsFull) {
						t.Error(err)
					}
					created <- c
				})
			}
			wg.Wait()
			close(created)
			n := 0
			for c := range created {
				if c {
					n++
				}
			}
			l, err := store.List(context.Background(), rm)
			if err != nil || n != 5 || len(l) != 5 {
				t.Fatalf("created %d, listed %d (%v); want 5 each", n, len(l), err)
			}
		})
	}
}

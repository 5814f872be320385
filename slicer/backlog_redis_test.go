package slicer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/objstore"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
	"danmaku/slicer"
	"danmaku/slicer/slicertest"
)

// backlogBackend is one Backlog implementation under test; lapse waits
// until a value set with ttl has lapsed (a fake clock, or Redis's own).
type backlogBackend struct {
	name string
	open func(t *testing.T) (b slicer.Backlog, lapse func(t *testing.T, room string, ttl time.Duration), rdb redis.UniversalClient)
}

func backlogBackends() []backlogBackend {
	redisBackend := func(name string, client func(testing.TB) redis.UniversalClient) backlogBackend {
		return backlogBackend{name, func(t *testing.T) (slicer.Backlog, func(*testing.T, string, time.Duration), redis.UniversalClient) {
			rdb := client(t)
			b := slicer.NewRedisBacklog(rdb)
			return b, func(t *testing.T, room string, ttl time.Duration) {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); ; {
					v, err := b.Get(context.Background(), room)
					if err == nil && v == 0 {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("backlog of %s still %v, %v long after its ttl %v", room, v, err, ttl)
					}
					time.Sleep(ttl / 4) // polls an expiry on Redis's own clock, with the deadline above: not synchronisation
				}
			}, rdb
		}}
	}
	return []backlogBackend{
		{"memory", func(t *testing.T) (slicer.Backlog, func(*testing.T, string, time.Duration), redis.UniversalClient) {
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			return slicer.NewMemoryBacklog(c), func(_ *testing.T, _ string, ttl time.Duration) { c.Advance(ttl) }, nil
		}},
		redisBackend("redis", redistest.Client),
		redisBackend("redis-cluster", redistest.Cluster),
	}
}

// TestBacklogConformance: a published backlog reads back until its TTL
// lapses, 0 clears it, rooms are apart, and values that are no number of
// seconds are refused. In Redis the value sits under the room's hash tag,
// where the ingest's gift script reads it.
func TestBacklogConformance(t *testing.T) {
	ctx := context.Background()
	for _, be := range backlogBackends() {
		t.Run(be.name, func(t *testing.T) {
			b, lapse, rdb := be.open(t)
			get := func(room string, want float64) {
				t.Helper()
				if v, err := b.Get(ctx, room); err != nil || v != want {
					t.Fatalf("Get(%s) = %v, %v; want %v", room, v, err, want)
				}
			}
			get("a", 0)
			if err := b.Set(ctx, "a", 2.5, 0.1, time.Minute); err != nil {
				t.Fatal(err)
			}
			get("a", 2.5)
			get("b", 0)
			if rdb != nil {
				pttl, err := rdb.PTTL(ctx, redisx.RoomKey("a", "giftbacklog")).Result()
				if err != nil || pttl <= 0 || pttl > time.Minute {
					t.Fatalf("PTTL of the room's backlog key = %v, %v", pttl, err)
				}
			}
			if err := b.Set(ctx, "a", 0, 0.1, time.Minute); err != nil {
				t.Fatal(err)
			}
			get("a", 0)
			for _, bad := range [][2]float64{{-1, 0}, {math.NaN(), 0}, {math.Inf(1), 0}, {1, -1}, {1, math.Inf(1)}} {
				if err := b.Set(ctx, "a", bad[0], bad[1], time.Minute); err == nil {
					t.Fatalf("Set(%v, %v) accepted", bad[0], bad[1])
				}
			}
			ttl := 200 * time.Millisecond
			if err := b.Set(ctx, "c", 7, 0, ttl); err != nil {
				t.Fatal(err)
			}
			get("c", 7)
			lapse(t, "c", ttl)
			get("c", 0)
		})
	}
}

// TestGiftFloodRedis floods a room through the Redis gift log at ten times
// its budget while a slicer leads it, all on one Redis: once the backlog
// the leader publishes is past the bound, new orders are refused
// (ErrGiftBacklog: the API's 429), the carry stays bounded, and every
// accepted gift reaches exactly one segment.
func TestGiftFloodRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ~15 s against a real Redis")
	}
	const (
		room     = "giftflood"
		budget   = 20
		boundSec = 1.0
		flood    = 4 * time.Second
		every    = 50 * time.Millisecond
		perTick  = 10 * budget * int(every/time.Millisecond) / 1000 // ten times the budget
	)
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	gifts, err := ingest.NewRedisGiftLog(ingest.RedisGiftLogConfig{Client: rdb, Streams: streams, Logger: quiet,
		BacklogBound: func(string) float64 { return boundSec }})
	if err != nil {
		t.Fatal(err)
	}
	backlog := slicer.NewRedisBacklog(rdb)
	objects := objstore.NewMemoryStore()
	reg := prometheus.NewRegistry()
	s, err := slicer.New(slicer.Config{Streams: streams, Objects: objects, Lease: slicer.NewRedisLease(rdb), Backlog: backlog,
		Budget: budget, NodeID: "solo", Logger: quiet, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// The carry, as the slicer reports it after each segment.
	var (
		mu       sync.Mutex
		maxCarry float64
	)
	carried := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Error(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "danmaku_slicer_carried_messages" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return 0
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			c := carried()
			mu.Lock()
			maxCarry = max(maxCarry, c)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // the watcher's sampling period; it asserts no window
		}
	}()

	var (
		accepted  []string
		byOrder   = map[string]string{}
		refusedAt []float64
		refused   []string
	)
	appendGift := func(order string) {
		m := wire.Message{Kind: wire.KindGift, User: order, Gift: "rose", Value: 1}
		id, dup, err := gifts.AppendGift(ctx, room, order, m)
		var be *ingest.GiftBacklogError
		switch {
		case errors.As(err, &be):
			refusedAt = append(refusedAt, be.Backlog)
			refused = append(refused, order)
		case err != nil:
			t.Fatal(err)
		case dup:
			t.Fatalf("new order %s answered as a repeat", order)
		default:
			accepted = append(accepted, id)
			byOrder[order] = id
		}
	}
	// A first burst of three seconds' worth opens the room; once its
	// leader has read it and published a backlog (over the bound), the
	// flood, at ten times the budget. (Until a room's leader first
	// publishes, nothing bounds its gifts: a live room has had a leader
	// since it opened.)
	for i := range 3 * budget {
		appendGift(fmt.Sprintf("w%d", i))
	}
	for {
		if v, err := backlog.Get(ctx, room); err == nil && v > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the leader never published a backlog")
		case <-time.After(20 * time.Millisecond):
		}
	}
	ticker := time.NewTicker(every)
	start, offered := time.Now(), 0
	for tick := 0; time.Since(start) < flood; tick++ {
		for i := range perTick {
			appendGift(fmt.Sprintf("f%d-%d", tick, i))
		}
		offered += perTick
		<-ticker.C
	}
	ticker.Stop()
	rateOffered := float64(offered) / time.Since(start).Seconds()
	if len(refused) == 0 {
		t.Fatal("no gift was refused")
	}
	for _, b := range refusedAt {
		if b <= boundSec {
			t.Fatalf("refused at a backlog of %v s, within the bound %v s", b, boundSec)
		}
	}
	// A repeat of an accepted order gets its answer, backlog or not.
	for order, want := range byOrder {
		if id, dup, err := gifts.AppendGift(ctx, room, order, wire.Message{Kind: wire.KindGift, User: order, Gift: "rose", Value: 1}); err != nil || !dup || id != want {
			t.Fatalf("repeat of %s = %s, %v, %v; want %s", order, id, dup, err, want)
		}
		break
	}
	// Wait for the carry to drain: the backlog lapses to 0 and the last
	// segment carries nothing.
	for {
		v, err := backlog.Get(ctx, room)
		if err == nil && v == 0 && carried() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the backlog never drained: %v, %v, carried %v", v, err, carried())
		case <-time.After(100 * time.Millisecond):
		}
	}
	stopWatch()
	<-watched
	first, last := slicertest.VerifySegments(t, ctx, objects, room, accepted, accepted[len(accepted)-1])
	// Gifts go in while the backlog — the leader's last publication plus
	// what was accepted since — is within the bound: the carry holds at
	// most the bound's worth and the opening burst, plus what a slot reads
	// between the leader's drain and its publication.
	rate := budget * (1 - slicer.DefaultShares[slicer.QueueSystem])
	if limit := (boundSec+1)*rate + 3*budget; maxCarry > limit {
		t.Fatalf("the carry reached %v, over %v", maxCarry, limit)
	}
	t.Logf("%d gifts offered, then %d over %v at %.0f/s (budget %d/s, bound %v s): %d accepted, %d refused (429), the carry at most %v; seconds %d..%d, each accepted gift exactly once",
		3*budget, offered, flood, rateOffered, budget, boundSec, len(accepted), len(refused), maxCarry, first, last)
}

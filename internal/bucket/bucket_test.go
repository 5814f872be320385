package bucket_test

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"danmaku/internal/bucket"
)

// t0 is an arbitrary non-zero start; every test passes explicit times.
var t0 = time.Date(2024, 6, 1, 20, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

type step struct {
	at   time.Duration
	n    float64
	want bool
}

func run(t *testing.T, b *bucket.Bucket, capacity, perSec float64, steps []step) {
	t.Helper()
	for i, s := range steps {
		if got := b.Take(at(s.at), capacity, perSec, s.n); got != s.want {
			t.Fatalf("step %d: Take(t0+%v, n=%v) = %v, want %v", i, s.at, s.n, got, s.want)
		}
	}
}

func TestBucket(t *testing.T) {
	tests := []struct {
		name             string
		capacity, perSec float64
		steps            []step
	}{
		{
			name: "starts full, holds capacity", capacity: 3, perSec: 1,
			steps: []step{{0, 1, true}, {0, 1, true}, {0, 1, true}, {0, 1, false}, {0, 1, false}},
		},
		{
			name: "takes several at once", capacity: 5, perSec: 1,
			steps: []step{{0, 4, true}, {0, 2, false}, {0, 1, true}, {0, 1, false}},
		},
		{
			name: "never more than capacity at once", capacity: 3, perSec: 1,
			steps: []step{{0, 4, false}, {time.Hour, 4, false}, {time.Hour, 3, true}},
		},
		{
			name: "refills at the rate", capacity: 3, perSec: 2,
			steps: []step{
				{0, 3, true}, {0, 1, false},
				{250 * time.Millisecond, 1, false}, // 0.5 token
				{500 * time.Millisecond, 1, true},  // 1 token
				{500 * time.Millisecond, 1, false},
				{1500 * time.Millisecond, 2, true}, // 2 tokens
				{1500 * time.Millisecond, 1, false},
			},
		},
		{
			name: "never above capacity after idling", capacity: 3, perSec: 2,
			steps: []step{{0, 3, true}, {time.Hour, 3, true}, {time.Hour, 1, false}},
		},
		{
			name: "failed take keeps the tokens", capacity: 4, perSec: 1,
			steps: []step{{0, 3, true}, {0, 2, false}, {0, 1, true}, {0, 1, false}},
		},
		{
			name: "zero tokens always succeed", capacity: 1, perSec: 1,
			steps: []step{{0, 1, true}, {0, 0, true}, {0, 1, false}},
		},
		{
			// The per-user bucket of the design: 3 tokens, one per 1.5 s.
			name: "user bucket 3 per 1.5s", capacity: 3, perSec: 1 / 1.5,
			steps: []step{
				{0, 1, true}, {100 * time.Millisecond, 1, true}, {200 * time.Millisecond, 1, true},
				{300 * time.Millisecond, 1, false},
				// 0.2 tokens left at t0+0.3s; the next whole token is there at t0+1.5s.
				{1400 * time.Millisecond, 1, false},
				{1600 * time.Millisecond, 1, true},
				{1700 * time.Millisecond, 1, false},
				{time.Minute, 3, true},
			},
		},
		{
			// Concurrent callers read the time before taking the lock, so a
			// call can arrive with a time before the previous one. It must not
			// move the bucket's clock back and hand out that time twice.
			name: "time going back refills nothing twice", capacity: 1, perSec: 1,
			steps: []step{
				{0, 1, true},
				{time.Second, 1, true}, // refilled 1
				{500 * time.Millisecond, 1, false},
				{1500 * time.Millisecond, 1, false}, // half a token since t0+1s
				{2 * time.Second, 1, true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bucket.Bucket
			run(t, &b, tt.capacity, tt.perSec, tt.steps)
		})
	}
}

func TestBucketFull(t *testing.T) {
	var b bucket.Bucket
	if !b.Full(t0, 3, 1) {
		t.Fatal("an unused bucket is not full")
	}
	b.Take(t0, 3, 1, 2)
	if b.Full(t0, 3, 1) {
		t.Fatal("a bucket with 1 of 3 tokens is full")
	}
	if b.Full(at(1999*time.Millisecond), 3, 1) {
		t.Fatal("full before refilling two tokens")
	}
	if !b.Full(at(2*time.Second), 3, 1) {
		t.Fatal("not full after refilling two tokens")
	}
}

func TestKeyedIndependentKeys(t *testing.T) {
	k := bucket.NewKeyed(2, 1)
	for range 2 {
		if !k.Take("alice", t0, 1) {
			t.Fatal("alice's bucket started below capacity")
		}
	}
	if k.Take("alice", t0, 1) {
		t.Fatal("alice took more than capacity")
	}
	for i := range 1000 {
		key := "user-" + strconv.Itoa(i)
		if !k.Take(key, t0, 2) {
			t.Fatalf("%s is limited by another key", key)
		}
	}
	if k.Take("alice", t0, 1) {
		t.Fatal("other keys refilled alice")
	}
	if !k.Take("alice", at(time.Second), 1) {
		t.Fatal("alice did not refill")
	}
}

func TestKeyedTakeWith(t *testing.T) {
	// A room's capacity follows its online count; each call brings it.
	k := bucket.NewKeyed(0, 0)
	if !k.TakeWith("big", t0, 1000, 1200, 1000) {
		t.Fatal("big room could not take its capacity")
	}
	if k.TakeWith("big", t0, 1000, 1200, 1) {
		t.Fatal("big room took above its capacity")
	}
	if !k.TakeWith("big", at(time.Second), 1000, 1200, 1000) {
		t.Fatal("big room did not refill at its rate")
	}
	if !k.TakeWith("small", t0, 10, 1, 10) || k.TakeWith("small", t0, 10, 1, 1) {
		t.Fatal("small room capacity")
	}
}

func TestKeyedSweep(t *testing.T) {
	k := bucket.NewKeyed(3, 1)
	k.Take("drained", t0, 3)   // 0 of 3
	k.Take("partly", t0, 1)    // 2 of 3: full again at t0+1s
	k.Take("untouched", t0, 0) // 3 of 3

	now := at(1500 * time.Millisecond)
	if kept := k.Sweep(now); kept != 1 {
		t.Fatalf("Sweep kept %d buckets, want 1 (drained)", kept)
	}
	// Forgetting only full buckets changes no answer.
	if k.Take("drained", now, 2) {
		t.Fatal("sweep refilled a drained bucket (1.5 tokens)")
	}
	if !k.Take("partly", now, 3) || !k.Take("untouched", now, 3) {
		t.Fatal("a forgotten bucket did not come back full")
	}
	// At t0+3s "drained" is full again; the other two were emptied at t0+1.5s.
	if kept := k.Sweep(at(3 * time.Second)); kept != 2 {
		t.Fatalf("second Sweep kept %d buckets, want 2", kept)
	}
	if kept := k.Sweep(at(time.Hour)); kept != 0 {
		t.Fatalf("Sweep an hour later kept %d buckets, want 0", kept)
	}
}

// TestKeyedSweepNeverChangesAnswers runs the same random calls against two
// sets of buckets, one swept after every step: every answer must match,
// including for buckets taken with their own capacity and rate.
func TestKeyedSweepNeverChangesAnswers(t *testing.T) {
	for _, cfg := range []struct {
		name             string
		capacity, perSec float64
		with             bool
	}{
		{"Take", 3, 1 / 1.5, false},
		{"TakeWith above the default", 0, 0, true},
		{"TakeWith below the default", 1000, 1000, true},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 5))
			plain := bucket.NewKeyed(cfg.capacity, cfg.perSec)
			swept := bucket.NewKeyed(cfg.capacity, cfg.perSec)
			now := t0
			for i := range 5000 {
				now = now.Add(time.Duration(r.IntN(300)) * time.Millisecond)
				key := "k" + strconv.Itoa(r.IntN(20))
				var a, b bool
				if cfg.with {
					// Each room has its own capacity and rate.
					id := float64(len(key))
					capacity, perSec := id, id/10
					a = plain.TakeWith(key, now, capacity, perSec, 1)
					b = swept.TakeWith(key, now, capacity, perSec, 1)
				} else {
					a = plain.Take(key, now, 1)
					b = swept.Take(key, now, 1)
				}
				if a != b {
					t.Fatalf("step %d (%s at %v): unswept %v, swept %v", i, key, now.Sub(t0), a, b)
				}
				swept.Sweep(now)
			}
		})
	}
}

func TestKeyedTakeAllocs(t *testing.T) {
	k := bucket.NewKeyed(3, 1/1.5)
	k.Take("user-123456", t0, 1)
	now := t0
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		k.Take("user-123456", now, 1)
	})
	if allocs != 0 {
		t.Fatalf("Keyed.Take on an existing key allocates %v times", allocs)
	}
}

func BenchmarkKeyedTake(b *testing.B) {
	const keys = 1 << 12
	names := make([]string, keys)
	for i := range names {
		names[i] = "user-" + strconv.Itoa(i)
	}
	k := bucket.NewKeyed(3, 1/1.5)
	var worker atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := worker.Add(1)
		r := rand.New(rand.NewPCG(w, w))
		now := t0
		for pb.Next() {
			now = now.Add(time.Microsecond)
			k.Take(names[r.IntN(keys)], now, 1)
		}
	})
}

func TestTakeUpTo(t *testing.T) {
	k := bucket.NewKeyed(0, 0)
	// A full bucket of 10 gives 10 of 25 asked, then nothing.
	if got := k.TakeUpTo("r", t0, 10, 100, 0, 25); got != 10 {
		t.Fatalf("took %d of a full 10, want 10", got)
	}
	if got := k.TakeUpTo("r", t0, 10, 100, 0, 5); got != 0 {
		t.Fatalf("took %d of an empty bucket", got)
	}
	// 55 ms at 100/s: 5.5 tokens, of which whole ones are given.
	if got := k.TakeUpTo("r", at(55*time.Millisecond), 10, 100, 0, 8); got != 5 {
		t.Fatalf("took %d after 55 ms at 100/s, want 5", got)
	}
	// What was already let through is charged first, never below empty:
	// 0.5 left + 1 s (100, capped at 10) = 10; 4 forced, 6 left.
	if got := k.TakeUpTo("r", at(time.Second+55*time.Millisecond), 10, 100, 4, 8); got != 6 {
		t.Fatalf("took %d after 4 forced of 10, want 6", got)
	}
	if got := k.TakeUpTo("r", at(2*time.Second), 10, 100, 50, 8); got != 0 {
		t.Fatalf("took %d after forcing 50 into a bucket of 10", got)
	}
	if got := k.TakeUpTo("r", at(2*time.Second+50*time.Millisecond), 10, 100, 0, 8); got != 5 {
		t.Fatalf("took %d: a forced debt was carried (want 5 of the 50 ms refill)", got)
	}
	if got := k.TakeUpTo("r", at(3*time.Second), 10, 100, 0, -1); got != 0 {
		t.Fatalf("negative n took %d", got)
	}
}

// Package bucket implements token buckets refilled lazily from the time of
// each call, so they are exact without a refill goroutine and testable with a
// fake clock. Bucket is not safe for concurrent use; Keyed is.
package bucket

import (
	"hash/maphash"
	"sync"
	"time"
)

// Bucket is one token bucket. The zero value is full on its first use.
type Bucket struct {
	tokens float64
	last   time.Time
}

// Take refills the bucket for the time since its last use (up to capacity,
// perSec tokens a second) and takes n tokens if that many are there.
func (b *Bucket) Take(now time.Time, capacity, perSec, n float64) bool {
	// The bucket's clock only moves forward: concurrent callers read the time
	// before they get the lock, and moving it back to an earlier call's time
	// would refill the time in between a second time.
	if b.last.IsZero() {
		b.tokens = capacity
		b.last = now
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens += d.Seconds() * perSec
		b.last = now
	}
	if b.tokens > capacity {
		b.tokens = capacity
	}
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// TakeUpTo refills the bucket as Take does and takes as many whole tokens
// as are there, up to n, returning how many it took. A caller that must
// charge for what it already let through (force) takes those tokens first,
// down to an empty bucket but never below: the debt is not carried, since
// what was let through is bounded by its own rule.
func (b *Bucket) TakeUpTo(now time.Time, capacity, perSec float64, force, n int) int {
	b.Take(now, capacity, perSec, 0)
	b.tokens = max(0, b.tokens-float64(force))
	got := min(n, int(b.tokens))
	if got < 0 {
		got = 0
	}
	b.tokens -= float64(got)
	return got
}

// Full reports whether the bucket would be full at now, i.e. forgetting it
// changes nothing.
func (b *Bucket) Full(now time.Time, capacity, perSec float64) bool {
	return b.last.IsZero() || b.tokens+now.Sub(b.last).Seconds()*perSec >= capacity
}

const shards = 64

// Keyed is a set of buckets with one shared capacity and rate, one per key
// (user, room), sharded to keep lock contention low.
type Keyed struct {
	Capacity float64
	PerSec   float64

	seed   maphash.Seed
	shards [shards]shard
}

type shard struct {
	mu sync.Mutex
	m  map[string]*keyedBucket
}

// keyedBucket remembers the capacity and rate of its last take, so that
// Sweep judges a bucket taken with TakeWith by its own numbers, not Keyed's.
type keyedBucket struct {
	Bucket
	capacity, perSec float64
}

// NewKeyed returns buckets holding capacity tokens, refilled perSec a second.
func NewKeyed(capacity, perSec float64) *Keyed {
	k := &Keyed{Capacity: capacity, PerSec: perSec, seed: maphash.MakeSeed()}
	for i := range k.shards {
		k.shards[i].m = map[string]*keyedBucket{}
	}
	return k
}

// Take takes n tokens from key's bucket.
func (k *Keyed) Take(key string, now time.Time, n float64) bool {
	return k.TakeWith(key, now, k.Capacity, k.PerSec, n)
}

// TakeWith is Take with a per-call capacity and rate (a room's capacity
// follows its online count).
func (k *Keyed) TakeWith(key string, now time.Time, capacity, perSec, n float64) bool {
	b, s := k.lock(key, capacity, perSec)
	r := b.Take(now, capacity, perSec, n)
	s.mu.Unlock()
	return r
}

// lock returns key's bucket (created empty-handed, i.e. full) with its
// shard locked, remembering capacity and rate for Sweep.
func (k *Keyed) lock(key string, capacity, perSec float64) (*keyedBucket, *shard) {
	s := &k.shards[maphash.String(k.seed, key)%shards]
	s.mu.Lock()
	b, ok := s.m[key]
	if !ok {
		b = &keyedBucket{}
		s.m[key] = b
	}
	b.capacity, b.perSec = capacity, perSec
	return b, s
}

// TakeUpTo is Bucket.TakeUpTo on key's bucket.
func (k *Keyed) TakeUpTo(key string, now time.Time, capacity, perSec float64, force, n int) int {
	b, s := k.lock(key, capacity, perSec)
	r := b.TakeUpTo(now, capacity, perSec, force, n)
	s.mu.Unlock()
	return r
}

// Sweep forgets the buckets that are full at now, bounding memory to the
// keys active within one refill period.
func (k *Keyed) Sweep(now time.Time) (kept int) {
	for i := range k.shards {
		s := &k.shards[i]
		s.mu.Lock()
		for key, b := range s.m {
			if b.Full(now, b.capacity, b.perSec) {
				delete(s.m, key)
			}
		}
		kept += len(s.m)
		s.mu.Unlock()
	}
	return kept
}

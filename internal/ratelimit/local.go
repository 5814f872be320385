package ratelimit

import (
	"hash/maphash"
	"sync"
	"time"

	"danmaku/internal/bucket"
)

// localBuckets are one rule's token buckets on this node, one per key,
// sharded so that a node-wide ("global") rule is the only one whose
// callers share a lock.
type localBuckets struct {
	seed   maphash.Seed
	shards [localShards]localShard
}

const localShards = 64

type localShard struct {
	mu sync.Mutex
	m  map[string]*localBucket
}

// localBucket remembers the numbers of its last take, so that Sweep judges
// it by them after a reload changed the rule.
type localBucket struct {
	bucket.Bucket
	capacity, perSec float64
}

func newLocalBuckets() *localBuckets {
	l := &localBuckets{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = map[string]*localBucket{}
	}
	return l
}

// take takes a token from key's bucket. When it does, near says whether
// fewer than reserve tokens are left: the request used most of the
// budget. The check runs on a copy of the bucket, so it takes nothing.
func (l *localBuckets) take(key string, now time.Time, capacity, perSec, reserve float64) (ok, near bool) {
	s := &l.shards[maphash.String(l.seed, key)%localShards]
	s.mu.Lock()
	b := s.m[key]
	if b == nil {
		b = &localBucket{}
		s.m[key] = b
	}
	b.capacity, b.perSec = capacity, perSec
	ok = b.Take(now, capacity, perSec, 1)
	if ok {
		probe := b.Bucket
		near = !probe.Take(now, capacity, perSec, reserve)
	}
	s.mu.Unlock()
	return ok, near
}

// sweep forgets the buckets that are full: forgetting them changes
// nothing, and it bounds memory to the keys active within a refill.
func (l *localBuckets) sweep(now time.Time) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, b := range s.m {
			if b.Full(now, b.capacity, b.perSec) {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
}

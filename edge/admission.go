package edge

import (
	"math/rand/v2"
	"sync"
	"time"

	"danmaku/internal/bucket"
)

// Admission defaults. A show's start brings a whole audience at once; an
// edge that accepted every handshake as it came would spend its CPU on
// token checks and upgrades while the connections it already holds starve.
const (
	// defaultConnectRate is new connections a second per edge: a
	// handshake (token verification, upgrade, join) costs ~100 µs of CPU,
	// so 5,000 a second is about half of a 2-core node's.
	defaultConnectRate = 5000
	// defaultMaxConnsPerUser bounds one user's connections on one edge
	// (tabs, devices): a token replayed a thousand times gets eight.
	defaultMaxConnsPerUser = 8
	// Retry-After of a connection refused for the rate is drawn from
	// [1 s, 3 s], so that the refused do not all come back together.
	connectRetryMin, connectRetryMax = 1, 3
)

// connectBucket is the token bucket new connections pass: rate a second,
// burst at most. Safe for concurrent use.
type connectBucket struct {
	rate, burst float64 // rate ≤ 0: unlimited

	mu sync.Mutex
	b  bucket.Bucket
}

func newConnectBucket(rate float64, burst int) *connectBucket {
	b := &connectBucket{rate: rate, burst: float64(burst)}
	if b.burst <= 0 {
		b.burst = max(1, rate)
	}
	return b
}

// take spends a token, or answers how long the caller should wait.
func (b *connectBucket) take(now time.Time) (bool, time.Duration) {
	if b.rate <= 0 {
		return true, 0
	}
	b.mu.Lock()
	ok := b.b.Take(now, b.burst, b.rate, 1)
	b.mu.Unlock()
	if ok {
		return true, 0
	}
	return false, time.Duration(connectRetryMin+rand.IntN(connectRetryMax-connectRetryMin+1)) * time.Second
}

// userConns counts each user's connections on this node. Safe for
// concurrent use.
type userConns struct {
	max int // ≤ 0: unlimited

	mu sync.Mutex
	n  map[string]int
}

// acquire counts one more connection of user, unless it has max already.
func (u *userConns) acquire(user string) bool {
	if u.max <= 0 {
		return true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[user] >= u.max {
		return false
	}
	if u.n == nil {
		u.n = map[string]int{}
	}
	u.n[user]++
	return true
}

// release undoes one acquire.
func (u *userConns) release(user string) {
	if u.max <= 0 {
		return
	}
	u.mu.Lock()
	if u.n[user]--; u.n[user] <= 0 {
		delete(u.n, user)
	}
	u.mu.Unlock()
}

package edge

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
	// defaultMaxHelloWaits bounds the sockets of a node waiting for their
	// hello at once. A browser's wait is one round trip; a socket that
	// sends nothing holds its slot for HelloTimeout. On an epoll loop a
	// waiting socket costs under 1 KiB, on a goroutine (TLS) ~20 KiB:
	// 10,000 of those are ~200 MB, not a node's memory.
	defaultMaxHelloWaits = 10_000
	// defaultMaxHelloWaitsPerAddr bounds them per client address, so that
	// one host cannot take the node's whole allowance. Each wait lasts a
	// round trip: 256 at once let a carrier NAT's address start ~1,000
	// browsers a second at a 250 ms round trip.
	defaultMaxHelloWaitsPerAddr = 256
)

// retryJitter is a Retry-After drawn from [connectRetryMin,
// connectRetryMax] seconds.
func retryJitter() time.Duration {
	return time.Duration(connectRetryMin+rand.IntN(connectRetryMax-connectRetryMin+1)) * time.Second
}

// helloWaits counts the sockets waiting for their hello, per node and per
// client address, and refuses more than their caps. Safe for concurrent
// use.
type helloWaits struct {
	max   int64 // ≤ 0: unlimited
	n     atomic.Int64
	addrs *userConns // per client address
}

// take counts one more waiting socket from addr, or returns the code it
// is refused with: CodeHelloWaits (the node's cap), CodeHelloWaitsAddr
// (the address's).
func (w *helloWaits) take(addr string) string {
	if n := w.n.Add(1); w.max > 0 && n > w.max {
		w.n.Add(-1)
		return CodeHelloWaits
	}
	if !w.addrs.acquire(addr) {
		w.n.Add(-1)
		return CodeHelloWaitsAddr
	}
	return ""
}

// done undoes one take: the socket said hello, or left, or was closed.
func (w *helloWaits) done(addr string) {
	w.addrs.release(addr)
	w.n.Add(-1)
}

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
	return false, retryJitter()
}

// userConns counts each user's connections on this node (and each client
// address's sockets waiting for a hello: helloWaits). Safe for concurrent
// use.
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

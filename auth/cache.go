package auth

import (
	"bytes"
	"errors"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultTokenCacheSize is the number of verified tokens a TokenCache holds
// unless told otherwise. A held token costs about 1.6 KiB: 1,591 bytes for a
// 673-byte token naming three ingest and three edge addresses (measured by
// BenchmarkTokenCacheMemory as the heap growth of a filled cache: the token
// itself, kept whole for the exact match, ~700; its decoded claims, ~750;
// the slot and the index entry, ~130). The default holds ~100 MiB when
// full. It is sized for the senders of one ingest node: a user sends to one
// node (its token's first ingest address), so 20 nodes serving a million
// senders hold 50,000 each. Beyond it the cache evicts, and a miss costs one
// Verify.
const DefaultTokenCacheSize = 1 << 16

const (
	// tokenCacheShards splits the cache so that hits on many cores take
	// different locks; a power of two.
	tokenCacheShards = 64
	// minShardSlots keeps shards of small caches from being too small for
	// the clock hand to mean anything.
	minShardSlots = 16
)

// Verifier checks a dynamic token locally and returns its claims. Keyring
// implements it, and so does TokenCache in front of a Keyring: a node
// verifying many requests per token uses the cache.
type Verifier interface {
	Verify(token string) (*Claims, error)
}

var (
	_ Verifier = (*Keyring)(nil)
	_ Verifier = (*TokenCache)(nil)
)

// signedBy is the epoch and the secret that verified a token.
type signedBy struct {
	epoch  int64
	secret []byte
}

// holds reports whether the keyring still holds by's epoch with the same
// secret, that is, whether Verify would still check the token's signature
// with the secret that passed it.
func (k *Keyring) holds(by signedBy) bool {
	sec := k.secret(by.epoch)
	return sec != nil && bytes.Equal(sec, by.secret)
}

// TokenCacheConfig configures a TokenCache.
type TokenCacheConfig struct {
	// Keyring verifies the tokens the cache does not hold, and says on
	// every hit whether a token's epoch secret is still held. Required.
	Keyring *Keyring
	// Capacity bounds the number of tokens held. Zero:
	// DefaultTokenCacheSize.
	Capacity int
}

// TokenCache is a bounded cache of the tokens a Keyring verified, in front
// of Keyring.Verify. Decoding a token's claims is most of what verifying it
// costs, and a user sends many requests with one token.
//
// A hit never accepts what Verify would refuse: the key is the whole token
// (an exact match, never a hash of it alone), and a hit is checked against
// what can change since the token was verified — the time (a hit is served
// only while Verify would accept the token's exp and nbf, with the same
// leeway), and the keyring's epochs (the token's epoch secret must still be
// held and unchanged, so an epoch that aged out or was re-keyed fails as
// Verify fails). The rest of what Verify checks (signature, algorithm,
// issuer, claims) is a function of the token's bytes and the keyring's fixed
// settings. A token Verify refuses is never cached.
//
// The claims returned are shared by every caller presenting the same token:
// treat them as immutable.
//
// The cache is split into shards by a seeded hash of the token, each with its
// own lock, a fixed array of slots and an index from token to slot. A hit
// takes the shard's read lock and allocates nothing. A full shard evicts
// with the CLOCK algorithm: a hit marks its slot, and the hand sweeping the
// slots for a victim takes the first expired or unmarked one, unmarking the
// rest as it passes. Every insert, full shard or not, first moves the hand
// over a few slots freeing the expired tokens it passes, and takes a freed
// slot before a never-used one, so the cache holds about the tokens still
// good (those presented within a token's life), not every token it ever
// met. TokenCache is safe for concurrent use.
type TokenCache struct {
	k      *Keyring
	seed   maphash.Seed
	mask   uint64
	shards []tokenShard
}

type tokenShard struct {
	mu    sync.RWMutex
	index map[string]int32
	slots []tokenSlot // fixed length: never reallocated under a reader
	used  int         // slots handed out so far; the rest have never held a token
	free  []int32     // used slots emptied (dropped, or expired and swept), to reuse first
	hand  int

	hits, misses, evictions, expired atomic.Uint64
	_                                [64]byte // keeps neighbouring shards' locks apart
}

// tokenSlot is one cached token: ~80 bytes beside the token and claims.
type tokenSlot struct {
	token  string
	claims *Claims // nil: free
	by     signedBy
	exp    int64 // unix ns: a hit is served only before it (exp plus the leeway)
	nbf    int64 // unix ns: ... and from it (nbf minus the leeway)
	ref    atomic.Uint32
}

// NewTokenCache checks cfg and returns an empty cache.
func NewTokenCache(cfg TokenCacheConfig) (*TokenCache, error) {
	if cfg.Keyring == nil {
		return nil, errors.New("auth: token cache: Keyring is required")
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultTokenCacheSize
	}
	if cfg.Capacity < 0 || cfg.Capacity > math.MaxInt32 {
		return nil, errors.New("auth: token cache: Capacity must be positive and fit in 32 bits")
	}
	n := tokenCacheShards
	for n > 1 && cfg.Capacity/n < minShardSlots {
		n /= 2
	}
	c := &TokenCache{k: cfg.Keyring, seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]tokenShard, n)}
	per := cfg.Capacity / n // n × per ≤ Capacity
	for i := range c.shards {
		c.shards[i].index = make(map[string]int32, per)
		c.shards[i].slots = make([]tokenSlot, per)
	}
	return c, nil
}

// Verify returns the claims of token as Keyring.Verify does, from the cache
// when it holds the token and the token is still good.
func (c *TokenCache) Verify(token string) (*Claims, error) {
	if token == "" || len(token) > maxTokenBytes || !compactJWT(token) {
		return c.k.Verify(token) // refused before any look-up; not worth hashing
	}
	sh := &c.shards[maphash.String(c.seed, token)&c.mask]
	now := c.k.cfg.Clock.Now().UnixNano()
	sh.mu.RLock()
	i, found := sh.index[token]
	var (
		claims *Claims
		by     signedBy
	)
	if found {
		if e := &sh.slots[i]; now < e.exp && now >= e.nbf {
			claims, by = e.claims, e.by
			if e.ref.Load() == 0 {
				e.ref.Store(1) // written once per sweep, not on every hit
			}
		}
	}
	sh.mu.RUnlock()
	if claims != nil && c.k.holds(by) {
		sh.hits.Add(1)
		return claims, nil
	}
	sh.misses.Add(1)
	claims, by, err := c.k.verify(token)
	if err != nil {
		if found {
			sh.drop(token)
		}
		return nil, err
	}
	// The bounds Verify applies (jwt: now < exp+leeway, now >= nbf-leeway);
	// exp is required by the parser, nbf is optional.
	exp := claims.ExpiresAt.Add(leeway).UnixNano()
	nbf := int64(math.MinInt64)
	if claims.NotBefore != nil {
		nbf = claims.NotBefore.Add(-leeway).UnixNano()
	}
	if now < exp {
		// Cloned: the token is a slice of the request's header, which the
		// cache should not keep alive.
		sh.put(strings.Clone(token), claims, by, exp, nbf, now)
	}
	return claims, nil
}

// put stores a verified token, in place of an older copy of it, in a free
// slot, or in the slot of the CLOCK victim.
func (sh *tokenShard) put(token string, claims *Claims, by signedBy, exp, nbf, now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.index[token]
	if !ok {
		i = sh.victim(now)
		if old := &sh.slots[i]; old.claims != nil {
			delete(sh.index, old.token)
			if now >= old.exp {
				sh.expired.Add(1)
			} else {
				sh.evictions.Add(1)
			}
		}
		sh.index[token] = i
	}
	e := &sh.slots[i]
	e.token, e.claims, e.by, e.exp, e.nbf = token, claims, by, exp, nbf
	e.ref.Store(0)
}

// reclaimProbes is how many slots the hand passes on each put, freeing the
// expired tokens it finds there; a put takes a freed slot before a
// never-used one. So what a shard holds stays near the tokens still good,
// not every token it met (a show's senders bring a new token at each
// refresh): a shard of U used slots turns the hand once in U/k puts, and
// carries about U/k expired tokens, freed a turn after they expire
// (TestTokenCacheReusesExpiredSlots measures it). A probe reads a slot
// under the lock the put holds anyway, beside a Verify that costs tens of
// microseconds.
const reclaimProbes = 4

// victim returns the slot to reuse: a free one (dropped, or expired and
// freed by the hand's sweep), else a never-used one, else (the shard is
// full of good tokens) the first one the hand finds not hit since it last
// passed. That search ends within two turns of the hand: the first turn
// unmarks every slot.
func (sh *tokenShard) victim(now int64) int32 {
	sh.sweep(now)
	if n := len(sh.free); n > 0 {
		i := sh.free[n-1]
		sh.free = sh.free[:n-1]
		return i
	}
	if sh.used < len(sh.slots) {
		sh.used++
		return int32(sh.used - 1)
	}
	for {
		if sh.hand >= len(sh.slots) { // the sweep leaves it one past a slot
			sh.hand = 0
		}
		i := sh.hand
		sh.hand++
		e := &sh.slots[i]
		if e.claims == nil || now >= e.exp || e.ref.Load() == 0 {
			return int32(i)
		}
		e.ref.Store(0)
	}
}

// sweep moves the hand over the next reclaimProbes used slots, freeing the
// expired tokens there. It clears no mark: only a full shard's search for
// a victim does.
func (sh *tokenShard) sweep(now int64) {
	for p := 0; p < reclaimProbes && p < sh.used; p++ {
		if sh.hand >= sh.used {
			sh.hand = 0
		}
		if e := &sh.slots[sh.hand]; e.claims != nil && now >= e.exp {
			sh.free = append(sh.free, int32(sh.hand))
			sh.forget(e)
			sh.expired.Add(1)
		}
		sh.hand++
	}
}

// forget empties slot e, whose token is held, and drops its index entry,
// so that neither keeps the token's bytes and claims alive.
func (sh *tokenShard) forget(e *tokenSlot) {
	delete(sh.index, e.token)
	e.token, e.claims, e.by = "", nil, signedBy{}
	e.ref.Store(0)
}

// drop forgets token, whose cached copy Verify now refuses (its epoch is
// gone or re-keyed), so that its slot is the next to be reused.
func (sh *tokenShard) drop(token string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.index[token]
	if !ok {
		return
	}
	sh.forget(&sh.slots[i])
	sh.free = append(sh.free, i)
}

// TokenCacheStats are a TokenCache's counters since it was made.
type TokenCacheStats struct {
	// Hits were answered from the cache; Misses were looked up, not found
	// good, and went to Keyring.Verify (whether or not it accepted the
	// token). An empty, oversized or malformed (not compactJWT) token is
	// refused without a look-up and counts in neither.
	Hits, Misses uint64
	// Evictions are unexpired tokens removed from a full cache to make
	// room for others, the least recently used first (usually a token its
	// sender has replaced): the cache is too small for the tokens in use
	// when they climb with the misses.
	Evictions uint64
	// Expired are tokens forgotten after their exp (with the leeway),
	// their slots reused: a cache's normal turnover.
	Expired uint64
	// Len is the number of tokens held now.
	Len int
}

// Stats returns the cache's counters.
func (c *TokenCache) Stats() TokenCacheStats {
	var s TokenCacheStats
	for i := range c.shards {
		sh := &c.shards[i]
		s.Hits += sh.hits.Load()
		s.Misses += sh.misses.Load()
		s.Evictions += sh.evictions.Load()
		s.Expired += sh.expired.Load()
		sh.mu.RLock()
		s.Len += len(sh.index)
		sh.mu.RUnlock()
	}
	return s
}

// Capacity returns the most tokens the cache holds at once.
func (c *TokenCache) Capacity() int { return len(c.shards) * len(c.shards[0].slots) }

package auth_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"danmaku/auth"
)

func newCache(tb testing.TB, e *env, capacity int) *auth.TokenCache {
	tb.Helper()
	c, err := auth.NewTokenCache(auth.TokenCacheConfig{Keyring: e.ring, Capacity: capacity})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// userClaims are a production-sized token's claims: three ingest and three
// edge addresses, a nick of six CJK characters.
func userClaims(i int) auth.Claims {
	c := validClaims()
	c.Subject = "user-" + strconv.Itoa(i)
	c.Nick = "弹幕观众小明"
	c.Addrs = []string{
		"https://ingest-07.danmaku.example.net", "https://ingest-12.danmaku.example.net", "https://ingest-03.danmaku.example.net",
		"wss://edge-113.danmaku.example.net/v1/ws", "wss://edge-114.danmaku.example.net/v1/ws", "wss://edge-020.danmaku.example.net/v1/ws",
	}
	c.Ingests = 3
	return c
}

// sameAnswer checks that the cache answers token as the keyring does now.
func sameAnswer(t *testing.T, e *env, c *auth.TokenCache, token, when string) {
	t.Helper()
	want, wantErr := e.ring.Verify(token)
	got, err := c.Verify(token)
	switch {
	case (wantErr == nil) != (err == nil):
		t.Fatalf("%s: cache says %v, keyring says %v", when, err, wantErr)
	case wantErr != nil:
		for _, sentinel := range []error{auth.ErrNoToken, auth.ErrBadToken, auth.ErrUnknownEpoch} {
			if errors.Is(wantErr, sentinel) != errors.Is(err, sentinel) {
				t.Fatalf("%s: cache error %v, keyring error %v", when, err, wantErr)
			}
		}
		if got != nil {
			t.Fatalf("%s: claims returned with error %v", when, err)
		}
	case got.Subject != want.Subject || got.Room != want.Room || !got.ExpiresAt.Equal(want.ExpiresAt.Time):
		t.Fatalf("%s: cache claims %+v, keyring claims %+v", when, got, want)
	}
}

func TestTokenCacheHitMiss(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 0)
	if got := c.Capacity(); got > auth.DefaultTokenCacheSize || got < auth.DefaultTokenCacheSize*9/10 {
		t.Fatalf("Capacity = %d, want about %d", got, auth.DefaultTokenCacheSize)
	}
	tok := e.sign(t, userClaims(1))
	first, err := c.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Misses != 1 || s.Hits != 0 || s.Len != 1 {
		t.Fatalf("after the first Verify: %+v", s)
	}
	second, err := c.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if second != first {
		t.Fatal("a hit decoded the claims again")
	}
	if second.User() != "user-1" || len(second.IngestAddrs()) != 3 {
		t.Fatalf("claims %+v", second)
	}
	if s := c.Stats(); s.Misses != 1 || s.Hits != 1 || s.Len != 1 {
		t.Fatalf("after the second Verify: %+v", s)
	}
	// Another token of the same user is another entry.
	e.clk.Advance(time.Second) // a new iat: other bytes
	other := e.sign(t, userClaims(1))
	if _, err := c.Verify(other); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Misses != 2 || s.Len != 2 {
		t.Fatalf("after another token: %+v", s)
	}
}

// A hit needs the whole token: a token differing in one byte is verified on
// its own (and refused here), even with the good one cached.
func TestTokenCacheExactKey(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 64)
	tok := e.sign(t, userClaims(1))
	if _, err := c.Verify(tok); err != nil {
		t.Fatal(err)
	}
	dot := strings.LastIndexByte(tok, '.')
	for i, variant := range []string{
		tok[:dot+1] + strings.Repeat("A", len(tok)-dot-1), // another signature
		tok[:dot],                 // no signature
		tok + "A",                 // longer
		tok[:10] + "x" + tok[11:], // another header
	} {
		if _, err := c.Verify(variant); !errors.Is(err, auth.ErrBadToken) {
			t.Errorf("variant %d: %v, want ErrBadToken", i, err)
		}
	}
	if s := c.Stats(); s.Hits != 0 || s.Len != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A cached token stops exactly where Verify stops: exp plus the leeway.
func TestTokenCacheExpiryOnHit(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 64)
	tok := e.sign(t, userClaims(1))
	claims, err := c.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	exp := claims.ExpiresAt.Time
	for _, at := range []time.Duration{-time.Second, 0, time.Second, 2*time.Second - time.Nanosecond} {
		e.clk.Set(exp.Add(at))
		hits := c.Stats().Hits
		sameAnswer(t, e, c, tok, "exp"+at.String())
		if c.Stats().Hits != hits+1 {
			t.Fatalf("exp%v: not answered from the cache", at)
		}
	}
	e.clk.Set(exp.Add(2 * time.Second))
	sameAnswer(t, e, c, tok, "exp+2s")
	if s := c.Stats(); s.Len != 0 {
		t.Fatalf("an expired token is still held: %+v", s)
	}
	// Verified in the leeway, a token is cached only until the leeway ends.
	e.clk.Set(exp.Add(-time.Minute))
	tok2 := e.sign(t, userClaims(2))
	e.clk.Advance(e.ring.TokenTTL() + time.Second) // 1 s past its exp
	if _, err := c.Verify(tok2); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	sameAnswer(t, e, c, tok2, "leeway over")
}

// nbf (never written by Sign, accepted by Verify) is re-checked on a hit too:
// a clock set back before it refuses the cached token as Verify does.
func TestTokenCacheNotBeforeOnHit(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 64)
	ep := e.epoch()
	p := e.payload()
	nbf := e.clk.Now().Add(10 * time.Second)
	p["nbf"] = nbf.Unix()
	tok := rawJWT(t, map[string]any{"alg": "EdDSA", "kid": strconv.FormatInt(ep, 10)}, p, auth.EpochKey(testMaster, ep))
	sameAnswer(t, e, c, tok, "before nbf")
	e.clk.Set(nbf.Add(-2 * time.Second))
	sameAnswer(t, e, c, tok, "nbf-2s")
	sameAnswer(t, e, c, tok, "nbf-2s again")
	if c.Stats().Hits != 1 {
		t.Fatalf("stats %+v", c.Stats())
	}
	e.clk.Set(nbf.Add(-2*time.Second - time.Nanosecond))
	sameAnswer(t, e, c, tok, "back before nbf")
}

// The keyring drops an epoch two epochs on; a cached token of that epoch is
// refused from then on, even one whose exp is far ahead.
func TestTokenCacheEpochWithdrawn(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 64)
	ep := e.epoch()
	p := e.payload()
	p["exp"] = e.clk.Now().Add(time.Hour).Unix()
	tok := rawJWT(t, map[string]any{"alg": "EdDSA", "kid": strconv.FormatInt(ep, 10)}, p, auth.EpochKey(testMaster, ep))
	sameAnswer(t, e, c, tok, "fresh")
	e.advance(t, testEpoch) // the previous epoch: still held
	sameAnswer(t, e, c, tok, "one epoch on")
	if c.Stats().Hits != 1 {
		t.Fatalf("stats %+v", c.Stats())
	}
	e.advance(t, testEpoch)
	if _, err := e.ring.Verify(tok); !errors.Is(err, auth.ErrUnknownEpoch) {
		t.Fatalf("keyring: %v, want ErrUnknownEpoch", err)
	}
	sameAnswer(t, e, c, tok, "two epochs on")
	if s := c.Stats(); s.Hits != 1 || s.Len != 0 {
		t.Fatalf("a withdrawn epoch's token is still served or held: %+v", s)
	}
}

// An epoch whose secret changed (a store re-keyed) refuses what the old
// secret signed, cached or not.
func TestTokenCacheEpochRekeyed(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 64)
	tok := e.sign(t, userClaims(1))
	sameAnswer(t, e, c, tok, "fresh")
	if err := e.store.Publish(context.Background(), e.epoch(), []byte("another secret, 32 bytes or more!!"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := e.ring.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, e, c, tok, "re-keyed")
	if s := c.Stats(); s.Hits != 0 || s.Len != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Whatever Verify refuses is refused again on the next try, and never held.
func TestTokenCacheNeverCachesBadTokens(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 64)
	ep := e.epoch()
	kid := strconv.FormatInt(ep, 10)
	secret := auth.DeriveSecret(testMaster, ep)
	good := e.sign(t, userClaims(1))
	expired := e.payload()
	expired["exp"] = e.clk.Now().Add(-time.Minute).Unix()
	noRoom := e.payload()
	delete(noRoom, "room")
	otherIss := e.payload()
	otherIss["iss"] = "someone-else"
	cases := map[string]string{
		"empty":         "",
		"garbage":       "a.b.c",
		"too long":      strings.Repeat("eyJ", 2000),
		"bad signature": good[:len(good)-4] + "AAAA",
		"alg none":      rawJWT(t, map[string]any{"alg": "none", "kid": kid}, e.payload(), nil),
		"no kid":        rawJWT(t, map[string]any{"alg": "HS256"}, e.payload(), secret),
		"unknown epoch": rawJWT(t, map[string]any{"alg": "HS256", "kid": strconv.FormatInt(ep+5, 10)}, e.payload(), secret),
		"expired":       rawJWT(t, map[string]any{"alg": "HS256", "kid": kid}, expired, secret),
		"missing room":  rawJWT(t, map[string]any{"alg": "HS256", "kid": kid}, noRoom, secret),
		"other issuer":  rawJWT(t, map[string]any{"alg": "HS256", "kid": kid}, otherIss, secret),
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := e.ring.Verify(tok); err == nil {
				t.Fatal("the keyring accepts it: not a bad token")
			}
			sameAnswer(t, e, c, tok, "first")
			sameAnswer(t, e, c, tok, "second")
		})
	}
	if s := c.Stats(); s.Hits != 0 || s.Len != 0 {
		t.Fatalf("bad tokens held: %+v", s)
	}
}

// The cache never holds more than its capacity; a token hit between
// insertions survives them (CLOCK gives it a second chance), and every
// token is still answered right after it was evicted.
func TestTokenCacheEvictionBound(t *testing.T) {
	e := newEnv(t)
	const capacity = 100
	c := newCache(t, e, capacity)
	if c.Capacity() > capacity || c.Capacity() < capacity*8/10 {
		t.Fatalf("Capacity() = %d for %d", c.Capacity(), capacity)
	}
	hot := e.sign(t, userClaims(0))
	if _, err := c.Verify(hot); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	toks := make([]string, n)
	for i := range toks {
		toks[i] = e.sign(t, userClaims(i+1))
	}
	for i, tok := range toks {
		if _, err := c.Verify(tok); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Verify(hot); err != nil {
			t.Fatal(err)
		}
		if l := c.Stats().Len; l > c.Capacity() {
			t.Fatalf("after %d tokens the cache holds %d, capacity %d", i+1, l, c.Capacity())
		}
	}
	s := c.Stats()
	if s.Hits != n || s.Misses != n+1 {
		t.Fatalf("the hot token was evicted: %+v", s)
	}
	if s.Evictions < n+1-uint64(c.Capacity()) {
		t.Fatalf("evictions %d, want at least %d", s.Evictions, n+1-c.Capacity())
	}
	for _, tok := range toks[:10] { // long evicted
		sameAnswer(t, e, c, tok, "evicted")
	}
}

func TestTokenCacheSmallCapacities(t *testing.T) {
	e := newEnv(t)
	for _, capacity := range []int{1, 2, 31, 33, 1000} {
		c := newCache(t, e, capacity)
		if got := c.Capacity(); got < 1 || got > capacity {
			t.Fatalf("Capacity() = %d for %d", got, capacity)
		}
		for i := range 3 * capacity {
			if _, err := c.Verify(e.sign(t, userClaims(i))); err != nil {
				t.Fatal(err)
			}
		}
		if l := c.Stats().Len; l > c.Capacity() {
			t.Fatalf("capacity %d holds %d", capacity, l)
		}
	}
}

func TestTokenCacheConfig(t *testing.T) {
	e := newEnv(t)
	for name, cfg := range map[string]auth.TokenCacheConfig{
		"no keyring":        {},
		"negative capacity": {Keyring: e.ring, Capacity: -1},
	} {
		if _, err := auth.NewTokenCache(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A hit allocates nothing.
func TestTokenCacheHitAllocs(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 64)
	tok := e.sign(t, userClaims(1))
	if _, err := c.Verify(tok); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = c.Verify(tok) }); n != 0 {
		t.Fatalf("a hit allocates %v times", n)
	}
}

// Hits, misses, evictions, refreshes and clock moves at once; -race checks
// them, and every answer must carry its own token's claims.
func TestTokenCacheConcurrent(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 40) // fewer slots than tokens: evictions all along
	toks := make([]string, 120)
	for i := range toks {
		toks[i] = e.sign(t, userClaims(i))
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for j := range 500 {
				i := (w*31 + j*7) % len(toks)
				cl, err := c.Verify(toks[i])
				if err != nil {
					t.Error(err)
					return
				}
				if cl.User() != "user-"+strconv.Itoa(i) {
					t.Errorf("token %d answered with %s's claims", i, cl.User())
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			e.clk.Advance(time.Millisecond)
			if err := e.ring.Refresh(context.Background()); err != nil {
				t.Error(err)
				return
			}
			_ = c.Stats()
		}
	})
	wg.Wait()
	if s := c.Stats(); s.Hits == 0 || s.Evictions == 0 || s.Len > c.Capacity() {
		t.Fatalf("stats %+v", s)
	}
}

func benchEnv(b *testing.B) (*env, string) {
	e := newEnv(b)
	return e, e.sign(b, userClaims(1))
}

// BenchmarkVerify is the uncached check: parse, HMAC, JSON-decode the claims.
func BenchmarkVerify(b *testing.B) {
	e, tok := benchEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.ring.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTokenCacheHit is the same check answered by a TokenCache.
func BenchmarkTokenCacheHit(b *testing.B) {
	e, tok := benchEnv(b)
	c := newCache(b, e, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTokenCheck is a node's whole check of a token it has seen
// before: the cache hit, then the address check — any address of the
// token (HasAddr, the check before tokens carried their audience) or the
// node's own part of the partition (ForIngest, ForEdge), each on the
// address it finds last.
func BenchmarkTokenCheck(b *testing.B) {
	e := newEnv(b)
	cl := userClaims(1) // three ingests, three edges
	tok, ingest, edge := e.sign(b, cl), cl.Addrs[2], cl.Addrs[5]
	c := newCache(b, e, 0)
	for _, bc := range []struct {
		name  string
		check func(*auth.Claims) bool
	}{
		{"HasAddr", func(c *auth.Claims) bool { return c.HasAddr(edge) }},
		{"ForIngest", func(c *auth.Claims) bool { return c.ForIngest(ingest) }},
		{"ForEdge", func(c *auth.Claims) bool { return c.ForEdge(edge) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				got, err := c.Verify(tok)
				if err != nil || !bc.check(got) {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTokenCacheHitParallel: many users' tokens on every core, as an
// ingest node sees them.
func BenchmarkTokenCacheHitParallel(b *testing.B) {
	e := newEnv(b)
	c := newCache(b, e, 0)
	toks := make([]string, 1024)
	for i := range toks {
		toks[i] = e.sign(b, userClaims(i))
		if _, err := c.Verify(toks[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := c.Verify(toks[i&1023]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkTokenCacheMiss is a token not held: Verify plus the insertion,
// evicting once the cache is full.
func BenchmarkTokenCacheMiss(b *testing.B) {
	e := newEnv(b)
	c := newCache(b, e, 1024)
	toks := make([]string, 4096)
	for i := range toks {
		toks[i] = e.sign(b, userClaims(i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.Verify(toks[i%len(toks)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkTokenCacheMemory measures what one held token costs (the heap
// growth of a cache filled with production-sized tokens, divided by their
// number): the figure behind DefaultTokenCacheSize.
func BenchmarkTokenCacheMemory(b *testing.B) {
	e := newEnv(b)
	const n = 1 << 13
	toks := make([]string, n)
	for i := range toks {
		toks[i] = e.sign(b, userClaims(i))
	}
	var perEntry, tokenBytes float64
	for _, tok := range toks {
		tokenBytes += float64(len(tok))
	}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newCache(b, e, n)
		for _, tok := range toks {
			if _, err := c.Verify(tok); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s := c.Stats(); s.Len < n*9/10 {
			b.Fatalf("only %d of %d held", s.Len, n)
		}
		perEntry = float64(after.HeapAlloc-before.HeapAlloc) / float64(c.Stats().Len)
		runtime.KeepAlive(c)
	}
	b.ReportMetric(perEntry, "B/entry")
	b.ReportMetric(tokenBytes/n, "B/token")
}

// FuzzTokenCache: whatever the input, the cache answers as the keyring
// does, the first time (a miss) and the second (a hit, or a refusal again).
func FuzzTokenCache(f *testing.F) {
	e := newEnv(f)
	c := newCache(f, e, 64)
	good := e.sign(f, userClaims(1))
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add("")
	f.Add("a.b.c")
	f.Add(strings.Repeat("eyJ", 2000))
	f.Fuzz(func(t *testing.T, tok string) {
		sameAnswer(t, e, c, tok, "first")
		sameAnswer(t, e, c, tok, "second")
	})
}

// malleate returns up to n other spellings of tok that a lenient base64url
// decoder reads as the same bytes: unused low bits set in a segment's last
// character, and CR, LF or CRLF inserted anywhere (the library's decoder
// skips them).
func malleate(tok string, n int) []string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var out []string
	segs := strings.Split(tok, ".")
	for si, seg := range segs {
		v := strings.IndexByte(alphabet, seg[len(seg)-1])
		unused := map[int]int{2: 0x0f, 3: 0x03}[len(seg)%4]
		for bits := 1; bits <= unused; bits++ {
			if v&unused != 0 {
				break
			}
			alt := append([]string(nil), segs...)
			alt[si] = seg[:len(seg)-1] + string(alphabet[v|bits])
			out = append(out, strings.Join(alt, "."))
		}
	}
	for i := 1; i < len(tok) && len(out) < n; i++ {
		for _, ins := range []string{"\n", "\r", "\r\n", "\n\n", "\n\r"} {
			out = append(out, tok[:i]+ins+tok[i:])
		}
	}
	return out[:min(n, len(out))]
}

// TestTokenCacheRefusesMalleated is issue 20's acceptance for token
// shapes: 3,000 spellings of one token are each refused before any look-up
// and make no cache entry, where each used to verify and take a slot; the
// token as signed still verifies.
func TestTokenCacheRefusesMalleated(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 0)
	tok := e.sign(t, userClaims(1))
	spellings := malleate(tok, 3000)
	if len(spellings) != 3000 {
		t.Fatalf("%d spellings", len(spellings))
	}
	for _, s := range spellings {
		if _, err := c.Verify(s); !errors.Is(err, auth.ErrBadToken) {
			t.Fatalf("spelling %q: %v, want ErrBadToken", s, err)
		}
		if _, err := e.ring.Verify(s); !errors.Is(err, auth.ErrBadToken) {
			t.Fatalf("keyring accepts spelling %q: %v", s, err)
		}
	}
	if st := c.Stats(); st.Len != 0 || st.Misses != 0 || st.Hits != 0 {
		t.Fatalf("after 3,000 spellings: %+v, want no entry and no look-up", st)
	}
	if _, err := c.Verify(tok); err != nil {
		t.Fatalf("the token as signed: %v", err)
	}
	if st := c.Stats(); st.Len != 1 {
		t.Fatalf("Len = %d, want 1", st.Len)
	}
	for _, s := range []string{"a.b", "a.b.c.d", "ab.cd.ef.", ".ab.cd", "ab..cd", "ab.cd.e", "ab+c.cd.ef", "ab.cd.ef=", "ab.cd.e f"} {
		if _, err := c.Verify(s); !errors.Is(err, auth.ErrBadToken) {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// The cache keeps a token's audience: a token cached after its use at an
// ingest is still refused by an edge's check on the hit, and the other way
// round; the entries are the exact token strings, so a token for one
// audience cannot answer for another.
func TestTokenCacheKeepsAudience(t *testing.T) {
	e := newEnv(t)
	c := newCache(t, e, 0)
	const node = "http://node-1"
	ingestOnly, edgeOnly := userClaims(1), userClaims(1)
	ingestOnly.Addrs, ingestOnly.Ingests = []string{node, "ws://edge-1"}, 1
	edgeOnly.Addrs, edgeOnly.Ingests = []string{"http://ingest-1", node}, 1
	toks := map[string]bool{e.sign(t, ingestOnly): true, e.sign(t, edgeOnly): false} // token: for the ingest at node
	for round := range 3 {                                                           // a miss, then hits
		for tok, forIngest := range toks {
			got, err := c.Verify(tok)
			if err != nil {
				t.Fatal(err)
			}
			if got.ForIngest(node) != forIngest || got.ForEdge(node) == forIngest {
				t.Fatalf("round %d: ForIngest %v, ForEdge %v; want ingest %v", round, got.ForIngest(node), got.ForEdge(node), forIngest)
			}
		}
	}
	if s := c.Stats(); s.Misses != 2 || s.Hits != 4 || s.Len != 2 {
		t.Fatalf("cache %+v", s)
	}
}

// A cache far from full does not keep expired tokens: a show's senders
// refresh their tokens (a new token each time), and each ingest meets every
// new one. The cache used to fill never-used slots first and reuse a slot
// only once its shard was full, so a 65,536-token cache grew by every
// token a node met, expired or not, until it held 65,536 (~100 MiB): the
// 30-minute soak's ingest heap growth. Now the hand takes a free or
// expired slot before a never-used one, and what the cache holds stays
// near the tokens still good.
func TestTokenCacheReusesExpiredSlots(t *testing.T) {
	e := newEnv(t)
	const (
		users   = 100
		refresh = 2 * time.Minute
		show    = 3 * time.Hour
	)
	c := newCache(t, e, 1<<14) // never full here: 90 refreshes × 100 users is 9,000
	live := users * int(e.ring.TokenTTL()/refresh+1)
	var at30, most int
	for m := time.Duration(0); m < show; m += refresh {
		for u := range users {
			tok := e.sign(t, userClaims(u))
			for range 3 { // a few requests with each token
				if _, err := c.Verify(tok); err != nil {
					t.Fatalf("%v: %v", m, err)
				}
			}
		}
		l := c.Stats().Len
		most = max(most, l)
		if m == 30*time.Minute {
			at30 = l
		}
		e.advance(t, refresh)
	}
	s := c.Stats()
	t.Logf("good at once %d; held: at most %d, %d at 30 minutes, %d at %v; %+v", live, most, at30, s.Len, show, s)
	if most > 2*live {
		t.Fatalf("the cache held up to %d tokens; %d are good at once (%+v)", most, live, s)
	}
	if s.Len > at30+users {
		t.Fatalf("the cache grows: %d tokens at 30 minutes, %d at %v (%+v)", at30, s.Len, show, s)
	}
	if s.Evictions != 0 {
		t.Fatalf("a cache that never filled evicted %d good tokens (%+v)", s.Evictions, s)
	}
	if s.Expired == 0 {
		t.Fatalf("no expired token was reclaimed (%+v)", s)
	}
}

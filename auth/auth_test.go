package auth_test

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/auth"
	"danmaku/internal/clock"
)

const testEpoch = 10 * time.Minute

// t0 is an epoch boundary (a whole day since the Unix epoch), so tests know
// exactly which epoch each instant falls into.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var testMaster = []byte("0123456789abcdef0123456789abcdef-master")

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is one auth center publishing into one store, and one keyring on it.
type env struct {
	clk    *clock.Fake
	store  *auth.MemorySecrets
	center *auth.Center
	ring   *auth.Keyring
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	clk := clock.NewFake(t0)
	store := auth.NewMemorySecrets()
	center, err := auth.NewCenter(auth.CenterConfig{Store: store, MasterKey: testMaster, Epoch: testEpoch, Clock: clk, Logger: discard})
	if err != nil {
		tb.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: store, MasterKey: testMaster, Epoch: testEpoch, Clock: clk, Logger: discard})
	if err != nil {
		tb.Fatal(err)
	}
	e := &env{clk: clk, store: store, center: center, ring: ring}
	e.sync(tb)
	return e
}

// sync has the center publish and the keyring refresh at the current time.
func (e *env) sync(tb testing.TB) {
	tb.Helper()
	if err := e.center.Publish(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if err := e.ring.Refresh(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

func (e *env) advance(tb testing.TB, d time.Duration) {
	tb.Helper()
	e.clk.Advance(d)
	e.sync(tb)
}

func (e *env) epoch() int64 { return auth.EpochOf(e.clk.Now(), testEpoch) }

func validClaims() auth.Claims {
	return auth.Claims{
		Room:             "room-1",
		Nick:             "nick",
		Avatar:           "a1",
		Role:             auth.RoleViewer,
		Addrs:            []string{"http://ingest-1", "ws://edge-1"},
		Login:            t0.UnixMilli(),
		RegisteredClaims: jwt.RegisteredClaims{Subject: "user-1"},
	}
}

func (e *env) sign(tb testing.TB, c auth.Claims) string {
	tb.Helper()
	tok, _, err := e.ring.Sign(c)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// rawJWT builds a token by hand so tests can forge headers the library would
// never write. alg "none" gets an empty signature; anything else is signed
// with HMAC-SHA256 over the signing input, whatever the header claims.
// rawJWT builds a token by hand: key is an ed25519.PrivateKey (EdDSA
// signature) or a []byte (HMAC-SHA256, for the tokens a verifier must
// refuse), whatever the header claims.
func rawJWT(tb testing.TB, header, payload map[string]any, key any) string {
	tb.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := json.Marshal(payload)
	if err != nil {
		tb.Fatal(err)
	}
	enc := base64.RawURLEncoding
	in := enc.EncodeToString(h) + "." + enc.EncodeToString(p)
	if header["alg"] == "none" {
		return in + "."
	}
	if priv, ok := key.(ed25519.PrivateKey); ok {
		return in + "." + enc.EncodeToString(ed25519.Sign(priv, []byte(in)))
	}
	m := hmac.New(sha256.New, key.([]byte))
	m.Write([]byte(in))
	return in + "." + enc.EncodeToString(m.Sum(nil))
}

func (e *env) payload() map[string]any {
	now := e.clk.Now()
	return map[string]any{
		"sub":   "user-1",
		"room":  "room-1",
		"role":  "viewer",
		"addrs": []string{"ws://edge-1"},
		"login": now.UnixMilli(),
		"iss":   "danmaku",
		"iat":   now.Unix(),
		"exp":   now.Add(time.Minute).Unix(),
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	e := newEnv(t)
	want := validClaims()
	tok, exp, err := e.ring.Sign(want)
	if err != nil {
		t.Fatal(err)
	}
	if got, wantExp := exp, e.clk.Now().Add(e.ring.TokenTTL()); !got.Equal(wantExp) {
		t.Errorf("expiry = %v, want %v", got, wantExp)
	}
	got, err := e.ring.Verify(tok)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if got.User() != "user-1" || got.Room != want.Room || got.Nick != want.Nick || got.Avatar != want.Avatar ||
		got.Role != want.Role || got.Login != want.Login || !slices.Equal(got.Addrs, want.Addrs) {
		t.Errorf("claims = %+v, want %+v", got, want)
	}
	if got.Issuer != "danmaku" {
		t.Errorf("issuer = %q", got.Issuer)
	}
	if !got.HasAddr("ws://edge-1") || got.HasAddr("ws://edge-2") {
		t.Errorf("HasAddr wrong for %v", got.Addrs)
	}

	// The header names the epoch and the one algorithm.
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, &auth.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Header["alg"] != "EdDSA" {
		t.Errorf("alg = %v", parsed.Header["alg"])
	}
	if parsed.Header["kid"] != strconv.FormatInt(e.epoch(), 10) {
		t.Errorf("kid = %v, want epoch %d", parsed.Header["kid"], e.epoch())
	}
}

func TestSignWithoutSecret(t *testing.T) {
	clk := clock.NewFake(t0)
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: auth.NewMemorySecrets(), Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ring.Sign(validClaims()); !errors.Is(err, auth.ErrNoSecret) {
		t.Fatalf("Sign before Refresh: err = %v, want ErrNoSecret", err)
	}
}

func TestTokenExpiry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
		ok    bool
	}{
		{"fresh", 0, true},
		{"just before expiry", testEpoch - time.Second, true},
		{"within leeway", testEpoch + time.Second, true},
		{"expired", testEpoch + 3*time.Second, false},
		{"long expired", testEpoch + 5*time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tok := e.sign(t, validClaims())
			e.advance(t, tc.after)
			_, err := e.ring.Verify(tok)
			if tc.ok && err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if !tc.ok && !errors.Is(err, auth.ErrBadToken) {
				t.Fatalf("Verify: err = %v, want ErrBadToken", err)
			}
		})
	}
}

func TestEpochGrace(t *testing.T) {
	e := newEnv(t)
	// Signed late in epoch E, so it is still unexpired well into E+1.
	e.advance(t, testEpoch-time.Minute)
	signedIn := e.epoch()
	tok := e.sign(t, validClaims())

	e.advance(t, 2*time.Minute)
	if e.epoch() != signedIn+1 {
		t.Fatalf("epoch = %d, want %d", e.epoch(), signedIn+1)
	}
	if _, err := e.ring.Verify(tok); err != nil {
		t.Fatalf("token of the previous epoch rejected in the grace window: %v", err)
	}

	// Once the keyring rotates past E+1 it no longer holds E: the token's
	// epoch is unknown (whatever its expiry says).
	e.advance(t, testEpoch)
	if e.epoch() != signedIn+2 {
		t.Fatalf("epoch = %d, want %d", e.epoch(), signedIn+2)
	}
	if _, err := e.ring.Verify(tok); !errors.Is(err, auth.ErrUnknownEpoch) {
		t.Fatalf("Verify after rotation: err = %v, want ErrUnknownEpoch", err)
	}
}

// A node whose clock is a little behind the issuer's still verifies a token
// signed in the next epoch: the keyring holds previous, current and next.
func TestEpochNextVerifies(t *testing.T) {
	e := newEnv(t)
	e.advance(t, testEpoch-time.Second) // last second of epoch E
	issuerClk := clock.NewFake(e.clk.Now().Add(2 * time.Second))
	issuer, err := auth.NewKeyring(auth.KeyringConfig{Store: e.store, MasterKey: testMaster, Epoch: testEpoch, Clock: issuerClk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := issuer.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok, _, err := issuer.Sign(validClaims())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ring.Verify(tok); err != nil {
		t.Fatalf("token of the next epoch rejected: %v", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	e := newEnv(t)
	ep := e.epoch()
	kid := strconv.FormatInt(ep, 10)
	secret := auth.DeriveSecret(testMaster, ep) // the HMAC secret of old; now an Ed25519 seed
	key := auth.EpochKey(testMaster, ep)
	pub := []byte(key.Public().(ed25519.PublicKey))
	good := e.sign(t, validClaims())
	parts := strings.Split(good, ".")

	hs := func(m jwt.SigningMethod) string {
		tok := jwt.NewWithClaims(m, jwt.MapClaims(e.payload()))
		tok.Header["kid"] = kid
		s, err := tok.SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	none := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims(e.payload()))
		tok.Header["kid"] = kid
		s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	header := func(kv ...any) map[string]any {
		h := map[string]any{"typ": "JWT"}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i].(string)] = kv[i+1]
		}
		return h
	}
	withPayload := func(change func(map[string]any)) string {
		p := e.payload()
		change(p)
		return rawJWT(t, header("alg", "EdDSA", "kid", kid), p, key)
	}
	claims := func(change func(*auth.Claims)) string {
		c := validClaims()
		change(&c)
		return e.sign(t, c)
	}
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	enc := base64.RawURLEncoding
	tamperedPayload := func() string {
		raw, err := enc.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		p := strings.Replace(string(raw), `"room-1"`, `"room-2"`, 1)
		return parts[0] + "." + enc.EncodeToString([]byte(p)) + "." + parts[2]
	}

	for _, tc := range []struct {
		name    string
		token   string
		wantErr error
	}{
		{"empty", "", auth.ErrNoToken},
		{"garbage", "not-a-token", auth.ErrBadToken},
		{"two segments", parts[0] + "." + parts[1], auth.ErrBadToken},
		{"alg none", none(), auth.ErrBadToken},
		{"alg none hand-made", rawJWT(t, header("alg", "none", "kid", kid), e.payload(), nil), auth.ErrBadToken},
		{"HS256 with the epoch seed", hs(jwt.SigningMethodHS256), auth.ErrBadToken},
		{"HS256 keyed with the public key (algorithm confusion)", rawJWT(t, header("alg", "HS256", "kid", kid), e.payload(), pub), auth.ErrBadToken},
		{"HS512", hs(jwt.SigningMethodHS512), auth.ErrBadToken},
		{"HS384", hs(jwt.SigningMethodHS384), auth.ErrBadToken},
		{"RS256 header, HMAC signature", rawJWT(t, header("alg", "RS256", "kid", kid), e.payload(), secret), auth.ErrBadToken},
		{"lower-case alg", rawJWT(t, header("alg", "hs256", "kid", kid), e.payload(), secret), auth.ErrBadToken},
		{"tampered payload", tamperedPayload(), auth.ErrBadToken},
		{"tampered signature", parts[0] + "." + parts[1] + "." + flip(parts[2], 5), auth.ErrBadToken},
		{"signature removed", parts[0] + "." + parts[1] + ".", auth.ErrBadToken},
		{"tampered header", flip(parts[0], 3) + "." + parts[1] + "." + parts[2], auth.ErrBadToken},
		{"kid missing", rawJWT(t, header("alg", "EdDSA"), e.payload(), key), auth.ErrBadToken},
		{"kid non-numeric", rawJWT(t, header("alg", "EdDSA", "kid", "current"), e.payload(), key), auth.ErrBadToken},
		{"kid a JSON number", rawJWT(t, header("alg", "EdDSA", "kid", ep), e.payload(), key), auth.ErrBadToken},
		{"kid of an unknown epoch", rawJWT(t, header("alg", "EdDSA", "kid", strconv.FormatInt(ep-5, 10)), e.payload(), key), auth.ErrUnknownEpoch},
		{"kid of another held epoch", rawJWT(t, header("alg", "EdDSA", "kid", strconv.FormatInt(ep+1, 10)), e.payload(), key), auth.ErrBadToken},
		{"wrong key", rawJWT(t, header("alg", "EdDSA", "kid", kid), e.payload(), ed25519.NewKeyFromSeed(make([]byte, 32))), auth.ErrBadToken},
		{"wrong issuer", withPayload(func(p map[string]any) { p["iss"] = "someone-else" }), auth.ErrBadToken},
		{"no expiry", withPayload(func(p map[string]any) { delete(p, "exp") }), auth.ErrBadToken},
		{"not yet valid", withPayload(func(p map[string]any) { p["nbf"] = e.clk.Now().Add(time.Minute).Unix() }), auth.ErrBadToken},
		{"claims of the wrong type", withPayload(func(p map[string]any) { p["room"] = 5 }), auth.ErrBadToken},
		{"missing room", claims(func(c *auth.Claims) { c.Room = "" }), auth.ErrBadToken},
		{"missing subject", claims(func(c *auth.Claims) { c.Subject = "" }), auth.ErrBadToken},
		{"missing role", claims(func(c *auth.Claims) { c.Role = "" }), auth.ErrBadToken},
		{"unknown role", claims(func(c *auth.Claims) { c.Role = "root" }), auth.ErrBadToken},
		{"too long", good + strings.Repeat("A", 4097-len(good)), auth.ErrBadToken},
		{"too long, valid prefix", strings.Repeat("A", 5000), auth.ErrBadToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.ring.Verify(tc.token)
			if err == nil {
				t.Fatalf("Verify accepted %q: %+v", tc.token, c)
			}
			if c != nil {
				t.Errorf("claims returned with error %v", err)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}

	// The controls: the hand-made EdDSA token and a valid role all pass.
	for name, tok := range map[string]string{
		"hand-made EdDSA": rawJWT(t, header("alg", "EdDSA", "kid", kid), e.payload(), key),
		"host":            claims(func(c *auth.Claims) { c.Role = auth.RoleHost }),
		"admin":           claims(func(c *auth.Claims) { c.Role = auth.RoleAdmin }),
		"no addrs":        claims(func(c *auth.Claims) { c.Addrs = nil }),
	} {
		if _, err := e.ring.Verify(tok); err != nil {
			t.Errorf("control %s rejected: %v", name, err)
		}
	}
}

func TestVerifyOtherIssuerKeyring(t *testing.T) {
	e := newEnv(t)
	tok := e.sign(t, validClaims())
	other, err := auth.NewKeyring(auth.KeyringConfig{Store: e.store, MasterKey: testMaster, Epoch: testEpoch, Issuer: "other", Clock: e.clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Verify(tok); !errors.Is(err, auth.ErrBadToken) {
		t.Fatalf("keyring with issuer %q accepted a %q token: err = %v", "other", "danmaku", err)
	}
}

// After a store failover the center re-publishes into an empty store; since
// secrets derive from the master key, tokens issued before still verify.
func TestCenterFailoverSameSecrets(t *testing.T) {
	e := newEnv(t)
	tok := e.sign(t, validClaims())

	for _, tc := range []struct {
		name   string
		master []byte
		ok     bool
	}{
		{"same master key", testMaster, true},
		{"other master key", []byte("another-master-key-of-32-bytes-or-more!!"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := auth.NewMemorySecrets()
			center, err := auth.NewCenter(auth.CenterConfig{Store: fresh, MasterKey: tc.master, Epoch: testEpoch, Clock: e.clk, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			if err := center.Publish(context.Background()); err != nil {
				t.Fatal(err)
			}
			ring, err := auth.NewKeyring(auth.KeyringConfig{Store: fresh, MasterKey: testMaster, Epoch: testEpoch, Clock: e.clk, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			if err := ring.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, err = ring.Verify(tok)
			if tc.ok && err != nil {
				t.Fatalf("token rejected after failover: %v", err)
			}
			if !tc.ok && !errors.Is(err, auth.ErrBadToken) {
				t.Fatalf("token accepted by a center with another master key: err = %v", err)
			}
		})
	}
}

func TestDeriveSecret(t *testing.T) {
	a := auth.DeriveSecret(testMaster, 42)
	if !slices.Equal(a, auth.DeriveSecret(testMaster, 42)) {
		t.Error("DeriveSecret is not deterministic")
	}
	if slices.Equal(a, auth.DeriveSecret(testMaster, 43)) {
		t.Error("two epochs share a secret")
	}
	if slices.Equal(a, auth.DeriveSecret([]byte("another-master-key-of-32-bytes-or-more!!"), 42)) {
		t.Error("two master keys share a secret")
	}
	if len(a) != sha256.Size {
		t.Errorf("secret is %d bytes", len(a))
	}
}

func TestCenterPublishesThreeEpochs(t *testing.T) {
	e := newEnv(t)
	cur := e.epoch()
	got, err := e.store.Fetch(context.Background(), cur-2, cur-1, cur, cur+1, cur+2)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []int64{cur - 1, cur, cur + 1} {
		if !slices.Equal(got[ep], []byte(auth.EpochKey(testMaster, ep).Public().(ed25519.PublicKey))) {
			t.Errorf("epoch %d: public key missing or wrong", ep)
		}
	}
	for _, ep := range []int64{cur - 2, cur + 2} {
		if _, ok := got[ep]; ok {
			t.Errorf("epoch %d published early or kept", ep)
		}
	}
}

// failingStore fails Fetch and Publish while broken is set.
type failingStore struct {
	auth.SecretStore
	broken atomic.Bool
}

var errStoreDown = errors.New("store down")

func (s *failingStore) Fetch(ctx context.Context, epochs ...int64) (map[int64][]byte, error) {
	if s.broken.Load() {
		return nil, errStoreDown
	}
	return s.SecretStore.Fetch(ctx, epochs...)
}

func (s *failingStore) Publish(ctx context.Context, epoch int64, secret []byte, ttl time.Duration) error {
	if s.broken.Load() {
		return errStoreDown
	}
	return s.SecretStore.Publish(ctx, epoch, secret, ttl)
}

func TestRefreshFailureKeepsSecrets(t *testing.T) {
	clk := clock.NewFake(t0)
	store := &failingStore{SecretStore: auth.NewMemorySecrets()}
	center, err := auth.NewCenter(auth.CenterConfig{Store: store, MasterKey: testMaster, Epoch: testEpoch, Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: store, MasterKey: testMaster, Epoch: testEpoch, Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := center.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ring.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok, _, err := ring.Sign(validClaims())
	if err != nil {
		t.Fatal(err)
	}
	store.broken.Store(true)
	if err := center.Publish(context.Background()); !errors.Is(err, errStoreDown) {
		t.Errorf("Publish: err = %v, want the store's error", err)
	}
	if err := ring.Refresh(context.Background()); !errors.Is(err, errStoreDown) {
		t.Errorf("Refresh: err = %v, want the store's error", err)
	}
	if _, err := ring.Verify(tok); err != nil {
		t.Fatalf("Verify after a failed refresh: %v", err)
	}
	if _, _, err := ring.Sign(validClaims()); err != nil {
		t.Fatalf("Sign after a failed refresh: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	store := auth.NewMemorySecrets()
	for _, tc := range []struct {
		name string
		cfg  auth.CenterConfig
		ok   bool
	}{
		{"valid", auth.CenterConfig{Store: store, MasterKey: testMaster}, true},
		{"no store", auth.CenterConfig{MasterKey: testMaster}, false},
		{"short master", auth.CenterConfig{Store: store, MasterKey: []byte("short")}, false},
		{"epoch under a second", auth.CenterConfig{Store: store, MasterKey: testMaster, Epoch: time.Millisecond}, false},
	} {
		t.Run("center/"+tc.name, func(t *testing.T) {
			_, err := auth.NewCenter(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewCenter: err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	for _, tc := range []struct {
		name    string
		cfg     auth.KeyringConfig
		ok      bool
		wantTTL time.Duration
	}{
		{"defaults", auth.KeyringConfig{Store: store}, true, 10 * time.Minute},
		{"ttl follows a short epoch", auth.KeyringConfig{Store: store, Epoch: time.Minute}, true, time.Minute},
		{"ttl set", auth.KeyringConfig{Store: store, TokenTTL: 30 * time.Second}, true, 30 * time.Second},
		{"no store", auth.KeyringConfig{}, false, 0},
		{"ttl beyond epoch", auth.KeyringConfig{Store: store, Epoch: time.Minute, TokenTTL: 2 * time.Minute}, false, 0},
	} {
		t.Run("keyring/"+tc.name, func(t *testing.T) {
			k, err := auth.NewKeyring(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("NewKeyring: err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && k.TokenTTL() != tc.wantTTL {
				t.Errorf("TokenTTL = %v, want %v", k.TokenTTL(), tc.wantTTL)
			}
		})
	}
}

// Sign, Verify and Refresh run concurrently on every node; -race checks them.
func TestKeyringConcurrent(t *testing.T) {
	e := newEnv(t)
	tok := e.sign(t, validClaims())
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				switch i % 3 {
				case 0:
					if _, err := e.ring.Verify(tok); err != nil {
						t.Error(err)
						return
					}
				case 1:
					if _, _, err := e.ring.Sign(validClaims()); err != nil {
						t.Error(err)
						return
					}
				case 2:
					if err := e.ring.Refresh(context.Background()); err != nil {
						t.Error(err)
						return
					}
					if err := e.center.Publish(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// FuzzVerifyToken: Verify never panics and accepts nothing but the token the
// keyring signed. Unpadded base64 lets the last character of a signature
// carry unused bits, so a variant differing only there decodes to the same
// signature; it must then carry exactly the signed claims.
func FuzzVerifyToken(f *testing.F) {
	e := newEnv(f)
	good := e.sign(f, validClaims())
	signed := good[:strings.LastIndexByte(good, '.')]
	ep := e.epoch()
	secret := auth.DeriveSecret(testMaster, ep)
	f.Add(good)
	f.Add("")
	f.Add("a.b.c")
	f.Add("..")
	f.Add(signed + ".")
	f.Add(rawJWT(f, map[string]any{"alg": "none", "kid": strconv.FormatInt(ep, 10)}, e.payload(), nil))
	f.Add(rawJWT(f, map[string]any{"alg": "HS256"}, e.payload(), secret))
	f.Add(rawJWT(f, map[string]any{"alg": "HS256", "kid": "99999999999999999999"}, e.payload(), secret))
	f.Add(rawJWT(f, map[string]any{"alg": "HS256", "kid": "-1"}, e.payload(), secret))
	f.Add(rawJWT(f, map[string]any{"alg": "RS256", "kid": strconv.FormatInt(ep, 10)}, e.payload(), secret))
	f.Add(strings.Repeat("eyJ", 2000))
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := e.ring.Verify(tok)
		if err != nil {
			if c != nil {
				t.Fatalf("claims returned with error %v", err)
			}
			return
		}
		i := strings.LastIndexByte(tok, '.')
		if i < 0 || tok[:i] != signed {
			t.Fatalf("Verify accepted a token it did not sign: %q", tok)
		}
		want := validClaims()
		if c.User() != want.Subject || c.Room != want.Room || c.Role != want.Role || !slices.Equal(c.Addrs, want.Addrs) {
			t.Fatalf("accepted token carries other claims: %+v", c)
		}
	})
}

// Ingests travels in the token as "ni" and says which addresses are
// ingests, the user's own first; a token without it (signed before it
// existed) names no split, and IngestAddrs is then every address.
func TestIngestAddrs(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name    string
		addrs   []string
		ingests int
		want    []string
	}{
		{"ingests then edges", []string{"http://i1", "http://i2", "ws://e1"}, 2, []string{"http://i1", "http://i2"}},
		{"all ingests", []string{"http://i1"}, 1, []string{"http://i1"}},
		{"old token", []string{"http://i1", "ws://e1"}, 0, []string{"http://i1", "ws://e1"}},
		{"count beyond the addresses", []string{"http://i1"}, 3, []string{"http://i1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validClaims()
			c.Addrs, c.Ingests = tc.addrs, tc.ingests
			got, err := e.ring.Verify(e.sign(t, c))
			if err != nil {
				t.Fatal(err)
			}
			if got.Ingests != tc.ingests || !slices.Equal(got.IngestAddrs(), tc.want) {
				t.Fatalf("Ingests %d, IngestAddrs %v; want %d, %v", got.Ingests, got.IngestAddrs(), tc.ingests, tc.want)
			}
		})
	}
	// The claim is "ni", absent when zero.
	c := validClaims()
	tok := e.sign(t, c)
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(payload), `"ni"`) {
		t.Errorf("a token without ingests carries ni: %s", payload)
	}
	c.Ingests = 1
	payload, _ = base64.RawURLEncoding.DecodeString(strings.Split(e.sign(t, c), ".")[1])
	if !strings.Contains(string(payload), `"ni":1`) {
		t.Errorf("payload %s lacks ni", payload)
	}
}

// TestSignRefusesTooLargeToken: a token no node would accept is never
// handed out (the client would loop on 401s); the entry answers 400.
func TestSignRefusesTooLargeToken(t *testing.T) {
	e := newEnv(t)
	c := validClaims()
	c.Avatar = "https://h/" + strings.Repeat("a", 3000)
	if _, _, err := e.ring.Sign(c); !errors.Is(err, auth.ErrTokenTooLarge) {
		t.Fatalf("Sign with a 3 KB avatar: err = %v, want ErrTokenTooLarge", err)
	}
	c = validClaims()
	if _, _, err := e.ring.Sign(c); err != nil {
		t.Fatalf("an ordinary token: %v", err)
	}
}

// TestVerifierCannotMint: a keyring without the master key verifies the
// issuers' tokens but cannot sign one; a keyring whose master key is not
// the center's refuses to sign rather than issue tokens no node accepts.
func TestVerifierCannotMint(t *testing.T) {
	e := newEnv(t)
	verifier, err := auth.NewKeyring(auth.KeyringConfig{Store: e.store, Epoch: testEpoch, Clock: e.clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := verifier.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := verifier.Verify(e.sign(t, validClaims())); err != nil {
		t.Fatalf("verifier refused the issuer's token: %v", err)
	}
	if _, _, err := verifier.Sign(validClaims()); !errors.Is(err, auth.ErrNotIssuer) {
		t.Fatalf("verifier Sign: err = %v, want ErrNotIssuer", err)
	}
	stranger, err := auth.NewKeyring(auth.KeyringConfig{Store: e.store, MasterKey: []byte("another-master-key-0123456789-0123456789"), Epoch: testEpoch, Clock: e.clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stranger.Sign(validClaims()); err == nil {
		t.Fatal("a keyring with another master key signed")
	}
	if _, err := auth.NewKeyring(auth.KeyringConfig{Store: e.store, MasterKey: []byte("short")}); err == nil {
		t.Fatal("a 5-byte master key was accepted")
	}
}

// A token's audience is its address partition: the first Ingests addresses
// are ingests', the rest edges'. An address in one part does not admit the
// token at a node of the other kind, and a token without the partition
// (ni 0, signed before it existed) is for no node.
func TestTokenAudience(t *testing.T) {
	for _, tc := range []struct {
		name           string
		addrs          []string
		ingests        int
		ingest, edge   []string // addresses ForIngest / ForEdge admit
		ingestN, edgeN []string // and refuse
	}{
		{"gslb's shape", []string{"http://i1", "http://i2", "ws://e1"}, 2,
			[]string{"http://i1", "http://i2"}, []string{"ws://e1"}, []string{"ws://e1", "http://x"}, []string{"http://i1", "http://i2"}},
		{"one address in both parts", []string{"http://n", "http://n"}, 1,
			[]string{"http://n"}, []string{"http://n"}, nil, nil},
		{"ingest-only token", []string{"http://n", "ws://e1"}, 1,
			[]string{"http://n"}, []string{"ws://e1"}, []string{"ws://e1"}, []string{"http://n"}},
		{"edge-only token", []string{"http://i1", "http://n"}, 1,
			[]string{"http://i1"}, []string{"http://n"}, []string{"http://n"}, []string{"http://i1"}},
		{"no partition (ni 0)", []string{"http://i1", "ws://e1"}, 0,
			nil, nil, []string{"http://i1", "ws://e1"}, []string{"http://i1", "ws://e1"}},
		{"count beyond the addresses", []string{"http://i1"}, 3,
			nil, nil, []string{"http://i1"}, []string{"http://i1"}},
		{"no edges", []string{"http://i1"}, 1,
			[]string{"http://i1"}, nil, nil, []string{"http://i1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &auth.Claims{Addrs: tc.addrs, Ingests: tc.ingests}
			for _, a := range tc.ingest {
				if !c.ForIngest(a) {
					t.Errorf("ForIngest(%s) = false", a)
				}
			}
			for _, a := range tc.edge {
				if !c.ForEdge(a) {
					t.Errorf("ForEdge(%s) = false", a)
				}
			}
			for _, a := range tc.ingestN {
				if c.ForIngest(a) {
					t.Errorf("ForIngest(%s) = true", a)
				}
			}
			for _, a := range tc.edgeN {
				if c.ForEdge(a) {
					t.Errorf("ForEdge(%s) = true", a)
				}
			}
		})
	}
}

// Package auth issues and verifies the dynamic token every node checks
// locally, and verifies the business tickets the entry endpoint accepts.
//
// The auth Center derives one Ed25519 key per epoch from a master key only
// the issuers hold (the seed is HMAC-SHA256(master, epoch)), so
// re-publishing after a store failover yields the same keys, and publishes
// the previous, current and next epoch's public keys. A Keyring on every
// node fetches those three and verifies tokens (ingest, edge) without
// calling anyone; only a keyring given the master key (the gslb) signs.
// Tokens are EdDSA JWTs whose kid is the epoch; no other algorithm is
// accepted. Center and Keyring are safe for concurrent use.
package auth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/internal/clock"
)

// Defaults.
const (
	defaultEpoch    = 10 * time.Minute
	defaultRefresh  = 5 * time.Second
	defaultTokenTTL = 10 * time.Minute
	// maxTokenBytes bounds what Verify parses; a real token is ~500 bytes.
	maxTokenBytes = 4096
	// leeway is the clock skew allowed on exp and nbf.
	leeway = 2 * time.Second
)

// Roles a ticket and token may carry.
const (
	RoleViewer = "viewer"
	RoleHost   = "host"
	RoleAdmin  = "admin"
	// RoleOps marks system messages a business server or operator sent
	// with a service key; no ticket carries it.
	RoleOps = "ops"
)

// ValidRole reports whether r is a known role.
func ValidRole(r string) bool { return r == RoleViewer || r == RoleHost || r == RoleAdmin }

// Errors returned by Verify and VerifyTicket. Each maps to one client code.
var (
	// ErrNoToken is returned for an empty token.
	ErrNoToken = errors.New("auth: no token")
	// ErrBadToken is returned for a token that does not parse, has a bad
	// signature, the wrong algorithm, or is expired.
	ErrBadToken = errors.New("auth: invalid token")
	// ErrUnknownEpoch is returned when the token's epoch secret is not held
	// (too old, or the keyring has not fetched yet).
	ErrUnknownEpoch = errors.New("auth: unknown token epoch")
	// ErrNoSecret is returned by Sign before the current epoch's secret is held.
	ErrNoSecret = errors.New("auth: current epoch secret not available")
)

// Claims are the dynamic token's claims. The token binds the user to the room
// and to the addresses handed out, so a node can refuse a token that was
// issued for another node.
type Claims struct {
	Room   string   `json:"room"`
	Nick   string   `json:"nick,omitempty"`
	Avatar string   `json:"av,omitempty"`
	Role   string   `json:"role"`
	Addrs  []string `json:"addrs"`
	// Ingests is how many of Addrs, from the first, are ingest addresses;
	// the rest are edges'. It is the token's audience: an ingest accepts
	// the token only if its address is among the first Ingests, an edge
	// only if its address is among the rest (ForIngest, ForEdge). Zero in
	// tokens signed before it existed, which no node accepts any more.
	Ingests int   `json:"ni,omitempty"`
	Login   int64 `json:"login"`
	jwt.RegisteredClaims
}

// User returns the token's user id (the JWT subject).
func (c *Claims) User() string { return c.Subject }

// HasAddr reports whether addr is one of the addresses the token was issued for.
func (c *Claims) HasAddr(addr string) bool { return slices.Contains(c.Addrs, addr) }

// ForIngest reports whether the token was issued for the ingest at addr:
// addr is among its first Ingests addresses. A token that names no ingest
// addresses (Ingests 0, signed before the claim existed) is for no ingest.
func (c *Claims) ForIngest(addr string) bool {
	return c.Ingests > 0 && c.Ingests <= len(c.Addrs) && slices.Contains(c.Addrs[:c.Ingests], addr)
}

// ForEdge reports whether the token was issued for the edge at addr: addr
// is among its addresses after the first Ingests. A token that names no
// ingest addresses names no partition, and is for no edge either.
func (c *Claims) ForEdge(addr string) bool {
	return c.Ingests > 0 && c.Ingests <= len(c.Addrs) && slices.Contains(c.Addrs[c.Ingests:], addr)
}

// IngestAddrs returns the token's ingest addresses, best first: the first is
// the user's own node (the allocator's rendezvous choice), the rest its
// fallbacks.
func (c *Claims) IngestAddrs() []string {
	if c.Ingests > 0 && c.Ingests <= len(c.Addrs) {
		return c.Addrs[:c.Ingests]
	}
	return c.Addrs
}

// EpochOf returns the epoch number that contains t.
func EpochOf(t time.Time, epoch time.Duration) int64 { return t.UnixNano() / int64(epoch) }

// DeriveSecret derives an epoch's secret from the master key.
func DeriveSecret(master []byte, epoch int64) []byte {
	h := hmac.New(sha256.New, master)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(epoch))
	h.Write([]byte("danmaku-token-epoch"))
	h.Write(b[:])
	return h.Sum(nil)
}

// EpochKey is an epoch's Ed25519 signing key: its seed is the epoch's
// derived secret, so every process holding the master key derives the same
// key and re-publishing after a store failover yields the same public key.
func EpochKey(master []byte, epoch int64) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(DeriveSecret(master, epoch))
}

// CenterConfig configures the auth center.
type CenterConfig struct {
	// Store receives the secrets. Required.
	Store SecretStore
	// MasterKey derives every epoch's secret. Required, at least 32 bytes.
	MasterKey []byte
	// Epoch is the length of one secret's interval. Zero: 10 minutes.
	Epoch time.Duration
	// Interval is how often the center re-publishes. Zero: Epoch/10.
	Interval time.Duration
	// Clock tells the time. Nil: real clock.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Center publishes epoch secrets ahead of time.
type Center struct {
	cfg CenterConfig
}

// NewCenter checks cfg and returns a Center. It starts nothing.
func NewCenter(cfg CenterConfig) (*Center, error) {
	if cfg.Store == nil {
		return nil, errors.New("auth: center: Store is required")
	}
	if len(cfg.MasterKey) < 32 {
		return nil, errors.New("auth: center: MasterKey must be at least 32 bytes")
	}
	if cfg.Epoch == 0 {
		cfg.Epoch = defaultEpoch
	}
	if cfg.Epoch < time.Second {
		return nil, errors.New("auth: center: Epoch must be at least 1s")
	}
	if cfg.Interval == 0 {
		cfg.Interval = cfg.Epoch / 10
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Center{cfg: cfg}, nil
}

// Publish publishes the previous, current and next epoch's secrets now.
func (c *Center) Publish(ctx context.Context) error {
	cur := EpochOf(c.cfg.Clock.Now(), c.cfg.Epoch)
	for e := cur - 1; e <= cur+1; e++ {
		// Only the public half leaves the issuers: a verifier can check a
		// token but never mint one. Kept for three epochs past its own so
		// late verifiers still find it.
		pub := EpochKey(c.cfg.MasterKey, e).Public().(ed25519.PublicKey)
		if err := c.cfg.Store.Publish(ctx, e, pub, 4*c.cfg.Epoch); err != nil {
			return fmt.Errorf("auth: publish epoch %d: %w", e, err)
		}
	}
	return nil
}

// Run publishes at once and then every Interval until ctx is done.
func (c *Center) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if err := c.Publish(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("auth center publish failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// KeyringConfig configures a Keyring.
type KeyringConfig struct {
	// Store is where secrets are fetched from. Required.
	Store SecretStore
	// Epoch must equal the center's. Zero: 10 minutes.
	Epoch time.Duration
	// Refresh is how often the keyring re-fetches. Zero: 5 s.
	Refresh time.Duration
	// TokenTTL is the lifetime of tokens Sign issues. Zero: 10 minutes. At
	// most Epoch, so that a token never outlives its secret's grace window.
	TokenTTL time.Duration
	// Issuer is written to and required in the iss claim. Zero: "danmaku".
	Issuer string
	// MasterKey, set on issuers only (the gslb processes), derives each
	// epoch's private signing key; without it the keyring verifies but
	// Sign answers ErrNotIssuer. At least 32 bytes when set.
	MasterKey []byte
	// Clock tells the time. Nil: real clock.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Keyring holds the previous, current and next epoch's secrets.
type Keyring struct {
	cfg    KeyringConfig
	parser *jwt.Parser

	mu      sync.RWMutex
	secrets map[int64][]byte // epoch → public key, as published
	signers map[int64]*epochSigner
}

// NewKeyring checks cfg and returns a Keyring. Call Refresh (or Run) before use.
func NewKeyring(cfg KeyringConfig) (*Keyring, error) {
	if cfg.Store == nil {
		return nil, errors.New("auth: keyring: Store is required")
	}
	if cfg.Epoch == 0 {
		cfg.Epoch = defaultEpoch
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = defaultRefresh
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = min(defaultTokenTTL, cfg.Epoch)
	}
	if cfg.TokenTTL > cfg.Epoch {
		return nil, fmt.Errorf("auth: keyring: TokenTTL %v exceeds Epoch %v", cfg.TokenTTL, cfg.Epoch)
	}
	if cfg.Issuer == "" {
		cfg.Issuer = "danmaku"
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.MasterKey) > 0 && len(cfg.MasterKey) < 32 {
		return nil, errors.New("auth: keyring: MasterKey must be at least 32 bytes")
	}
	k := &Keyring{cfg: cfg, secrets: map[int64][]byte{}, signers: map[int64]*epochSigner{}}
	k.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return k.cfg.Clock.Now() }),
		jwt.WithLeeway(leeway),
	)
	return k, nil
}

// TokenTTL returns the lifetime of issued tokens.
func (k *Keyring) TokenTTL() time.Duration { return k.cfg.TokenTTL }

// Refresh fetches the previous, current and next epoch's secrets. On failure
// the secrets already held stay in use.
func (k *Keyring) Refresh(ctx context.Context) error {
	cur := EpochOf(k.cfg.Clock.Now(), k.cfg.Epoch)
	got, err := k.cfg.Store.Fetch(ctx, cur-1, cur, cur+1)
	if err != nil {
		return fmt.Errorf("auth: refresh: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for e := range k.secrets {
		if e < cur-1 {
			delete(k.secrets, e)
		}
	}
	for e := range k.signers {
		if e < cur-1 {
			delete(k.signers, e)
		}
	}
	for e, s := range got {
		k.secrets[e] = s
	}
	return nil
}

// Run refreshes every Refresh interval until ctx is done.
func (k *Keyring) Run(ctx context.Context) error {
	t := time.NewTicker(k.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := k.Refresh(ctx); err != nil && ctx.Err() == nil {
				k.cfg.Logger.Warn("keyring refresh failed", "err", err)
			}
		}
	}
}

// signer returns epoch's private key and token header: derived from the
// master key once per epoch, and only while the store holds the matching
// public key (a keyring whose master key is not the center's would issue
// tokens no node accepts; it refuses instead).
func (k *Keyring) signer(epoch int64) (*epochSigner, error) {
	pub := k.secret(epoch)
	if pub == nil {
		return nil, ErrNoSecret
	}
	if len(k.cfg.MasterKey) == 0 {
		return nil, ErrNotIssuer
	}
	k.mu.RLock()
	s, ok := k.signers[epoch]
	k.mu.RUnlock()
	if ok {
		return s, nil
	}
	priv := EpochKey(k.cfg.MasterKey, epoch)
	if !bytes.Equal(priv.Public().(ed25519.PublicKey), pub) {
		return nil, fmt.Errorf("auth: epoch %d: the published public key is not this master key's", epoch)
	}
	s = newEpochSigner(priv, epoch)
	k.mu.Lock()
	k.signers[epoch] = s
	k.mu.Unlock()
	return s, nil
}

// Ready reports whether the keyring holds the current epoch's secret, so
// that it can verify (and sign) a token issued now. A node reports itself
// to the gslb and healthy only once it is: a freshly started node must not
// refuse valid tokens while its first refresh is under way.
func (k *Keyring) Ready() bool {
	return k.secret(EpochOf(k.cfg.Clock.Now(), k.cfg.Epoch)) != nil
}

// ErrNotIssuer is returned by Sign on a keyring without the master key: a
// verifier cannot mint tokens.
var ErrNotIssuer = errors.New("auth: this keyring verifies only (no master key)")

// ErrTokenTooLarge is returned by Sign for claims that make a token longer
// than any node accepts (too many addresses, or an identity the ticket
// checks should have refused).
var ErrTokenTooLarge = errors.New("auth: token too large")

// ErrNotReady is what a health check says before Ready.
var ErrNotReady = errors.New("auth: token secrets not loaded yet")

func (k *Keyring) secret(epoch int64) []byte {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.secrets[epoch]
}

// Sign issues a token for c with the current epoch's secret, filling in the
// registered claims (issuer, issued-at, expiry).
//
// It is on the entry endpoint's path, once per viewer joining, and a show's
// start brings hundreds of thousands of joins a second: the token is built
// by hand (signToken) rather than by the jwt library, byte for byte what
// the library wrote, for a fraction of the CPU beside Ed25519 itself.
func (k *Keyring) Sign(c Claims) (string, time.Time, error) {
	now := k.cfg.Clock.Now()
	epoch := EpochOf(now, k.cfg.Epoch)
	s, err := k.signer(epoch)
	if err != nil {
		return "", time.Time{}, err
	}
	exp := now.Add(k.cfg.TokenTTL)
	// jwt.NewNumericDate's values, kept on the stack.
	iat, expires := jwt.NumericDate{Time: now.Truncate(jwt.TimePrecision)}, jwt.NumericDate{Time: exp.Truncate(jwt.TimePrecision)}
	c.Issuer = k.cfg.Issuer
	c.IssuedAt = &iat
	c.ExpiresAt = &expires
	tok, n := s.signToken(&c)
	if n > maxTokenBytes {
		// Every verifier would refuse it, and a client would loop on it.
		return "", time.Time{}, fmt.Errorf("%w: %d bytes, nodes accept %d", ErrTokenTooLarge, n, maxTokenBytes)
	}
	return tok, exp, nil
}

// Verify checks a token locally and returns its claims.
func (k *Keyring) Verify(token string) (*Claims, error) {
	c, _, err := k.verify(token)
	return c, err
}

// verify is Verify, also returning the epoch and the secret that verified
// the token, so that a TokenCache can tell later whether it still would.
func (k *Keyring) verify(token string) (*Claims, signedBy, error) {
	var by signedBy
	if token == "" {
		return nil, by, ErrNoToken
	}
	if len(token) > maxTokenBytes {
		return nil, by, fmt.Errorf("%w: too long", ErrBadToken)
	}
	if !compactJWT(token) {
		return nil, by, errNotCompact
	}
	var c Claims
	_, err := k.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		epoch, err := strconv.ParseInt(kid, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: kid", ErrBadToken)
		}
		sec := k.secret(epoch)
		if sec == nil {
			return nil, ErrUnknownEpoch
		}
		if len(sec) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: epoch %d's published key is not an Ed25519 public key", ErrBadToken, epoch)
		}
		by = signedBy{epoch, sec}
		return ed25519.PublicKey(sec), nil
	})
	if err != nil {
		if errors.Is(err, ErrUnknownEpoch) {
			return nil, signedBy{}, ErrUnknownEpoch
		}
		return nil, signedBy{}, fmt.Errorf("%w: %v", ErrBadToken, err)
	}
	if c.Subject == "" || c.Room == "" || !ValidRole(c.Role) {
		return nil, signedBy{}, fmt.Errorf("%w: missing claims", ErrBadToken)
	}
	// Only a holder of the epoch's key signs, but a token is read as
	// strictly as a ticket: a claim of ours in another case ("Role", which
	// encoding/json took for role) or twice is refused. Open: a newer
	// signer may add claims during a rolling upgrade. About 2 µs beside
	// the verification's 70 (BenchmarkTokenStrictPayload, docs/benchmarks.md),
	// and a TokenCache hit skips both.
	if err := strictPayload(token, (*Claims)(nil)); err != nil {
		return nil, signedBy{}, fmt.Errorf("%w: claims: %v", ErrBadToken, err)
	}
	return &c, by, nil
}

// errNotCompact refuses a token outside compactJWT's shape.
var errNotCompact = fmt.Errorf("%w: not three canonical base64url segments", ErrBadToken)

// b64url holds each unpadded base64url character's 6-bit value, and
// notB64url is 1 for every other byte.
var b64url, notB64url = func() (val, not [256]uint8) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range not {
		not[i] = 1
	}
	for i := range len(alphabet) {
		val[alphabet[i]], not[alphabet[i]] = uint8(i), 0
	}
	return
}()

// compactJWT reports whether s is three non-empty segments of unpadded
// base64url joined by dots, each spelt the one way an encoder spells its
// bytes: no length a decoder would have to reject, and no bit set in the
// last character beyond the bytes it carries. The library's decoder
// ignores those bits and skips CR and LF, so without this one token had
// thousands of spellings, each accepted, each a new token-cache entry.
// It reads s once, without a branch per byte, and allocates nothing.
func compactJWT(s string) bool {
	h, rest, ok := strings.Cut(s, ".")
	if !ok {
		return false
	}
	p, sig, ok := strings.Cut(rest, ".")
	return ok && canonicalSegment(h) && canonicalSegment(p) && canonicalSegment(sig)
}

// canonicalSegment reports whether seg is an encoder's spelling of some
// bytes in unpadded base64url: not empty, only base64url characters (a dot
// is none), not one character over a whole group, and its last
// character's unused low bits zero.
func canonicalSegment(seg string) bool {
	if len(seg) == 0 {
		return false
	}
	last := b64url[seg[len(seg)-1]]
	n := len(seg)
	var bad uint8
	for ; len(seg) >= 8; seg = seg[8:] { // eight loads a round, no branch
		bad |= notB64url[seg[0]] | notB64url[seg[1]] | notB64url[seg[2]] | notB64url[seg[3]] |
			notB64url[seg[4]] | notB64url[seg[5]] | notB64url[seg[6]] | notB64url[seg[7]]
	}
	for i := 0; i < len(seg); i++ {
		bad |= notB64url[seg[i]]
	}
	if bad != 0 {
		return false
	}
	switch n % 4 {
	case 1:
		return false
	case 2: // one byte: 4 unused bits
		return last&0x0f == 0
	case 3: // two bytes: 2 unused bits
		return last&0x03 == 0
	}
	return true
}

package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/internal/ident"
	"danmaku/sdk/jsonx"
	"danmaku/sdk/wire"
)

// ErrBadTicket is returned for a business ticket that does not verify.
var ErrBadTicket = errors.New("auth: invalid ticket")

// Ticket is what the business's login service vouches for: an HS256 JWT
// signed with a key shared with the gslb, so the entry endpoint verifies it
// locally without calling the user service.
type Ticket struct {
	Nick   string `json:"nick,omitempty"`
	Avatar string `json:"av,omitempty"`
	// Role is "viewer" (default), "host" or "admin". A host or admin role
	// holds only in the rooms the ticket's scope names (Scoped): an
	// unscoped ticket is a viewer's everywhere (RoleIn).
	Role string `json:"role,omitempty"`
	// Rooms, when set, are the only rooms the ticket admits (at most
	// MaxTicketRooms room names).
	Rooms []string `json:"rooms,omitempty"`
	// Event, when set, is the only event whose rooms the ticket admits.
	// With Rooms too, a room must be in both.
	Event string `json:"event,omitempty"`
	jwt.RegisteredClaims
}

// DevTicketKey is the ticket key of embedded mode. It is public on purpose:
// `danmaku ticket` and the dev clients mint tickets with it. Never use it in a
// deployment.
var DevTicketKey = []byte("danmaku-dev-ticket-key-not-secret-0123456789")

// MintTicket signs a ticket for user valid for ttl.
func MintTicket(key []byte, user string, t Ticket, ttl time.Duration) (string, error) {
	now := time.Now()
	t.Subject = user
	t.IssuedAt = jwt.NewNumericDate(now)
	t.ExpiresAt = jwt.NewNumericDate(now.Add(ttl))
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, &t).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("auth: mint ticket: %w", err)
	}
	return s, nil
}

// MaxTicketRooms bounds a ticket's rooms claim.
const MaxTicketRooms = 100

// Scoped reports whether the ticket names the rooms or the event it admits.
func (t *Ticket) Scoped() bool { return len(t.Rooms) > 0 || t.Event != "" }

// Admits reports whether the ticket admits room, a room of event ("": the
// room belongs to no known event). An unscoped ticket admits every room.
func (t *Ticket) Admits(room, event string) bool {
	if len(t.Rooms) > 0 && !slices.Contains(t.Rooms, room) {
		return false
	}
	return t.Event == "" || t.Event == event
}

// RoleIn is the ticket's role in room of event: its own in a room its
// scope admits, a viewer's where it is unscoped. A host or admin ticket
// that names no room or event is no host anywhere: otherwise a host of one
// room would be a host of every room.
func (t *Ticket) RoleIn(room, event string) string {
	if !t.Scoped() || !t.Admits(room, event) {
		return RoleViewer
	}
	return t.Role
}

// TicketConfig configures a TicketVerifier.
type TicketConfig struct {
	// Keys verify tickets: a ticket signed with any of them is accepted,
	// so that a login service's key rotates without a gap (the new key
	// beside the old one until every ticket signed with the old has
	// expired). At least one; each at least MinTicketKeyBytes.
	Keys [][]byte
	// MaxLifetime refuses a ticket whose exp is more than this after its
	// iat, or after now (ErrTicketLifetime): a ticket lost in a log must
	// not open rooms for years. Zero: DefaultMaxTicketLifetime; negative:
	// refused.
	MaxLifetime time.Duration
	// Audience, when set, must be one of the ticket's aud. Empty: aud is
	// not checked.
	Audience string
	// Issuer, when set, must be the ticket's iss. Empty: iss is not
	// checked.
	Issuer string
	// Now tells the time. Nil: time.Now.
	Now func() time.Time
}

// MinTicketKeyBytes is the shortest ticket key accepted: RFC 7518 asks for
// a key of at least the hash's size (256 bits) for HS256.
const MinTicketKeyBytes = 32

// DefaultMaxTicketLifetime: see TicketConfig.MaxLifetime.
const DefaultMaxTicketLifetime = 24 * time.Hour

// ErrTicketLifetime is returned for a ticket that verifies but lives longer
// than the verifier's MaxLifetime. It wraps ErrBadTicket.
var ErrTicketLifetime = fmt.Errorf("%w: lifetime over the maximum", ErrBadTicket)

// TicketVerifier verifies business tickets. Safe for concurrent use.
type TicketVerifier struct {
	keys        [][]byte
	maxLifetime time.Duration
	audience    string
	issuer      string
	now         func() time.Time
	// header is the last header segment seen to name HS256 (see
	// checkHeader); nil before the first.
	header atomic.Pointer[string]
	// scratch holds *ticketScratch: an HMAC keyed with each key and buffers, so that a
	// verification allocates only what it returns.
	scratch sync.Pool
}

// NewTicketVerifier returns a verifier for tickets signed with key, with
// TicketConfig's defaults; now tells the time (nil: time.Now).
func NewTicketVerifier(key []byte, now func() time.Time) (*TicketVerifier, error) {
	return NewTicketVerifierFrom(TicketConfig{Keys: [][]byte{key}, Now: now})
}

// NewTicketVerifierFrom checks cfg and returns a verifier.
func NewTicketVerifierFrom(cfg TicketConfig) (*TicketVerifier, error) {
	if len(cfg.Keys) == 0 {
		return nil, errors.New("auth: a ticket key is required")
	}
	for i, k := range cfg.Keys {
		if len(k) < MinTicketKeyBytes {
			return nil, fmt.Errorf("auth: ticket key %d of %d is %d bytes: at least %d are required (HS256 keys of 256 bits, RFC 7518)", i+1, len(cfg.Keys), len(k), MinTicketKeyBytes)
		}
	}
	switch {
	case cfg.MaxLifetime == 0:
		cfg.MaxLifetime = DefaultMaxTicketLifetime
	case cfg.MaxLifetime < 0:
		return nil, fmt.Errorf("auth: ticket MaxLifetime must be positive (got %v)", cfg.MaxLifetime)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &TicketVerifier{keys: cfg.Keys, maxLifetime: cfg.MaxLifetime, audience: cfg.Audience, issuer: cfg.Issuer, now: cfg.Now}
	v.scratch.New = func() any {
		st := &ticketScratch{}
		for _, k := range v.keys {
			st.macs = append(st.macs, hmac.New(sha256.New, k))
		}
		return st
	}
	return v, nil
}

// maxIdentityTokenBytes bounds what a ticket's identity claims (sub, nick,
// av) take in a dynamic token once JSON-encoded (encoding/json writes & < >
// as six bytes each). The token is refused by every node beyond
// maxTokenBytes (4096): base64 leaves ~2,980 bytes of payload, and the rest
// of the claims — room (64), role, login and times (~150), and the node
// addresses (a dozen of 40 bytes, ~500) — need well under 1,500 of them.
// Refusing the ticket at entry is better than handing out a token that
// every node then refuses. Ordinary identities take well under 200 bytes.
const maxIdentityTokenBytes = 1200

// ClaimError is returned by Verify for a ticket that verifies but whose
// identity claim breaks the identity rules (package internal/ident): the
// business's login service must fix its ticket, so the caller may say
// which claim and why. It wraps ErrBadTicket.
type ClaimError struct {
	// Claim is the ticket's claim name: "sub", "nick" or "av"; a claim's
	// name as the ticket spells it when it is one of ours in another case
	// ("Role") or repeated; "payload" for a payload that is not UTF-8 or
	// holds half a surrogate pair.
	Claim  string
	Reason string
}

func (e *ClaimError) Error() string {
	return fmt.Sprintf("%v: claim %q: %s", ErrBadTicket, e.Claim, e.Reason)
}

func (e *ClaimError) Unwrap() error { return ErrBadTicket }

// claimError renames an ident error's field to the ticket's claim name.
func claimError(claim string, err error) *ClaimError {
	var ie *ident.Error
	if errors.As(err, &ie) {
		return &ClaimError{Claim: claim, Reason: ie.Reason}
	}
	return &ClaimError{Claim: claim, Reason: err.Error()}
}

// Verify checks a ticket and returns its claims with Role defaulted, the
// nickname cleaned and cut to what the wire carries (ident.CleanNick), the
// subject and avatar checked (ident.CheckUser, ident.CheckAvatar). A ticket
// that does not verify wraps ErrBadTicket; one that verifies but breaks an
// identity rule is a *ClaimError.
func (v *TicketVerifier) Verify(ticket string) (*Ticket, error) {
	if ticket == "" || len(ticket) > maxTokenBytes {
		return nil, fmt.Errorf("%w: empty or too long", ErrBadTicket)
	}
	if !compactJWT(ticket) { // one ticket, one spelling, as for tokens
		return nil, fmt.Errorf("%w: not three canonical base64url segments", ErrBadTicket)
	}
	t, bad, err := v.parse(ticket)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTicket, err)
	}
	if t.Role == "" {
		t.Role = RoleViewer
	}
	if bad != nil {
		// Not UTF-8 (encoding/json would have turned the bad bytes into
		// U+FFFD, which a nickname would then show), or a claim in another
		// case or repeated (encoding/json would have taken "Role" for
		// role, and the last of two).
		return nil, bad
	}
	// A missing subject or an unknown role is no ticket of ours at all, as
	// before the identity rules: 401 at entry, not a claim to fix.
	if t.Subject == "" || !ValidRole(t.Role) {
		return nil, fmt.Errorf("%w: no subject or unknown role", ErrBadTicket)
	}
	if err := ident.CheckUser(t.Subject); err != nil {
		return nil, claimError("sub", err)
	}
	nick, err := ident.CleanNick(t.Nick)
	if err != nil {
		return nil, claimError("nick", err)
	}
	t.Nick = nick
	if err := ident.CheckAvatar(t.Avatar); err != nil {
		return nil, claimError("av", err)
	}
	if n := jsonLen(t.Subject) + jsonLen(t.Nick) + jsonLen(t.Avatar); n > maxIdentityTokenBytes {
		return nil, &ClaimError{Claim: "av", Reason: fmt.Sprintf("sub, nick and av would take %d bytes of the token, more than %d", n, maxIdentityTokenBytes)}
	}
	if err := v.checkPolicy(t); err != nil {
		return nil, err
	}
	return t, nil
}

// checkPolicy checks what the deployment asks of a ticket beyond its
// signature and identity: its scope claims well formed, its lifetime, its
// audience and issuer. The same checks whichever parser filled t.
func (v *TicketVerifier) checkPolicy(t *Ticket) error {
	if len(t.Rooms) > MaxTicketRooms {
		return &ClaimError{Claim: "rooms", Reason: fmt.Sprintf("at most %d rooms (got %d)", MaxTicketRooms, len(t.Rooms))}
	}
	for _, r := range t.Rooms {
		if !wire.ValidRoom(r) {
			return &ClaimError{Claim: "rooms", Reason: fmt.Sprintf("%q is no room name: 1-64 of A-Z a-z 0-9 _ -", r)}
		}
	}
	if t.Event != "" && !wire.ValidRoom(t.Event) { // event ids follow the room rules
		return &ClaimError{Claim: "event", Reason: "not an event id: 1-64 of A-Z a-z 0-9 _ -"}
	}
	exp := t.ExpiresAt.Time // exp is required: parse refused a ticket without
	if exp.Sub(v.now()) > v.maxLifetime+ticketLeeway ||
		(t.IssuedAt != nil && exp.Sub(t.IssuedAt.Time) > v.maxLifetime) {
		return fmt.Errorf("%w (%v)", ErrTicketLifetime, v.maxLifetime)
	}
	if v.audience != "" && !slices.Contains(t.Audience, v.audience) {
		return fmt.Errorf("%w: aud does not name %q", ErrBadTicket, v.audience)
	}
	if v.issuer != "" && t.Issuer != v.issuer {
		return fmt.Errorf("%w: iss is not %q", ErrBadTicket, v.issuer)
	}
	return nil
}

// jsonLen is the length of s as a JSON string in a token.
func jsonLen(s string) int {
	if jsonx.Verbatim(s) {
		return len(s) + 2 // without json.Marshal's allocations, on every entry
	}
	b, _ := json.Marshal(s) // a string always marshals
	return len(b)
}

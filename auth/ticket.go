package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/internal/ident"
	"danmaku/internal/jsonx"
)

// ErrBadTicket is returned for a business ticket that does not verify.
var ErrBadTicket = errors.New("auth: invalid ticket")

// Ticket is what the business's login service vouches for: an HS256 JWT
// signed with a key shared with the gslb, so the entry endpoint verifies it
// locally without calling the user service.
type Ticket struct {
	Nick   string `json:"nick,omitempty"`
	Avatar string `json:"av,omitempty"`
	// Role is "viewer" (default), "host" or "admin".
	Role string `json:"role,omitempty"`
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

// TicketVerifier verifies business tickets. Safe for concurrent use.
type TicketVerifier struct {
	key []byte
	now func() time.Time
	// header is the last header segment seen to name HS256 (see
	// checkHeader); nil before the first.
	header atomic.Pointer[string]
	// scratch holds *ticketScratch: a keyed HMAC and buffers, so that a
	// verification allocates only what it returns.
	scratch sync.Pool
}

// NewTicketVerifier returns a verifier for tickets signed with key; now tells
// the time (nil: time.Now).
func NewTicketVerifier(key []byte, now func() time.Time) (*TicketVerifier, error) {
	if len(key) < 16 {
		return nil, errors.New("auth: ticket key must be at least 16 bytes")
	}
	if now == nil {
		now = time.Now
	}
	v := &TicketVerifier{key: key, now: now}
	v.scratch.New = func() any { return &ticketScratch{mac: hmac.New(sha256.New, v.key)} }
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
	return t, nil
}

// jsonLen is the length of s as a JSON string in a token.
func jsonLen(s string) int {
	if jsonx.Verbatim(s) {
		return len(s) + 2 // without json.Marshal's allocations, on every entry
	}
	b, _ := json.Marshal(s) // a string always marshals
	return len(b)
}

package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
	key    []byte
	parser *jwt.Parser
}

// NewTicketVerifier returns a verifier for tickets signed with key; now tells
// the time (nil: time.Now).
func NewTicketVerifier(key []byte, now func() time.Time) (*TicketVerifier, error) {
	if len(key) < 16 {
		return nil, errors.New("auth: ticket key must be at least 16 bytes")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(5 * time.Second),
	}
	if now != nil {
		opts = append(opts, jwt.WithTimeFunc(now))
	}
	return &TicketVerifier{key: key, parser: jwt.NewParser(opts...)}, nil
}

// Verify checks a ticket and returns its claims with Role defaulted.
func (v *TicketVerifier) Verify(ticket string) (*Ticket, error) {
	if ticket == "" || len(ticket) > maxTokenBytes {
		return nil, fmt.Errorf("%w: empty or too long", ErrBadTicket)
	}
	var t Ticket
	if _, err := v.parser.ParseWithClaims(ticket, &t, func(*jwt.Token) (any, error) { return v.key, nil }); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTicket, err)
	}
	if t.Role == "" {
		t.Role = RoleViewer
	}
	if t.Subject == "" || len(t.Subject) > 64 || !ValidRole(t.Role) {
		return nil, fmt.Errorf("%w: bad subject or role", ErrBadTicket)
	}
	return &t, nil
}

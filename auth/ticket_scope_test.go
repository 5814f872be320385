package auth_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/auth"
)

// Scope claims: rooms and event are read, checked, and decide the role a
// ticket holds in a room.
func TestTicketScope(t *testing.T) {
	v, _ := newTicketVerifier(t, ticketKey)
	host := mint(t, ticketKey, "alice", auth.Ticket{Role: auth.RoleHost, Rooms: []string{"room-a"}, Event: "show"}, time.Hour)
	tk, err := v.Verify(host)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tk.Rooms, []string{"room-a"}) || tk.Event != "show" || !tk.Scoped() {
		t.Fatalf("scope = %q %q", tk.Rooms, tk.Event)
	}
	for _, c := range []struct {
		room, event string
		admits      bool
		role        string
	}{
		{"room-a", "show", true, auth.RoleHost},
		{"room-b", "show", false, auth.RoleViewer}, // a host of room A is no host of room B
		{"room-a", "other", false, auth.RoleViewer},
		{"room-a", "", false, auth.RoleViewer},
	} {
		if got := tk.Admits(c.room, c.event); got != c.admits {
			t.Errorf("Admits(%s, %s) = %v", c.room, c.event, got)
		}
		if got := tk.RoleIn(c.room, c.event); got != c.role {
			t.Errorf("RoleIn(%s, %s) = %s, want %s", c.room, c.event, got, c.role)
		}
	}
	// An unscoped host ticket admits every room and is a host of none.
	un, err := v.Verify(mint(t, ticketKey, "bob", auth.Ticket{Role: auth.RoleHost}, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if un.Scoped() || !un.Admits("room-b", "show") || un.RoleIn("room-b", "show") != auth.RoleViewer {
		t.Errorf("unscoped host: scoped %v, role %s", un.Scoped(), un.RoleIn("room-b", "show"))
	}
	// An event-scoped admin holds its role in every room of the event.
	ev, err := v.Verify(mint(t, ticketKey, "carol", auth.Ticket{Role: auth.RoleAdmin, Event: "show"}, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if ev.RoleIn("room-z", "show") != auth.RoleAdmin || ev.RoleIn("room-z", "other") != auth.RoleViewer {
		t.Error("event scope")
	}

	many := make([]string, auth.MaxTicketRooms+1)
	for i := range many {
		many[i] = "r"
	}
	for name, c := range map[string]struct {
		tk    auth.Ticket
		claim string
	}{
		"room not a name": {auth.Ticket{Rooms: []string{"a b"}}, "rooms"},
		"empty room":      {auth.Ticket{Rooms: []string{""}}, "rooms"},
		"too many rooms":  {auth.Ticket{Rooms: many}, "rooms"},
		"event not an id": {auth.Ticket{Event: "e/1"}, "event"},
		"event too long":  {auth.Ticket{Event: strings.Repeat("e", 65)}, "event"},
	} {
		_, err := v.Verify(mint(t, ticketKey, "u1", c.tk, time.Hour))
		var ce *auth.ClaimError
		if !errors.As(err, &ce) || ce.Claim != c.claim {
			t.Errorf("%s: %v, want a ClaimError on %s", name, err, c.claim)
		}
	}
}

// A ticket living longer than the maximum is refused, whether its iat
// says so or its exp alone: a 60-day ticket is no ticket.
func TestTicketMaxLifetime(t *testing.T) {
	v, _ := newTicketVerifier(t, ticketKey)
	now := time.Now()
	sign := func(iat *jwt.NumericDate, exp time.Time) string {
		tk := auth.Ticket{RegisteredClaims: jwt.RegisteredClaims{Subject: "u1", IssuedAt: iat, ExpiresAt: jwt.NewNumericDate(exp)}}
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, &tk).SignedString(ticketKey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		name string
		tk   string
		ok   bool
	}{
		{"24 h", mint(t, ticketKey, "u1", auth.Ticket{}, 24*time.Hour), true},
		{"60 days", mint(t, ticketKey, "u1", auth.Ticket{}, 60*24*time.Hour), false},
		{"60 days, no iat", sign(nil, now.Add(60*24*time.Hour)), false},
		{"25 h from an iat an hour ago", sign(jwt.NewNumericDate(now.Add(-time.Hour)), now.Add(24*time.Hour)), false},
		{"an hour, no iat", sign(nil, now.Add(time.Hour)), true},
	} {
		_, err := v.Verify(c.tk)
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, auth.ErrTicketLifetime)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	long, err := auth.NewTicketVerifierFrom(auth.TicketConfig{Keys: [][]byte{ticketKey}, MaxLifetime: 90 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Verify(mint(t, ticketKey, "u1", auth.Ticket{}, 60*24*time.Hour)); err != nil {
		t.Errorf("90-day maximum: %v", err)
	}
}

// During a rotation both keys verify; a key of neither does not; keys
// shorter than 32 bytes are refused when the verifier is made.
func TestTicketKeyRotation(t *testing.T) {
	oldKey, newKey := ticketKey, []byte("the-new-ticket-key-0123456789abcdef")
	v, err := auth.NewTicketVerifierFrom(auth.TicketConfig{Keys: [][]byte{newKey, oldKey}})
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string][]byte{"old": oldKey, "new": newKey} {
		if _, err := v.Verify(mint(t, key, "u1", auth.Ticket{}, time.Hour)); err != nil {
			t.Errorf("%s key: %v", name, err)
		}
	}
	if _, err := v.Verify(mint(t, []byte("neither-key-0123456789abcdefghijk"), "u1", auth.Ticket{}, time.Hour)); !errors.Is(err, auth.ErrBadTicket) {
		t.Errorf("other key: %v", err)
	}
	for _, keys := range [][][]byte{nil, {[]byte("sixteen-byte-key")}, {newKey, []byte("0123456789abcdef0123456789abcde")}} {
		if _, err := auth.NewTicketVerifierFrom(auth.TicketConfig{Keys: keys}); err == nil {
			t.Errorf("keys %q accepted", keys)
		}
	}
	if len(auth.DevTicketKey) < auth.MinTicketKeyBytes {
		t.Error("the dev ticket key is too short")
	}
}

// aud and iss are checked when the verifier names them.
func TestTicketAudienceIssuer(t *testing.T) {
	v, err := auth.NewTicketVerifierFrom(auth.TicketConfig{Keys: [][]byte{ticketKey}, Audience: "danmaku", Issuer: "login.example"})
	if err != nil {
		t.Fatal(err)
	}
	good := auth.Ticket{RegisteredClaims: jwt.RegisteredClaims{Issuer: "login.example", Audience: jwt.ClaimStrings{"shop", "danmaku"}}}
	if _, err := v.Verify(mint(t, ticketKey, "u1", good, time.Hour)); err != nil {
		t.Errorf("good: %v", err)
	}
	for name, tk := range map[string]auth.Ticket{
		"no aud":    {RegisteredClaims: jwt.RegisteredClaims{Issuer: "login.example"}},
		"other aud": {RegisteredClaims: jwt.RegisteredClaims{Issuer: "login.example", Audience: jwt.ClaimStrings{"shop"}}},
		"no iss":    {RegisteredClaims: jwt.RegisteredClaims{Audience: jwt.ClaimStrings{"danmaku"}}},
		"other iss": {RegisteredClaims: jwt.RegisteredClaims{Issuer: "evil.example", Audience: jwt.ClaimStrings{"danmaku"}}},
	} {
		if _, err := v.Verify(mint(t, ticketKey, "u1", tk, time.Hour)); !errors.Is(err, auth.ErrBadTicket) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A ticket has one spelling: its signature with unused bits set, or a
// line break inserted, is refused before it is parsed.
func TestTicketOneSpelling(t *testing.T) {
	v, _ := newTicketVerifier(t, ticketKey)
	tk := mint(t, ticketKey, "u1", auth.Ticket{}, time.Hour)
	if _, err := v.Verify(tk); err != nil {
		t.Fatal(err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tk[len(tk)-1]) // 43 characters: 2 unused bits
	for _, s := range []string{
		tk[:len(tk)-1] + string(alphabet[last|1]),
		tk[:len(tk)-1] + string(alphabet[last|2]),
		tk[:10] + "\r\n" + tk[10:],
		tk[:len(tk)-5] + "\n" + tk[len(tk)-5:],
		tk + "=",
		" " + tk,
	} {
		if _, err := v.Verify(s); !errors.Is(err, auth.ErrBadTicket) {
			t.Errorf("%q: %v", s, err)
		}
	}
}

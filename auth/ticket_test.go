package auth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/auth"
	"danmaku/internal/clock"
)

var ticketKey = []byte("ticket-key-for-tests-0123456789")

// newTicketVerifier reads the time from a fake clock started at the wall
// clock, because MintTicket stamps tickets with time.Now.
func newTicketVerifier(t testing.TB, key []byte) (*auth.TicketVerifier, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Now())
	v, err := auth.NewTicketVerifier(key, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	return v, clk
}

func mint(t testing.TB, key []byte, user string, tk auth.Ticket, ttl time.Duration) string {
	t.Helper()
	s, err := auth.MintTicket(key, user, tk, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTicketVerify(t *testing.T) {
	v, _ := newTicketVerifier(t, ticketKey)
	for _, tc := range []struct {
		name     string
		ticket   string
		wantRole string // "" = rejected
	}{
		{"viewer by default", mint(t, ticketKey, "u1", auth.Ticket{Nick: "n"}, time.Hour), auth.RoleViewer},
		{"explicit viewer", mint(t, ticketKey, "u1", auth.Ticket{Role: auth.RoleViewer}, time.Hour), auth.RoleViewer},
		{"host", mint(t, ticketKey, "u1", auth.Ticket{Role: auth.RoleHost}, time.Hour), auth.RoleHost},
		{"admin", mint(t, ticketKey, "u1", auth.Ticket{Role: auth.RoleAdmin}, time.Hour), auth.RoleAdmin},
		{"64-byte user", mint(t, ticketKey, strings.Repeat("u", 64), auth.Ticket{}, time.Hour), auth.RoleViewer},
		{"empty", "", ""},
		{"garbage", "garbage", ""},
		{"too long", strings.Repeat("a", 4097), ""},
		{"expired", mint(t, ticketKey, "u1", auth.Ticket{}, -time.Minute), ""},
		{"wrong key", mint(t, []byte("another-ticket-key-0123456789"), "u1", auth.Ticket{}, time.Hour), ""},
		{"bad role", mint(t, ticketKey, "u1", auth.Ticket{Role: "root"}, time.Hour), ""},
		{"no user", mint(t, ticketKey, "", auth.Ticket{}, time.Hour), ""},
		{"65-byte user", mint(t, ticketKey, strings.Repeat("u", 65), auth.Ticket{}, time.Hour), ""},
		{"alg none", func() string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "u1", "exp": time.Now().Add(time.Hour).Unix()}).
				SignedString(jwt.UnsafeAllowNoneSignatureType)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}(), ""},
		{"HS512", func() string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodHS512, jwt.MapClaims{"sub": "u1", "exp": time.Now().Add(time.Hour).Unix()}).
				SignedString(ticketKey)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}(), ""},
		{"no expiry", func() string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u1"}).SignedString(ticketKey)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.Verify(tc.ticket)
			if tc.wantRole == "" {
				if err == nil {
					t.Fatalf("accepted: %+v", got)
				}
				if !errors.Is(err, auth.ErrBadTicket) {
					t.Fatalf("err = %v, want ErrBadTicket", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got.Role != tc.wantRole {
				t.Errorf("role = %q, want %q", got.Role, tc.wantRole)
			}
			if got.Subject == "" {
				t.Error("no subject")
			}
		})
	}
}

func TestTicketExpiresOnTheVerifiersClock(t *testing.T) {
	v, clk := newTicketVerifier(t, ticketKey)
	tk := mint(t, ticketKey, "u1", auth.Ticket{Nick: "nick", Avatar: "a7"}, time.Minute)
	got, err := v.Verify(tk)
	if err != nil {
		t.Fatal(err)
	}
	if got.Subject != "u1" || got.Nick != "nick" || got.Avatar != "a7" {
		t.Errorf("ticket = %+v", got)
	}
	clk.Advance(time.Hour)
	if _, err := v.Verify(tk); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("expired ticket: err = %v, want ErrBadTicket", err)
	}
}

func TestTicketVerifierKeyLength(t *testing.T) {
	if _, err := auth.NewTicketVerifier([]byte("short"), nil); err == nil {
		t.Fatal("short key accepted")
	}
	if _, err := auth.NewTicketVerifier(auth.DevTicketKey, nil); err != nil {
		t.Fatalf("dev key rejected: %v", err)
	}
}

// FuzzVerifyTicket: Verify never panics and accepts only the ticket minted
// (up to the unused bits of the signature's last base64 character).
func FuzzVerifyTicket(f *testing.F) {
	v, _ := newTicketVerifier(f, ticketKey)
	good := mint(f, ticketKey, "u1", auth.Ticket{Role: auth.RoleHost}, 24*time.Hour)
	signed := good[:strings.LastIndexByte(good, '.')]
	f.Add(good)
	f.Add("")
	f.Add("a.b.c")
	f.Add(signed + ".")
	f.Add(mint(f, []byte("another-ticket-key-0123456789"), "u1", auth.Ticket{}, time.Hour))
	f.Add(mint(f, ticketKey, "u1", auth.Ticket{Role: "root"}, time.Hour))
	f.Fuzz(func(t *testing.T, s string) {
		tk, err := v.Verify(s)
		if err != nil {
			if tk != nil {
				t.Fatalf("ticket returned with error %v", err)
			}
			return
		}
		i := strings.LastIndexByte(s, '.')
		if i < 0 || s[:i] != signed {
			t.Fatalf("Verify accepted a ticket nobody minted: %q", s)
		}
		if tk.Subject != "u1" || tk.Role != auth.RoleHost {
			t.Fatalf("accepted ticket carries other claims: %+v", tk)
		}
	})
}

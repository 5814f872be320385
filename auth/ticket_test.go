package auth_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/auth"
	"danmaku/internal/clock"
)

var ticketKey = []byte("ticket-key-for-tests-0123456789-")

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

// Identity claims: the subject and avatar are refused when they break the
// identity rules, naming the claim; the nickname is cleaned and cut.
func TestTicketIdentityClaims(t *testing.T) {
	v, _ := newTicketVerifier(t, ticketKey)
	ampURL := "https://img.example/a?" + strings.Repeat("&", 256-len("https://img.example/a?"))
	for _, tc := range []struct {
		name      string
		sub       string
		tk        auth.Ticket
		wantClaim string // "" = accepted
		wantNick  string
	}{
		{"plain", "u-1", auth.Ticket{Nick: "小明", Avatar: "a7"}, "", "小明"},
		{"non-ASCII user", "用户42", auth.Ticket{}, "", ""},
		{"avatar URL", "u1", auth.Ticket{Avatar: "https://img.example/a/7.png?s=64&v=2"}, "", ""},
		{"nick cut to six characters", "u1", auth.Ticket{Nick: "abcdefghij"}, "", "abcdef"},
		{"nick without bidi and zero-width", "u1", auth.Ticket{Nick: "ad\u200bmin\u202e"}, "", "admin"},
		{"nick with a newline", "u1", auth.Ticket{Nick: "a\nb"}, "", "a b"},
		{"nick too long as given", "u1", auth.Ticket{Nick: strings.Repeat("n", 129)}, "nick", ""},
		{"user with NUL", "u\x001", auth.Ticket{}, "sub", ""},
		{"user with newline", "u1\n", auth.Ticket{}, "sub", ""},
		{"user with bidi override", "u1\u202e", auth.Ticket{}, "sub", ""},
		{"user with zero-width space", "u\u200b1", auth.Ticket{}, "sub", ""},
		{"user with space", "u 1", auth.Ticket{}, "sub", ""},
		{"user not NFC", "e\u0301", auth.Ticket{}, "sub", ""},
		{"user not UTF-8", "u\xff", auth.Ticket{}, "sub", ""},
		{"2,500-byte avatar", "u1", auth.Ticket{Avatar: "https://img.example/" + strings.Repeat("a", 2480)}, "av", ""},
		{"avatar neither code nor https", "u1", auth.Ticket{Avatar: "javascript:alert(1)"}, "av", ""},
		{"avatar with a quote", "u1", auth.Ticket{Avatar: `https://img.example/a"onerror=x`}, "av", ""},
		{"avatar URL at the bound, all escapes", "u1", auth.Ticket{Avatar: ampURL}, "av", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.Verify(mint(t, ticketKey, tc.sub, tc.tk, time.Hour))
			if tc.wantClaim == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if got.Nick != tc.wantNick {
					t.Errorf("nick = %q, want %q", got.Nick, tc.wantNick)
				}
				return
			}
			var ce *auth.ClaimError
			if !errors.As(err, &ce) || ce.Claim != tc.wantClaim || !errors.Is(err, auth.ErrBadTicket) {
				t.Fatalf("err = %v, want a ClaimError on %q wrapping ErrBadTicket", err, tc.wantClaim)
			}
			// \xff is a byte, not a rune: ContainsAny would look for U+FFFD.
			if strings.ContainsAny(ce.Reason, "\x00\n\u202e\u200b") || strings.IndexByte(ce.Reason, 0xff) >= 0 {
				t.Errorf("reason %q echoes the value", ce.Reason)
			}
		})
	}
}

// A payload that is not UTF-8 is refused, not shown with U+FFFD: encoding/json
// would replace the bad bytes silently (MintTicket cannot even write them).
func TestTicketPayloadNotUTF8(t *testing.T) {
	v, _ := newTicketVerifier(t, ticketKey)
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body := enc.EncodeToString(fmt.Appendf(nil, `{"sub":"u1","nick":"a`+"\xff"+`b","exp":%d}`, time.Now().Add(time.Hour).Unix()))
	mac := hmac.New(sha256.New, ticketKey)
	mac.Write([]byte(head + "." + body))
	_, err := v.Verify(head + "." + body + "." + enc.EncodeToString(mac.Sum(nil)))
	var ce *auth.ClaimError
	if !errors.As(err, &ce) || ce.Claim != "payload" {
		t.Fatalf("err = %v, want a ClaimError on the payload", err)
	}
}

// signTicket signs a raw payload as a business login service would.
func signTicket(key []byte, payload string) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body := enc.EncodeToString([]byte(payload))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(head + "." + body))
	return head + "." + body + "." + enc.EncodeToString(mac.Sum(nil))
}

// TestTicketClaimsStrict: claims are read as strictly as a JSON body. A
// claim of ours in another case ("Role": encoding/json took it for role,
// so {"sub":"alice","Role":"admin"} was an admin's ticket) or repeated (the
// last won) is a ClaimError naming it, whichever path decodes the payload;
// claims not ours stay allowed (the claim set is open).
func TestTicketClaimsStrict(t *testing.T) {
	v, _ := newTicketVerifier(t, ticketKey)
	exp := time.Now().Add(time.Hour).Unix()
	for _, tc := range []struct {
		payload, claim string // claim "": accepted
	}{
		{`{"sub":"alice","role":"host","exp":%d}`, ""},
		{`{"sub":"alice","exp":%d,"tenant":"x","aud":["a"]}`, ""},
		{`{"s\u0075b":"alice","exp":%d}`, ""}, // an escape spells the same name
		{`{"sub":"alice","Role":"admin","exp":%d}`, "Role"},
		{`{"sub":"alice","ROLE":"admin","exp":%d}`, "ROLE"},
		{`{"SUB":"alice","exp":%d}`, "SUB"},
		{`{"sub":"alice","nic\u212a":"n","exp":%d}`, "nic\u212a"},
		{`{"sub":"alice","role":"viewer","role":"admin","exp":%d}`, "role"},
		{`{"sub":"alice","sub":"bob","exp":%d}`, "sub"},
		{`{"sub":"alice","exp":%d,"exp":99999999999}`, "exp"},
		{`{"sub":"alice","exp":%d,"tenant":"x","tenant":"y"}`, "tenant"},
		{`{"sub":"alice","nick":"\ud800","exp":%d}`, "payload"},
	} {
		tk, err := v.Verify(signTicket(ticketKey, fmt.Sprintf(tc.payload, exp)))
		if tc.claim == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.payload, err)
			}
			continue
		}
		var ce *auth.ClaimError
		if !errors.As(err, &ce) || ce.Claim != tc.claim || !errors.Is(err, auth.ErrBadTicket) {
			t.Errorf("%s: %v (%+v), want a ClaimError on %q", tc.payload, err, tk, tc.claim)
		}
	}
}

// The largest identity a ticket may carry still makes a token every node
// accepts, with room to spare for a long list of node addresses.
func TestTicketIdentityFitsAToken(t *testing.T) {
	v, _ := newTicketVerifier(t, ticketKey)
	// Escaped characters are what make an identity long in a token: & < >
	// take six bytes each. Find the longest avatar the budget lets through.
	sub := strings.Repeat("<", 64)
	nick := "\U0001F389\U0001F389\U0001F389\U0001F389\U0001F389\U0001F389"
	var best *auth.Ticket
	for n := 256 - len("https://h/?"); n >= 0; n-- {
		tk, err := v.Verify(mint(t, ticketKey, sub, auth.Ticket{Nick: nick, Avatar: "https://h/?" + strings.Repeat("&", n)}, time.Hour))
		if err == nil {
			best = tk
			break
		}
	}
	if best == nil {
		t.Fatal("no avatar fits")
	}
	e := newEnv(t)
	c := validClaims()
	c.Subject, c.Nick, c.Avatar, c.Role = best.Subject, best.Nick, best.Avatar, best.Role
	c.Room = strings.Repeat("r", 64)
	c.Addrs = nil
	for i := range 12 {
		c.Addrs = append(c.Addrs, fmt.Sprintf("wss://edge-%02d.eu-west.danmaku.example:443", i))
	}
	c.Ingests = 6
	tok := e.sign(t, c)
	if _, err := e.ring.Verify(tok); err != nil {
		t.Fatalf("token of %d bytes for the largest identity refused: %v", len(tok), err)
	}
	t.Logf("largest identity: token of %d bytes", len(tok))
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

package auth

// Differential tests of the hand-built token (Keyring.Sign) and the
// hand-rolled ticket parser (TicketVerifier.Verify) against the jwt library
// paths they replace, kept here verbatim as references.

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/internal/clock"
	"danmaku/internal/ident"
)

// jwtSign is Keyring.Sign as it was, on the jwt library.
func jwtSign(k *Keyring, c Claims) (string, time.Time, error) {
	now := k.cfg.Clock.Now()
	epoch := EpochOf(now, k.cfg.Epoch)
	s, err := k.signer(epoch)
	if err != nil {
		return "", time.Time{}, err
	}
	exp := now.Add(k.cfg.TokenTTL)
	c.Issuer = k.cfg.Issuer
	c.IssuedAt = jwt.NewNumericDate(now)
	c.ExpiresAt = jwt.NewNumericDate(exp)
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, &c)
	tok.Header["kid"] = strconv.FormatInt(epoch, 10)
	str, err := tok.SignedString(s.priv)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: sign: %w", err)
	}
	if len(str) > maxTokenBytes {
		return "", time.Time{}, fmt.Errorf("%w: %d bytes, nodes accept %d", ErrTokenTooLarge, len(str), maxTokenBytes)
	}
	return str, exp, nil
}

// jwtTicketVerifier is TicketVerifier.Verify as it was, on the jwt
// library's parser.
type jwtTicketVerifier struct {
	key    []byte
	parser *jwt.Parser
	// policy is a TicketVerifier's with the same key and clock: the
	// deployment's checks (scope claims, lifetime, aud, iss) are shared,
	// not parsed.
	policy *TicketVerifier
}

func newJWTTicketVerifier(key []byte, now func() time.Time) *jwtTicketVerifier {
	policy, err := NewTicketVerifier(key, now)
	if err != nil {
		panic(err)
	}
	return &jwtTicketVerifier{key: key, policy: policy, parser: jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(5*time.Second),
		jwt.WithTimeFunc(now),
	)}
}

func (v *jwtTicketVerifier) Verify(ticket string) (*Ticket, error) {
	if ticket == "" || len(ticket) > maxTokenBytes {
		return nil, fmt.Errorf("%w: empty or too long", ErrBadTicket)
	}
	if !compactJWT(ticket) { // before the library, which takes any spelling
		return nil, fmt.Errorf("%w: not three canonical base64url segments", ErrBadTicket)
	}
	var t Ticket
	if _, err := v.parser.ParseWithClaims(ticket, &t, func(*jwt.Token) (any, error) { return v.key, nil }); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTicket, err)
	}
	if t.Role == "" {
		t.Role = RoleViewer
	}
	if ce := strictClaims(jwtPayload(ticket)); ce != nil {
		return nil, ce
	}
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
	if err := v.policy.checkPolicy(&t); err != nil {
		return nil, err
	}
	return &t, nil
}

// jwtPayload is the decoded payload of a ticket the library accepted.
func jwtPayload(ticket string) []byte {
	_, rest, _ := strings.Cut(ticket, ".")
	payload, _, _ := strings.Cut(rest, ".")
	b, _ := base64.RawURLEncoding.DecodeString(payload)
	return b
}

var (
	fastMaster = []byte("0123456789abcdef0123456789abcdef-master")
	fastT0     = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
)

// fastKeyring is an issuing keyring holding the epochs around clk's time.
func fastKeyring(tb testing.TB, clk *clock.Fake) *Keyring {
	tb.Helper()
	store := NewMemorySecrets()
	center, err := NewCenter(CenterConfig{Store: store, MasterKey: fastMaster, Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	if err := center.Publish(context.Background()); err != nil {
		tb.Fatal(err)
	}
	k, err := NewKeyring(KeyringConfig{Store: store, MasterKey: fastMaster, Clock: clk})
	if err != nil {
		tb.Fatal(err)
	}
	if err := k.Refresh(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return k
}

// fragments make generated strings: plain ASCII, what encoding/json
// escapes (HTML characters, quotes, backslashes, control characters, U+2028
// and U+2029), other Unicode, and invalid UTF-8.
var fragments = []string{
	"a", "Z", "0", "-", "_", " ", "/", ":", "?", "=", "~", "\x7f",
	"<", ">", "&", `"`, `\`, "\x00", "\x01", "\x08", "\t", "\n", "\r", "\x1f",
	"\u2028", "\u2029", "é", "弹幕", "\U0001F389", "\ufffd", "\u202e", "\u200b",
	"\xff", "\xc3", "\xed\xa0\x80", "\xe2\x80", "\xf4\x90\x80\x80",
}

func genString(r *rand.Rand, max int) string {
	n := r.IntN(max + 1)
	var b strings.Builder
	for range n {
		if r.IntN(3) == 0 {
			b.WriteString(fragments[r.IntN(len(fragments))])
		} else {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
	}
	return b.String()
}

func genClaims(r *rand.Rand) Claims {
	c := Claims{
		Room:   genString(r, 20),
		Nick:   genString(r, 8),
		Avatar: genString(r, 40),
		Role:   []string{RoleViewer, RoleHost, RoleAdmin, "", genString(r, 6)}[r.IntN(5)],
		Login:  r.Int64() - r.Int64(),
	}
	c.Subject = genString(r, 20)
	switch r.IntN(4) {
	case 0: // nil: null
	case 1:
		c.Addrs = []string{}
	default:
		for range 1 + r.IntN(12) {
			c.Addrs = append(c.Addrs, genString(r, 50))
		}
	}
	switch r.IntN(3) {
	case 0:
	case 1:
		c.Ingests = r.IntN(len(c.Addrs) + 1)
	default:
		c.Ingests = r.IntN(7) - 3
	}
	switch r.IntN(8) {
	case 0:
		c.Avatar = "https://img.example/" + strings.Repeat("a", 200+r.IntN(3000))
	case 1:
		c.Avatar = strings.Repeat("&", r.IntN(600))
	}
	// The registered claims Sign leaves to the caller.
	if r.IntN(4) == 0 {
		c.NotBefore = jwt.NewNumericDate(fastT0.Add(time.Duration(r.Int64N(int64(time.Hour)))))
	}
	if r.IntN(4) == 0 {
		for range r.IntN(3) {
			c.Audience = append(c.Audience, genString(r, 10))
		}
	}
	if r.IntN(4) == 0 {
		c.ID = genString(r, 16)
	}
	if r.IntN(8) == 0 {
		c.Issuer = "overwritten-by-Sign"
	}
	return c
}

// TestSignMatchesJWT: the hand-built token is byte for byte what the jwt
// library wrote, for generated claims at instants within and across epochs.
func TestSignMatchesJWT(t *testing.T) {
	clk := clock.NewFake(fastT0.Add(123456789))
	k := fastKeyring(t, clk)
	r := rand.New(rand.NewPCG(1, 2))
	n := 5000
	if testing.Short() {
		n = 500
	}
	var tooLarge int
	for i := range n {
		c := genClaims(r)
		// Instants within the current epoch, some on a whole second.
		clk.Set(fastT0.Add(time.Duration(r.Int64N(int64(defaultEpoch)))))
		if i%5 == 0 {
			clk.Set(clk.Now().Truncate(time.Second))
		}
		want, wantExp, wantErr := jwtSign(k, c)
		got, gotExp, err := k.Sign(c)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("claims %+v: err %v, jwt err %v", c, err, wantErr)
		}
		if errors.Is(err, ErrTokenTooLarge) {
			tooLarge++
		}
		if got != want || !gotExp.Equal(wantExp) {
			t.Fatalf("claims %+v:\n got %s (exp %v)\nwant %s (exp %v)", c, got, gotExp, want, wantExp)
		}
		if err == nil && c.NotBefore == nil && c.Subject != "" && c.Room != "" && ValidRole(c.Role) {
			if _, err := k.Verify(got); err != nil {
				t.Fatalf("own token refused: %v", err)
			}
		}
	}
	if tooLarge == 0 || tooLarge == n {
		t.Errorf("%d of %d tokens too large: the sizes generated miss a side", tooLarge, n)
	}
}

// FuzzSignMatchesJWT: the hand-built token is the library's for any
// strings in the claims.
func FuzzSignMatchesJWT(f *testing.F) {
	clk := clock.NewFake(fastT0.Add(1500 * time.Millisecond))
	k := fastKeyring(f, clk)
	f.Add("room-1", "弹幕观众小明", "a7", "user-1", "wss://edge-1", 1, int64(1893456000000))
	f.Add("<r>&", "\u2028\u2029", "\xff\xc3", `"\`, "\x00\x1f\x7f", 0, int64(-1))
	f.Add("", "", "", "", "", -3, int64(0))
	f.Fuzz(func(t *testing.T, room, nick, av, sub, addr string, ni int, login int64) {
		c := Claims{Room: room, Nick: nick, Avatar: av, Role: RoleViewer, Ingests: ni, Login: login,
			RegisteredClaims: jwt.RegisteredClaims{Subject: sub, ID: addr, Audience: jwt.ClaimStrings{nick}}}
		switch {
		case addr == "":
		case len(addr)%2 == 0:
			c.Addrs = []string{addr, room}
		default:
			c.Addrs = []string{}
		}
		want, _, wantErr := jwtSign(k, c)
		got, _, err := k.Sign(c)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Fatalf("claims %+v:\n got %s (%v)\nwant %s (%v)", c, got, err, want, wantErr)
		}
	})
}

// TestSignHeaderMatchesJWT: the precomputed header segment is the
// library's, for epochs of every width and sign.
func TestSignHeaderMatchesJWT(t *testing.T) {
	for _, epoch := range []int64{0, 1, 9, 10, 4_300_000, -1, -4_300_000, 1<<63 - 1, -1 << 63} {
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, &Claims{})
		tok.Header["kid"] = strconv.FormatInt(epoch, 10)
		s, err := tok.SigningString()
		if err != nil {
			t.Fatal(err)
		}
		want, _, _ := strings.Cut(s, ".")
		if got := newEpochSigner(nil, epoch).header; got != want {
			t.Errorf("epoch %d: header %s, want %s", epoch, got, want)
		}
	}
}

// TestSignAllocs: the token is the one allocation of a Sign.
func TestSignAllocs(t *testing.T) {
	k := fastKeyring(t, clock.NewFake(fastT0))
	c := benchClaims()
	if _, _, err := k.Sign(c); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = k.Sign(c) }); n > 1 {
		t.Errorf("Sign allocates %v times, want 1", n)
	}
}

// benchClaims are a production-sized token's claims: three ingest and
// three edge addresses, a nick of six CJK characters.
func benchClaims() Claims {
	return Claims{
		Room:   "room-1",
		Nick:   "弹幕观众小明",
		Avatar: "a1",
		Role:   RoleViewer,
		Addrs: []string{
			"https://ingest-07.danmaku.example.net", "https://ingest-12.danmaku.example.net", "https://ingest-03.danmaku.example.net",
			"wss://edge-113.danmaku.example.net/v1/ws", "wss://edge-114.danmaku.example.net/v1/ws", "wss://edge-020.danmaku.example.net/v1/ws",
		},
		Ingests:          3,
		Login:            fastT0.UnixMilli(),
		RegisteredClaims: jwt.RegisteredClaims{Subject: "user-1"},
	}
}

// BenchmarkSign: the entry endpoint's token, on the jwt library (jwt) and
// built by hand (fast).
func BenchmarkSign(b *testing.B) {
	k := fastKeyring(b, clock.NewFake(fastT0))
	c := benchClaims()
	for _, impl := range []struct {
		name string
		sign func(*Keyring, Claims) (string, time.Time, error)
	}{{"jwt", jwtSign}, {"fast", (*Keyring).Sign}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := impl.sign(k, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var fuzzTicketKey = []byte("ticket-key-for-tests-0123456789-")

// ticketNow is the verifiers' time in the ticket tests: fixed, so that a
// fuzz input means the same on every run.
var ticketNow = time.Unix(1_900_000_000, 250_000_000)

func hs256(key []byte, signing string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signing))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// fuzzTicket builds a ticket from a fuzz input. mode bits: 1, header is JSON
// to base64url-encode (else the segment as given); 2, payload likewise; 4,
// sig is the signature segment as given (else the valid HS256 signature); 8,
// the ticket is header alone, as given (any number of segments).
func fuzzTicket(header, payload string, mode uint8, sig string) string {
	enc := base64.RawURLEncoding
	if mode&8 != 0 {
		return header
	}
	if mode&1 != 0 {
		header = enc.EncodeToString([]byte(header))
	}
	if mode&2 != 0 {
		payload = enc.EncodeToString([]byte(payload))
	}
	signing := header + "." + payload
	if mode&4 != 0 {
		return signing + "." + sig
	}
	return signing + "." + hs256(fuzzTicketKey, signing)
}

func addTicketSeeds(f *testing.F) {
	const hs = `{"alg":"HS256","typ":"JWT"}`
	now := ticketNow.Unix()
	p := func(format string, args ...any) string { return fmt.Sprintf(format, args...) }
	valid := p(`{"sub":"u1","nick":"n","av":"a7","role":"host","exp":%d,"iat":%d}`, now+3600, now)
	enc := base64.RawURLEncoding
	for _, s := range []struct {
		h, p string
		mode uint8
		sig  string
	}{
		{hs, valid, 3, ""},
		{hs, p(`{"sub":"u1","exp":%d}`, now-60), 3, ""},                        // expired
		{hs, p(`{"sub":"u1","exp":%d}`, now-4), 3, ""},                         // expired within the leeway
		{hs, p(`{"sub":"u1","exp":%d}`, now-5), 3, ""},                         // at the leeway
		{hs, p(`{"sub":"u1","exp":%d,"nbf":%d}`, now+60, now+60), 3, ""},       // not yet valid
		{hs, p(`{"sub":"u1","exp":%d,"nbf":%d}`, now+60, now+5), 3, ""},        // nbf within the leeway
		{hs, p(`{"sub":"u1","exp":%d,"nbf":%d}`, now-60, now+60), 3, ""},       // both
		{hs, p(`{"sub":"u1","exp":%d,"iat":%d}`, now+60, now+6000), 3, ""},     // iat in the future: not checked
		{hs, `{"sub":"u1"}`, 3, ""},                                            // no exp
		{hs, p(`{"sub":"u1","exp":%d,"exp":null}`, now+60), 3, ""},             // exp null after a value
		{hs, p(`{"sub":"u1","exp":null,"exp":%d}`, now+60), 3, ""},             // ... before
		{hs, p(`{"sub":"u1","exp":%d.75}`, now+60), 3, ""},                     // a fraction
		{hs, p(`{"sub":"u1","exp":%de0,"nbf":-1.5}`, now+60), 3, ""},           // an exponent
		{hs, p(`{"sub":"u1","exp":"%d"}`, now+60), 3, ""},                      // a string
		{hs, p(`{"sub":"u1","exp":"\u0031%d"}`, now+60), 3, ""},                // an escaped string
		{hs, `{"sub":"u1","exp":"soon"}`, 3, ""},                               // a string, not a number
		{hs, `{"sub":"u1","exp":true}`, 3, ""},                                 // a bool
		{hs, `{"sub":"u1","exp":{"a":1}}`, 3, ""},                              // an object
		{hs, `{"sub":"u1","exp":1e400}`, 3, ""},                                // out of range
		{hs, `{"sub":"u1","exp":1e300}`, 3, ""},                                // huge
		{hs, `{"sub":"u1","exp":9223372036854775807}`, 3, ""},                  // huge
		{hs, `{"sub":"u1","exp":123456789012345678901234567890}`, 3, ""},       // huge
		{hs, `{"sub":"u1","exp":-1e300,"nbf":-1e300}`, 3, ""},                  // huge and negative
		{hs, `{"sub":"u1","exp":1e-400,"iat":-0}`, 3, ""},                      // tiny
		{hs, p(`{"sub":"u1","aud":"x","exp":%d}`, now+60), 3, ""},              // aud a string
		{hs, p(`{"sub":"u1","aud":["x","y"],"exp":%d}`, now+60), 3, ""},        // aud an array
		{hs, p(`{"sub":"u1","aud":[],"exp":%d}`, now+60), 3, ""},               // aud empty
		{hs, p(`{"sub":"u1","aud":["x",1],"exp":%d}`, now+60), 3, ""},          // aud not strings
		{hs, p(`{"sub":"u1","aud":["x"],"aud":null,"exp":%d}`, now+60), 3, ""}, // aud null after a value
		{hs, p(`{"sub":"u1","aud":5,"exp":%d}`, now+60), 3, ""},                // aud a number
		{hs, p(`{"sub":"u1","sub":"u2","exp":%d}`, now+60), 3, ""},             // duplicate keys
		{hs, p(`{"sub":"u1","role":"viewer","exp":%d,"role":"admin"}`, now+60), 3, ""},
		{hs, p(`{"sub":"u1","x":1,"exp":%d,"x":2}`, now+60), 3, ""}, // a repeated claim not ours
		{hs, p(`{"sub":"alice","Role":"admin","exp":%d}`, now+60), 3, ""},
		{hs, p(`{"sub":"u1","nick":"\ud800","exp":%d}`, now+60), 3, ""},           // half a surrogate pair
		{hs, p(`{"sub":"u1","sub":null,"exp":%d}`, now+60), 3, ""},                // null string
		{hs, p(`{"SUB":"u1","Nick":"N","ROLE":"admin","EXP":%d}`, now+60), 3, ""}, // keys in other case
		{hs, p(`{"ſub":"u1","nic\u212a":"N","exp":%d}`, now+60), 3, ""},           // keys that fold to ours
		{hs, p(`{"s\u0075b":"u1","exp":%d,"jti":"j","iss":"i"}`, now+60), 3, ""},
		{hs, p(`{"sub":5,"exp":%d}`, now+60), 3, ""}, // a claim of the wrong type
		{hs, p(`{"sub":"u1","exp":%d,"other":[1,{"x":null}]}`, now+60), 3, ""},
		{hs, p(`{"sub":"u1","nick":"a`+"\xff"+`b","exp":%d}`, now+60), 3, ""}, // not UTF-8
		{hs, p(`{"sub":"u\xff","exp":%d}`, now+60), 3, ""},
		{hs, p(`{"sub":"u1","exp":%d} `, now+60), 3, ""}, // trailing space
		{hs, p(`{"sub":"u1","exp":%d}x`, now+60), 3, ""}, // trailing garbage
		{hs, `null`, 3, ""},
		{hs, `[]`, 3, ""},
		{hs, `"x"`, 3, ""},
		{hs, ``, 3, ""},
		{hs, p(`{"sub":"u1","role":"root","exp":%d}`, now+60), 3, ""},
		{hs, p(`{"sub":"u 1","exp":%d}`, now+60), 3, ""},
		{hs, p(`{"sub":"u1","role":"host","rooms":["a","b"],"event":"e","exp":%d}`, now+60), 3, ""}, // scoped
		{hs, p(`{"sub":"u1","rooms":[],"event":"","exp":%d}`, now+60), 3, ""},                       // scope empty
		{hs, p(`{"sub":"u1","rooms":[ "a" , "b" ],"exp":%d}`, now+60), 3, ""},                       // spaces
		{hs, p(`{"sub":"u1","rooms":["a",],"exp":%d}`, now+60), 3, ""},                              // trailing comma
		{hs, p(`{"sub":"u1","rooms":["a",1],"exp":%d}`, now+60), 3, ""},                             // not strings
		{hs, p(`{"sub":"u1","rooms":["\u0061"],"exp":%d}`, now+60), 3, ""},                          // an escape
		{hs, p(`{"sub":"u1","rooms":["a"],"rooms":["b"],"exp":%d}`, now+60), 3, ""},                 // repeated
		{hs, p(`{"sub":"u1","rooms":[["a"]],"exp":%d}`, now+60), 3, ""},                             // nested
		{hs, p(`{"sub":"u1","rooms":"a","exp":%d}`, now+60), 3, ""},                                 // rooms a string
		{hs, p(`{"sub":"u1","rooms":["a b"],"exp":%d}`, now+60), 3, ""},                             // no room name
		{hs, p(`{"sub":"u1","rooms":null,"event":"e.1","exp":%d}`, now+60), 3, ""},                  // no event id
		{hs, p(`{"sub":"u1","exp":%d}`, now+60*86400), 3, ""},                                       // 60 days
		{hs, p(`{"sub":"u1","exp":%d,"iat":%d}`, now+3600, now-25*3600), 3, ""},                     // exp-iat over a day
		{`{"alg":"none","typ":"JWT"}`, valid, 7, ""},
		{`{"alg":"HS512","typ":"JWT"}`, valid, 3, ""},
		{`{"alg":"RS256","typ":"JWT"}`, valid, 3, ""},
		{`{"alg":"hs256"}`, valid, 3, ""},
		{`{"alg":"HS256","alg":"none"}`, valid, 3, ""},
		{`{"alg":"none","alg":"HS256"}`, valid, 3, ""},
		{`{"ALG":"HS256"}`, valid, 3, ""},
		{`{"alg":"HS\u0032\u00356"}`, valid, 3, ""},
		{`{"alg":["HS256"]}`, valid, 3, ""},
		{`{"typ":"JWT"}`, valid, 3, ""},
		{`null`, valid, 3, ""},
		{`[]`, valid, 3, ""},
		{`{"alg":"HS256","kid":"x","x":[1,2]}`, valid, 3, ""},
		{hs, valid, 7, "AAAA"},                                                            // bad signature
		{hs, valid, 7, ""},                                                                // no signature
		{hs, valid, 7, "x.y"},                                                             // four segments
		{enc.EncodeToString([]byte(hs)) + "=", enc.EncodeToString([]byte(valid)), 0, ""},  // padded header
		{enc.EncodeToString([]byte(hs)), enc.EncodeToString([]byte(valid)) + "==", 0, ""}, // padded payload
		{enc.EncodeToString([]byte(hs)), "\n" + enc.EncodeToString([]byte(valid)), 0, ""}, // a newline in base64
		{base64.URLEncoding.EncodeToString([]byte(hs)), base64.URLEncoding.EncodeToString([]byte(valid)), 0, ""},
		{base64.StdEncoding.EncodeToString([]byte(hs)), base64.StdEncoding.EncodeToString([]byte(valid + "??>>")), 0, ""},
		{"a.b", "", 8, ""},     // two segments
		{"a.b.c.d", "", 8, ""}, // four
		{"", "", 8, ""},
	} {
		f.Add(s.h, s.p, s.mode, s.sig)
	}
	// A signature with other unused bits, and one with a newline.
	tk := fuzzTicket(hs, valid, 3, "")
	i := strings.LastIndexByte(tk, '.')
	sig := tk[i+1:]
	last := strings.IndexByte("AEIMQUYcgkosw048", sig[len(sig)-1]) // the last character's unused bits are 0
	f.Add(tk[:i], "", uint8(8), "")
	f.Add(tk[:i]+"."+sig[:len(sig)-1]+string("BFJNRVZdhlptx159"[max(last, 0)]), "", uint8(8), "")
	f.Add(tk[:i]+"."+sig[:10]+"\r\n"+sig[10:], "", uint8(8), "")
	f.Add(tk+"=", "", uint8(8), "")
}

// FuzzTicketVerifyMatchesJWT: the hand-rolled ticket parser accepts what
// the jwt library's parser accepted, and no more, with the same claims, and
// refuses with the same kind of error (a ClaimError naming the same claim,
// or ErrBadTicket). Inputs carry a valid signature unless mode says
// otherwise, so that the claims decoding is what is fuzzed.
func FuzzTicketVerifyMatchesJWT(f *testing.F) {
	now := func() time.Time { return ticketNow }
	fast, err := NewTicketVerifier(fuzzTicketKey, now)
	if err != nil {
		f.Fatal(err)
	}
	ref := newJWTTicketVerifier(fuzzTicketKey, now)
	addTicketSeeds(f)
	f.Fuzz(func(t *testing.T, header, payload string, mode uint8, sig string) {
		tk := fuzzTicket(header, payload, mode, sig)
		want, wantErr := ref.Verify(tk)
		got, err := fast.Verify(tk)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("ticket %q: fast %v, jwt %v", tk, err, wantErr)
		}
		if err != nil {
			if got != nil {
				t.Fatalf("ticket returned with error %v", err)
			}
			var ce, wantCE *ClaimError
			if errors.As(err, &ce) != errors.As(wantErr, &wantCE) || (ce != nil && *ce != *wantCE) || !errors.Is(err, ErrBadTicket) {
				t.Fatalf("ticket %q: fast %v, jwt %v", tk, err, wantErr)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ticket %q:\n fast %#v\n jwt  %#v", tk, got, want)
		}
	})
}

// TestTicketVerifyAllocs: beside the claims it returns (the ticket and its
// strings), a verification allocates what encoding/json does.
func TestTicketVerifyAllocs(t *testing.T) {
	v, err := NewTicketVerifier(fuzzTicketKey, func() time.Time { return ticketNow })
	if err != nil {
		t.Fatal(err)
	}
	tk := benchTicket()
	if _, err := v.Verify(tk); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(100, func() { _, _ = v.Verify(tk) })
	t.Logf("%v allocations", n)
	if n > 12 {
		t.Errorf("Verify allocates %v times", n)
	}
}

// benchTicket is an ordinary login service's ticket.
func benchTicket() string {
	now := ticketNow.Unix()
	return fuzzTicket(`{"alg":"HS256","typ":"JWT"}`,
		fmt.Sprintf(`{"nick":"弹幕观众小明","av":"a7","role":"viewer","sub":"user-12345678","exp":%d,"iat":%d}`, now+3600, now), 3, "")
}

// BenchmarkTicketVerify: the entry endpoint's ticket check, on the jwt
// library (jwt) and hand-rolled (fast).
func BenchmarkTicketVerify(b *testing.B) {
	now := func() time.Time { return ticketNow }
	fast, err := NewTicketVerifier(fuzzTicketKey, now)
	if err != nil {
		b.Fatal(err)
	}
	tk := benchTicket()
	// A paid room's host: the ticket names its rooms and event.
	scoped := fuzzTicket(`{"alg":"HS256","typ":"JWT"}`,
		fmt.Sprintf(`{"nick":"弹幕观众小明","av":"a7","role":"host","rooms":["main","backstage"],"event":"xmas-2026","sub":"user-12345678","exp":%d,"iat":%d}`,
			ticketNow.Unix()+3600, ticketNow.Unix()), 3, "")
	for _, impl := range []struct {
		name   string
		verify func(string) (*Ticket, error)
		ticket string
	}{
		{"jwt", newJWTTicketVerifier(fuzzTicketKey, now).Verify, tk},
		{"fast", fast.Verify, tk},
		{"scoped/jwt", newJWTTicketVerifier(fuzzTicketKey, now).Verify, scoped},
		{"scoped/fast", fast.Verify, scoped},
	} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := impl.verify(impl.ticket); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTokenClaimsStrict: a dynamic token's claims are read as strictly as a
// ticket's: one of ours in another case or repeated is refused, even under
// a valid signature; another claim (a newer signer's) is allowed.
func TestTokenClaimsStrict(t *testing.T) {
	clk := clock.NewFake(fastT0)
	k := fastKeyring(t, clk)
	s, err := k.signer(EpochOf(clk.Now(), k.cfg.Epoch))
	if err != nil {
		t.Fatal(err)
	}
	exp := clk.Now().Add(time.Minute).Unix()
	for _, tc := range []struct {
		claims string
		ok     bool
	}{
		{`"role":"viewer"`, true},
		{`"role":"viewer","future":[1]`, true},
		{`"role":"viewer","Role":"admin"`, false},
		{`"ROLE":"admin","role":"viewer"`, false},
		{`"role":"viewer","role":"admin"`, false},
		{`"role":"viewer","future":1,"future":2`, false},
	} {
		payload := fmt.Sprintf(`{"iss":%q,"room":"r1","addrs":["ws://a"],"login":1,"sub":"alice","exp":%d,%s}`, k.cfg.Issuer, exp, tc.claims)
		signing := s.header + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
		tok := signing + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.priv, []byte(signing)))
		c, err := k.Verify(tok)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadToken)) {
			t.Errorf("%s: %+v, %v", tc.claims, c, err)
		}
	}
}

// BenchmarkTokenStrictPayload is what the strict claims check adds to an
// uncached token verification (BenchmarkVerify: the signature's ~70 µs).
func BenchmarkTokenStrictPayload(b *testing.B) {
	clk := clock.NewFake(fastT0)
	k := fastKeyring(b, clk)
	tok, _, err := k.Sign(benchClaims())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := strictPayload(tok, (*Claims)(nil)); err != nil {
			b.Fatal(err)
		}
	}
}

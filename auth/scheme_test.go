package auth_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/auth"
)

// BenchmarkTokenScheme compares the two ways a dynamic token can be
// signed, on the same claims and with the same parser options as the
// Keyring: HS256 with a per-epoch secret every verifier holds (what the
// Keyring does: any verifier could also mint), and Ed25519 with a
// per-epoch key pair whose private half stays at the issuers. Both sides
// in one run, for docs/architecture.md's choice.
func BenchmarkTokenScheme(b *testing.B) {
	c := userClaims(1)
	now := time.Now()
	c.Issuer = "danmaku"
	c.IssuedAt = jwt.NewNumericDate(now)
	c.ExpiresAt = jwt.NewNumericDate(now.Add(10 * time.Minute))
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	schemes := []struct {
		name      string
		method    jwt.SigningMethod
		sign, ver any
	}{
		{"HS256", jwt.SigningMethodHS256, secret, secret},
		{"Ed25519", jwt.SigningMethodEdDSA, priv, pub},
	}
	for _, s := range schemes {
		parser := jwt.NewParser(jwt.WithValidMethods([]string{s.method.Alg()}), jwt.WithIssuer("danmaku"), jwt.WithExpirationRequired(), jwt.WithLeeway(5*time.Second))
		sign := func() string {
			tok := jwt.NewWithClaims(s.method, &c)
			tok.Header["kid"] = "1"
			out, err := tok.SignedString(s.sign)
			if err != nil {
				b.Fatal(err)
			}
			return out
		}
		b.Run(s.name+"/sign", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sign()
			}
		})
		tok := sign()
		b.Run(s.name+"/verify", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var got auth.Claims
				if _, err := parser.ParseWithClaims(tok, &got, func(*jwt.Token) (any, error) { return s.ver, nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(s.name+"/bytes", func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(float64(len(tok)), "token-bytes")
		})
	}
}

package auth

import (
	"crypto/ed25519"
	"danmaku/sdk/jsonx"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The token Sign writes is the one the jwt library wrote before
// (jwt.NewWithClaims(jwt.SigningMethodEdDSA, &c) with the kid header), byte
// for byte, but built by hand. Sign runs once per viewer joining, at the
// entry endpoint, and a show's start brings hundreds of thousands of joins a
// second: the library's header map, reflective json.Marshal of the claims,
// separate base64 strings and concatenations cost a third as much CPU again
// as Ed25519 itself. Here the header segment is computed once per epoch, the
// claims are appended as JSON into a stack buffer, and the token is written
// into one buffer of its final size. TestSignMatchesJWT checks the bytes
// against the library's on generated claims.

// epochSigner is an epoch's private key and the base64url header segment of
// every token it signs.
type epochSigner struct {
	priv   ed25519.PrivateKey
	header string
}

func newEpochSigner(priv ed25519.PrivateKey, epoch int64) *epochSigner {
	// What json.Marshal writes for the library's header map: keys sorted,
	// the kid a string of ASCII digits (and perhaps a minus sign).
	h := `{"alg":"EdDSA","kid":"` + strconv.FormatInt(epoch, 10) + `","typ":"JWT"}`
	return &epochSigner{priv: priv, header: base64.RawURLEncoding.EncodeToString([]byte(h))}
}

// sigSegmentLen is the length of an Ed25519 signature in base64url.
var sigSegmentLen = base64.RawURLEncoding.EncodedLen(ed25519.SignatureSize)

// signToken returns the signed token for c and its length; when the length
// exceeds maxTokenBytes it signs nothing and returns "" (Sign refuses such
// a token anyway).
func (s *epochSigner) signToken(c *Claims) (string, int) {
	enc := base64.RawURLEncoding
	// Big enough for an ordinary token's claims (~400 bytes) and its signing
	// input; a larger one spills to the heap, still correct.
	var (
		js  [1024]byte
		in  [1536]byte
		sig [86]byte // sigSegmentLen
	)
	payload := appendClaims(js[:0], c)
	n := len(s.header) + 1 + enc.EncodedLen(len(payload))
	total := n + 1 + sigSegmentLen
	if total > maxTokenBytes {
		return "", total
	}
	signing := in[:0]
	if n > len(in) {
		signing = make([]byte, 0, n)
	}
	signing = append(signing, s.header...)
	signing = append(signing, '.')
	signing = enc.AppendEncode(signing, payload)
	enc.Encode(sig[:], ed25519.Sign(s.priv, signing))
	var b strings.Builder
	b.Grow(total)
	b.Write(signing)
	b.WriteByte('.')
	b.Write(sig[:])
	return b.String(), total
}

// appendClaims appends c as json.Marshal(c) writes it: the fields in
// declaration order with their omitempty rules, the embedded registered
// claims' fields in place, strings escaped as encoding/json escapes them.
func appendClaims(b []byte, c *Claims) []byte {
	b = append(b, `{"room":`...)
	b = jsonx.AppendString(b, c.Room)
	if c.Nick != "" {
		b = append(b, `,"nick":`...)
		b = jsonx.AppendString(b, c.Nick)
	}
	if c.Avatar != "" {
		b = append(b, `,"av":`...)
		b = jsonx.AppendString(b, c.Avatar)
	}
	b = append(b, `,"role":`...)
	b = jsonx.AppendString(b, c.Role)
	b = append(b, `,"addrs":`...)
	b = jsonx.AppendStrings(b, c.Addrs)
	if c.Ingests != 0 {
		b = append(b, `,"ni":`...)
		b = strconv.AppendInt(b, int64(c.Ingests), 10)
	}
	b = append(b, `,"login":`...)
	b = strconv.AppendInt(b, c.Login, 10)
	if c.Issuer != "" {
		b = append(b, `,"iss":`...)
		b = jsonx.AppendString(b, c.Issuer)
	}
	if c.Subject != "" {
		b = append(b, `,"sub":`...)
		b = jsonx.AppendString(b, c.Subject)
	}
	if len(c.Audience) != 0 {
		b = append(b, `,"aud":`...)
		// jwt.ClaimStrings.MarshalJSON.
		if len(c.Audience) == 1 && !jwt.MarshalSingleStringAsArray {
			b = jsonx.AppendString(b, c.Audience[0])
		} else {
			b = jsonx.AppendStrings(b, c.Audience)
		}
	}
	if c.ExpiresAt != nil {
		b = append(b, `,"exp":`...)
		b = appendNumericDate(b, c.ExpiresAt)
	}
	if c.NotBefore != nil {
		b = append(b, `,"nbf":`...)
		b = appendNumericDate(b, c.NotBefore)
	}
	if c.IssuedAt != nil {
		b = append(b, `,"iat":`...)
		b = appendNumericDate(b, c.IssuedAt)
	}
	if c.ID != "" {
		b = append(b, `,"jti":`...)
		b = jsonx.AppendString(b, c.ID)
	}
	return append(b, '}')
}

// appendNumericDate appends d as jwt.NumericDate.MarshalJSON writes it.
func appendNumericDate(b []byte, d *jwt.NumericDate) []byte {
	if jwt.TimePrecision == time.Second {
		// Whole seconds: MarshalJSON's fraction is empty.
		return strconv.AppendInt(b, d.Truncate(time.Second).Unix(), 10)
	}
	m, _ := d.MarshalJSON() // never fails
	return append(b, m...)
}

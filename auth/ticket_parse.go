package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/internal/strictjson"
)

// The entry endpoint verifies a business ticket once per viewer joining,
// hundreds of thousands a second at a show's start. The jwt library's
// parser decodes the header into a map on every call, decodes the claims by
// reflection with a nested json.Unmarshal per date, allocates its own HMAC,
// and the UTF-8 check then decoded the payload a second time. parse does
// what that parser did, with the options NewTicketVerifier gave it (HS256
// only, exp required, 5 s leeway on exp and nbf, iat not checked, unpadded
// base64url, exactly three segments), accepting and refusing the same
// tickets and filling the same claims (FuzzTicketVerifyMatchesJWT), for a
// fraction of the CPU: the header is decoded once per distinct header
// segment, the payload once, into a flat struct, and the HMAC state and
// buffers are pooled.

// ticketLeeway is the clock skew allowed on a ticket's exp and nbf.
const ticketLeeway = 5 * time.Second

// Parse errors, worded as the library words them.
var (
	errTicketSegments = fmt.Errorf("%w: token contains an invalid number of segments", jwt.ErrTokenMalformed)
	errTicketAlgNone  = fmt.Errorf("%w: signing method (alg) is unspecified", jwt.ErrTokenUnverifiable)
	errTicketExpMiss  = fmt.Errorf("%w: %w: exp claim is required", jwt.ErrTokenInvalidClaims, jwt.ErrTokenRequiredClaimMissing)
	errTicketExpired  = fmt.Errorf("%w: %w", jwt.ErrTokenInvalidClaims, jwt.ErrTokenExpired)
	errTicketNotYet   = fmt.Errorf("%w: %w", jwt.ErrTokenInvalidClaims, jwt.ErrTokenNotValidYet)
	errTicketSig      = fmt.Errorf("%w: %w", jwt.ErrTokenSignatureInvalid, jwt.ErrSignatureInvalid)
)

// ticketScratch is what one verification needs beside what it returns.
type ticketScratch struct {
	macs    []hash.Hash // HMAC-SHA256 keyed with each of the verifier's keys
	buf     []byte      // the ticket's bytes
	payload []byte      // the decoded payload
	sum     [sha256.Size]byte
	sig     [64]byte
	wire    ticketWire
}

// ticketWire is a ticket's claims as decoded: Ticket's JSON names (the
// payload has passed strictClaims, or decodeTicketFast, so they are spelt
// exactly and none is repeated), the dates kept as numbers.
type ticketWire struct {
	Nick      string           `json:"nick"`
	Avatar    string           `json:"av"`
	Role      string           `json:"role"`
	Issuer    string           `json:"iss"`
	Subject   string           `json:"sub"`
	Audience  jwt.ClaimStrings `json:"aud"`
	Rooms     []string         `json:"rooms"`
	Event     string           `json:"event"`
	ExpiresAt wireDate         `json:"exp"`
	NotBefore wireDate         `json:"nbf"`
	IssuedAt  wireDate         `json:"iat"`
	ID        string           `json:"jti"`
}

// wireDate is a *jwt.NumericDate as decoded, without the allocation and the
// nested json.Unmarshal of NumericDate.UnmarshalJSON.
type wireDate struct {
	set bool
	sec float64
}

// UnmarshalJSON is jwt.NumericDate.UnmarshalJSON, null included: encoding/json
// sets a *NumericDate to nil for null.
func (d *wireDate) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == 'n' {
		*d = wireDate{}
		return nil
	}
	f, ok := smallUint(b)
	if !ok {
		// A string holding a number, a fraction, an exponent, a huge
		// number: what the library does.
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("could not parse NumericData: %w", err)
		}
		var err error
		if f, err = n.Float64(); err != nil {
			return fmt.Errorf("could not convert json number value to float: %w", err)
		}
	}
	*d = wireDate{set: true, sec: f}
	return nil
}

// smallUint returns b as a number when it is 1 to 15 ASCII digits, which
// strconv.ParseFloat would return exactly.
func smallUint(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return float64(n), true
}

// numericDate is what jwt.NumericDate.UnmarshalJSON makes of sec.
func numericDate(sec float64) jwt.NumericDate {
	round, frac := math.Modf(sec)
	return jwt.NumericDate{Time: time.Unix(int64(round), int64(frac*1e9)).Truncate(jwt.TimePrecision)}
}

// ticketAlloc is a verified ticket and its dates in one allocation.
type ticketAlloc struct {
	t             Ticket
	exp, nbf, iat jwt.NumericDate
}

// checkHeader checks a ticket's header segment names HS256, as the library
// did: base64url, a JSON object, its "alg" the string "HS256". The last
// segment that passed is remembered, so that the one header every ticket
// of a login service carries is decoded once.
func (v *TicketVerifier) checkHeader(seg string) error {
	if last := v.header.Load(); last != nil && *last == seg {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return fmt.Errorf("%w: could not base64 decode header: %w", jwt.ErrTokenMalformed, err)
	}
	var h map[string]any
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("%w: could not JSON decode header: %w", jwt.ErrTokenMalformed, err)
	}
	alg, ok := h["alg"].(string)
	if !ok {
		return errTicketAlgNone
	}
	if alg != jwt.SigningMethodHS256.Alg() {
		return fmt.Errorf("%w: signing method %v is invalid", jwt.ErrTokenSignatureInvalid, alg)
	}
	last := strings.Clone(seg) // not the request's memory
	v.header.Store(&last)
	return nil
}

// strictClaims checks a ticket's payload as every JSON body is checked
// (strictjson.CheckJSON): UTF-8, no half surrogate pair, each claim of Ticket
// spelt exactly and none repeated. encoding/json, which the jwt library
// decodes claims with, matches names in any case and keeps the last of
// repeated ones, so {"sub":"alice","Role":"admin"} was an admin's ticket.
// The claim set is open: other claims are passed over.
func strictClaims(payload []byte) *ClaimError {
	err := strictjson.CheckJSON(payload, (*Ticket)(nil), false)
	if err == nil {
		return nil
	}
	ce := &ClaimError{Claim: "payload", Reason: err.Error()}
	if je, ok := errors.AsType[*strictjson.JSONError](err); ok {
		ce.Reason = je.Reason
		if je.Member != "" {
			ce.Claim = je.Member
		}
	}
	return ce
}

// strictPayload checks the claims of a JWT the library accepted as
// strictClaims does, v naming its claims.
func strictPayload(token string, v any) error {
	_, rest, _ := strings.Cut(token, ".")
	seg, _, _ := strings.Cut(rest, ".")
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return strictjson.CheckJSON(b, v, false)
}

// parse verifies a ticket's header, signature and times and returns its
// claims as the library filled them, and what strictClaims finds wrong
// with its payload.
func (v *TicketVerifier) parse(ticket string) (*Ticket, *ClaimError, error) {
	h, rest, ok := strings.Cut(ticket, ".")
	if !ok {
		return nil, nil, errTicketSegments
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.IndexByte(sig, '.') >= 0 {
		return nil, nil, errTicketSegments
	}
	if err := v.checkHeader(h); err != nil {
		return nil, nil, err
	}

	st := v.scratch.Get().(*ticketScratch)
	defer func() {
		st.wire = ticketWire{} // holds no claims between calls
		v.scratch.Put(st)
	}()
	enc := base64.RawURLEncoding
	st.buf = append(st.buf[:0], ticket...)
	signed := st.buf[:len(h)+1+len(p)]
	if need := enc.DecodedLen(len(p)); cap(st.payload) < need {
		st.payload = make([]byte, need)
	}
	n, err := enc.Decode(st.payload[:cap(st.payload)], signed[len(h)+1:])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: could not base64 decode claim: %w", jwt.ErrTokenMalformed, err)
	}
	payload := st.payload[:n]
	var bad *ClaimError // what the fast path takes is strict already
	if !decodeTicketFast(payload, &st.wire) {
		st.wire = ticketWire{}
		if err := json.Unmarshal(payload, &st.wire); err != nil {
			return nil, nil, fmt.Errorf("%w: could not JSON decode claim: %w", jwt.ErrTokenMalformed, err)
		}
		bad = strictClaims(payload)
	}
	var mac []byte
	if sseg := st.buf[len(signed)+1:]; enc.DecodedLen(len(sseg)) <= len(st.sig) {
		n, err = enc.Decode(st.sig[:], sseg)
		mac = st.sig[:n]
	} else {
		mac, err = enc.DecodeString(sig)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: could not base64 decode signature: %w", jwt.ErrTokenMalformed, err)
	}
	signedBy := false
	for _, h := range st.macs { // the current key first: one HMAC but during a rotation
		h.Reset()
		h.Write(signed)
		if hmac.Equal(mac, h.Sum(st.sum[:0])) {
			signedBy = true
			break
		}
	}
	if !signedBy {
		return nil, nil, errTicketSig
	}

	w := &st.wire
	now := v.now()
	if !w.ExpiresAt.set {
		return nil, nil, errTicketExpMiss
	}
	a := &ticketAlloc{exp: numericDate(w.ExpiresAt.sec)}
	var errs []error
	if !now.Before(a.exp.Add(ticketLeeway)) {
		errs = append(errs, errTicketExpired)
	}
	if w.NotBefore.set {
		a.nbf = numericDate(w.NotBefore.sec)
		if now.Before(a.nbf.Add(-ticketLeeway)) {
			errs = append(errs, errTicketNotYet)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	t := &a.t
	t.Nick, t.Avatar, t.Role = w.Nick, w.Avatar, w.Role
	t.Issuer, t.Subject, t.Audience, t.ID = w.Issuer, w.Subject, w.Audience, w.ID
	t.Rooms, t.Event = w.Rooms, w.Event
	t.ExpiresAt = &a.exp
	if w.NotBefore.set {
		t.NotBefore = &a.nbf
	}
	if w.IssuedAt.set {
		a.iat = numericDate(w.IssuedAt.sec)
		t.IssuedAt = &a.iat
	}
	return t, bad, nil
}

// decodeTicketFast decodes the payload an ordinary login service writes —
// one flat object whose keys are Ticket's claim names exactly, each once,
// its strings valid UTF-8 without escapes, rooms an array of such strings,
// its dates integers of at most 15 digits — as json.Unmarshal into
// ticketWire would, and reports whether it did. On anything else (another
// key, a key in another case, a repeated key, an escape, a fraction, null,
// any other array, invalid JSON) it reports
// false and the caller leaves the payload to json.Unmarshal and
// strictClaims: the fast path never has to know encoding/json's rules
// beyond what it accepts.
func decodeTicketFast(b []byte, w *ticketWire) bool {
	*w = ticketWire{}
	i := skipJSONSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipJSONSpace(b, i+1) == len(b)
	}
	var seen uint16 // the claims read, by their case below
	for {
		key, j, ok := plainJSONString(b, i)
		if !ok {
			return false
		}
		i = skipJSONSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipJSONSpace(b, i+1)
		str, date, bit := w.claim(key)
		if bit == 0 {
			return false
		}
		if seen&bit != 0 {
			return false // repeated: strictClaims refuses it
		}
		seen |= bit
		if bit == roomsClaim {
			rooms, j, ok := plainJSONStrings(b, i)
			if !ok {
				return false
			}
			w.Rooms, i = rooms, j
		} else if str != nil {
			v, j, ok := plainJSONString(b, i)
			if !ok {
				return false
			}
			*str, i = string(v), j
		} else {
			j := i
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			f, ok := smallUint(b[i:j])
			if !ok || (b[i] == '0' && j-i > 1) { // JSON has no leading zeros
				return false
			}
			*date, i = wireDate{set: true, sec: f}, j
		}
		i = skipJSONSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipJSONSpace(b, i+1)
		case '}':
			return skipJSONSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// plainJSONStrings returns the array of plain strings (plainJSONString)
// at b[i] and the index after it: what encoding/json decodes into a
// []string, an empty array included (an empty slice, not nil).
func plainJSONStrings(b []byte, i int) ([]string, int, bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false // null, or not an array: json.Unmarshal's
	}
	out := []string{}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return out, i + 1, true
	}
	for {
		v, j, ok := plainJSONString(b, i)
		if !ok {
			return nil, 0, false
		}
		out = append(out, string(v))
		i = skipJSONSpace(b, j)
		if i >= len(b) {
			return nil, 0, false
		}
		switch b[i] {
		case ',':
			i = skipJSONSpace(b, i+1)
		case ']':
			return out, i + 1, true
		default:
			return nil, 0, false
		}
	}
}

// skipJSONSpace returns the index of the first byte from i on that is not
// JSON white space.
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainJSONString returns the contents of the JSON string at b[i] and the
// index after it, when it has no escapes and is valid UTF-8: what
// encoding/json would decode to the same bytes.
func plainJSONString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	start := i + 1
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[start:j], j + 1, utf8.Valid(b[start:j])
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// roomsClaim is claim's bit for "rooms", the one list of strings.
const roomsClaim = 1 << 10

// claim is where decodeTicketFast puts the claim named key (a string or a
// date; neither for "rooms") and its bit among those read; bit 0: a claim
// strictClaims refuses.
func (w *ticketWire) claim(key []byte) (str *string, date *wireDate, bit uint16) {
	switch string(key) {
	case "nick":
		return &w.Nick, nil, 1 << 0
	case "av":
		return &w.Avatar, nil, 1 << 1
	case "role":
		return &w.Role, nil, 1 << 2
	case "iss":
		return &w.Issuer, nil, 1 << 3
	case "sub":
		return &w.Subject, nil, 1 << 4
	case "jti":
		return &w.ID, nil, 1 << 5
	case "exp":
		return nil, &w.ExpiresAt, 1 << 6
	case "nbf":
		return nil, &w.NotBefore, 1 << 7
	case "iat":
		return nil, &w.IssuedAt, 1 << 8
	case "event":
		return &w.Event, nil, 1 << 9
	case "rooms":
		return nil, nil, roomsClaim
	}
	return nil, nil, 0
}

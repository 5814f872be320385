package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"danmaku/internal/httpx"
	"danmaku/internal/strictjson"
)

// Rules is the rules document: what a RuleSource holds and Parse reads.
//
//	{"rules": [{"name": "entry-ip", "route": "GET /v1/entry", "key": "ip",
//	            "algorithm": "local", "limit": 500, "per": "1s", "burst": 2000}],
//	 "allow": {"cidrs": ["10.0.0.0/8"], "credentials": ["operator"]}}
type Rules struct {
	Rules []Rule `json:"rules"`
	Allow Allow  `json:"allow"`
}

// Rule is one limit: requests matching Route, counted per Key.
type Rule struct {
	// Name labels the rule's metrics and its Redis keys: 1-64 of a-z 0-9 _ -,
	// unique in the document. A rule that keeps its name across a reload
	// keeps its counts.
	Name string `json:"name"`
	// Route is "*" (every route), "[METHOD ]PATH" with PATH a route as the
	// server registers it ("/v1/rooms/:room/barrage"), or a PATH ending in
	// "/*" (every route under it).
	Route string `json:"route"`
	// Key is what is counted apart: "ip", "user", "room", "credential" or
	// "global" (every request of the route on this node, or across nodes
	// with the window algorithm).
	Key string `json:"key"`
	// Credential narrows a "credential" rule to one class of service key
	// ("gift", "announce", "operator"). Empty: every class.
	Credential string `json:"credential,omitempty"`
	// Algorithm is "local" (a token bucket on each node) or "window" (a
	// sliding window shared by the nodes).
	Algorithm string `json:"algorithm"`
	// Limit is how many requests a key may make per Per.
	Limit int64 `json:"limit"`
	// Per is the period of Limit, a Go duration from 100ms to 1h.
	Per string `json:"per"`
	// Burst is a local bucket's capacity. Zero: Limit. Not for windows,
	// which admit at most Limit in any Per.
	Burst int64 `json:"burst,omitempty"`
	// Near is the share of the budget from which an admitted request is
	// marked near the limit, in (0, 1]. Zero: 0.8.
	Near float64 `json:"near,omitempty"`
}

// Allow lists the callers no rule applies to: internal services.
type Allow struct {
	// CIDRs are client address ranges ("10.0.0.0/8", "fd00::/8").
	CIDRs []string `json:"cidrs,omitempty"`
	// Credentials are classes of service keys ("operator") or single keys
	// by fingerprint ("sha256:" and the first 16 hex digits of the key's
	// SHA-256, as Fingerprint writes it), so that the document holds no
	// secret.
	Credentials []string `json:"credentials,omitempty"`
}

// Key kinds.
const (
	KeyIP         = "ip"
	KeyUser       = "user"
	KeyRoom       = "room"
	KeyCredential = "credential"
	KeyGlobal     = "global"
)

// Algorithms.
const (
	AlgorithmLocal  = "local"
	AlgorithmWindow = "window"
)

// Bounds of a rule.
const (
	minPer = 100 * time.Millisecond
	maxPer = time.Hour
	// maxLimit keeps a bucket's arithmetic exact in float64.
	maxLimit = 1_000_000_000
	// maxWindowLimit bounds a shared window's sorted set: windows are for
	// low rates that must hold exactly (operators, gift credentials, a
	// user's entries), and each admitted request is one member until it
	// leaves the window.
	maxWindowLimit = 10_000
	maxRules       = 256
	maxNameLen     = 64
	defaultNear    = 0.8
	// MaxDocument bounds a rules document, from a file or Redis.
	MaxDocument = 256 << 10
)

// CodeBadRules is the code of a rules document that decodes but breaks a
// rule; bad JSON keeps the shared codes bad_json and bad_utf8.
const CodeBadRules = "bad_rules"

// ErrBadRules marks every error Parse returns.
var ErrBadRules = errors.New("ratelimit: bad rules")

// ConfigError is a rules document Parse refuses: a stable Code (bad_json,
// bad_utf8, body_too_large, bad_rules) and a message naming the field by
// its JSON path ("rules[2].per").
type ConfigError struct {
	Code    string
	Message string
}

func (e *ConfigError) Error() string { return "ratelimit: " + e.Code + ": " + e.Message }

// Is makes every ConfigError match ErrBadRules.
func (e *ConfigError) Is(target error) bool { return target == ErrBadRules }

func badRule(i int, field, format string, args ...any) *ConfigError {
	return &ConfigError{Code: CodeBadRules, Message: fmt.Sprintf("rules[%d].%s: ", i, field) + fmt.Sprintf(format, args...)}
}

// Parse decodes and checks a rules document. It reads JSON with the
// decoder every request body is read with (strictjson.Decode: unknown, repeated
// and case-variant fields refused, one value, valid UTF-8), so that a typo
// in a limit is an error at load, not a rule silently missing.
func Parse(data []byte) (Rules, error) {
	if len(data) > MaxDocument {
		return Rules{}, &ConfigError{Code: httpx.CodeTooLarge, Message: fmt.Sprintf("body exceeds %d bytes", MaxDocument)}
	}
	var r Rules
	if err := strictjson.Decode(data, &r); err != nil {
		if e, ok := errors.AsType[*strictjson.Error](err); ok {
			return Rules{}, &ConfigError{Code: e.Code, Message: e.Message}
		}
		return Rules{}, fmt.Errorf("ratelimit: %w", err) // not a pointer: our bug
	}
	if _, err := compile(r); err != nil {
		return Rules{}, err
	}
	// An empty allow list is none: the document's one form (its encoding
	// omits them), so what a node stores and logs reads back the same.
	if len(r.Allow.CIDRs) == 0 {
		r.Allow.CIDRs = nil
	}
	if len(r.Allow.Credentials) == 0 {
		r.Allow.Credentials = nil
	}
	return r, nil
}

// compiled is a checked rule with its numbers worked out.
type compiled struct {
	Rule
	method, path string
	prefix       bool // path is a prefix ("/v1/admin/")
	all          bool // route "*"
	per          time.Duration
	capacity     float64 // local bucket capacity
	perSec       float64 // local refill
	near         float64
}

var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// compile checks r and works out each rule's numbers.
func compile(r Rules) (*document, error) {
	if len(r.Rules) > maxRules {
		return nil, &ConfigError{Code: CodeBadRules, Message: fmt.Sprintf("rules: at most %d (got %d)", maxRules, len(r.Rules))}
	}
	d := &document{allowCreds: map[string]bool{}}
	names := map[string]bool{}
	for i, ru := range r.Rules {
		c := compiled{Rule: ru}
		if !validName(ru.Name) {
			return nil, badRule(i, "name", "must be 1-%d of a-z 0-9 _ - (got %q)", maxNameLen, ru.Name)
		}
		if names[ru.Name] {
			return nil, badRule(i, "name", "%q is already the name of another rule", ru.Name)
		}
		names[ru.Name] = true
		if err := c.parseRoute(); err != nil {
			return nil, badRule(i, "route", "%v (got %q)", err, ru.Route)
		}
		switch ru.Key {
		case KeyIP, KeyUser, KeyRoom, KeyCredential, KeyGlobal:
		default:
			return nil, badRule(i, "key", `must be "ip", "user", "room", "credential" or "global" (got %q)`, ru.Key)
		}
		if ru.Credential != "" && ru.Key != KeyCredential {
			return nil, badRule(i, "credential", `only a "credential" rule names a credential class`)
		}
		if ru.Credential != "" && !validName(ru.Credential) {
			return nil, badRule(i, "credential", "must be 1-%d of a-z 0-9 _ - (got %q)", maxNameLen, ru.Credential)
		}
		switch ru.Algorithm {
		case AlgorithmLocal, AlgorithmWindow:
		default:
			return nil, badRule(i, "algorithm", `must be "local" or "window" (got %q)`, ru.Algorithm)
		}
		per, err := time.ParseDuration(ru.Per)
		if err != nil || per < minPer || per > maxPer {
			return nil, badRule(i, "per", "must be a duration from %v to %v, e.g. \"1s\" or \"1m\" (got %q)", minPer, maxPer, ru.Per)
		}
		c.per = per
		limitMax := int64(maxLimit)
		if ru.Algorithm == AlgorithmWindow {
			limitMax = maxWindowLimit
		}
		if ru.Limit < 1 || ru.Limit > limitMax {
			return nil, badRule(i, "limit", "must be a whole number from 1 to %d for a %s rule (got %d)", limitMax, ru.Algorithm, ru.Limit)
		}
		switch {
		case ru.Burst != 0 && ru.Algorithm == AlgorithmWindow:
			return nil, badRule(i, "burst", "a window admits at most limit in any period; burst is for local rules")
		case ru.Burst < 0 || ru.Burst > maxLimit:
			return nil, badRule(i, "burst", "must be a whole number from 1 to %d, or absent for the limit (got %d)", maxLimit, ru.Burst)
		}
		c.capacity = float64(ru.Limit)
		if ru.Burst > 0 {
			c.capacity = float64(ru.Burst)
		}
		c.perSec = float64(ru.Limit) / per.Seconds()
		if ru.Near < 0 || ru.Near > 1 || math.IsNaN(ru.Near) {
			return nil, badRule(i, "near", "must be a share in (0, 1], or absent for %v (got %v)", defaultNear, ru.Near)
		}
		c.near = ru.Near
		if c.near == 0 {
			c.near = defaultNear
		}
		d.rules = append(d.rules, &c)
	}
	for i, s := range r.Allow.CIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, &ConfigError{Code: CodeBadRules, Message: fmt.Sprintf("allow.cidrs[%d]: %q is neither a CIDR nor an address", i, s)}
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		d.allowNets = append(d.allowNets, p.Masked())
	}
	for i, s := range r.Allow.Credentials {
		if !validName(s) && !validFingerprint(s) {
			return nil, &ConfigError{Code: CodeBadRules, Message: fmt.Sprintf("allow.credentials[%d]: want a credential class (a-z 0-9 _ -) or \"sha256:\" and 16 hex digits (got %q)", i, s)}
		}
		d.allowCreds[s] = true
	}
	return d, nil
}

func (c *compiled) parseRoute() error {
	r := c.Route
	if r == "*" {
		c.all = true
		return nil
	}
	if m, p, ok := strings.Cut(r, " "); ok {
		if !methods[m] {
			return fmt.Errorf("method %q is not an HTTP method in capitals", m)
		}
		c.method, r = m, p
	}
	if !strings.HasPrefix(r, "/") || strings.ContainsAny(r, " \t?#") || len(r) > 256 {
		return errors.New(`want "*", or an optional method and a path starting with "/"`)
	}
	if strings.HasSuffix(r, "/*") {
		c.prefix, r = true, r[:len(r)-1]
	}
	if strings.Contains(r, "*") {
		return errors.New(`"*" only as the whole route or as the last path segment`)
	}
	c.path = r
	return nil
}

// matches reports whether the rule covers a request to the route
// registered as path (gin's FullPath).
func (c *compiled) matches(method, path string) bool {
	if c.method != "" && c.method != method {
		return false
	}
	switch {
	case c.all:
		return true
	case c.prefix:
		return strings.HasPrefix(path, c.path)
	}
	return path == c.path
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

func validFingerprint(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != fingerprintHex {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !(h[i] >= '0' && h[i] <= '9' || h[i] >= 'a' && h[i] <= 'f') {
			return false
		}
	}
	return true
}

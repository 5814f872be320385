package ratelimit

import (
	"crypto/subtle"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/httpx"
	"danmaku/sdk/wire"
)

// Identity is who a request comes from, as its server has verified it.
type Identity struct {
	// User is the verified user id. Empty: unknown (user rules skip the
	// request; its handler refuses it anyway).
	User string
}

// IdentifyFunc tells who a request comes from. It runs only for requests a
// "user" rule covers, before the handler: it must verify what it reads
// (a ticket, a token), since a key taken on a client's word would let one
// client spend another's budget.
type IdentifyFunc func(c *gin.Context) Identity

// nearKey is where the middleware leaves the name of a rule a request
// came near, for the handler (Near).
const nearKey = "danmaku.ratelimit.near"

// Near reports whether the request passed a rule with most of its budget
// used, and which: the handler may then answer more cheaply (the gslb
// serves the client's last allocation and stretches its refresh hint).
func Near(c *gin.Context) (rule string, near bool) {
	v, ok := c.Get(nearKey)
	if !ok {
		return "", false
	}
	rule, _ = v.(string)
	return rule, true
}

// Handler returns the gin middleware applying the rules to the routes it
// is installed on. identify resolves users for "user" rules; nil: those
// rules skip every request.
//
// A request over a rule is answered 429 rate_limited with a Retry-After
// of the rule's wait, rounded up to whole seconds and stretched by up to
// as much again at random, so that the clients one burst turned away do
// not come back in step. The checks stop at the first refusal; the rules
// checked before it have counted the request.
func (l *Limiter) Handler(identify IdentifyFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		d := l.doc.Load()
		rules := d.forRoute(c.Request.Method, c.FullPath())
		if len(rules) == 0 {
			c.Next()
			return
		}
		ip, _ := netip.ParseAddr(c.ClientIP())
		ip = ip.Unmap()
		for _, p := range d.allowNets {
			if p.Contains(ip) {
				c.Next()
				return
			}
		}
		class, fp := l.credentialOf(c)
		if class != "" && (d.allowCreds[class] || d.allowCreds[fp]) {
			c.Next()
			return
		}
		var (
			id       Identity
			resolved bool
			nearRule string
			now      = l.cfg.Clock.Now()
		)
		for _, a := range rules {
			var key string
			switch a.Key {
			case KeyIP:
				key = ipKey(ip)
			case KeyGlobal:
				key = "all"
			case KeyRoom:
				key = roomOf(c)
			case KeyCredential:
				if class != "" && (a.Credential == "" || a.Credential == class) {
					key = class + ":" + fp
				}
			case KeyUser:
				if !resolved && identify != nil {
					id, resolved = identify(c), true
				}
				key = id.User
			}
			if key == "" {
				continue // the rule does not apply to this request
			}
			v := l.check(c.Request.Context(), a, key, now)
			switch {
			case !v.ok:
				a.cLimited.Inc()
				abortLimited(c, a, v.retry)
				return
			case v.near:
				a.cNear.Inc()
				if nearRule == "" {
					nearRule = a.Name
				}
			default:
				a.cAllowed.Inc()
			}
		}
		if nearRule != "" {
			c.Set(nearKey, nearRule)
		}
		c.Next()
	}
}

func abortLimited(c *gin.Context, a *active, wait time.Duration) {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	secs += rand.IntN(secs + 1)
	httpx.Abort(c, &httpx.Error{
		Status: http.StatusTooManyRequests, Code: httpx.CodeRateLimited,
		Message:    fmt.Sprintf("over the rate limit %q (%d per %s); retry after the Retry-After delay", a.Name, a.Limit, a.per),
		RetryAfter: time.Duration(secs) * time.Second,
	})
}

// ipKey is the counted key of a client address. An IPv6 client counts by
// its /64: one subscriber gets a whole /64, and counting single addresses
// would let it rotate through them.
func ipKey(ip netip.Addr) string {
	if !ip.IsValid() {
		return "unknown"
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// roomOf is the room a request names, in its path or its query, if it is a
// valid room name (anything else is refused by the handler and must not
// become a key).
func roomOf(c *gin.Context) string {
	r := c.Param("room")
	if r == "" {
		r = c.Query("room")
	}
	if !wire.ValidRoom(r) {
		return ""
	}
	return r
}

// credentialOf returns the class and fingerprint of the service key the
// request bears, if it bears one. Keys are compared in constant time; a
// dynamic token is longer than any key, so it costs a length check each.
func (l *Limiter) credentialOf(c *gin.Context) (class, fp string) {
	if len(l.creds) == 0 {
		return "", ""
	}
	tok := []byte(httpx.BearerToken(c, ""))
	if len(tok) == 0 {
		return "", ""
	}
	for _, k := range l.creds {
		if subtle.ConstantTimeCompare(tok, k.key) == 1 {
			class, fp = k.class, k.fp
		}
	}
	return class, fp
}

package httpx

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-contrib/cors"
	"github.com/gin-gonic/gin"
)

// Origins is the list of web origins ("https://app.example.com") whose pages
// may call an API from the browser: the CORS allow-list of the gslb and the
// ingest, and the list the edge checks a WebSocket handshake's Origin
// against. "*" allows every origin. The zero value allows none, so a
// deployment opens its APIs to pages only where it says so.
type Origins struct {
	all  bool
	list map[string]struct{}
}

// ParseOrigins checks and normalises origins: each is "*" or
// scheme://host[:port] with scheme http or https and nothing after the host.
func ParseOrigins(origins []string) (Origins, error) {
	o := Origins{list: map[string]struct{}{}}
	for _, s := range origins {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if s == "*" {
			o.all = true
			continue
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return Origins{}, fmt.Errorf("httpx: origin %q is not \"*\" or scheme://host[:port]", s)
		}
		o.list[strings.ToLower(u.Scheme+"://"+u.Host)] = struct{}{}
	}
	return o, nil
}

// Allowed reports whether a request with this Origin header may proceed. An
// empty Origin is a native client (not a browser page) and is allowed: the
// list protects users' browsers, not the API.
func (o Origins) Allowed(origin string) bool {
	if origin == "" || o.all {
		return true
	}
	_, ok := o.list[strings.ToLower(origin)]
	return ok
}

// Empty reports whether no origin is allowed.
func (o Origins) Empty() bool { return !o.all && len(o.list) == 0 }

// corsMaxAge lets a browser reuse a preflight for ten minutes: a poller's
// every request would otherwise cost two round trips.
const corsMaxAge = 10 * time.Minute

// CodeCORSNotAllowed: a CORS preflight to a route that browsers do not
// call (gifts, operator APIs): no origin is granted it.
const CodeCORSNotAllowed = "cors_not_allowed"

// CORS returns the middleware that answers preflights and sets the CORS
// headers for allowed origins, on the routes browsers call (gin patterns,
// "/v1/rooms/:room/barrage") and on no other: a preflight to another path
// is answered 403 cors_not_allowed, and a request to one gets no CORS
// headers, so that no page can read what a server-to-server or operator
// API answers. The library (gin-contrib/cors) answers with a bare 403 for
// a foreign origin; here a foreign preflight gets the coded error, and a
// foreign simple request is served without CORS headers (the browser then
// hides the answer from the page, which is the protection).
func CORS(o Origins, routes []string) gin.HandlerFunc {
	granted := corsFor(o)
	return func(c *gin.Context) {
		path := c.Request.URL.EscapedPath() // as the engine routes it
		if !slices.ContainsFunc(routes, func(r string) bool { return matchRoute(r, path) }) {
			if c.Request.Method == http.MethodOptions && c.GetHeader("Origin") != "" {
				Abort(c, Errorf(http.StatusForbidden, CodeCORSNotAllowed, "browsers do not call this route: no origin may"))
			}
			return
		}
		granted(c)
	}
}

// matchRoute reports whether path is one of pattern's: its segments equal,
// a ":name" segment matching any one that is not empty.
func matchRoute(pattern, path string) bool {
	for {
		p, pRest, pMore := strings.Cut(pattern, "/")
		s, sRest, sMore := strings.Cut(path, "/")
		if strings.HasPrefix(p, ":") {
			if s == "" {
				return false
			}
		} else if p != s {
			return false
		}
		if pMore != sMore {
			return false
		}
		if !pMore {
			return true
		}
		pattern, path = pRest, sRest
	}
}

// corsFor is CORS on a route browsers call.
func corsFor(o Origins) gin.HandlerFunc {
	if o.Empty() {
		return func(c *gin.Context) {
			if c.Request.Method == http.MethodOptions && c.GetHeader("Origin") != "" {
				Abort(c, Errorf(http.StatusForbidden, CodeForbidden, "origin not allowed"))
			}
		}
	}
	lib := cors.New(cors.Config{
		AllowOriginFunc: func(string) bool { return true }, // checked below
		AllowMethods:    []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut},
		AllowHeaders:    []string{"Authorization", "Content-Type", "Accept"},
		ExposeHeaders:   []string{"Retry-After", "Date"},
		MaxAge:          corsMaxAge,
	})
	return func(c *gin.Context) {
		origin := c.GetHeader("Origin")
		if !o.Allowed(origin) {
			if c.Request.Method == http.MethodOptions {
				Abort(c, Errorf(http.StatusForbidden, CodeForbidden, "origin not allowed"))
			}
			return
		}
		lib(c)
	}
}

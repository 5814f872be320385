// Package origin serves an object store over HTTP exactly as a CDN sees S3:
// every object with the Content-Type, Cache-Control and ETag it was written
// with, conditional requests answered as RFC 9110 says (304, 412), and 404
// for a key not yet written (a second not yet due), never 403. Each object
// has one URL: its key as written, so that no cache holds it twice. Embedded
// mode points clients straight at it; in front of S3 the CDN plays this
// part. Safe for concurrent use.
package origin

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/httpx"
	"danmaku/internal/objstore"
)

// NotFoundCacheControl is sent with a 404. A 404 means "not yet": a CDN may
// keep it only briefly (the CDN configuration bounds it sub-second), and a
// browser must not keep it at all.
const NotFoundCacheControl = "no-cache"

// CodePreconditionFailed answers an If-Match or If-Unmodified-Since that
// the object does not meet.
const CodePreconditionFailed = "precondition_failed"

// Register serves every key at the root of e, beside the engine's own routes
// (/healthz, /metrics): objects are looked up for any path no route matches,
// because gin cannot mix a root catch-all with static routes.
func Register(e *gin.Engine, store objstore.Store) {
	e.NoRoute(func(c *gin.Context) {
		if c.Request.Method != http.MethodGet && c.Request.Method != http.MethodHead {
			httpx.Abort(c, httpx.Errorf(http.StatusMethodNotAllowed, httpx.CodeNoMethod, "objects are read-only"))
			return
		}
		serve(c, store)
	})
}

func serve(c *gin.Context, store objstore.Store) {
	// Pollers of many origins set CORS-free fetches from web pages.
	c.Header("Access-Control-Allow-Origin", "*")
	key, ok := objectKey(c.Request)
	if !ok {
		notFound(c, "no such object: an object is asked for by its key as written, without percent-escapes")
		return
	}
	obj, err := store.Get(c.Request.Context(), key)
	switch {
	case errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrBadKey):
		notFound(c, "no such object (a second not yet written is 404)")
		return
	case err != nil:
		e := httpx.Errorf(http.StatusServiceUnavailable, httpx.CodeUnavailable, "object store unavailable")
		e.RetryAfter = time.Second
		httpx.Abort(c, e)
		return
	}
	c.Header("Cache-Control", obj.CacheControl)
	c.Header("ETag", obj.ETag)
	// The stores keep no modification time, so the origin sends no
	// Last-Modified and, as RFC 9110 13.1.3 and 13.1.4 require of a
	// resource without one, ignores If-Modified-Since and
	// If-Unmodified-Since.
	switch evaluate(c.Request.Header, obj.ETag, time.Time{}) {
	case notModified:
		c.Status(http.StatusNotModified)
		return
	case preconditionFailed:
		httpx.Abort(c, httpx.Errorf(http.StatusPreconditionFailed, CodePreconditionFailed, "the object does not meet If-Match or If-Unmodified-Since"))
		return
	}
	ct := obj.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	c.Header("Content-Length", strconv.Itoa(len(obj.Body)))
	if c.Request.Method == http.MethodHead {
		c.Header("Content-Type", ct)
		c.Status(http.StatusOK)
		return
	}
	c.Data(http.StatusOK, ct, obj.Body)
}

func notFound(c *gin.Context, msg string) {
	c.Header("Cache-Control", NotFoundCacheControl)
	httpx.Abort(c, httpx.Errorf(http.StatusNotFound, httpx.CodeNotFound, "%s", msg))
}

// objectKey is the key a request names, and false when the path is not a
// key as written. Keys (rooms/ROOM/s/T.msgpack, with room ids of
// A-Z a-z 0-9 _ -) never need escaping, so a percent-escape can only be a
// second spelling of a key — /rooms%2Fdemo%2Flive.json for
// /rooms/demo/live.json — and a CDN would cache each spelling apart: an
// old manifest under one, a new one under the other. Caches key on the
// path as sent, so that is what is checked (EscapedPath: the path as sent,
// or, for one that was sent with characters a path must escape, its
// escaped form).
func objectKey(r *http.Request) (string, bool) {
	if strings.Contains(r.URL.EscapedPath(), "%") {
		return "", false
	}
	return strings.TrimPrefix(r.URL.Path, "/"), true
}

// outcome is what the conditional headers make of a request.
type outcome int

const (
	proceed outcome = iota
	notModified
	preconditionFailed
)

// evaluate applies a GET or HEAD's preconditions to an object that exists,
// with etag and (zero: unknown) modified, in the order of RFC 9110 13.2.2:
// If-Match, else If-Unmodified-Since; then If-None-Match, else
// If-Modified-Since. If-None-Match uses the weak comparison, so a CDN
// revalidating with W/"…", a list of the tags it holds, or "*" gets its
// 304.
func evaluate(h http.Header, etag string, modified time.Time) outcome {
	if im := h.Values("If-Match"); len(im) > 0 {
		if !matchAny(im, etag, true) {
			return preconditionFailed
		}
	} else if t, ok := headerTime(h, "If-Unmodified-Since"); ok && !modified.IsZero() && modified.Truncate(time.Second).After(t) {
		return preconditionFailed
	}
	if inm := h.Values("If-None-Match"); len(inm) > 0 {
		if matchAny(inm, etag, false) {
			return notModified
		}
		return proceed
	}
	if t, ok := headerTime(h, "If-Modified-Since"); ok && !modified.IsZero() && !modified.Truncate(time.Second).After(t) {
		return notModified
	}
	return proceed
}

// headerTime parses an HTTP date; an invalid one is ignored (RFC 9110
// 13.1.3).
func headerTime(h http.Header, name string) (time.Time, bool) {
	v := h.Get(name)
	if v == "" {
		return time.Time{}, false
	}
	t, err := http.ParseTime(v)
	return t, err == nil
}

// matchAny reports whether the field values (each "*" or a list of entity
// tags, possibly over several header lines) name etag. strong asks for the
// strong comparison (If-Match): both tags strong and equal. Otherwise the
// weak one: equal opaque tags, W/ or not. An unparsable member ends the
// list, as in net/http: what precedes it still counts.
func matchAny(values []string, etag string, strong bool) bool {
	ours, ourWeak, ok := parseETag(etag)
	if !ok {
		return false
	}
	for _, v := range values {
		for {
			v = strings.TrimLeft(v, " \t,")
			if v == "" {
				break
			}
			if v[0] == '*' {
				return true
			}
			end := tagEnd(v)
			if end < 0 {
				break
			}
			tag, weak, _ := parseETag(v[:end])
			if tag == ours && (!strong || (!weak && !ourWeak)) {
				return true
			}
			v = v[end:]
		}
	}
	return false
}

// tagEnd is the length of the entity tag that starts s, or -1.
func tagEnd(s string) int {
	start := 0
	if strings.HasPrefix(s, "W/") {
		start = 2
	}
	if len(s) < start+2 || s[start] != '"' {
		return -1
	}
	i := strings.IndexByte(s[start+1:], '"')
	if i < 0 {
		return -1
	}
	return start + 1 + i + 1
}

// parseETag splits an entity tag into its opaque tag (quotes included) and
// whether it is weak.
func parseETag(s string) (tag string, weak, ok bool) {
	if tagEnd(s) != len(s) {
		return "", false, false
	}
	if strings.HasPrefix(s, "W/") {
		return s[2:], true, true
	}
	return s, false, true
}

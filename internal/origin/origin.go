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
const CodePreconditionFailed = httpx.CodePreconditionFailed

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
	switch httpx.EvaluatePreconditions(c.Request.Header, obj.ETag, time.Time{}) {
	case httpx.NotModified:
		c.Status(http.StatusNotModified)
		return
	case httpx.PreconditionFailed:
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

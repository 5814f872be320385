// Package origin serves an object store over HTTP exactly as a CDN sees S3:
// every object with the Content-Type, Cache-Control and ETag it was written
// with, 304 for a matching If-None-Match, and 404 for a key not yet written
// (a second not yet due), never 403. Embedded mode points clients straight at
// it; in front of S3 the CDN plays this part. Safe for concurrent use.
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
	key := strings.TrimPrefix(c.Request.URL.Path, "/")
	// Pollers of many origins set CORS-free fetches from web pages.
	c.Header("Access-Control-Allow-Origin", "*")
	obj, err := store.Get(c.Request.Context(), key)
	switch {
	case errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrBadKey):
		c.Header("Cache-Control", NotFoundCacheControl)
		httpx.Abort(c, httpx.Errorf(http.StatusNotFound, httpx.CodeNotFound, "no such object (a second not yet written is 404)"))
		return
	case err != nil:
		e := httpx.Errorf(http.StatusServiceUnavailable, httpx.CodeUnavailable, "object store unavailable")
		e.RetryAfter = time.Second
		httpx.Abort(c, e)
		return
	}
	c.Header("Cache-Control", obj.CacheControl)
	c.Header("ETag", obj.ETag)
	if inm := c.GetHeader("If-None-Match"); inm != "" && inm == obj.ETag {
		c.Status(http.StatusNotModified)
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

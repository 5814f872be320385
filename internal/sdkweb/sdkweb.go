// Package sdkweb serves the browser SDK (danmaku.js), its demo page and the
// vendored msgpack decoder from the files danmaku/sdk/web embeds in the
// binary, so that `danmaku dev` shows the demo at the gslb's "/" with no
// npm at run time. sdk/web/README.md documents the SDK itself.
package sdkweb

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/httpx"
	"danmaku/sdk/web"
)

// contentTypes names what the embedded files are. JavaScript is
// text/javascript (RFC 9239): browsers refuse a module script of another type.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".mjs":  "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".json": "application/json",
	".svg":  "image/svg+xml",
	".png":  "image/png",
}

type asset struct {
	body []byte
	typ  string
	etag string
}

// assets are read once: the files never change in a running binary.
var assets = func() map[string]asset {
	m := map[string]asset{}
	err := fs.WalkDir(web.Files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		typ, ok := contentTypes[path.Ext(name)]
		if !ok {
			return nil // only what a page loads is served
		}
		b, err := web.Files.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[name] = asset{body: b, typ: typ, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic("sdkweb: embedded files: " + err.Error())
	}
	return m
}()

// Register serves GET and HEAD "/" (the demo page) and "/sdk/*file" (the
// SDK module, the demo's script and style, the vendored msgpack) on e.
// Every answer carries Cache-Control: no-cache, so a browser revalidates
// (by ETag) and never runs a stale SDK against a newer server.
func Register(e *gin.Engine) {
	index := func(c *gin.Context) { serve(c, "demo/index.html") }
	file := func(c *gin.Context) {
		name := strings.TrimPrefix(path.Clean("/"+c.Param("file")), "/")
		serve(c, name)
	}
	e.GET("/", index)
	e.HEAD("/", index)
	e.GET("/sdk/*file", file)
	e.HEAD("/sdk/*file", file)
}

// serve answers with the whole file. Preconditions are evaluated here,
// not by http.ServeContent, which answers a failed If-Match with an empty
// 412 and a bad Range with a plain-text 416: every answer but a success is
// the coded error. Range is ignored (RFC 9110 14.2 lets a server do so):
// the files are small, and a page loads each whole.
func serve(c *gin.Context, name string) {
	a, ok := assets[name]
	if !ok {
		httpx.Abort(c, httpx.Errorf(http.StatusNotFound, httpx.CodeNotFound, "no such file"))
		return
	}
	h := c.Writer.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	// The files carry no modification time (embed.FS has none), so there
	// is no Last-Modified and the date preconditions are ignored, as RFC
	// 9110 13.1.3 and 13.1.4 require of a resource without one.
	switch httpx.EvaluatePreconditions(c.Request.Header, a.etag, time.Time{}) {
	case httpx.NotModified:
		c.Status(http.StatusNotModified)
		return
	case httpx.PreconditionFailed:
		httpx.Abort(c, httpx.Errorf(http.StatusPreconditionFailed, httpx.CodePreconditionFailed, "the file does not meet If-Match"))
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	if c.Request.Method == http.MethodHead {
		h.Set("Content-Type", a.typ)
		c.Status(http.StatusOK)
		return
	}
	c.Data(http.StatusOK, a.typ, a.body)
}

// Package web serves the browser SDK (danmaku.js), its demo page and the
// vendored msgpack decoder from files embedded in the binary, so that
// `danmaku dev` shows the demo at the gslb's "/" with no npm at run time.
// sdk/web/README.md documents the SDK itself.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/httpx"
)

//go:embed danmaku.js demo vendor
var files embed.FS

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
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		typ, ok := contentTypes[path.Ext(name)]
		if !ok {
			return nil // only what a page loads is served
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[name] = asset{body: b, typ: typ, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic("sdk/web: embedded files: " + err.Error())
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

func serve(c *gin.Context, name string) {
	a, ok := assets[name]
	if !ok {
		httpx.Abort(c, httpx.Errorf(http.StatusNotFound, httpx.CodeNotFound, "no such file"))
		return
	}
	h := c.Writer.Header()
	h.Set("Content-Type", a.typ)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	// ServeContent answers HEAD, If-None-Match (304) and ranges.
	http.ServeContent(c.Writer, c.Request, name, time.Time{}, bytes.NewReader(a.body))
}

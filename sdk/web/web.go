// Package web embeds the browser SDK (danmaku.js), its demo page and the
// vendored msgpack decoder, so that a server can serve them from its binary
// with no npm at run time (the server's `danmaku dev` shows the demo at the
// gslb's "/"). sdk/web/README.md documents the SDK itself.
package web

import "embed"

// Files holds danmaku.js and the demo and vendor directories, by their
// paths under sdk/web ("danmaku.js", "demo/index.html", ...). The Go
// source, the tests and the npm tooling are not in it.
//
//go:embed danmaku.js demo vendor
var Files embed.FS

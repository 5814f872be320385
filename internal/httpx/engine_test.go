package httpx

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
)

// TestOnePathOneAnswer: a path no route names, whatever its likeness to one
// (a trailing slash, another case, doubled or dotted segments), is a coded
// 404 — never gin's redirect, whose HTML body a POST cannot follow and
// whose Location would repeat a ?token= or ?ticket=.
func TestOnePathOneAnswer(t *testing.T) {
	e := NewEngine(EngineConfig{Role: "r"})
	e.GET("/v1/entry", func(c *gin.Context) { c.JSON(200, gin.H{"ok": true}) })
	e.POST("/v1/gifts", func(c *gin.Context) { c.JSON(200, gin.H{"ok": true}) })
	e.GET("/v1/ws", func(c *gin.Context) { c.JSON(200, gin.H{"ok": true}) })
	e.GET("/v1/admin/bans/:user", func(c *gin.Context) { c.JSON(200, gin.H{"user": c.Param("user")}) })
	for _, tt := range []struct{ method, target string }{
		{"GET", "/v1/entry/?ticket=SECRET"},
		{"GET", "/v1/entry/"},
		{"POST", "/v1/gifts/"},
		{"GET", "/v1/ws/?token=SECRET"},
		{"GET", "/V1/ENTRY?ticket=SECRET"},
		{"GET", "/v1//entry?ticket=SECRET"},
		{"GET", "/v1/./entry?ticket=SECRET"},
		{"GET", "/v1/x/../entry?ticket=SECRET"},
		{"GET", "/v1/%65ntry?ticket=SECRET"},
		{"GET", "/healthz/"},
	} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(tt.method, tt.target, nil))
		if w.Code != http.StatusNotFound || errorCode(t, w.Body.Bytes()) != CodeNotFound {
			t.Errorf("%s %s = %d %s, want a coded 404", tt.method, tt.target, w.Code, w.Body)
		}
		if loc := w.Header().Get("Location"); loc != "" {
			t.Errorf("%s %s: Location %q", tt.method, tt.target, loc)
		}
		if strings.Contains(w.Body.String(), "SECRET") {
			t.Errorf("%s %s: the answer repeats the query: %s", tt.method, tt.target, w.Body)
		}
	}
	// A parameter is unescaped after matching: one segment, whatever it
	// holds.
	for target, want := range map[string]string{
		"/v1/admin/bans/a%2Fb":     "a/b",
		"/v1/admin/bans/%2F":       "/",
		"/v1/admin/bans/a%20b":     "a b",
		"/v1/admin/bans/%E4%B8%AD": "中",
		// As a path unescapes, not a query: "+" is a plus.
		"/v1/admin/bans/a+b":   "a+b",
		"/v1/admin/bans/a%2Bb": "a+b",
	} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
		if w.Code != 200 || !strings.Contains(w.Body.String(), fmt.Sprintf("%q", want)) {
			t.Errorf("GET %s = %d %s, want user %q", target, w.Code, w.Body, want)
		}
	}
}

// TestPanicLogKeepsSecrets: the log of a panic names the route, not the
// query or the headers a ticket, token or key travels in.
func TestPanicLogKeepsSecrets(t *testing.T) {
	var buf bytes.Buffer
	e := NewEngine(EngineConfig{Role: "r", Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	e.GET("/v1/entry", func(c *gin.Context) { panic("boom") })
	r := httptest.NewRequest("GET", "/v1/entry?room=demo&ticket=SECRET1&token=SECRET2", nil)
	r.Header.Set("Authorization", "Bearer SECRET3")
	r.Header.Set("Cookie", "s=SECRET4")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	if w.Code != 500 || errorCode(t, w.Body.Bytes()) != CodeInternal {
		t.Fatalf("panic = %d %s", w.Code, w.Body)
	}
	log := buf.String()
	if !strings.Contains(log, "route=/v1/entry") || !strings.Contains(log, "boom") {
		t.Fatalf("log does not name the route and the panic: %s", log)
	}
	if strings.Contains(log, "SECRET") {
		t.Fatalf("log holds a secret: %s", log)
	}
}

// TestServerOwnAnswers pins what net/http answers itself, before any
// handler: plain text, not the coded error (NewServer's comment and
// docs/api.md say so). If a Go release changes one of them, this fails and
// the docs are brought up to date.
func TestServerOwnAnswers(t *testing.T) {
	addr := startServer(t, NewServer(NewEngine(EngineConfig{Role: "r"}), 10*time.Second))
	big := strings.Repeat("x", MaxHeaderBytes+4096)
	for _, tt := range []struct {
		name, request string
		status        int
		plain         bool // text/plain; else no Content-Type and no body
	}{
		{"bad request line", "GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, true},
		{"bad header name", "GET / HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", 400, true},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400, true},
		{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", 431, true},
		{"unknown transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, true},
		{"HTTP/2 request line", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, true},
		{"unknown expectation", "GET / HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", 417, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, tt.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ct := resp.Header.Get("Content-Type")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if tt.plain && !strings.HasPrefix(ct, "text/plain") {
				t.Fatalf("Content-Type %q: net/http now answers otherwise; update NewServer's comment and docs/api.md", ct)
			}
			if !tt.plain && (ct != "" || len(body) != 0) {
				t.Fatalf("Content-Type %q body %q: update NewServer's comment and docs/api.md", ct, body)
			}
		})
	}
}

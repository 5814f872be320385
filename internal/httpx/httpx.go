// Package httpx is the HTTP plumbing every role shares: the one coded error
// clients see, strict JSON binding with body limits, a gin engine with
// /healthz and /metrics, and servers with explicit timeouts. Everything here is
// safe for concurrent use.
package httpx

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Error is the one error shape clients see:
// {"error": {"code": "...", "message": "..."}}. Codes are stable; messages are
// for people.
type Error struct {
	Status     int           `json:"-"`
	Code       string        `json:"code"`
	Message    string        `json:"message"`
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an Error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Common codes shared by every role.
const (
	CodeBadJSON      = "bad_json"
	CodeBadRequest   = "bad_request"
	CodeTooLarge     = "body_too_large"
	CodeUnauthorized = "unauthorized"
	CodeForbidden    = "forbidden"
	CodeNotFound     = "not_found"
	CodeNoMethod     = "method_not_allowed"
	CodeRateLimited  = "rate_limited"
	CodeUnavailable  = "unavailable"
	CodeInternal     = "internal"
)

// Abort writes e and stops the handler chain.
func Abort(c *gin.Context, e *Error) {
	if e.RetryAfter > 0 {
		secs := int((e.RetryAfter + time.Second - 1) / time.Second)
		c.Header("Retry-After", strconv.Itoa(secs))
	}
	c.AbortWithStatusJSON(e.Status, gin.H{"error": e})
}

// BindJSON decodes the request body into v, reading at most limit bytes.
// Unknown fields are rejected so that a misspelt field is a clear error, not a
// silently missing value.
func BindJSON(c *gin.Context, limit int64, v any) *Error {
	body := http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return jsonError(err, limit)
		}
		return Errorf(http.StatusBadRequest, CodeBadJSON, "body holds more than one JSON value")
	}
	return nil
}

func jsonError(err error, limit int64) *Error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return Errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "body exceeds %d bytes", limit)
	case errors.As(err, &te):
		return Errorf(http.StatusBadRequest, CodeBadJSON, "field %q must be %s", te.Field, te.Type)
	case errors.As(err, &se):
		return Errorf(http.StatusBadRequest, CodeBadJSON, "malformed JSON at byte %d", se.Offset)
	case errors.Is(err, io.EOF):
		return Errorf(http.StatusBadRequest, CodeBadJSON, "empty body")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, CodeBadJSON, "truncated JSON")
	}
	return Errorf(http.StatusBadRequest, CodeBadJSON, "%v", err)
}

// EngineConfig configures NewEngine.
type EngineConfig struct {
	// Role names the process role in logs ("gslb", "ingest", ...).
	Role string
	// Logger receives request errors and panics. Nil: slog.Default().
	Logger *slog.Logger
	// Gatherer backs /metrics. Nil: no /metrics route.
	Gatherer prometheus.Gatherer
	// Healthy reports readiness for /healthz. Nil: always healthy.
	Healthy func() error
	// TrustedProxies are the addresses (CIDRs) whose X-Forwarded-For is
	// believed. Nil: none — the peer address is the client, so a client
	// cannot choose its ISP line by forging a header.
	TrustedProxies []string
	// CORS, when set, answers browser preflights and sets CORS headers for
	// these origins (a page on another origin calls the API). Nil: no CORS
	// handling; a preflight answers 405.
	CORS *Origins
}

// NewEngine returns a gin engine with coded 404/405 answers, panic recovery
// that still answers with a coded error, /healthz and /metrics.
func NewEngine(cfg EngineConfig) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	e := gin.New()
	e.HandleMethodNotAllowed = true
	if err := e.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		log.Error("httpx: bad trusted proxies; trusting none", "err", err)
		_ = e.SetTrustedProxies(nil)
	}
	e.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, rec any) {
		// A panic is a bug; the client still gets the coded shape.
		log.Error("panic in handler", "role", cfg.Role, "path", c.FullPath(), "panic", rec)
		Abort(c, Errorf(http.StatusInternalServerError, CodeInternal, "internal error"))
	}))
	if cfg.CORS != nil {
		e.Use(CORS(*cfg.CORS))
	}
	e.NoRoute(func(c *gin.Context) { Abort(c, Errorf(http.StatusNotFound, CodeNotFound, "no such endpoint")) })
	e.NoMethod(func(c *gin.Context) {
		Abort(c, Errorf(http.StatusMethodNotAllowed, CodeNoMethod, "method not allowed"))
	})
	health := func(c *gin.Context) {
		if cfg.Healthy != nil {
			if err := cfg.Healthy(); err != nil {
				Abort(c, Errorf(http.StatusServiceUnavailable, CodeUnavailable, "%v", err))
				return
			}
		}
		c.JSON(http.StatusOK, gin.H{"status": "ok", "role": cfg.Role})
	}
	// HEAD too: load balancers probe with either.
	e.GET("/healthz", health)
	e.HEAD("/healthz", health)
	if cfg.Gatherer != nil {
		h := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
		e.GET("/metrics", gin.WrapH(h))
	}
	return e
}

// NewServer returns an http.Server with explicit timeouts. Clients of every
// role are on the open internet: without a header timeout a slow-loris holds a
// connection forever, and without an idle timeout keep-alive connections of
// millions of pollers pile up. WriteTimeout is left to the caller because the
// edge upgrades to long-lived WebSockets.
func NewServer(h http.Handler, writeTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// Serve serves srv on ln until ctx is done, then shuts it down gracefully
// (bounded by grace). It returns nil after a clean shutdown.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	if err != nil {
		return fmt.Errorf("httpx: shutdown: %w", err)
	}
	return nil
}

// KeyMatches reports whether the request's bearer token is one of keys
// (service or operator keys), comparing in constant time. Empty keys never
// match.
func KeyMatches(c *gin.Context, keys []string) bool {
	got := []byte(BearerToken(c, ""))
	if len(got) == 0 {
		return false
	}
	ok := false
	for _, k := range keys {
		if k != "" && subtle.ConstantTimeCompare(got, []byte(k)) == 1 {
			ok = true
		}
	}
	return ok
}

// BearerToken returns the token of an "Authorization: Bearer" header, or the
// named query parameter when the header is absent (browsers cannot set headers
// on a WebSocket).
func BearerToken(c *gin.Context, query string) string {
	h := c.GetHeader("Authorization")
	if len(h) > 7 && (h[:7] == "Bearer " || h[:7] == "bearer ") {
		return h[7:]
	}
	if query != "" {
		return c.Query(query)
	}
	return ""
}

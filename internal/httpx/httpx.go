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
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"danmaku/internal/strictjson"
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
	CodeBadJSON      = strictjson.CodeBadJSON
	CodeBadUTF8      = strictjson.CodeBadUTF8
	CodeBadRequest   = "bad_request"
	CodeTooLarge     = "body_too_large"
	CodeBodyRefused  = "body_not_allowed"
	CodeBodyTimeout  = "body_timeout"
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
// Every role reads its JSON bodies through it, so it is strict once for all:
// the body must be valid UTF-8 (400 bad_utf8, before encoding/json could
// replace a bad byte or an unpaired surrogate escape with a visible U+FFFD);
// keys must be the exact field names — unknown fields, keys that differ from
// a field only in case, and duplicate keys are refused (400 bad_json), so a
// misspelt field is a clear error and no two readers of one body can see
// different values; one JSON value, nothing after it. Messages speak of
// fields by their JSON path and of JSON types, never of Go types. The
// decoding is strictjson.Decode's, the one strict decoder; BindJSON adds the
// body's limits and the HTTP statuses.
//
// A body declared longer than limit is refused (413 body_too_large) before
// a byte of it is read: net/http sends "100 Continue" at the first read, so
// a client that asked for it (curl does above 1 MB) gets the 413 as its
// answer instead of being told to go on and then reset while it sends. A
// body that stops arriving until the server's read timeout is answered 408
// body_timeout. Both answers close the connection: what is left of the
// body is never read.
func BindJSON(c *gin.Context, limit int64, v any) *Error {
	if c.Request.ContentLength > limit {
		closeAfterAnswer(c)
		return tooLarge(limit)
	}
	bp := bodyPool.Get().(*[]byte)
	defer func() {
		// A rare large body (the event API's) is not kept for every
		// comment after it.
		if cap(*bp) <= maxPooledBody {
			bodyPool.Put(bp)
		}
	}()
	data, err := readAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit), (*bp)[:0])
	*bp = data
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return bodyTimeout(c)
	}
	if err != nil {
		return jsonError(err, limit)
	}
	if err := strictjson.Decode(data, v); err != nil {
		if de, ok := errors.AsType[*strictjson.Error](err); ok {
			return &Error{Status: http.StatusBadRequest, Code: de.Code, Message: de.Message}
		}
		return jsonError(err, limit)
	}
	return nil
}

// maxPooledBody is the largest body buffer kept for reuse: a few comment or
// gift bodies' worth.
const maxPooledBody = 16 << 10

// bodyPool holds body buffers: the ingest binds a body per comment.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10+512); return &b }}

// readAll is io.ReadAll into b's spare capacity.
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// defaultAnswerTime is how long the answer to a body that timed out has to
// be written on a server without a write timeout.
const defaultAnswerTime = 10 * time.Second

// bodyTimeout answers a body read that hit the server's read deadline:
// 408, and the connection closed (the rest of the body is never read).
// The server's write deadline was set when the header was read (NewServer:
// 10 s), so by the read timeout (15 s) it has passed and the client would
// get a bare close: the answer gets the server's write timeout again,
// counted from now. It is a few hundred bytes, which the socket's buffer
// takes at once; the deadline only bounds a machine too busy to write it.
func bodyTimeout(c *gin.Context) *Error {
	closeAfterAnswer(c)
	if c.Writer != nil {
		d := defaultAnswerTime
		if srv, ok := c.Request.Context().Value(http.ServerContextKey).(*http.Server); ok && srv.WriteTimeout > 0 {
			d = srv.WriteTimeout
		}
		_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(d))
	}
	return Errorf(http.StatusRequestTimeout, CodeBodyTimeout, "the request body did not arrive within the server's read timeout")
}

// closeAfterAnswer makes the answer close the connection, so that
// net/http does not read what is left of a body before the next request
// (up to 256 KiB, as slowly as the client likes). BindJSON also decodes
// documents outside any request (ratelimit.Parse), with no writer.
func closeAfterAnswer(c *gin.Context) {
	if c.Writer != nil {
		c.Header("Connection", "close")
	}
}

func tooLarge(limit int64) *Error {
	return Errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, "body exceeds %d bytes", limit)
}

func jsonError(err error, limit int64) *Error {
	var (
		mbe *http.MaxBytesError
		ie  *json.InvalidUnmarshalError
	)
	switch {
	case errors.As(err, &mbe):
		return tooLarge(limit)
	case errors.As(err, &ie):
		// A handler passed something that is not a pointer: our bug.
		return Errorf(http.StatusInternalServerError, CodeInternal, "internal error")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, CodeBadJSON, "truncated body")
	}
	// The body's read failed otherwise.
	return Errorf(http.StatusBadRequest, CodeBadJSON, "a field's value does not parse: %v", err)
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
	// these origins (a page on another origin calls the API) on
	// CORSRoutes. Nil: no CORS handling; a preflight answers 405.
	CORS *Origins
	// CORSRoutes are the routes browsers call (gin patterns): the only
	// ones CORS applies to. A preflight to another path is answered 403
	// cors_not_allowed. Empty: none.
	CORSRoutes []string
	// NoBody marks a role none of whose routes reads a request body (the
	// edge). A request that declares one (Content-Length or chunked) is
	// answered 400 body_not_allowed before any route runs, and its
	// connection closed at once. False: bodies are the routes' business.
	NoBody bool
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
	// Every path has one spelling. gin's redirects (trailing slash, fixed
	// case or dots) answer with an HTML body a POST cannot follow, and
	// copy the query — a ?ticket= or ?token= — into Location, where
	// proxies and browser histories keep it; a path no route names is a
	// coded 404 instead.
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.RemoveExtraSlash = false
	// Routes match the path as sent, and parameters are unescaped after
	// matching (unescapeParams): a ban of user "a/b" is
	// /v1/admin/bans/a%2Fb, not a path of four segments that no route has.
	e.UseEscapedPath = true
	e.UnescapePathValues = false
	if err := e.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		log.Error("httpx: bad trusted proxies; trusting none", "err", err)
		_ = e.SetTrustedProxies(nil)
	}
	e.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, rec any) {
		// A panic is a bug; the client still gets the coded shape. The
		// log names the route, never the query or the headers: those may
		// hold a ticket, a token or a service key (gin's own dump, which
		// prints the headers, goes to io.Discard).
		log.Error("panic in handler", "role", cfg.Role, "method", c.Request.Method, "route", c.FullPath(), "panic", rec)
		Abort(c, Errorf(http.StatusInternalServerError, CodeInternal, "internal error"))
	}))
	e.Use(unescapeParams)
	if cfg.NoBody {
		e.Use(refuseBody)
	}
	if cfg.CORS != nil {
		e.Use(CORS(*cfg.CORS, cfg.CORSRoutes))
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
		// A collector that fails leaves its metrics out (and is logged)
		// rather than turning the whole scrape into promhttp's plain-text
		// 500.
		h := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
			ErrorHandling: promhttp.ContinueOnError,
			ErrorLog:      promLog{log},
		})
		e.GET("/metrics", gin.WrapH(h))
	}
	return e
}

// unescapeParams unescapes the path parameters as a path is unescaped
// (url.PathUnescape). gin's own unescaping is a query's, which reads "+" as
// a space: a ban of user "a+b" was put on, and listed ids lifted from,
// user "a b". Without a '%' in the value it costs a scan.
func unescapeParams(c *gin.Context) {
	for i := range c.Params {
		if v, err := url.PathUnescape(c.Params[i].Value); err == nil {
			c.Params[i].Value = v
		}
	}
}

// refuseBody answers a request that declares a body on a role that reads
// none. After a handler returns, net/http reads what is left of an unread
// body (up to 256 KiB) so that it can reuse the connection: for a body that
// never comes that wait lasts until the read deadline, a socket held by
// any client without a login. Closing the connection and expiring its read
// deadline now ends that wait as soon as the answer is written.
func refuseBody(c *gin.Context) {
	r := c.Request
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		c.Next()
		return
	}
	c.Header("Connection", "close")
	_ = http.NewResponseController(c.Writer).SetReadDeadline(time.Now())
	Abort(c, Errorf(http.StatusBadRequest, CodeBodyRefused, "this endpoint takes no request body"))
}

// promLog hands promhttp's errors to the role's logger.
type promLog struct{ log *slog.Logger }

func (p promLog) Println(v ...any) { p.log.Error("metrics: " + fmt.Sprint(v...)) }

// MaxHeaderBytes bounds a request's header block. Clients send a bearer
// token of at most 4 KiB and little else; net/http reads up to 4 KiB past
// the bound before it answers 431.
const MaxHeaderBytes = 16 << 10

// NewServer returns an http.Server with explicit timeouts. Clients of every
// role are on the open internet: without a header timeout a slow-loris holds a
// connection forever, and without an idle timeout keep-alive connections of
// millions of pollers pile up. WriteTimeout is left to the caller because the
// edge upgrades to long-lived WebSockets.
//
// Some answers net/http writes itself, before any handler runs, in plain
// text, closing the connection: 400 for a request line, header or Host it
// cannot parse, 431 for a header block over MaxHeaderBytes, 501 for a
// Transfer-Encoding it does not know, 505 for an HTTP version other than
// 1.x, 417 (without a body) for an Expect other than 100-continue, and (the
// TLS edge) 400 to plain HTTP. net/http offers no hook for them; only a
// listener that parsed every request a second time could rewrite them, a
// second HTTP parser in front of the first for answers no real client
// provokes. docs/api.md lists them. A request that times out reading its
// header gets no answer at all.
func NewServer(h http.Handler, writeTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
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
// on a WebSocket). The scheme is matched in any case ("BEARER", "bearer"):
// RFC 9110 (11.1) makes it case-insensitive, and a client that spells it
// otherwise would be told its credential is missing.
func BearerToken(c *gin.Context, query string) string {
	h := c.GetHeader("Authorization")
	if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		if tok = strings.TrimLeft(tok, " "); tok != "" {
			return tok
		}
	}
	if query != "" {
		return c.Query(query)
	}
	return ""
}

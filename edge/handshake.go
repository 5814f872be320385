package edge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"

	"danmaku/auth"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/strictjson"
	"danmaku/sdk/wire"
)

// Close codes of a connection refused after the upgrade, i.e. a browser's
// whose token came in its first frame. They mirror the HTTP answers a
// native client gets before the upgrade.
const (
	// CloseBadHello (4400): the first frame was not {"token": ..., "last": ...}
	// or named an invalid room or last id. Do not retry as is.
	CloseBadHello = 4400
	// CloseTokenRejected (4401): the token is invalid, expired or of an
	// unknown epoch: fetch a new entry (with jitter), then reconnect.
	CloseTokenRejected = 4401
	// CloseWrongNode (4403): the token was not issued for this node: try the
	// next address, and fetch a new entry when none is left.
	CloseWrongNode = 4403
	// CloseHelloTimeout (4408): no first frame within the hello timeout.
	CloseHelloTimeout = 4408
	// CloseTryLater (1013, "try again later"): the room's stream could not
	// be opened; reconnect after a back-off.
	CloseTryLater = 1013
)

// maxTokenLen bounds a token in a first frame. A real token is under 1 KB.
const maxTokenLen = 4 << 10

// hello is the first frame a browser sends: a page cannot set headers on a
// WebSocket, and a token in the URL leaks into logs, proxies and redirect
// Locations. Text frame, JSON: {"token": "...", "last": "<id>"}; last is
// optional. Names are exact and none may repeat (strictjson.CheckJSON, as for
// a request body: {"TOKEN":…} is refused, not read as the token); other
// members are ignored so a later SDK may add some.
type hello struct {
	Token string `json:"token"`
	Last  string `json:"last"`
}

// errBadHello is returned by parseHello.
var errBadHello = errors.New("edge: bad hello")

func parseHello(b []byte) (hello, error) {
	var h hello
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return hello{}, fmt.Errorf("%w: not a JSON object", errBadHello)
	}
	if err := strictjson.CheckJSON(b, &h, false); err != nil {
		return hello{}, fmt.Errorf("%w: %v", errBadHello, err)
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return hello{}, fmt.Errorf("%w: %v", errBadHello, err)
	}
	if h.Token == "" || len(h.Token) > maxTokenLen {
		return hello{}, fmt.Errorf("%w: token missing or too long", errBadHello)
	}
	return h, nil
}

// refusal is why a handshake is refused, both as the HTTP answer before an
// upgrade and as the close code after one.
type refusal struct {
	status int
	code   string
	close  int
	msg    string
}

// checkToken verifies a dynamic token for this node.
func (s *Server) checkToken(tok string) (*auth.Claims, *refusal) {
	claims, err := s.cfg.Verifier.Verify(tok)
	switch {
	case errors.Is(err, auth.ErrUnknownEpoch):
		return nil, &refusal{http.StatusUnauthorized, CodeTokenEpoch, CloseTokenRejected, "token epoch unknown; get a new entry"}
	case err != nil:
		return nil, &refusal{http.StatusUnauthorized, CodeUnauthorized, CloseTokenRejected, "missing or invalid token"}
	case !claims.ForEdge(s.cfg.Addr):
		// Also a token whose address names this node only as an ingest:
		// a token's audience is its address partition (auth.Claims.Ingests).
		return nil, &refusal{http.StatusForbidden, CodeWrongNode, CloseWrongNode, "token was not issued for this node as an edge"}
	case !wire.ValidRoom(claims.Room):
		return nil, &refusal{http.StatusBadRequest, CodeBadRequest, CloseBadHello, "token names an invalid room"}
	}
	if s.cfg.Events != nil {
		if err := s.cfg.Events.CheckIssued(claims.Room); err != nil {
			// 4404 / 4409 / 4503: the HTTP status, in the private range.
			e := event.RoomHTTPError(err)
			return nil, &refusal{e.Status, e.Code, 4000 + e.Status, e.Message}
		}
	}
	if s.banned(claims.Room, claims.User()) {
		return nil, refuseBanned
	}
	return claims, nil
}

// errClientGone ends a join whose client left while the room's hub started.
var errClientGone = &refusal{close: -1}

// join holds the room's hub and registers a new connection in its fan-out.
// On success the caller owns the connection and its holds (the hub, the
// user's count, the slot): start it, which releases them when it ends.
func (s *Server) join(ctx context.Context, claims *auth.Claims, last msgID, hasLast bool) (*conn, resumePlan, *refusal) {
	h, err := s.acquire(claims.Room)
	if err != nil {
		return nil, resumePlan{}, refuseDraining
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		s.release(h)
		return nil, resumePlan{}, errClientGone
	}
	if h.initErr != nil {
		s.release(h)
		s.log.Warn("edge: handshake", "room", claims.Room, "err", h.initErr)
		return nil, resumePlan{}, &refusal{http.StatusServiceUnavailable, CodeUnavailable, CloseTryLater, "room unavailable; retry shortly"}
	}
	cn := newConn(s, h, claims)
	p, r := h.register(cn, last, hasLast)
	if r != nil {
		s.release(h)
		return nil, resumePlan{}, r
	}
	if s.bans != nil && s.bans.Has(claims.Room, claims.User()) {
		// Banned since checkToken: the sweep of that ban may have walked
		// this hub before the connection was in it.
		h.unregister(cn)
		s.release(h)
		return nil, resumePlan{}, refuseBanned
	}
	return cn, p, nil
}

// Refusals of join.
var (
	refuseDraining = &refusal{http.StatusServiceUnavailable, CodeDraining, CloseGoingAway, "node is draining; try another address"}
	// Close codes after a hello are 4000 + the HTTP status, as the event
	// refusals'.
	refuseRoomFull     = &refusal{http.StatusServiceUnavailable, CodeRoomFull, 4503, "the room is full on this node; try another address"}
	refuseTooManyConns = &refusal{http.StatusTooManyRequests, CodeTooManyConns, 4429, "this user holds too many connections on this node"}
)

// handleWS checks a handshake. A native client's token comes in the
// Authorization header and is checked before the upgrade; a browser's
// comes in its first frame, after it (helloWait: in an epoll loop, or
// serveHello). Either way the token never travels in the URL: a query
// token is refused.
//
// The handler writes the connection's catch-up itself and returns: the
// socket then belongs to an epoll loop (or a goSock), and net/http's
// per-request state and the handler's deep stack are freed. A browser's
// socket goes to a loop at once, to wait for its hello there.
func (s *Server) handleWS(c *gin.Context) {
	if s.draining.Load() {
		s.reject(c, http.StatusServiceUnavailable, CodeDraining, "node is draining; try another address")
		return
	}
	// The connection rate first: past it a handshake costs a lock and a
	// small answer, whatever it carries.
	if ok, retry := s.connects.take(s.cfg.Clock.Now()); !ok {
		s.rejectRetry(c, http.StatusServiceUnavailable, CodeConnectRate, "too many new connections; retry after the Retry-After delay or try another address", retry)
		return
	}
	// Reserve the slot before any work so that a reconnect storm cannot
	// overshoot MaxConns between check and use.
	if n := s.conns.Add(1); s.cfg.MaxConns > 0 && n > int64(s.cfg.MaxConns) {
		s.conns.Add(-1)
		s.reject(c, http.StatusServiceUnavailable, CodeOverCapacity, "node is full; try another address")
		return
	}
	slotHeld := true // until the connection owns it
	defer func() {
		if slotHeld {
			s.conns.Add(-1)
		}
	}()
	if tokenInQuery(c.Request.URL.Query()) {
		s.reject(c, http.StatusBadRequest, CodeTokenInURL, "the token must not travel in the URL: send it in the first frame or an Authorization header")
		return
	}
	last, hasLast, err := parseLast(c.Query("last"))
	if err != nil {
		s.reject(c, http.StatusBadRequest, CodeBadRequest, "last must be a message id such as 1700000000000-0")
		return
	}
	if r := s.checkProtocol(c); r != nil {
		s.reject(c, r.status, r.code, r.msg)
		return
	}
	tok := httpx.BearerToken(c, "")
	var claims *auth.Claims
	if tok != "" {
		var r *refusal
		if claims, r = s.checkToken(tok); r != nil {
			s.reject(c, r.status, r.code, r.msg)
			return
		}
		if !s.users.acquire(claims.User()) {
			s.reject(c, refuseTooManyConns.status, refuseTooManyConns.code, refuseTooManyConns.msg)
			return
		}
	}
	userHeld := claims != nil // released here unless the connection owns it
	defer func() {
		if userHeld {
			s.users.release(claims.User())
		}
	}()
	if r := s.checkUpgrade(c.Request); r != nil {
		if r.code == CodeBadRequest {
			c.Header("Sec-WebSocket-Version", "13")
		}
		s.reject(c, r.status, r.code, r.msg)
		return
	}
	if claims == nil {
		// A socket without a token waits for its hello.
		slotHeld = !s.waitHello(c, last, hasLast)
		return
	}

	// Join the fan-out before the 101 goes out: a client that has seen the
	// handshake complete gets everything appended from then on.
	cn, p, r := s.join(c.Request.Context(), claims, last, hasLast)
	if r == errClientGone {
		return
	}
	if r != nil {
		s.reject(c, r.status, r.code, r.msg)
		return
	}
	nc, br, ok := s.upgrade(c)
	slotHeld, userHeld = false, false // the connection owns them now
	if !ok {
		cn.finish()
		return
	}
	s.log.Debug("edge: connected", "room", claims.Room, "user", claims.User(), "resume", hasLast)
	cn.start(nc, br, p)
}

// waitHello upgrades a socket that came without a token to wait for its
// hello, bounded per node and per address before it is upgraded. True:
// the wait took the connection's slot.
func (s *Server) waitHello(c *gin.Context, last msgID, hasLast bool) bool {
	addr := c.ClientIP()
	if code := s.hellos.take(addr); code != "" {
		status := http.StatusServiceUnavailable
		msg := "too many connections wait for their hello on this node; retry after the Retry-After delay or try another address"
		if code == CodeHelloWaitsAddr {
			status = http.StatusTooManyRequests
			msg = "too many connections from this address wait for their hello; retry after the Retry-After delay"
		}
		s.rejectRetry(c, status, code, msg, retryJitter())
		return false
	}
	nc, br, ok := s.upgrade(c)
	if !ok {
		s.hellos.done(addr)
		return false
	}
	wait := helloWait{s: s, addr: addr, last: last, hasLast: hasLast}
	if !s.pollHello(nc, br, &wait) {
		s.serveHello(nc, br, &wait)
	}
	return true
}

// tokenInQuery reports whether a query carries a token under any spelling
// of the name: a proxy or a log keeps ?Token= as surely as ?token=, and a
// client library may well send the one it was given.
func tokenInQuery(q url.Values) bool {
	for k := range q {
		if strings.EqualFold(k, "token") {
			return true
		}
	}
	return false
}

// checkUpgrade refuses, with a coded answer, what the upgrade would: the
// WebSocket library then never answers in a shape of its own (plain text:
// a 505 for HTTP/1.0, a 400 for a header it reads otherwise). Its checks
// are the library's (ws.HTTPUpgrader.Upgrade), as strict or stricter: the
// first Upgrade and Connection header only, scanned as it scans them.
func (s *Server) checkUpgrade(r *http.Request) *refusal {
	bad := func(msg string) *refusal {
		return &refusal{status: http.StatusBadRequest, code: CodeBadRequest, msg: msg}
	}
	switch {
	case r.Method != http.MethodGet:
		return bad("WebSocket upgrade required")
	case r.ProtoMajor != 1 || r.ProtoMinor < 1:
		// HTTP/2 and 3 carry WebSockets otherwise (RFC 8441), which this
		// node does not serve.
		return bad("a WebSocket handshake is an HTTP/1.1 request")
	case r.Host == "":
		return bad("the Host header is required")
	case !strings.EqualFold(firstHeader(r.Header, "Upgrade"), "websocket") || !hasToken(firstHeader(r.Header, "Connection"), "upgrade"):
		return bad("WebSocket upgrade required")
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return bad("unsupported WebSocket version: 13 is required")
	}
	if k, err := base64.StdEncoding.DecodeString(r.Header.Get("Sec-WebSocket-Key")); err != nil || len(k) != 16 {
		return bad("bad Sec-WebSocket-Key")
	}
	if o := r.Header.Get("Origin"); o != "" && !s.cfg.AllowOrigins.Allowed(o) {
		return &refusal{status: http.StatusForbidden, code: CodeOrigin, msg: "origin not allowed"}
	}
	return nil
}

// firstHeader is the first value of a header: all the WebSocket library
// reads of one.
func firstHeader(h http.Header, name string) string {
	if v := h.Values(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// hasToken reports whether a comma-separated header value holds token
// (case-insensitive), scanned as the WebSocket library scans it.
func hasToken(v, token string) bool {
	has := false
	httphead.ScanTokens([]byte(v), func(t []byte) bool {
		has = strings.EqualFold(string(t), token)
		return !has
	})
	return has
}

// upgrade answers 101 and takes the socket from net/http.
func (s *Server) upgrade(c *gin.Context) (net.Conn, *bufio.Reader, bool) {
	nc, rw, _, err := s.up.Upgrade(c.Request, c.Writer)
	if err != nil {
		// Checked above, so only a failed hijack or write gets here: the
		// client is gone or the server misconfigured.
		s.m.rejects.WithLabelValues(CodeBadRequest).Inc()
		s.log.Debug("edge: upgrade", "err", err)
		if nc != nil {
			_ = nc.Close()
		}
		return nil, nil, false
	}
	// net/http's deadlines stay on a hijacked socket: clear them.
	_ = nc.SetDeadline(time.Time{})
	var br *bufio.Reader
	if rw != nil {
		br = rw.Reader
	}
	return nc, br, true
}

// serveHello reads a socket's hello on this goroutine (a socket no epoll
// loop can own: TLS, other systems), within HelloTimeout, then admits it.
// It owns the connection's slot and its place among the hello waits.
func (s *Server) serveHello(nc net.Conn, br *bufio.Reader, w *helloWait) {
	if br == nil {
		br = bufio.NewReaderSize(nc, goReadBuffer)
	}
	_ = nc.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	f, err := readClientMessage(br, s.cfg.ReadLimit)
	s.hellos.done(w.addr)
	var r *refusal
	var ne interface{ Timeout() bool }
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		r = refuseHelloTimeout
	case errors.Is(err, errFrameTooBig):
		r = refuseHelloTooBig
	case errors.Is(err, errFrameBad):
		r = refuseHelloFrame
	case err != nil:
		r = errClientGone // the client left
	case f.op == ws.OpClose:
		// The client leaves before its hello: its close is answered, as
		// on any socket (and in a loop's wait).
		s.conns.Add(-1)
		_ = writeAll(nc, closeGrace, echoClose(f.payload))
		_ = nc.Close()
		return
	default:
		_ = nc.SetReadDeadline(time.Time{})
		r = w.parse(f)
	}
	if r != nil {
		s.conns.Add(-1)
		s.refuse(nc, br, r)
		return
	}
	s.admitHello(nc, br, w.hl.Token, w.last, w.hasLast)
}

// Refusals of a hello.
var (
	refuseHelloTimeout = &refusal{code: CodeHelloTimeout, close: CloseHelloTimeout, msg: "no hello"}
	refuseHelloTooBig  = &refusal{code: CodeBadHello, close: closeTooBig, msg: "hello too large"}
	refuseHelloFrame   = &refusal{code: CodeBadHello, close: closeProtocol, msg: "bad frame"}
	refuseBadHello     = &refusal{code: CodeBadHello, close: CloseBadHello, msg: "first frame must be {\"token\":…,\"last\":…}"}
	// refuseHelloFlood: pings or pongs before the hello beyond the
	// allowance's burst, on a socket waiting in an epoll loop.
	refuseHelloFlood = &refusal{code: CodeBadHello, close: ClosePolicy, msg: "too many frames before the hello"}
)

// admitHello authenticates an upgraded connection by the token of its
// hello, then starts it. A last id in the hello wins over one in the
// query (the caller has put it in last). It owns the connection's slot.
func (s *Server) admitHello(nc net.Conn, br *bufio.Reader, token string, last msgID, hasLast bool) {
	slotHeld := true
	defer func() {
		if slotHeld {
			s.conns.Add(-1)
		}
	}()
	claims, r := s.checkToken(token)
	if r != nil {
		s.refuse(nc, br, r)
		return
	}
	if !s.users.acquire(claims.User()) {
		s.refuse(nc, br, refuseTooManyConns)
		return
	}
	cn, p, r := s.join(s.ctx, claims, last, hasLast)
	if r != nil {
		s.users.release(claims.User())
		s.refuse(nc, br, r)
		return
	}
	slotHeld = false // the connection owns it, and the user's count
	s.log.Debug("edge: connected", "room", claims.Room, "user", claims.User(), "resume", hasLast, "hello", true)
	cn.start(nc, br, p)
}

// refuse closes an upgraded connection with r's close code and counts it.
// Close texts are short: a control frame carries at most 123 bytes.
func (s *Server) refuse(nc net.Conn, br *bufio.Reader, r *refusal) {
	if r.close < 0 {
		_ = nc.Close()
		return
	}
	s.m.rejects.WithLabelValues(r.code).Inc()
	refuseConn(nc, br, r.close, wire.TruncateRunes(r.msg, 40))
}

// refuseConn sends a close frame on a socket no loop owns, waits (at most
// closeGrace) for the client to close first, so that the client holds
// the TIME_WAIT, and closes it.
func refuseConn(nc net.Conn, br *bufio.Reader, code int, text string) {
	if err := writeAll(nc, closeGrace, closeFrame(code, text)); err == nil {
		_ = nc.SetReadDeadline(time.Now().Add(closeGrace))
		if br == nil {
			br = bufio.NewReaderSize(nc, goReadBuffer)
		}
		for {
			if f, err := readClientFrame(br, maxTokenLen); err != nil || f.op == ws.OpClose {
				break
			}
		}
	}
	_ = nc.Close()
}

// checkProtocol reads the handshake's proto parameter (absent: 1, clients
// from before it) and refuses one below MinProtocol before the upgrade.
// A browser cannot read an HTTP refusal of a WebSocket, but it met the
// same minimum at the gslb's entry, which it reads first.
func (s *Server) checkProtocol(c *gin.Context) *refusal {
	n := 1
	if v, ok := c.GetQuery("proto"); ok {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 1 || n > wire.MaxProtocol || strconv.Itoa(n) != v {
			return &refusal{status: http.StatusBadRequest, code: CodeBadProtocol, msg: fmt.Sprintf("proto must be a whole number 1-%d without sign or leading zeros", wire.MaxProtocol)}
		}
	}
	if n < s.cfg.MinProtocol {
		return &refusal{status: http.StatusUpgradeRequired, code: CodeProtocolUnsupported, msg: fmt.Sprintf("client protocol %d is no longer served; the minimum is %d: update the SDK", n, s.cfg.MinProtocol)}
	}
	return nil
}

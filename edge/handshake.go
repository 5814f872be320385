package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gorilla/websocket"

	"danmaku/auth"
	"danmaku/internal/httpx"
	"danmaku/internal/wire"
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
// optional. Unknown fields are ignored so a later SDK may add some.
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
	case !claims.HasAddr(s.cfg.Addr):
		return nil, &refusal{http.StatusForbidden, CodeWrongNode, CloseWrongNode, "token was not issued for this node"}
	case !wire.ValidRoom(claims.Room):
		return nil, &refusal{http.StatusBadRequest, CodeBadRequest, CloseBadHello, "token names an invalid room"}
	}
	if s.cfg.Events != nil {
		if e := s.cfg.Events.Check(claims.Room); e != nil {
			// 4404 / 4409 / 4503: the HTTP status, in the private range.
			return nil, &refusal{e.Status, e.Code, 4000 + e.Status, e.Message}
		}
	}
	return claims, nil
}

// errClientGone ends a join whose client left while the room's hub started.
var errClientGone = &refusal{close: -1}

// join holds the room's hub and registers a new connection in its fan-out.
// On success the caller owns the hub reference (release it) and the
// connection (set its ws and serve it, or unregister it).
func (s *Server) join(ctx context.Context, claims *auth.Claims, last msgID, hasLast bool) (*hub, *conn, resumePlan, *refusal) {
	h, err := s.acquire(claims.Room)
	if err != nil {
		return nil, nil, resumePlan{}, refuseDraining
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		s.release(h)
		return nil, nil, resumePlan{}, errClientGone
	}
	if h.initErr != nil {
		s.release(h)
		s.log.Warn("edge: handshake", "room", claims.Room, "err", h.initErr)
		return nil, nil, resumePlan{}, &refusal{http.StatusServiceUnavailable, CodeUnavailable, CloseTryLater, "room unavailable; retry shortly"}
	}
	cn := newConn(s, h, nil, claims)
	p, r := h.register(cn, last, hasLast)
	if r != nil {
		s.release(h)
		return nil, nil, resumePlan{}, r
	}
	return h, cn, p, nil
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
// comes in its first frame, after it (serveHello). Either way the token
// never travels in the URL: a query token is refused.
func (s *Server) handleWS(c *gin.Context) {
	if s.draining.Load() {
		s.reject(c, http.StatusServiceUnavailable, CodeDraining, "node is draining; try another address")
		return
	}
	// The connection rate first: past it a handshake costs a lock and a
	// small answer, whatever it carries.
	if ok, retry := s.connects.take(time.Now()); !ok {
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
	handedOff := false // to the connection's goroutine, which then undoes both
	defer func() {
		if !handedOff {
			s.conns.Add(-1)
		}
	}()
	if _, inURL := c.GetQuery("token"); inURL {
		s.reject(c, http.StatusBadRequest, CodeTokenInURL, "the token must not travel in the URL: send it in the first frame or an Authorization header")
		return
	}
	last, hasLast, err := parseLast(c.Query("last"))
	if err != nil {
		s.reject(c, http.StatusBadRequest, CodeBadRequest, "last must be a message id such as 1700000000000-0")
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
	userHeld := claims != nil // released here unless handed off with the connection
	defer func() {
		if userHeld {
			s.users.release(claims.User())
		}
	}()
	if !websocket.IsWebSocketUpgrade(c.Request) {
		s.reject(c, http.StatusBadRequest, CodeBadRequest, "WebSocket upgrade required")
		return
	}
	if claims == nil {
		ws, err := s.upgrader.Upgrade(c.Writer, c.Request, nil)
		if err != nil {
			return // the upgrader has answered
		}
		handedOff = true
		go func() {
			defer s.conns.Add(-1)
			s.serveHello(ws, last, hasLast)
		}()
		return
	}

	// Join the fan-out before the 101 goes out: a client that has seen the
	// handshake complete gets everything appended from then on.
	h, cn, p, r := s.join(c.Request.Context(), claims, last, hasLast)
	if r == errClientGone {
		return
	}
	if r != nil {
		s.reject(c, r.status, r.code, r.msg)
		return
	}
	ws, err := s.upgrader.Upgrade(c.Writer, c.Request, nil)
	if err != nil {
		h.unregister(cn) // the upgrader has answered
		s.release(h)
		return
	}
	cn.ws = ws
	s.log.Debug("edge: connected", "room", claims.Room, "user", claims.User(), "resume", hasLast)
	// The connection gets a goroutine of its own and the handler returns:
	// net/http's per-request state and the handler's deep stack are then
	// freed, which keeps an idle connection small.
	handedOff, userHeld = true, false
	go func() {
		defer s.conns.Add(-1)
		defer s.users.release(claims.User())
		defer s.release(h)
		cn.serve(p)
	}()
}

// serveHello authenticates an upgraded connection by its first frame, then
// serves it. A last id in the first frame wins over one in the query.
func (s *Server) serveHello(ws *websocket.Conn, last msgID, hasLast bool) {
	ws.SetReadLimit(s.cfg.ReadLimit)
	_ = ws.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	typ, b, err := ws.ReadMessage()
	var ne interface{ Timeout() bool }
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		s.refuse(ws, &refusal{code: CodeHelloTimeout, close: CloseHelloTimeout, msg: "no hello"})
		return
	case errors.Is(err, websocket.ErrReadLimit):
		s.refuse(ws, &refusal{code: CodeBadHello, close: websocket.CloseMessageTooBig, msg: "hello too large"})
		return
	case err != nil:
		_ = ws.Close() // the client left
		return
	}
	hl, err := parseHello(b)
	if err == nil && typ != websocket.TextMessage {
		err = fmt.Errorf("%w: not a text frame", errBadHello)
	}
	if err == nil && hl.Last != "" {
		last, hasLast, err = parseLast(hl.Last)
	}
	if err != nil {
		s.refuse(ws, &refusal{code: CodeBadHello, close: CloseBadHello, msg: "first frame must be {\"token\":…,\"last\":…}"})
		return
	}
	claims, r := s.checkToken(hl.Token)
	if r != nil {
		s.refuse(ws, r)
		return
	}
	if !s.users.acquire(claims.User()) {
		s.refuse(ws, refuseTooManyConns)
		return
	}
	defer s.users.release(claims.User())
	h, cn, p, r := s.join(s.ctx, claims, last, hasLast)
	if r != nil {
		s.refuse(ws, r)
		return
	}
	_ = ws.SetReadDeadline(time.Time{})
	cn.ws = ws
	s.log.Debug("edge: connected", "room", claims.Room, "user", claims.User(), "resume", hasLast, "hello", true)
	defer s.release(h)
	cn.serve(p)
}

// refuse closes an upgraded connection with r's close code and counts it.
// Close texts are short: a control frame carries at most 123 bytes.
func (s *Server) refuse(ws *websocket.Conn, r *refusal) {
	if r.close < 0 {
		_ = ws.Close()
		return
	}
	s.m.rejects.WithLabelValues(r.code).Inc()
	msg := websocket.FormatCloseMessage(r.close, wire.TruncateRunes(r.msg, 40))
	if err := ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(closeGrace)); err == nil {
		// Let the client close first, so it holds the TIME_WAIT.
		_ = ws.SetReadDeadline(time.Now().Add(closeGrace))
		for {
			if _, _, err := ws.NextReader(); err != nil {
				break
			}
		}
	}
	_ = ws.Close()
}

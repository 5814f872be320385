package sdk

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/sdk/wire"
)

// Close codes the edge ends a connection with.
const (
	// CloseResume asks the client to reconnect at once with its last id
	// (the edge could not keep up with it, or moved it).
	CloseResume = 4001
	// CloseResumeGap says the edge no longer holds the resume point (the
	// room's stream was trimmed past it): reconnect without a last id. The
	// poller's walk through the segments delivers what was missed.
	CloseResumeGap = 4002
	// CloseDraining says the edge is shutting down: reconnect after a random
	// wait, through a fresh entry.
	CloseDraining = 4003
	// CloseRoomEnded says the room's event has ended: do not reconnect.
	CloseRoomEnded = 4004
	// CloseTokenRejected says the token was refused: fetch a new entry.
	CloseTokenRejected = 4401
	// CloseBanned says an operator banned this user from the room: do not
	// reconnect (the edge and the entry refuse it until the ban is lifted
	// or lapses); Stats.EdgeBanned becomes 1.
	CloseBanned = 4451
)

const (
	edgeHandshakeTimeout = 10 * time.Second
	edgeWriteTimeout     = 5 * time.Second
	edgeBackoffMin       = time.Second
	edgeBackoffMax       = 30 * time.Second
)

// edgeLoop holds one WebSocket to the first edge address that answers,
// falling back to the next ones, and resumes from the last id it received.
// A reconnector decides where to dial and how long to wait; this loop does
// the I/O.
func (c *Client) edgeLoop(ctx context.Context) {
	r := &reconnector{now: c.serverNow, jitter: rand.N[time.Duration],
		seenWindow: c.cfg.SeenWindow, rejoinJitter: c.cfg.RejoinJitter}
	// A session cache lets a reconnect to a wss:// edge resume its TLS
	// session (one round trip, no key exchange): a drained edge's clients
	// all reconnect within seconds.
	dialer := websocket.Dialer{HandshakeTimeout: edgeHandshakeTimeout, Proxy: http.ProxyFromEnvironment,
		TLSClientConfig: &tls.Config{ClientSessionCache: tls.NewLRUClientSessionCache(16)}}
	for ctx.Err() == nil {
		s := c.sess.Load()
		addrs := s.entry.Edge
		if len(addrs) == 0 {
			// Poll-only until an entry names an edge.
			_ = c.waitFor(ctx, func() time.Duration {
				if c.sess.Load() != s {
					return 0
				}
				return time.Second
			})
			continue
		}
		addr, last := r.target(addrs)
		// The token goes in a header, never in the URL, where proxies and
		// logs would keep it.
		conn, resp, err := dialer.DialContext(ctx, edgeURL(addr, last), http.Header{"Authorization": {"Bearer " + s.entry.Token}})
		var step edgeStep
		switch {
		case err == nil:
			step = c.edgeConnected(ctx, r, conn, s.entry.Token)
		case ctx.Err() != nil:
			return
		default:
			step = c.edgeDialFailed(r, len(addrs), addr, resp, err)
		}
		if step.stop || step.wait > 0 && c.sleep(ctx, step.wait) != nil {
			return
		}
		switch step.rejoin {
		case rejoinDialed:
			_ = c.rejoin(ctx, s, c.cfg.RejoinJitter)
		case rejoinCurrent:
			_ = c.rejoin(ctx, c.sess.Load(), c.cfg.RejoinJitter)
		}
	}
}

// edgeDialFailed counts and logs a failed dial of addr, one of n, and asks r
// what to do next.
func (c *Client) edgeDialFailed(r *reconnector, n int, addr string, resp *http.Response, err error) edgeStep {
	c.stats.edgeDialErrors.Add(1)
	if resp != nil && resp.StatusCode == http.StatusUnauthorized {
		c.log.Info("sdk: edge refused the token; re-joining", "room", c.cfg.Room)
		return r.tokenRefused()
	}
	c.log.Warn("sdk: edge dial failed", "room", c.cfg.Room, "addr", addr, "err", err)
	var retryAfter time.Duration
	if resp != nil && (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) {
		// A busy edge (connect_rate at a show's start, room_full,
		// too_many_conns) says when to come back: not before, even after
		// trying the others.
		retryAfter = readAPIError(resp).RetryAfter
	}
	return r.dialFailed(n, retryAfter)
}

// edgeConnected reads conn until it ends, and asks r what to do next.
func (c *Client) edgeConnected(ctx context.Context, r *reconnector, conn *websocket.Conn, tok string) edgeStep {
	c.stats.edgeConnects.Add(1)
	if r.connected() {
		c.stats.edgeReconnects.Add(1)
	}
	frames := c.stats.edgeFrames.Load()
	code, err := c.readEdge(ctx, conn, &r.last, tok)
	if ctx.Err() != nil {
		return edgeStep{stop: true}
	}
	switch code {
	case CloseRoomEnded:
		// The poller ends the client when it has delivered the room's
		// last segment.
		c.log.Info("sdk: the room has ended; the edge is done", "room", c.cfg.Room)
	case CloseBanned:
		// The edge and the entry refuse this user until the ban ends. The
		// segments still show the room.
		c.stats.banned.Store(1)
		c.log.Info("sdk: banned from the room; the edge is done", "room", c.cfg.Room)
	case CloseResume:
	case CloseResumeGap:
		c.log.Info("sdk: the edge cannot resume this client; starting fresh", "room", c.cfg.Room)
	case CloseDraining, CloseTokenRejected:
		c.log.Info("sdk: edge closed; re-joining", "room", c.cfg.Room, "code", code)
	default:
		c.log.Info("sdk: edge connection lost", "room", c.cfg.Room, "err", err)
	}
	return r.closed(code, c.stats.edgeFrames.Load() != frames)
}

// isTokenAsk reports whether a text frame from the edge asks for a fresh
// token: {"refresh":"token","exp_ms":N}.
func isTokenAsk(b []byte) bool {
	var a struct {
		Refresh string `json:"refresh"`
	}
	return json.Unmarshal(b, &a) == nil && a.Refresh == "token"
}

// answerTokenAsk answers the edge's ask for a fresh token: with the
// session's when it is newer than the edge's (the writer sends it), else by
// refreshing the entry now rather than at its usual time (the new session's
// token then goes out the same way).
func (c *Client) answerTokenAsk(ctx context.Context, edgeTok *atomic.Pointer[string]) {
	c.stats.tokenAsks.Add(1)
	s := c.sess.Load()
	if s.entry.Token != *edgeTok.Load() {
		select {
		case c.tokenNews <- struct{}{}:
		default:
		}
		return
	}
	go func() { _ = c.rejoin(ctx, s, 0) }()
}

// edgeURL is the handshake URL: the edge's address with the client's
// protocol (the edge refuses one below its minimum, 426) and the resume
// point, if any.
func edgeURL(addr, last string) string {
	u, err := url.Parse(addr)
	if err != nil {
		// Let the dialer report the bad address.
		return addr
	}
	q := u.Query()
	q.Set("proto", strconv.Itoa(wire.Protocol))
	if last != "" {
		q.Set("last", last)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// readEdge reads frames until the connection ends, and returns the close
// code the edge sent (0 if none).
func (c *Client) readEdge(ctx context.Context, conn *websocket.Conn, last *string, tok string) (int, error) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() {
		_ = conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second))
		_ = conn.Close()
	})
	defer stop()
	rctx, stopReports := context.WithCancel(ctx)
	defer stopReports()
	var edgeTok atomic.Pointer[string] // the token the edge holds for this connection
	edgeTok.Store(&tok)
	// A refresh between the dial and now: send its token at once.
	select {
	case c.tokenNews <- struct{}{}:
	default:
	}
	go c.reportLoop(rctx, conn, &edgeTok)
	conn.SetReadLimit(wire.MaxFrameBytes)
	// Deadlines are on the real clock: they are about the network.
	extend := func() { _ = conn.SetReadDeadline(time.Now().Add(c.cfg.EdgeReadTimeout)) }
	conn.SetPingHandler(func(data string) error {
		extend()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(edgeWriteTimeout))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	for {
		extend()
		typ, data, err := conn.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, err
			}
			return 0, err
		}
		if typ != websocket.BinaryMessage {
			if isTokenAsk(data) {
				c.answerTokenAsk(ctx, &edgeTok)
			}
			continue
		}
		c.stats.edgeFrames.Add(1)
		f, err := wire.DecodeFrame(data)
		if err == nil && f.Room != c.cfg.Room {
			err = errMismatch
		}
		if err != nil {
			c.stats.edgeDecodeErrors.Add(1)
			c.log.Warn("sdk: skipping undecodable edge frame", "room", c.cfg.Room, "err", err)
			continue
		}
		for i := range f.Messages {
			// A site-wide broadcast's id is the site stream's, another id
			// space: it must not move the room's resume point.
			if !f.Messages[i].Site && wire.CompareIDs(f.Messages[i].ID, *last) > 0 {
				*last = f.Messages[i].ID
			}
		}
		now := c.serverNow().UnixMilli()
		if _, err := c.merge.takedown(ctx, f.TakenDown, now); err != nil {
			return 0, err
		}
		if err := c.merge.deliver(ctx, f.Messages, now); err != nil {
			return 0, err
		}
	}
}

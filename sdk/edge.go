package sdk

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
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
func (c *Client) edgeLoop(ctx context.Context) {
	var (
		last    string        // newest id received from the edge
		lastAt  time.Time     // server time the connection that gave last ended
		stuck   time.Duration // back-off of frameless resume closes
		idx     int
		backoff time.Duration
		retryAt time.Time // the latest Retry-After of the addresses tried
		// A session cache lets a reconnect to a wss:// edge resume its TLS
		// session (one round trip, no key exchange): a drained edge's
		// clients all reconnect within seconds.
		dialer = websocket.Dialer{HandshakeTimeout: edgeHandshakeTimeout, Proxy: http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{ClientSessionCache: tls.NewLRUClientSessionCache(16)}}
		everConn bool
	)
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
		if idx >= len(addrs) {
			idx = 0
		}
		// Resume only while what the edge would replay is still in the
		// seen-set: gifts of a longer gap arrived through segments, and a
		// replay older than SeenWindow would show them twice. Segments
		// carry every gift, so starting fresh loses nothing.
		if last != "" && !lastAt.IsZero() && c.serverNow().Sub(lastAt) > c.cfg.SeenWindow/2 {
			last = ""
		}
		// The token goes in a header, never in the URL, where proxies and
		// logs would keep it.
		conn, resp, err := dialer.DialContext(ctx, edgeURL(addrs[idx], last), http.Header{"Authorization": {"Bearer " + s.entry.Token}})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.stats.edgeDialErrors.Add(1)
			if resp != nil && resp.StatusCode == http.StatusUnauthorized {
				c.log.Info("sdk: edge refused the token; re-joining", "room", c.cfg.Room)
				_ = c.rejoin(ctx, s, c.cfg.RejoinJitter)
				idx = 0
				continue
			}
			c.log.Warn("sdk: edge dial failed", "room", c.cfg.Room, "addr", addrs[idx], "err", err)
			if resp != nil && (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) {
				// A busy edge (connect_rate at a show's start, room_full,
				// too_many_conns) says when to come back: not before, even
				// after trying the others.
				if ra := readAPIError(resp).RetryAfter; ra > 0 {
					if at := c.serverNow().Add(ra); at.After(retryAt) {
						retryAt = at
					}
				}
			}
			idx++
			if idx == len(addrs) {
				// Every address failed: they may all be gone. Back off, then
				// ask the gslb for fresh ones.
				idx = 0
				backoff = min(max(2*backoff, edgeBackoffMin), edgeBackoffMax)
				wait := backoff/2 + rand.N(backoff/2+1)
				if until := retryAt.Sub(c.serverNow()); until > 0 {
					// Spread the refused over a second past what was asked.
					wait = max(wait, until+rand.N(time.Second))
				}
				retryAt = time.Time{}
				if c.sleep(ctx, wait) != nil {
					return
				}
				_ = c.rejoin(ctx, s, c.cfg.RejoinJitter)
			}
			continue
		}
		backoff = 0
		c.stats.edgeConnects.Add(1)
		if everConn {
			c.stats.edgeReconnects.Add(1)
		}
		everConn = true
		frames := c.stats.edgeFrames.Load()
		code, err := c.readEdge(ctx, conn, &last, s.entry.Token)
		lastAt = c.serverNow()
		if ctx.Err() != nil {
			return
		}
		switch code {
		case CloseRoomEnded:
			// The segments carry the rest, up to the room's last one; the
			// poller ends the client when it has delivered it.
			c.log.Info("sdk: the room has ended; the edge is done", "room", c.cfg.Room)
			return
		case CloseBanned:
			// The edge and the entry refuse this user until the ban ends;
			// reconnecting would only be refused. The segments still show
			// the room.
			c.stats.banned.Store(1)
			c.log.Info("sdk: banned from the room; the edge is done", "room", c.cfg.Room)
			return
		case CloseResume:
			// Reconnect at once to the same address; last resumes the
			// stream. A resume close before any frame means the edge could
			// not catch this client up (its store is failing): back off
			// rather than loop through handshakes.
			if c.stats.edgeFrames.Load() != frames {
				stuck = 0
				break
			}
			stuck = min(max(2*stuck, edgeBackoffMin), edgeBackoffMax)
			if c.sleep(ctx, stuck/2+rand.N(stuck/2+1)) != nil {
				return
			}
		case CloseResumeGap:
			// Start fresh; the segments carry the gap. Spread a whole
			// edge's worth of such closes (an outage longer than the
			// stream is kept) like any reconnect.
			c.log.Info("sdk: the edge cannot resume this client; starting fresh", "room", c.cfg.Room)
			last = ""
			if c.cfg.RejoinJitter > 0 && c.sleep(ctx, rand.N(c.cfg.RejoinJitter)) != nil {
				return
			}
		case CloseDraining, CloseTokenRejected:
			c.log.Info("sdk: edge closed; re-joining", "room", c.cfg.Room, "code", code)
			// The session at close time, not at dial time: a token refresh
			// in between must not turn this into an immediate reconnect to
			// the draining node's old address list without jitter.
			_ = c.rejoin(ctx, c.sess.Load(), c.cfg.RejoinJitter)
			idx = 0
		default:
			// A dropped connection: every client of that edge reconnects
			// now, so spread them out. Nothing is lost meanwhile: last
			// resumes the stream.
			c.log.Info("sdk: edge connection lost", "room", c.cfg.Room, "err", err)
			if c.cfg.RejoinJitter > 0 && c.sleep(ctx, rand.N(c.cfg.RejoinJitter)) != nil {
				return
			}
		}
	}
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

func edgeURL(addr, last string) string {
	if last == "" {
		return addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		// Let the dialer report the bad address.
		return addr
	}
	q := u.Query()
	q.Set("last", last)
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
		if err := c.merge.deliver(ctx, f.Messages, c.serverNow().UnixMilli()); err != nil {
			return 0, err
		}
	}
}

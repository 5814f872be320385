package edge

import (
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/auth"
	"danmaku/internal/wire"
)

// Close codes the edge sends, and what a client does on each.
const (
	// CloseResume (4001): the connection fell behind (its queue filled up)
	// or its catch-up failed. Reconnect at once with last=<id of the last
	// message received>; nothing is lost.
	CloseResume = 4001
	// CloseResumeGap (4002): the resume point is older than anything the
	// node can replay (the room's stream was trimmed past it). Reconnect at
	// once without last; what was missed is in the CDN segments, which the
	// client's poller walks in order anyway.
	CloseResumeGap = 4002
	// CloseGoingAway (4003): the node is draining. Get a new entry from the
	// gslb after a random jitter (0-3 s) and reconnect elsewhere with last.
	CloseGoingAway = 4003
	// CloseRoomEnded (4004): the room's event has ended. Do not reconnect;
	// the room's last segments and its ended manifest are on the CDN.
	CloseRoomEnded = 4004
	// ClosePolicy (1008): the client broke the protocol (it sent too many
	// messages). Back off before reconnecting.
	ClosePolicy = websocket.ClosePolicyViolation
)

// conn is one client connection: serve's goroutine writes, readLoop drains
// what the client sends.
type conn struct {
	s    *Server
	h    *hub
	ws   *websocket.Conn
	user string // the token's subject: online counts are of distinct users
	// exp is the token's expiry (Unix ms; 0: none), moved on by a fresh
	// token sent in-band.
	exp atomic.Int64
	// asked: a tokenAsk was sent for the current exp. Writer goroutine only.
	asked    bool
	askedExp int64

	queue    chan *frame   // bounded; filled by the hub without blocking
	site     chan *frame   // site-wide broadcasts, beside queue (site.go)
	done     chan struct{} // closed by kick
	readDone chan struct{} // closed when readLoop returns
	once     sync.Once
	code     int // close code to send, 0: none; written before done closes
	text     string

	idx int // position in h.conns, -1 when not there; guarded by h.mu

	// Writer goroutine only (set by register before the writer starts).
	skip    msgID
	hasSkip bool
}

func newConn(s *Server, h *hub, ws *websocket.Conn, claims *auth.Claims) *conn {
	c := &conn{
		s:        s,
		h:        h,
		ws:       ws,
		user:     claims.User(),
		queue:    make(chan *frame, s.cfg.QueueSize),
		site:     make(chan *frame, siteQueueSize),
		done:     make(chan struct{}),
		readDone: make(chan struct{}),
		idx:      -1,
	}
	if claims.ExpiresAt != nil {
		c.exp.Store(claims.ExpiresAt.UnixMilli())
	}
	return c
}

// kick asks the connection to close with code (0: without a close frame).
// Only the first call counts; it reports whether this call was it. It never
// blocks, so the hub may call it under its lock.
func (c *conn) kick(code int, text string) bool {
	first := false
	c.once.Do(func() {
		c.code, c.text = code, text
		close(c.done)
		first = true
	})
	return first
}

// serve runs the connection until it is closed, then cleans up. p is the
// catch-up computed when the connection joined the hub.
func (c *conn) serve(p resumePlan) {
	go c.readLoop()
	c.writeLoop(p)
	c.kick(0, "") // the writer failed: nothing more can be sent
	if c.code != 0 {
		msg := websocket.FormatCloseMessage(c.code, c.text)
		if err := c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(closeGrace)); err == nil {
			// Let the client answer and close first: it then holds the
			// TIME_WAIT, not this node with its 100k sockets.
			t := time.NewTimer(closeGrace)
			select {
			case <-c.readDone:
			case <-t.C:
			}
			t.Stop()
		}
	}
	_ = c.ws.Close()
	<-c.readDone
	c.h.unregister(c)
	c.s.m.closes.WithLabelValues(closeReason(c.code)).Inc()
}

func closeReason(code int) string {
	switch code {
	case CloseResume:
		return reasonResume
	case CloseResumeGap:
		return reasonGap
	case CloseTokenRejected:
		return reasonExpired // the only close with it after the handshake
	case CloseGoingAway:
		return reasonDraining
	case CloseRoomEnded:
		return reasonEnded
	case ClosePolicy:
		return reasonPolicy
	}
	return reasonGone
}

// writeLoop sends the catch-up, then queued frames and pings, until the
// connection is kicked or a write fails.
func (c *conn) writeLoop(p resumePlan) {
	if !c.catchUp(p) {
		return
	}
	ping := time.NewTicker(c.s.cfg.PingInterval)
	defer ping.Stop()
	for {
		// A kicked connection sends nothing more, even with frames queued.
		select {
		case <-c.done:
			return
		default:
		}
		select {
		case <-c.done:
			return
		case f := <-c.queue:
			if !c.writeFrame(f) {
				return
			}
		case f := <-c.site:
			// As it is: site messages are outside the room's id order, so
			// a resume's skip does not apply to them.
			if !c.writePrepared(f) {
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.s.cfg.WriteTimeout)); err != nil {
				return
			}
			if !c.checkExpiry() {
				return
			}
		}
	}
}

// checkExpiry runs at each ping: a connection whose token expires within
// two ping intervals is asked (once per expiry) for a fresh one, and one
// past its expiry and the grace is closed with CloseTokenRejected. It
// reports whether the connection goes on.
func (c *conn) checkExpiry() bool {
	exp := c.exp.Load()
	if exp == 0 {
		return true
	}
	now := c.s.cfg.Clock.Now().UnixMilli()
	if now >= exp+c.s.cfg.TokenGrace.Milliseconds() {
		c.kick(CloseTokenRejected, "token expired")
		c.s.m.tokenExpired.Inc()
		return false
	}
	if now < exp-2*c.s.cfg.PingInterval.Milliseconds() || (c.asked && c.askedExp == exp) {
		return true
	}
	b, _ := json.Marshal(tokenAsk{Refresh: "token", ExpMs: exp}) // always marshals
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		return false
	}
	c.asked, c.askedExp = true, exp
	c.s.m.tokenAsks.Inc()
	return true
}

// refreshToken takes a fresh token a client sent in-band: valid, for the
// same user and room (a refreshed entry may name other edges; the user is
// on this one already), expiring later than the one it replaces.
func (c *conn) refreshToken(tok string) {
	claims, err := c.s.cfg.Verifier.Verify(tok)
	if err != nil || claims.User() != c.user || claims.Room != c.h.room || claims.ExpiresAt == nil {
		c.s.m.tokenRefreshes.WithLabelValues("refused").Inc()
		return
	}
	for {
		old := c.exp.Load()
		exp := claims.ExpiresAt.UnixMilli()
		if exp <= old {
			c.s.m.tokenRefreshes.WithLabelValues("stale").Inc()
			return
		}
		if c.exp.CompareAndSwap(old, exp) {
			c.s.m.tokenRefreshes.WithLabelValues("ok").Inc()
			return
		}
	}
}

// writeFrame writes a shared frame, leaving out what the client already has.
func (c *conn) writeFrame(f *frame) bool {
	if c.hasSkip {
		if !c.skip.less(f.last) {
			return true // all of it is at or before the client's last id
		}
		c.hasSkip = false
		if !c.skip.less(f.first) {
			i := 0
			for i < len(f.msgs) {
				if id, _ := parseMsgID(f.msgs[i].ID); c.skip.less(id) {
					break
				}
				i++
			}
			return c.writeMessages(f.msgs[i:], "")
		}
	}
	return c.writePrepared(f)
}

// writeMessages encodes msgs for this connection alone and writes them.
// source labels catch-up messages ("ring", "store"); "" for live ones.
func (c *conn) writeMessages(msgs []wire.Message, source string) bool {
	frames, err := encodeFrames(c.h.room, msgs, false)
	if err != nil {
		c.s.log.Error("edge: encode frame", "room", c.h.room, "err", err)
		c.kick(CloseResume, "resume")
		return false
	}
	for _, f := range frames {
		select {
		case <-c.done:
			return false
		default:
		}
		_ = c.ws.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		if err := c.ws.WriteMessage(websocket.BinaryMessage, f.data); err != nil {
			return false
		}
		c.s.m.framesSent.Inc()
		c.s.m.messagesSent.Add(float64(len(f.msgs)))
		if source != "" {
			c.s.m.catchUp.WithLabelValues(source).Add(float64(len(f.msgs)))
		}
	}
	return true
}

// catchUp sends what a resuming client missed: the pushable messages in
// (storeFrom, storeUntil] read back from the store, then those the ring
// held when the connection joined.
func (c *conn) catchUp(p resumePlan) bool {
	if p.fromStore {
		switch gap, err := c.resumeGap(p); {
		case err != nil:
			c.s.log.Warn("edge: catch-up read", "room", c.h.room, "err", err)
			c.kick(CloseResume, "resume")
			return false
		case gap:
			// Replaying from here would skip what the trim took, silently.
			c.kick(CloseResumeGap, "resume point too old; reconnect without last")
			return false
		}
		lo := c.s.minGift(c.h.room)
		after := p.storeFrom.String()
		for done := false; !done; {
			es, err := c.s.cfg.Store.Read(c.s.ctx, c.h.key, after, readCount, 0)
			if err != nil {
				c.s.log.Warn("edge: catch-up read", "room", c.h.room, "err", err)
				c.kick(CloseResume, "resume")
				return false
			}
			if len(es) == 0 {
				break
			}
			var batch []wire.Message
			for i := range es {
				id, err := parseMsgID(es[i].ID)
				if err != nil {
					continue
				}
				if p.storeUntil.less(id) {
					done = true
					break
				}
				if pushable(&es[i], lo) {
					batch = append(batch, wire.Slim(es[i]))
				}
				if id == p.storeUntil {
					done = true
					break
				}
			}
			if len(batch) > 0 && !c.writeMessages(batch, "store") {
				return false
			}
			after = es[len(es)-1].ID
		}
	}
	if len(p.ring) > 0 {
		return c.writeMessages(p.ring, "ring")
	}
	return true
}

// resumeGap reports whether the stream no longer holds the resume point:
// its oldest entry is newer than the client's last id (the entry with that
// id was trimmed, and whatever followed it up to the oldest may have been
// too), or the stream is empty though the room has moved past last. A last
// of 0-0 asks for whatever is kept and is never a gap.
func (c *conn) resumeGap(p resumePlan) (bool, error) {
	if p.storeFrom == (msgID{}) {
		return false, nil
	}
	es, err := c.s.cfg.Store.Read(c.s.ctx, c.h.key, "0-0", 1, 0)
	if err != nil {
		return false, err
	}
	if len(es) == 0 {
		return p.storeFrom.less(p.storeUntil), nil
	}
	first, err := parseMsgID(es[0].ID)
	if err != nil {
		return false, nil // a store never returns one; the read finds out
	}
	return p.storeFrom.less(first), nil
}

// errClientFlood ends a connection whose client sends more than its allowance.
var errClientFlood = errors.New("edge: client sends too much")

// readLoop drains the client: pongs (which keep the connection alive) and
// counter reports. It ends the connection when the client goes silent for
// a ping interval and the pong grace, closes, or floods.
func (c *conn) readLoop() {
	defer close(c.readDone)
	ws := c.ws
	wait := c.s.cfg.PingInterval + c.s.cfg.PongGrace
	ws.SetReadLimit(c.s.cfg.ReadLimit)
	_ = ws.SetReadDeadline(time.Now().Add(wait))
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(wait)) })
	// One allowance for everything a client sends, pings included: each
	// ping costs a pong written by this server.
	tokens, last := float64(clientMsgBurst), time.Now()
	allow := func() bool {
		now := time.Now()
		_ = ws.SetReadDeadline(now.Add(wait))
		tokens = min(clientMsgBurst, tokens+float64(now.Sub(last))/float64(clientMsgEvery))
		last = now
		if tokens < 1 {
			return false
		}
		tokens--
		return true
	}
	ws.SetPingHandler(func(data string) error {
		if !allow() {
			return errClientFlood
		}
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(closeGrace))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	for {
		typ, b, err := ws.ReadMessage()
		if errors.Is(err, errClientFlood) {
			c.kick(ClosePolicy, "too many messages")
			return
		}
		if err != nil {
			c.kick(0, "")
			return
		}
		if !allow() {
			c.kick(ClosePolicy, "too many messages")
			return
		}
		if typ != websocket.TextMessage {
			c.s.m.badReports.Inc()
			continue
		}
		r, err := parseReport(b)
		if err != nil {
			c.s.m.badReports.Inc()
			continue
		}
		c.s.m.renderDrops.Add(float64(r.Drops))
		c.s.m.heldSends.Add(float64(r.Held))
		if r.Token != "" {
			c.refreshToken(r.Token)
		}
	}
}

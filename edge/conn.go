package edge

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"danmaku/auth"
	"danmaku/sdk/wire"
)

// Close codes the edge sends, and what a client does on each.
const (
	// CloseResume (4001): the connection fell behind (its queue filled up)
	// or its catch-up failed. Reconnect at once with last=<id of the last
	// message received>; nothing is lost.
	CloseResume = 4001
	// CloseResumeGap (4002): the resume point is older than anything the
	// node can replay (the room's stream was trimmed past it), or further
	// ahead than the room can have written (more than maxLastAhead past its
	// newest id and the node's clock). Reconnect at once without last; what
	// was missed is in the CDN segments, which the client's poller walks in
	// order anyway.
	CloseResumeGap = 4002
	// CloseGoingAway (4003): the node is draining. Get a new entry from the
	// gslb after a random jitter (0-3 s) and reconnect elsewhere with last.
	CloseGoingAway = 4003
	// CloseRoomEnded (4004): the room's event has ended. Do not reconnect;
	// the room's last segments and its ended manifest are on the CDN.
	CloseRoomEnded = 4004
	// ClosePolicy (1008): the client broke the protocol (it sent too many
	// messages). Back off before reconnecting.
	ClosePolicy = 1008
)

// Results of sock.send.
const (
	sendOK     = iota // written, or queued behind what the socket holds
	sendFull          // max frames wait already: the frame was not taken
	sendClosed        // the socket is closing or gone
)

// conn is one client connection. It has no goroutine of its own: the
// room's flusher offers it frames, the server's pinger ticks it, and its
// socket's reader (an epoll loop, or a goSock's reader) hands it what the
// client sends. mu orders all three.
type conn struct {
	s    *Server
	h    *hub
	user string // the token's subject: online counts are of distinct users
	// exp is the token's expiry (Unix ms; 0: none), moved on by a fresh
	// token sent in-band.
	exp atomic.Int64
	// lastRead is when the client last sent anything (Unix ns): a client
	// silent for a ping interval and the grace is dead.
	lastRead atomic.Int64

	mu sync.Mutex
	sk sock // nil until the catch-up is written
	// backlog holds frames offered while the catch-up is written, at most
	// QueueSize; they follow it.
	backlog  []*frame
	closing  bool  // kicked: nothing more is sent
	code     int   // the close code sent (0: none), for the closes metric
	lastPing int64 // Unix ns
	// asked: a tokenAsk was sent for askedExp.
	asked    bool
	askedExp int64
	// skip: the client is ahead of the hub (it resumed from a node that
	// had read further); frames up to skip are left out, once.
	skip    msgID
	hasSkip bool

	// The client's allowance (a token bucket, timed by Config.Clock):
	// read by its socket's reader only.
	tokens  float32
	tokenAt int64 // Unix ns
	// pingsOut is how many of our pings are unanswered: that many pongs
	// are free.
	pingsOut atomic.Int32
	// What the client's counter reports may still add (reportCredit, as
	// of creditAt, Unix ns of Config.Clock) and when the last one was
	// taken (0: none): see takeReport. Reader only.
	reportCredit float32
	creditAt     int64
	reportAt     int64
	// frag is a message whose first fragments arrived; reader only.
	frag       []byte
	fragBinary bool

	idx  int // position in h.conns, -1 when not there; guarded by h.mu
	gone sync.Once
}

func newConn(s *Server, h *hub, claims *auth.Claims) *conn {
	c := &conn{s: s, h: h, user: claims.User(), idx: -1, tokens: clientMsgBurst}
	now := time.Now().UnixNano()
	c.lastRead.Store(now)
	c.tokenAt, c.lastPing = s.cfg.Clock.Now().UnixNano(), now
	if claims.ExpiresAt != nil {
		c.exp.Store(claims.ExpiresAt.UnixMilli())
	}
	c.reportCredit, c.creditAt = s.reportCap(), s.cfg.Clock.Now().UnixNano()
	return c
}

var _ sockOwner = (*conn)(nil)

// touched marks that the client sent something: a pong, a report.
func (c *conn) touched() int64 {
	c.lastRead.Store(time.Now().UnixNano())
	return c.s.cfg.ReadLimit
}

// kick closes the connection with code (0: without a close frame). Only
// the first call counts; it reports whether this call was it.
func (c *conn) kick(code int, text string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kickLocked(code, text)
}

func (c *conn) kickLocked(code int, text string) bool {
	if c.closing {
		return false
	}
	c.closing, c.code = true, code
	c.backlog = nil
	if c.sk != nil {
		c.sk.closeWith(code, text)
	}
	// Without a socket the catch-up is still being written: start sees
	// closing and closes with code.
	return true
}

// start writes the catch-up p to nc, hands the socket to a loop (or a
// goSock) and then sends what was offered meanwhile. br holds what the
// client sent past the handshake. The connection's holds (slot, user,
// hub) are released by finish, once the socket is gone.
func (c *conn) start(nc net.Conn, br *bufio.Reader, p resumePlan) {
	frames, code := c.catchUp(p)
	if code == 0 && len(frames) > 0 {
		if err := writeAll(nc, c.s.cfg.WriteTimeout, frames...); err != nil {
			code = -1
		}
	}
	if code != 0 {
		c.mu.Lock()
		c.closing, c.code = true, max(code, 0)
		c.mu.Unlock()
		if code > 0 {
			refuseConn(nc, br, code, closeText(code))
		} else {
			_ = nc.Close()
		}
		c.finish()
		return
	}
	sk := c.s.newSock(nc, br, c)
	c.mu.Lock()
	c.sk = sk
	if c.closing {
		sk.closeWith(c.code, closeText(c.code))
	} else {
		var t tally
		for _, f := range c.backlog {
			if !c.sendFrameLocked(f, &t) {
				break
			}
		}
		c.backlog = nil
		c.s.count(&t)
	}
	c.mu.Unlock()
	sk.begin()
}

// closeText is the reason sent with a close code.
func closeText(code int) string {
	switch code {
	case CloseResume:
		return "resume"
	case CloseResumeGap:
		return "resume point not in the stream; reconnect without last"
	case CloseGoingAway:
		return "going away"
	case CloseRoomEnded:
		return "room ended"
	case CloseTokenRejected:
		return "token expired"
	case ClosePolicy:
		return "too many messages"
	}
	return ""
}

// finish runs once the socket is closed: the connection leaves its hub
// and releases its slot, its user's count and its hold on the hub.
func (c *conn) finish() {
	c.gone.Do(func() {
		c.h.unregister(c)
		c.mu.Lock()
		code := c.code
		c.closing = true
		c.backlog = nil
		c.mu.Unlock()
		c.s.m.closes.WithLabelValues(closeReason(code)).Inc()
		c.s.users.release(c.user)
		c.s.release(c.h)
		c.s.conns.Add(-1)
	})
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
	case CloseBanned:
		return reasonBanned
	case ClosePolicy, closeUnsupported, closeBadData, closeTooBig, closeProtocol:
		return reasonPolicy
	}
	return reasonGone
}

// offer sends a room frame, or keeps it while the catch-up is written,
// counting what it wrote in t. A connection that cannot take it is closed
// with CloseResume; it reports false then.
func (c *conn) offer(f *frame, t *tally) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return true
	}
	if c.sk == nil {
		if len(c.backlog) >= c.s.cfg.QueueSize {
			c.kickLocked(CloseResume, closeText(CloseResume))
			return false
		}
		c.backlog = append(c.backlog, f)
		return true
	}
	return c.sendFrameLocked(f, t)
}

// sendFrameLocked sends a shared frame, leaving out what the client
// already has. Never drop: a client that cannot keep up resumes from its
// last id on a fresh connection.
func (c *conn) sendFrameLocked(f *frame, t *tally) bool {
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
			own, err := encodeFrames(c.h.room, f.msgs[i:])
			if err != nil {
				c.s.log.Error("edge: encode frame", "room", c.h.room, "err", err)
				c.kickLocked(CloseResume, closeText(CloseResume))
				return false
			}
			for _, f := range own {
				if !c.sendLocked(f, t) {
					return false
				}
			}
			return true
		}
	}
	return c.sendLocked(f, t)
}

func (c *conn) sendLocked(f *frame, t *tally) bool {
	switch c.sk.send(f.data, c.s.cfg.QueueSize) {
	case sendFull:
		if !c.closing {
			c.s.m.slow.Inc() // before the close frame reaches the client
		}
		c.kickLocked(CloseResume, closeText(CloseResume))
		return false
	case sendClosed:
		return false
	}
	t.frames++
	t.msgs += len(f.msgs)
	return true
}

// offerSite sends a site-wide frame when the socket holds fewer than
// siteQueueSize unwritten frames; otherwise (or during the catch-up) it is skipped: the
// segments carry it, and the room's frames are not held up behind it.
func (c *conn) offerSite(f *frame, t *tally) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closing && c.sk != nil && c.sk.send(f.data, siteQueueSize) == sendOK {
		t.frames++
		t.msgs += len(f.msgs)
		t.siteOffered += len(f.msgs)
		return
	}
	t.siteSkipped += len(f.msgs)
}

// tick runs a few times per ping interval: a client that answered
// nothing since its last ping, for the grace, is closed; the others are
// pinged once an interval, and asked for a fresh token or closed when
// theirs expires.
func (c *conn) tick(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.sk == nil {
		return
	}
	t, read := now.UnixNano(), c.lastRead.Load()
	if read < c.lastPing {
		// The last ping is unanswered. Dead: silent for a ping interval
		// and the ping unanswered for the grace — whatever the pinger's
		// granularity, a client has the whole grace to answer.
		if t-c.lastPing > int64(c.s.cfg.PongGrace) && t-read > int64(c.s.cfg.PingInterval) {
			c.kickLocked(0, "")
			return
		}
	} else if t-c.lastPing >= int64(c.s.cfg.PingInterval) {
		// A ping that does not fit is not needed: the client is behind on
		// frames already, and closed as slow if it stays so.
		if c.sk.send(pingFrame, c.s.cfg.QueueSize) == sendOK {
			c.lastPing = t
			c.pingsOut.Add(1)
		}
	}
	c.checkExpiryLocked()
}

// checkExpiryLocked: a connection whose token expires within two ping
// intervals is asked (once per expiry) for a fresh one, and one past its
// expiry and the grace is closed with CloseTokenRejected.
func (c *conn) checkExpiryLocked() {
	exp := c.exp.Load()
	if exp == 0 {
		return
	}
	now := c.s.cfg.Clock.Now().UnixMilli()
	if now >= exp+c.s.cfg.TokenGrace.Milliseconds() {
		c.s.m.tokenExpired.Inc() // before the close frame reaches the client
		c.kickLocked(CloseTokenRejected, closeText(CloseTokenRejected))
		return
	}
	if now < exp-2*c.s.cfg.PingInterval.Milliseconds() || (c.asked && c.askedExp == exp) {
		return
	}
	b, _ := json.Marshal(tokenAsk{Refresh: "token", ExpMs: exp}) // always marshals
	if c.sk.send(serverFrame(ws.OpText, b), c.s.cfg.QueueSize) != sendOK {
		return // asked again at the next ping
	}
	c.asked, c.askedExp = true, exp
	c.s.m.tokenAsks.Inc()
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

// catchUp returns what a resuming client missed, encoded for it alone:
// the pushable messages in (storeFrom, storeUntil] read back from the
// store, then those the ring held when the connection joined. A nonzero
// code closes the connection instead.
func (c *conn) catchUp(p resumePlan) (frames [][]byte, code int) {
	if p.ahead {
		// Like a resume point trimmed away, one that was never written:
		// the client reconnects without last, and its segment poller
		// finds its place.
		return nil, CloseResumeGap
	}
	var msgs []wire.Message
	if p.fromStore {
		switch gap, err := c.resumeGap(p); {
		case err != nil:
			c.s.log.Warn("edge: catch-up read", "room", c.h.room, "err", err)
			return nil, CloseResume
		case gap:
			// Replaying from here would skip what the trim took, silently.
			return nil, CloseResumeGap
		}
		lo := c.s.minGift(c.h.room)
		after := p.storeFrom.String()
		n := 0
		for done := false; !done; {
			es, err := c.s.cfg.Store.Read(c.s.ctx, c.h.key, after, readCount, 0)
			if err != nil {
				c.s.log.Warn("edge: catch-up read", "room", c.h.room, "err", err)
				return nil, CloseResume
			}
			if len(es) == 0 {
				break
			}
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
					msgs = append(msgs, wire.Slim(es[i]))
					n++
				}
				if id == p.storeUntil {
					done = true
					break
				}
			}
			after = es[len(es)-1].ID
		}
		c.s.m.catchUp.WithLabelValues("store").Add(float64(n))
	}
	if len(p.ring) > 0 {
		msgs = append(msgs, p.ring...)
		c.s.m.catchUp.WithLabelValues("ring").Add(float64(len(p.ring)))
	}
	if len(msgs) == 0 {
		return nil, 0
	}
	fs, err := encodeFrames(c.h.room, msgs)
	if err != nil {
		c.s.log.Error("edge: encode frame", "room", c.h.room, "err", err)
		return nil, CloseResume
	}
	for _, f := range fs {
		frames = append(frames, f.data)
		c.s.m.framesSent.Inc()
		c.s.m.messagesSent.Add(float64(len(f.msgs)))
	}
	return frames, 0
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

// onFrame handles one frame the client sent: pings (answered), pongs,
// counter reports and in-band tokens. Close frames are the socket's. It
// is called by the socket's reader only, one frame at a time; false ends
// the connection (it has been kicked).
func (c *conn) onFrame(f clientFrame) bool {
	// One allowance for everything a client sends, pings and pongs
	// included: each ping costs a pong written by this server, and each
	// frame a turn of the epoll loop the client shares with its
	// neighbours. A pong answering one of our pings is free (lastRead,
	// moved by the reader, is all it is for); an unasked one is not.
	if f.op == ws.OpPong && c.pingsOut.Load() > 0 {
		c.pingsOut.Add(-1) // the reader alone takes it down
		return true
	}
	now := c.s.cfg.Clock.Now().UnixNano()
	c.tokens = min(clientMsgBurst, c.tokens+float32(now-c.tokenAt)/float32(clientMsgEvery))
	c.tokenAt = now
	if c.tokens < 1 {
		c.kick(ClosePolicy, closeText(ClosePolicy))
		return false
	}
	c.tokens--
	if f.op == ws.OpPong {
		return true
	}
	if f.op == ws.OpPing {
		c.mu.Lock()
		if !c.closing && c.sk != nil {
			c.sk.send(serverFrame(ws.OpPong, f.payload), c.s.cfg.QueueSize+1)
		}
		c.mu.Unlock()
		return true
	}
	// A message may come in fragments (a client library splits what is
	// longer than its buffer): they are joined, within ReadLimit.
	switch {
	case f.op == ws.OpContinuation && c.frag == nil:
		c.s.m.badReports.Inc()
		c.kick(closeProtocol, "continuation without a message")
		return false
	case f.op == ws.OpContinuation:
		if int64(len(c.frag)+len(f.payload)) > c.s.cfg.ReadLimit {
			c.kick(closeTooBig, "message too large")
			return false
		}
		c.frag = append(c.frag, f.payload...)
		if !f.fin {
			return true
		}
		f.op, f.payload, c.frag = ws.OpText, c.frag, nil
		if c.fragBinary {
			f.op = ws.OpBinary
		}
	case !f.fin:
		c.frag, c.fragBinary = append([]byte(nil), f.payload...), f.op == ws.OpBinary
		return true
	}
	// What breaks the protocol closes with its code; a well-formed report
	// whose values are out of range is counted and ignored (a newer SDK
	// may send what this edge does not know).
	switch {
	case f.op != ws.OpText:
		c.s.m.badReports.Inc()
		c.kick(closeUnsupported, "only text reports are accepted")
		return false
	}
	r, err := parseReport(f.payload)
	if err != nil {
		c.s.m.badReports.Inc()
		if errors.Is(err, errReportSyntax) {
			c.kick(closeBadData, "reports are JSON objects")
			return false
		}
		return true
	}
	if r.Drops > 0 || r.Held > 0 || r.Segs > 0 || r.Lat.set {
		// One counter report, its service levels included, is taken or
		// refused whole: the same spacing (ReportEvery) for all of it.
		if reason := c.takeReport(r, c.s.cfg.Clock.Now().UnixNano()); reason != "" {
			c.s.m.reportsRefused.WithLabelValues(reason).Inc()
		} else {
			c.s.m.renderDrops.Add(float64(r.Drops))
			c.s.m.heldSends.Add(float64(r.Held))
			ev, room := c.s.cfg.Events.MetricLabels(c.h.room)
			c.s.m.addSLO(ev, room, &r)
		}
	}
	if r.Token != "" {
		c.refreshToken(r.Token)
	}
	return true
}

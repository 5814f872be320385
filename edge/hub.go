package edge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"danmaku/internal/backoff"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// hub is one room on this node: one reader tailing the room's Live lane, one
// flusher fanning frames out, and the room's connections.
//
// Invariants, under mu: every pushable message with an id in (base, cursor]
// is in the ring; every one in (flushed, cursor] is in pending; every
// connection in conns has been (or is being) given every message up to
// flushed and will be offered every frame flushed after it.
type hub struct {
	s      *Server
	room   string
	key    stream.Key
	ctx    context.Context
	cancel context.CancelFunc

	ready   chan struct{} // closed once the start position is known
	initErr error         // set before ready is closed

	refs int // connections holding the hub, guarded by s.mu

	wake   chan struct{} // reader → flusher: pending is not empty
	online atomic.Int64  // len(users): distinct viewers, readable without mu

	mu      sync.Mutex
	conns   []*conn
	users   map[string]int // connections per user
	ring    ring
	base    msgID
	cursor  msgID
	flushed msgID
	pending []wire.Message
}

func newHub(s *Server, room string) *hub {
	ctx, cancel := context.WithCancel(s.ctx)
	return &hub{
		s:      s,
		room:   room,
		key:    stream.Key{Room: room, Lane: stream.Live},
		ctx:    ctx,
		cancel: cancel,
		ready:  make(chan struct{}),
		wake:   make(chan struct{}, 1),
		ring:   newRing(s.cfg.RingSize),
		users:  map[string]int{},
	}
}

// run finds the start position, then tails the stream until the hub is
// stopped. It is the hub's only reader of the store.
func (h *hub) run() {
	defer h.s.wg.Done()
	// An explicit start id instead of "$": the ring then covers a known
	// range from the first moment, which resume depends on.
	last, err := h.s.cfg.Store.LastID(h.ctx, h.key)
	var start msgID
	if err == nil {
		start, err = parseMsgID(last)
	}
	if err != nil {
		h.initErr = fmt.Errorf("edge: open room %s: %w", h.room, err)
		// Out of the map before anyone sees the error: the next handshake
		// starts a new hub instead of sharing this dead one until every
		// overlapping handshake has let go of it.
		h.s.mu.Lock()
		if h.s.hubs[h.room] == h {
			delete(h.s.hubs, h.room)
		}
		h.s.mu.Unlock()
		close(h.ready)
		return
	}
	h.base, h.cursor, h.flushed = start, start, start
	close(h.ready)

	h.s.wg.Add(1)
	go h.flushLoop()

	after := last
	retry := backoff.New(50*time.Millisecond, maxBackoff) // jittered: a failover stops every room's reader at once
	for {
		es, err := h.s.cfg.Store.Read(h.ctx, h.key, after, readCount, h.s.cfg.ReadBlock)
		if h.ctx.Err() != nil {
			return
		}
		if err != nil {
			// The connections stay: they get what was missed once the
			// store answers again (reads resume after the last id).
			h.s.m.readErrors.Inc()
			if retry.Failures() == 0 {
				h.s.log.Warn("edge: read live stream; retrying, connections kept", "room", h.room, "err", err)
			}
			if !backoff.Sleep(h.ctx, retry.Next()) {
				return
			}
			continue
		}
		if n := retry.Failures(); n > 0 {
			h.s.log.Info("edge: live stream read again", "room", h.room, "failed_reads", n)
			retry.Reset()
		}
		if len(es) > 0 {
			h.add(es)
			after = es[len(es)-1].ID
		}
	}
}

// add files freshly read entries: pushable ones into the ring and pending.
func (h *hub) add(es []stream.Entry) {
	lo := h.s.minGift(h.room)
	h.mu.Lock()
	n := len(h.pending)
	for i := range es {
		id, err := parseMsgID(es[i].ID)
		if err != nil || !h.cursor.less(id) {
			continue // a store never returns these; never let one break the order
		}
		h.cursor = id
		if !pushable(&es[i], lo) {
			continue
		}
		m := wire.Slim(es[i])
		if old, ok := h.ring.push(entry{id: id, msg: m}); ok {
			h.base = old.id
		}
		h.pending = append(h.pending, m)
	}
	grew := len(h.pending) > n
	h.mu.Unlock()
	if grew {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// flushLoop sends pending messages at most once per merge window: the first
// message after a quiet window goes out at once, later ones wait for the
// window to pass and share a frame.
func (h *hub) flushLoop() {
	defer h.s.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	var last time.Time
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.wake:
		}
		if wait := h.s.cfg.MergeWindow - time.Since(last); wait > 0 {
			t.Reset(wait)
			select {
			case <-h.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if h.flush() {
			last = time.Now()
		}
	}
}

// flush encodes pending into frames once and offers them to every
// connection. It reports whether it sent anything.
func (h *hub) flush() bool {
	h.mu.Lock()
	msgs := h.pending
	h.pending = nil
	h.mu.Unlock()
	if len(msgs) == 0 {
		return false
	}
	// Encoding happens outside the lock; a connection joining meanwhile
	// sees flushed not yet advanced, so it gets these from the fan-out
	// below, not from its catch-up.
	frames, err := encodeFrames(h.room, msgs)
	if err != nil {
		// Only a bug gets here (a Message always encodes). Connections
		// would miss these messages, so send them all away to resume.
		h.s.log.Error("edge: encode frame", "room", h.room, "err", err)
	}

	// The connections and the new flushed position are taken together:
	// one that joins later has these messages in its catch-up (the ring
	// up to flushed), one in the snapshot gets them below.
	h.mu.Lock()
	last, _ := parseMsgID(msgs[len(msgs)-1].ID)
	h.flushed = last
	conns := h.s.fanBuf.get(h.conns)
	h.mu.Unlock()
	defer h.s.fanBuf.put(conns)
	// The writes happen outside the lock (a join waits for none of them),
	// spread over the cores: each is a syscall, the bulk of an edge's CPU.
	start := time.Now()
	defer func() { h.s.m.fanout.Observe(time.Since(start).Seconds()) }()
	h.s.fanOut(conns, func(c *conn, t *tally) {
		if err != nil {
			c.kick(CloseResume, closeText(CloseResume))
			return
		}
		for _, f := range frames {
			if !c.offer(f, t) {
				return
			}
		}
	})
	return true
}

// resumePlan is what a joining connection must be sent before its queue: the
// pushable messages in (storeFrom, storeUntil] from the store when fromStore,
// then ring.
type resumePlan struct {
	fromStore  bool
	storeFrom  msgID
	storeUntil msgID
	ring       []wire.Message
	// ahead: the client's last id is beyond anything the room can have
	// written (aheadOfStream); it is closed with CloseResumeGap instead.
	ahead bool
}

// maxLastAhead is how far past both the room's newest id and this node's
// clock a last id may be. A client legitimately ahead came from a node
// that had read a little further, and store and node clocks differ by
// far less; an id beyond it was never written, and honouring it would
// withhold every message up to it (an hour ahead: an hour of gifts).
const maxLastAhead = time.Minute

// aheadOfStream reports whether last lies beyond maxLastAhead past the
// room's newest id and the node's clock (the room may have written since
// the hub last read). h.mu must be held.
func (h *hub) aheadOfStream(last msgID) bool {
	newest := max(h.cursor.ms, h.s.cfg.Clock.Now().UnixMilli())
	return last.ms > newest+maxLastAhead.Milliseconds()
}

// register adds c to the fan-out and returns its catch-up. With hasLast the
// catch-up covers everything after last up to flushed; the fan-out covers
// the rest. It fails once the server drains.
func (h *hub) register(c *conn, last msgID, hasLast bool) (resumePlan, *refusal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.s.draining.Load() {
		return resumePlan{}, refuseDraining
	}
	if max := h.s.cfg.MaxRoomConns; max > 0 && len(h.conns) >= max {
		// A hot room spills over: the client tries its next edge address,
		// and this node's load report sends new viewers elsewhere.
		return resumePlan{}, refuseRoomFull
	}
	var p resumePlan
	if hasLast && h.aheadOfStream(last) {
		// Not joined: the connection is closed as soon as it starts.
		p.ahead = true
		return p, nil
	}
	if hasLast {
		from := last
		if last.less(h.base) {
			// Older than the ring: the store has (last, base]. When the
			// ring evicted unflushed entries, base is past flushed and
			// pending holds the rest.
			p.fromStore, p.storeFrom, p.storeUntil = true, last, minID(h.base, h.flushed)
			from = h.base
		}
		p.ring = h.ring.slice(h.ring.after(from), h.ring.after(h.flushed))
		if h.flushed.less(last) {
			// The client is ahead of this hub (it came from a node that
			// read further): skip what it already has.
			c.skip, c.hasSkip = last, true
		}
	}
	c.idx = len(h.conns)
	h.conns = append(h.conns, c)
	if h.users[c.user]++; h.users[c.user] == 1 {
		h.online.Add(1)
	}
	return p, nil
}

// unregister removes c from the fan-out, if it is still there.
func (h *hub) unregister(c *conn) {
	h.mu.Lock()
	if c.idx >= 0 {
		h.removeAt(c.idx)
	}
	h.mu.Unlock()
}

// removeAt removes conns[i]; mu must be held.
func (h *hub) removeAt(i int) {
	c := h.conns[i]
	c.idx = -1
	last := len(h.conns) - 1
	if i != last {
		h.conns[i] = h.conns[last]
		h.conns[i].idx = i
	}
	h.conns[last] = nil
	h.conns = h.conns[:last]
	if h.users[c.user]--; h.users[c.user] <= 0 {
		delete(h.users, c.user)
		h.online.Add(-1)
	}
}

// snapshot returns the hub's connections.
func (h *hub) snapshot() []*conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*conn(nil), h.conns...)
}

// frame is one encoded WebSocket frame, shared by every connection of a
// room (or, for a resume's partial frames, one connection's own).
type frame struct {
	data        []byte // the whole WebSocket frame: header and payload
	msgs        []wire.Message
	first, last msgID
}

// frameOf is the frame of entries ms: the messages in m, the takedown
// entries' takedowns in td. A frame of takedowns alone has an empty m.
func frameOf(room string, ms []wire.Message) *wire.Frame {
	f := &wire.Frame{V: wire.Version, Room: room, Messages: ms}
	n := 0
	for i := range ms {
		if ms[i].IsTakedown() {
			n++
		}
	}
	if n == 0 {
		return f // the common case: no copy
	}
	f.Messages = make([]wire.Message, 0, len(ms)-n)
	for i := range ms {
		if ms[i].IsTakedown() {
			f.TakenDown = append(f.TakenDown, ms[i].TakenDown...)
		} else {
			f.Messages = append(f.Messages, ms[i])
		}
	}
	return f
}

// encodeFrames encodes msgs as binary WebSocket frames of at most
// maxFrameMessages messages and at most wire.MaxFrameBytes bytes of
// payload (a single larger message still gets its own frame).
func encodeFrames(room string, msgs []wire.Message) ([]*frame, error) {
	var out []*frame
	var enc func([]wire.Message) error
	enc = func(ms []wire.Message) error {
		b, err := wire.EncodeFrame(frameOf(room, ms))
		if err != nil {
			return err
		}
		if len(b) > wire.MaxFrameBytes && len(ms) > 1 {
			if err := enc(ms[:len(ms)/2]); err != nil {
				return err
			}
			return enc(ms[len(ms)/2:])
		}
		f := &frame{data: serverFrame(ws.OpBinary, b), msgs: ms}
		f.first, _ = parseMsgID(ms[0].ID)
		f.last, _ = parseMsgID(ms[len(ms)-1].ID)
		out = append(out, f)
		return nil
	}
	for len(msgs) > 0 {
		n := min(len(msgs), maxFrameMessages)
		if err := enc(msgs[:n:n]); err != nil {
			return nil, err
		}
		msgs = msgs[n:]
	}
	return out, nil
}

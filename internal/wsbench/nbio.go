package wsbench

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

// nbioServer runs lesismal/nbio in its event-loop mode (IOModNonBlocking):
// a few poller goroutines own every socket; reads use one buffer per
// poller; a connection holds bytes only while a frame is partly read or
// partly written. Frames are encoded once and written with the raw
// nbio.Conn.Write (non-blocking: what the socket does not take is kept
// and flushed on EPOLLOUT), not with websocket.Conn.WriteMessage, which
// encodes and copies the frame for each connection.
type nbioServer struct {
	opt    Options
	ln     net.Listener
	eng    *nbhttp.Engine
	up     *websocket.Upgrader
	room   *room[*nbioConn]
	limit  atomic.Int64
	stop   chan struct{}
	closed sync.Once
}

type nbioConn struct {
	ws      *websocket.Conn
	nb      *nbio.Conn
	pending atomic.Int64 // bytes handed to Write and not yet on the socket
	kicked  atomic.Bool
}

func init() { logging.SetLevel(logging.LevelNone) }

// NewNbio starts the nbio candidate on a loopback port.
func NewNbio(opt Options) (Server, error) {
	opt = opt.withDefaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &nbioServer{opt: opt, ln: ln, room: newRoom[*nbioConn](), stop: make(chan struct{})}
	s.limit.Store(int64(opt.QueueSize) * 256)

	u := websocket.NewUpgrader()
	u.CheckOrigin = func(*http.Request) bool { return true }
	u.HandshakeTimeout = 5 * time.Second
	// The read deadline nbio resets on every frame received: a client
	// silent for a ping interval and the grace is closed (as the edge).
	u.KeepaliveTime = opt.PingInterval + opt.PongGrace
	u.MessageLengthLimit = ReadLimit
	u.OnMessage(func(*websocket.Conn, websocket.MessageType, []byte) {}) // text frames: discarded
	// Pongs go through send too, so that the pending count stays exact.
	u.SetPingHandler(func(c *websocket.Conn, data string) {
		if v, ok := c.Session().(*nbioConn); ok {
			s.send(v, serverFrame(0xA, []byte(data)))
		}
	})
	u.OnClose(func(c *websocket.Conn, _ error) {
		if v, ok := c.Session().(*nbioConn); ok {
			s.room.remove(v)
		}
	})
	s.up = u

	s.eng = nbhttp.NewEngine(nbhttp.Config{
		Network: "tcp",
		Addrs:   []string{ln.Addr().String()},
		Listen:  func(string, string) (net.Listener, error) { return ln, nil },
		IOMod:   nbhttp.IOModNonBlocking,
		NPoller: 2,
		// One read buffer per poller, not per connection.
		ReadBufferSize: 4 << 10,
		// Client payloads go back to the pool as soon as OnMessage returns.
		ReleaseWebsocketPayload:      true,
		MaxWebsocketFramePayloadSize: ReadLimit,
		MaxLoad:                      1 << 20,
		Handler:                      http.HandlerFunc(s.serveHTTP),
	})
	// nbio calls this for every write that reached the socket, direct or
	// flushed on EPOLLOUT. The nbio.Conn's session is the websocket.Conn
	// (set by Upgrade; in IOModNonBlocking its Session never blocks), whose
	// session is ours once serveHTTP set it (nil for the 101 response).
	s.eng.OnWrittenSize(func(c *nbio.Conn, _ []byte, n int) {
		if ws, ok := c.Session().(*websocket.Conn); ok {
			if v, ok := ws.Session().(*nbioConn); ok {
				v.pending.Add(-int64(n))
			}
		}
	})
	if err := s.eng.Start(); err != nil {
		ln.Close()
		return nil, err
	}
	go s.pinger()
	return s, nil
}

func (s *nbioServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if rejectHTTP(w, r) {
		return
	}
	ws, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	under := ws.UnderlayerConn()
	if hc, ok := under.(*nbhttp.Conn); ok { // IOModNonBlocking wraps it
		under = hc.Conn
	}
	nb, ok := under.(*nbio.Conn)
	if !ok { // not reachable in IOModNonBlocking
		ws.Close()
		return
	}
	c := &nbioConn{ws: ws, nb: nb}
	ws.SetSession(c)
	s.room.add(c)
}

func (s *nbioServer) Addr() string { return s.ln.Addr().String() }
func (s *nbioServer) Conns() int   { return s.room.len() }

func (s *nbioServer) Close() error {
	s.closed.Do(func() {
		close(s.stop)
		s.eng.Stop()
	})
	return nil
}

// send writes an encoded frame, or closes with CloseResume a connection
// whose unwritten bytes would exceed its bound.
func (s *nbioServer) send(c *nbioConn, frame []byte) {
	if c.kicked.Load() {
		return
	}
	if c.pending.Add(int64(len(frame))) > s.limit.Load() {
		s.kick(c, CloseResume)
		return
	}
	if _, err := c.nb.Write(frame); err != nil {
		c.ws.Close()
	}
}

func (s *nbioServer) kick(c *nbioConn, code int) {
	if c.kicked.Swap(true) {
		return
	}
	_ = c.ws.WriteClose(code, "resume") // queued behind what is pending
	_ = c.ws.Close()
}

func (s *nbioServer) Broadcast(payload []byte) {
	frame := serverFrame(0x2, payload)
	s.limit.Store(int64(s.opt.QueueSize) * int64(len(frame)))
	s.room.each(func(c *nbioConn) { s.send(c, frame) })
}

func (s *nbioServer) pinger() {
	ping := serverFrame(0x9, nil)
	t := time.NewTicker(s.opt.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.room.each(func(c *nbioConn) { s.send(c, ping) })
		}
	}
}

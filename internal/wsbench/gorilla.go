package wsbench

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// gorillaServer is today's edge design: one goroutine writes (from a
// bounded channel of prepared messages), one reads.
type gorillaServer struct {
	opt  Options
	ln   net.Listener
	hs   *http.Server
	up   websocket.Upgrader
	room *room[*gorillaConn]
}

type gorillaConn struct {
	ws    *websocket.Conn
	queue chan *websocket.PreparedMessage
	done  chan struct{}
	once  sync.Once
	code  int
}

// NewGorilla starts the baseline candidate on a loopback port.
func NewGorilla(opt Options) (Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &gorillaServer{opt: opt.withDefaults(), ln: ln, room: newRoom[*gorillaConn]()}
	s.up = websocket.Upgrader{
		HandshakeTimeout: 5 * time.Second,
		ReadBufferSize:   512, // as the edge
		WriteBufferPool:  &sync.Pool{},
		CheckOrigin:      func(*http.Request) bool { return true },
	}
	s.hs = &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.hs.Serve(ln) }()
	return s, nil
}

func (s *gorillaServer) Addr() string { return s.ln.Addr().String() }
func (s *gorillaServer) Conns() int   { return s.room.len() }

func (s *gorillaServer) Close() error {
	err := s.hs.Close() // hijacked connections are not closed by it
	s.room.each(func(c *gorillaConn) { c.kick(0) })
	return err
}

func (s *gorillaServer) Broadcast(payload []byte) {
	pm, err := websocket.NewPreparedMessage(websocket.BinaryMessage, payload)
	if err != nil {
		return
	}
	s.room.each(func(c *gorillaConn) {
		select {
		case c.queue <- pm:
		default:
			c.kick(CloseResume)
		}
	})
}

func (c *gorillaConn) kick(code int) {
	c.once.Do(func() { c.code = code; close(c.done) })
}

func (s *gorillaServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if rejectHTTP(w, r) {
		return
	}
	ws, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	// As the edge: the connection gets goroutines of its own and the
	// handler returns, freeing net/http's per-request state and the
	// handler's deep stack.
	go s.serveConn(ws)
}

func (s *gorillaServer) serveConn(ws *websocket.Conn) {
	c := &gorillaConn{ws: ws, queue: make(chan *websocket.PreparedMessage, s.opt.QueueSize), done: make(chan struct{})}
	s.room.add(c)
	readDone := make(chan struct{})
	go func() { // reader goroutine
		defer close(readDone)
		defer c.kick(0)
		wait := s.opt.PingInterval + s.opt.PongGrace
		ws.SetReadLimit(ReadLimit)
		_ = ws.SetReadDeadline(time.Now().Add(wait))
		ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(wait)) })
		for {
			if _, _, err := ws.NextReader(); err != nil { // text frames: discarded unread
				return
			}
			_ = ws.SetReadDeadline(time.Now().Add(wait))
		}
	}()
	// This goroutine writes.
	ping := time.NewTicker(s.opt.PingInterval)
	const writeTimeout = 10 * time.Second
loop:
	for {
		select {
		case <-c.done:
			break loop
		case pm := <-c.queue:
			_ = ws.SetWriteDeadline(time.Now().Add(writeTimeout))
			if ws.WritePreparedMessage(pm) != nil {
				break loop
			}
		case <-ping.C:
			if ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout)) != nil {
				break loop
			}
		}
	}
	ping.Stop()
	c.kick(0)
	if c.code != 0 {
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(c.code, "resume"), time.Now().Add(time.Second))
	}
	_ = ws.Close()
	<-readDone
	s.room.remove(c)
}

package edge

import (
	"bufio"
	"net"
	"sync"
	"time"

	"github.com/gobwas/ws"
)

// goSock serves a socket a loop cannot own (TLS: the record layer needs a
// blocking net.Conn; other systems; wrapped listeners) with a reader and
// a writer goroutine. The queue holds references to shared frames.
type goSock struct {
	c  *conn
	nc net.Conn
	br *bufio.Reader

	mu      sync.Mutex
	q       [][]byte
	closing bool          // a close was queued or the socket failed
	wake    chan struct{} // writer: the queue grew or the socket closes
	read    chan struct{} // closed when the reader ends
}

// goReadBuffer is a goSock's read buffer: clients send control frames
// and small reports.
const goReadBuffer = 512

func newGoSock(nc net.Conn, br *bufio.Reader, c *conn) *goSock {
	if br == nil || br.Buffered() == 0 {
		// The handshake's reader is the HTTP server's 4 KiB one; an idle
		// connection keeps a smaller one.
		br = bufio.NewReaderSize(nc, goReadBuffer)
	}
	return &goSock{c: c, nc: nc, br: br, wake: make(chan struct{}, 1), read: make(chan struct{})}
}

func (g *goSock) begin() {
	written := make(chan struct{})
	go g.readLoop(written)
	go g.writeLoop(written)
}

func (g *goSock) send(frame []byte, max int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return sendClosed
	}
	if len(g.q) >= max {
		return sendFull
	}
	g.q = append(g.q, frame)
	g.signal()
	return sendOK
}

func (g *goSock) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

func (g *goSock) closeWith(code int, text string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return
	}
	g.closing = true
	if code == 0 {
		_ = g.nc.Close() // both loops end
		return
	}
	g.q = append(g.q, closeFrame(code, text))
	g.signal()
}

// writeLoop writes what is queued until a write fails, the reader ends,
// or a queued close frame is out; then it waits (at most closeGrace) for
// the client to answer a close, and closes the socket.
func (g *goSock) writeLoop(written chan<- struct{}) {
	defer close(written)
	defer g.nc.Close()
	for {
		select {
		case <-g.wake:
		case <-g.read:
			// What is queued still goes out (a close frame, the echo of
			// the client's), bounded by the write deadline.
			g.mu.Lock()
			q := g.q
			g.q = nil
			g.mu.Unlock()
			if len(q) > 0 {
				_ = writeAll(g.nc, g.c.s.cfg.WriteTimeout, q...)
			}
			return
		}
		g.mu.Lock()
		q, closing := g.q, g.closing
		g.q = nil
		g.mu.Unlock()
		if len(q) > 0 {
			if err := writeAll(g.nc, g.c.s.cfg.WriteTimeout, q...); err != nil {
				return
			}
		}
		if closing {
			// Let the client close first, so that it holds the TIME_WAIT.
			t := time.NewTimer(closeGrace)
			select {
			case <-g.read:
			case <-t.C:
			}
			t.Stop()
			return
		}
	}
}

// readLoop hands the client's frames to the connection until the socket
// fails or closes; once the writer has ended too, the connection finishes.
func (g *goSock) readLoop(written <-chan struct{}) {
	c := g.c
	defer func() {
		g.mu.Lock()
		g.closing = true
		g.mu.Unlock()
		close(g.read)
		<-written
		c.finish()
	}()
	for {
		f, err := readClientFrame(g.br, c.s.cfg.ReadLimit)
		if err != nil {
			if code := frameErrCode(err); code != 0 {
				c.kick(code, "bad frame")
			}
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if f.op == ws.OpClose {
			g.mu.Lock()
			if !g.closing {
				g.closing = true
				g.q = append(g.q, echoClose(f.payload))
				g.signal()
			}
			g.mu.Unlock()
			return
		}
		if !c.onFrame(f) {
			return
		}
	}
}

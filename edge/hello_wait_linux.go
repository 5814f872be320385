package edge

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"

	"github.com/gobwas/ws"

	"danmaku/sdk/wire"
)

// loopWait is a helloWait's side in an epoll loop.
type loopWait struct {
	ps       *pollSock
	deadline int64 // Unix ns on the server's Clock: closed with 4408 after it
	// frag is a hello that came in fragments; the loop's only.
	frag   []byte
	fragOp ws.OpCode
	// controls counts the control frames before the hello: more than
	// clientMsgBurst is a flood in a loop shared with other sockets.
	controls int
}

var _ sockOwner = (*helloWait)(nil)

// pollHello hands an upgraded socket to an epoll loop to wait for its
// hello there; false when no loop can own it (nc is then untouched).
func (s *Server) pollHello(nc net.Conn, br *bufio.Reader, w *helloWait) bool {
	p := s.poller()
	if p == nil {
		return false
	}
	switch sk := p.add(nc, pre(br), w).(type) {
	case nil:
		return false
	case *pollSock:
		w.ps = sk
		w.deadline = s.cfg.Clock.Now().Add(s.cfg.HelloTimeout).UnixNano()
		l := sk.l
		l.hmu.Lock()
		l.hellos = append(l.hellos, w)
		l.hmu.Unlock()
		sk.begin()
	default: // failed on the way: closed
		w.finish()
	}
	return true
}

// sweepHellos closes, with 4408, the loop's sockets past their hello
// deadline, and forgets the waits that ended.
func (l *loop) sweepHellos() {
	l.hmu.Lock()
	if len(l.hellos) == 0 {
		l.hmu.Unlock()
		return
	}
	now := l.now().UnixNano()
	var late []*helloWait
	keep := l.hellos[:0]
	for _, w := range l.hellos {
		w.mu.Lock()
		open := w.state == waitOpen
		w.mu.Unlock()
		switch {
		case !open:
		case now >= w.deadline:
			late = append(late, w)
		default:
			keep = append(keep, w)
		}
	}
	clear(l.hellos[len(keep):])
	l.hellos = keep
	if len(keep) == 0 {
		l.hellos = nil
	}
	l.hmu.Unlock()
	for _, w := range late {
		w.refuse(refuseHelloTimeout)
	}
}

func (w *helloWait) touched() int64 { return w.s.cfg.ReadLimit }

// onFrame takes the client's first message as its hello, joining
// fragments within ReadLimit; control frames before it are skipped, as a
// goroutine's read skips them, up to clientMsgBurst of them (more closes
// 1008, as a connection's allowance does). A hello of the right shape ends
// the wait: false, and handOff follows.
func (w *helloWait) onFrame(f clientFrame) bool {
	w.mu.Lock()
	open := w.state == waitOpen
	w.mu.Unlock()
	if !open {
		return true // refused: the client's close is awaited
	}
	if f.op.IsControl() {
		if w.controls++; w.controls > clientMsgBurst {
			return w.refuse(refuseHelloFlood)
		}
		return true
	}
	switch {
	case f.op == ws.OpContinuation:
		if w.frag == nil {
			return w.refuse(refuseHelloFrame)
		}
		if int64(len(w.frag)+len(f.payload)) > w.s.cfg.ReadLimit {
			return w.refuse(refuseHelloTooBig)
		}
		w.frag = append(w.frag, f.payload...)
		if !f.fin {
			return true
		}
		f = clientFrame{op: w.fragOp, fin: true, payload: w.frag}
		w.frag = nil
	case w.frag != nil: // a new message amid the fragments of one
		return w.refuse(refuseHelloFrame)
	case !f.fin:
		w.frag, w.fragOp = append([]byte(nil), f.payload...), f.op
		return true
	}
	if r := w.parse(f); r != nil {
		return w.refuse(r)
	}
	w.mu.Lock()
	if w.state == waitOpen {
		w.state = waitHandedOff
	}
	w.mu.Unlock()
	return false
}

// kick closes for a framing error.
func (w *helloWait) kick(code int, _ string) bool {
	if code == closeTooBig {
		return w.refuse(refuseHelloTooBig)
	}
	return w.refuse(refuseHelloFrame)
}

// refuse closes a waiting socket with r's code and counts it; always
// false (read no more).
func (w *helloWait) refuse(r *refusal) bool {
	w.mu.Lock()
	if w.state != waitOpen {
		w.mu.Unlock()
		return false
	}
	w.state = waitRefused // frag is the reader's: left to the collector
	w.mu.Unlock()
	w.s.m.rejects.WithLabelValues(r.code).Inc()
	w.ps.closeWith(r.close, wire.TruncateRunes(r.msg, 40))
	return false
}

// finish runs once the socket closed in its loop: the slot and the wait
// are freed.
func (w *helloWait) finish() {
	w.mu.Lock()
	if w.state == waitDone {
		w.mu.Unlock()
		return
	}
	w.state = waitDone
	w.mu.Unlock()
	w.s.hellos.done(w.addr)
	w.s.conns.Add(-1)
}

// handOff takes a socket whose hello came out of its loop and admits it
// on a goroutine of its own: verifying the token and joining the room may
// wait (a room's first connection opens its stream), which a loop must
// not. rest is what the client sent after its hello (the loop's buffer:
// copied).
func (w *helloWait) handOff(ps *pollSock, rest []byte) {
	w.mu.Lock()
	ok := w.state == waitHandedOff
	w.mu.Unlock()
	if !ok {
		return
	}
	fd, ok := ps.detach()
	if !ok {
		return // closed meanwhile: finish has freed everything
	}
	w.s.hellos.done(w.addr)
	rest = bytes.Clone(rest)
	go w.admit(fd, rest)
}

// admit gives the socket back to Go's netpoller (the net.Conn the
// handshake path writes a catch-up to) and admits it, as serveHello does.
func (w *helloWait) admit(fd int, rest []byte) {
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f) // a dup: f is closed either way
	_ = f.Close()
	if err != nil {
		w.s.log.Debug("edge: hand off a hello's socket", "err", err)
		w.s.conns.Add(-1)
		return
	}
	var br *bufio.Reader
	if len(rest) > 0 {
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rest), nc), max(len(rest), goReadBuffer))
		_, _ = br.Peek(len(rest))
	}
	w.s.admitHello(nc, br, w.hl.Token, w.last, w.hasLast)
}

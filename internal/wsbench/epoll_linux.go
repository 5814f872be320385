package wsbench

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"
)

// epollServer is gobwas/ws over a hand-written epoll loop. The handshake
// runs on a short-lived goroutine with the standard library's net.Conn;
// the socket is then dup'ed out of Go's netpoller and owned by one of
// GOMAXPROCS epoll loops. A connection is a small struct: no goroutine, no
// buffer unless a client frame arrived in pieces or the socket did not take
// everything written (pending then holds references to the shared frames,
// bounded by QueueSize, flushed with writev on EPOLLOUT).
type epollServer struct {
	opt   Options
	ln    net.Listener
	loops []*eloop
	room  *room[*econn]
	next  atomic.Uint32
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

type eloop struct {
	s    *epollServer
	epfd int
	mu   sync.Mutex
	fds  map[int]*econn
	buf  []byte // the loop's read buffer, shared by its connections
}

type econn struct {
	l        *eloop
	mu       sync.Mutex
	fd       int
	closed   bool
	out      bool     // EPOLLOUT armed
	pending  [][]byte // frames (shared, read-only) not yet on the socket
	off      int      // bytes of pending[0] already written
	partial  []byte   // an incomplete client frame; nil when none
	lastRead atomic.Int64
}

// NewEpoll starts the gobwas/ws + epoll candidate on a loopback port.
func NewEpoll(opt Options) (Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &epollServer{opt: opt.withDefaults(), ln: ln, room: newRoom[*econn](), stop: make(chan struct{})}
	n := max(1, min(4, runtimeProcs()))
	for range n {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			s.Close()
			return nil, err
		}
		l := &eloop{s: s, epfd: epfd, fds: make(map[int]*econn), buf: make([]byte, 4<<10)}
		s.loops = append(s.loops, l)
		s.wg.Add(1)
		go l.run()
	}
	s.wg.Add(2)
	go s.accept()
	go s.pinger()
	return s, nil
}

func (s *epollServer) Addr() string { return s.ln.Addr().String() }
func (s *epollServer) Conns() int   { return s.room.len() }

func (s *epollServer) Close() error {
	s.once.Do(func() {
		close(s.stop)
		s.ln.Close()
		s.room.each(func(c *econn) { c.close() })
		s.wg.Wait()
		for _, l := range s.loops {
			unix.Close(l.epfd)
		}
	})
	return nil
}

func (s *epollServer) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.handshake(nc)
	}
}

var errUnauthorized = ws.RejectConnectionError(ws.RejectionStatus(401))

func (s *epollServer) handshake(nc net.Conn) {
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	auth := false
	u := ws.Upgrader{
		ReadBufferSize: 1 << 10,
		OnRequest: func(uri []byte) error {
			if p, _, _ := strings.Cut(string(uri), "?"); p != Path {
				return ws.RejectConnectionError(ws.RejectionStatus(404))
			}
			return nil
		},
		OnHeader: func(k, v []byte) error {
			if strings.EqualFold(string(k), "Authorization") && authorized(string(v)) {
				auth = true
			}
			return nil
		},
		OnBeforeUpgrade: func() (ws.HandshakeHeader, error) {
			if !auth {
				return nil, errUnauthorized
			}
			return nil, nil
		},
	}
	if _, err := u.Upgrade(nc); err != nil {
		nc.Close()
		return
	}
	// Take the socket out of Go's netpoller: dup it, close the original.
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		nc.Close()
		return
	}
	fd := -1
	_ = rc.Control(func(f uintptr) { fd, err = unix.Dup(int(f)) })
	nc.Close()
	if err != nil || fd < 0 {
		return
	}
	_ = unix.SetNonblock(fd, true)
	l := s.loops[int(s.next.Add(1))%len(s.loops)]
	c := &econn{l: l, fd: fd}
	c.lastRead.Store(time.Now().Unix())
	l.mu.Lock()
	l.fds[fd] = c
	l.mu.Unlock()
	s.room.add(c)
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
		c.close()
	}
}

func (l *eloop) run() {
	defer l.s.wg.Done()
	evs := make([]unix.EpollEvent, 256)
	for {
		select {
		case <-l.s.stop:
			return
		default:
		}
		n, err := unix.EpollWait(l.epfd, evs, 200)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		for i := range max(n, 0) {
			e := evs[i]
			l.mu.Lock()
			c := l.fds[int(e.Fd)]
			l.mu.Unlock()
			if c == nil {
				continue
			}
			if e.Events&unix.EPOLLOUT != 0 {
				c.mu.Lock()
				c.flushLocked()
				c.mu.Unlock()
			}
			if e.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				l.read(c)
			}
		}
	}
}

// read drains the socket into the loop's buffer and handles whole frames.
// It holds c.mu: a concurrent close must not let it read a reused fd.
func (l *eloop) read(c *econn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.closed {
		n, err := unix.Read(c.fd, l.buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return
		}
		if err != nil || n == 0 {
			c.closeLocked()
			return
		}
		c.lastRead.Store(time.Now().Unix())
		data := l.buf[:n]
		if c.partial != nil {
			data = append(c.partial, data...)
		}
		rest, ok := c.handleFramesLocked(data)
		if !ok {
			c.closeLocked()
			return
		}
		if len(rest) > 0 {
			c.partial = append([]byte(nil), rest...)
		} else {
			c.partial = nil
		}
		if n < len(l.buf) {
			return
		}
	}
}

// handleFramesLocked handles the whole client frames in data and returns what is
// left of an incomplete one; false: close the connection.
func (c *econn) handleFramesLocked(data []byte) ([]byte, bool) {
	for len(data) > 0 {
		r := bytes.NewReader(data)
		h, err := ws.ReadHeader(r)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return data, true
		}
		if err != nil || !h.Masked || h.Length > ReadLimit {
			c.closeWithLocked(ws.StatusProtocolError)
			return nil, false
		}
		hl := len(data) - r.Len()
		if int64(len(data)-hl) < h.Length {
			return data, true
		}
		p := data[hl : hl+int(h.Length)]
		data = data[hl+int(h.Length):]
		switch h.OpCode {
		case ws.OpPing:
			ws.Cipher(p, h.Mask, 0)
			c.sendLocked(ws.MustCompileFrame(ws.NewPongFrame(p)))
		case ws.OpClose:
			c.closeWithLocked(ws.StatusNormalClosure)
			return nil, false
		default: // text, binary, continuation, pong: read and discarded
		}
	}
	return nil, true
}

// send writes frame, or queues a reference to it behind what is pending.
func (c *econn) send(frame []byte) {
	c.mu.Lock()
	c.sendLocked(frame)
	c.mu.Unlock()
}

func (c *econn) sendLocked(frame []byte) {
	if c.closed {
		return
	}
	if len(c.pending) > 0 {
		if len(c.pending) >= c.l.s.opt.QueueSize {
			c.kickLocked(CloseResume)
			return
		}
		c.pending = append(c.pending, frame)
		return
	}
	n, err := unix.Write(c.fd, frame)
	if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
		c.closeLocked()
		return
	}
	if n = max(n, 0); n < len(frame) {
		c.pending, c.off = append(c.pending, frame), n
		c.armLocked(true)
	}
}

// flushLocked writes what is pending with one writev.
func (c *econn) flushLocked() {
	if c.closed || len(c.pending) == 0 {
		return
	}
	iov := make([][]byte, len(c.pending))
	copy(iov, c.pending)
	iov[0] = iov[0][c.off:]
	n, err := unix.Writev(c.fd, iov)
	if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
		c.closeLocked()
		return
	}
	n = max(n, 0)
	for n > 0 && len(c.pending) > 0 {
		left := len(c.pending[0]) - c.off
		if n < left {
			c.off += n
			break
		}
		n -= left
		c.pending[0] = nil
		c.pending, c.off = c.pending[1:], 0
	}
	if len(c.pending) == 0 {
		c.pending, c.off = nil, 0 // release the queue's memory
		c.armLocked(false)
	}
}

func (c *econn) armLocked(out bool) {
	if c.out == out {
		return
	}
	c.out = out
	ev := uint32(unix.EPOLLIN | unix.EPOLLRDHUP)
	if out {
		ev |= unix.EPOLLOUT
	}
	_ = unix.EpollCtl(c.l.epfd, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: ev, Fd: int32(c.fd)})
}

// kickLocked sends a close frame with code (best effort: the socket may be
// full) and closes.
func (c *econn) kickLocked(code int) {
	_, _ = unix.Write(c.fd, ws.MustCompileFrame(ws.NewCloseFrame(ws.NewCloseFrameBody(ws.StatusCode(code), "resume"))))
	c.closeLocked()
}

func (c *econn) closeWithLocked(code ws.StatusCode) {
	if !c.closed {
		_, _ = unix.Write(c.fd, ws.MustCompileFrame(ws.NewCloseFrame(ws.NewCloseFrameBody(code, ""))))
		c.closeLocked()
	}
}

func (c *econn) close() {
	c.mu.Lock()
	c.closeLocked()
	c.mu.Unlock()
}

func (c *econn) closeLocked() {
	if c.closed {
		return
	}
	c.closed = true
	c.pending, c.partial = nil, nil
	l := c.l
	l.mu.Lock()
	if l.fds[c.fd] == c {
		delete(l.fds, c.fd)
	}
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
	unix.Close(c.fd) // under l.mu: the fd number is not reused before it leaves l.fds
	l.mu.Unlock()
	l.s.room.remove(c) // broadcasts iterate over a snapshot: no lock held
}

func (s *epollServer) Broadcast(payload []byte) {
	frame := serverFrame(byte(ws.OpBinary), payload)
	s.room.each(func(c *econn) { c.send(frame) })
}

// pinger pings every connection each interval and closes those that sent
// nothing for an interval and the grace (one timer for the room, none per
// connection).
func (s *epollServer) pinger() {
	defer s.wg.Done()
	ping := serverFrame(byte(ws.OpPing), nil)
	t := time.NewTicker(s.opt.PingInterval)
	defer t.Stop()
	dead := int64((s.opt.PingInterval + s.opt.PongGrace) / time.Second)
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			now := time.Now().Unix()
			s.room.each(func(c *econn) {
				if now-c.lastRead.Load() > dead {
					c.close()
					return
				}
				c.send(ping)
			})
		}
	}
}

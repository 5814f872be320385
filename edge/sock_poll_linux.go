package edge

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"
)

// poller owns the plain TCP sockets of a server: a few epoll loops (one
// per core, at most maxLoops), each with one read buffer for all its
// sockets. A socket is taken out of Go's netpoller once its handshake
// and catch-up are written (dup'ed, the net.Conn closed), so an idle
// connection costs a pollSock and a map entry — no goroutine, no buffer.
type poller struct {
	loops []*loop
	next  atomic.Uint32
	wg    sync.WaitGroup
}

// maxLoops bounds the epoll loops: reading is rare on an edge (pongs and
// reports), so more loops would only be more idle goroutines.
const maxLoops = 4

// pollReadBuffer is each loop's read buffer.
const pollReadBuffer = 16 << 10

// maxReadsPerWake bounds how many reads one socket gets per wake-up of its
// loop (64 KiB with pollReadBuffer). Sockets are registered level-triggered
// (no EPOLLET): one with data left is reported by the next epoll_wait
// again, and the kernel puts it behind the sockets that were ready with
// it, so a client that floods its socket gets its turn and no more — its
// neighbours' pongs and flushes are not held up behind it. Without the
// bound, a loop read one flooding socket for as long as it kept up, and a
// neighbour's queue filled meanwhile (closed 631 ms into a pong flood).
const maxReadsPerWake = 4

// closingReadLimit is what a socket may send after our close frame before
// its loop stops reading it (deaf): a client answering the close sends a
// few bytes, one flooding on reads at the loop's full speed until the
// close grace ends it. Deaf, its kernel buffer fills and TCP holds it back.
const closingReadLimit = maxReadsPerWake * pollReadBuffer

type loop struct {
	epfd int
	efd  int // an eventfd that wakes the loop to stop
	stop atomic.Bool
	buf  []byte // the loop's read buffer, shared by its sockets

	mu    sync.Mutex
	socks map[int32]*pollSock

	// Sockets waiting for their hello (helloWait), timed out by the loop:
	// it wakes every tick and closes those past their deadline, told by
	// now (the server's Clock).
	now    func() time.Time
	tick   time.Duration
	swept  time.Time // loop only
	hmu    sync.Mutex
	hellos []*helloWait
}

// pollSock is a socket owned by a loop. mu guards fd against reuse: the
// number is closed and forgotten under it (and under the loop's mu), so
// no write can reach another socket that got the same number.
type pollSock struct {
	l *loop
	c sockOwner

	mu    sync.Mutex
	fd    int
	state uint8 // sockOpen, sockClosing (close frame sent), sockClosed
	out   bool  // EPOLLOUT armed (or to be, once registered)
	// registered: the socket is in its loop's epoll set (begin).
	registered bool
	pending    [][]byte
	off        int    // bytes of pending[0] on the wire already
	partial    []byte // an incomplete client frame
	timer      *time.Timer
	// closingRead counts what was read after our close frame; past
	// closingReadLimit the socket is deaf (EPOLLIN disarmed) until it
	// hangs up or the close grace ends it.
	closingRead int
	deaf        bool
}

const (
	sockOpen = iota
	sockClosing
	sockClosed
)

// newPoller starts the loops; they time hello waits by now, checked
// every tick.
func newPoller(now func() time.Time, tick time.Duration) (*poller, error) {
	p := &poller{}
	for range max(1, min(maxLoops, runtime.GOMAXPROCS(0))) {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			p.stop()
			return nil, err
		}
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			unix.Close(epfd)
			p.stop()
			return nil, err
		}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(efd)}); err != nil {
			unix.Close(epfd)
			unix.Close(efd)
			p.stop()
			return nil, err
		}
		l := &loop{epfd: epfd, efd: efd, buf: make([]byte, pollReadBuffer), socks: map[int32]*pollSock{}, now: now, tick: tick}
		p.loops = append(p.loops, l)
		p.wg.Go(l.run)
	}
	return p, nil
}

// stop ends the loops; sockets still open are closed (a server stops
// them after its drain, when none should be left).
func (p *poller) stop() {
	for _, l := range p.loops {
		l.stop.Store(true)
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(l.efd, one[:])
	}
	p.wg.Wait()
	for _, l := range p.loops {
		l.mu.Lock()
		socks := make([]*pollSock, 0, len(l.socks))
		for _, ps := range l.socks {
			socks = append(socks, ps)
		}
		l.mu.Unlock()
		for _, ps := range socks {
			ps.mu.Lock()
			ps.finishLocked()
			ps.mu.Unlock()
			ps.c.finish()
		}
		unix.Close(l.epfd)
		unix.Close(l.efd)
	}
}

// add takes nc (a *net.TCPConn) out of Go's netpoller and into a loop;
// pre is what the client sent past the handshake, already read. It
// returns nil when nc cannot be polled here; nc is then untouched.
func (p *poller) add(nc net.Conn, pre []byte, c sockOwner) sock {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	fd := -1
	if cerr := rc.Control(func(f uintptr) { fd, err = unix.Dup(int(f)) }); cerr != nil || err != nil || fd < 0 {
		return nil
	}
	unix.CloseOnExec(fd)
	_ = nc.Close() // the dup keeps the socket; Go's netpoller lets go of it
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return deadSock{c}
	}
	l := p.loops[int(p.next.Add(1))%len(p.loops)]
	ps := &pollSock{l: l, c: c, fd: fd}
	if len(pre) > 0 {
		ps.partial = append([]byte(nil), pre...)
	}
	return ps
}

// begin handles what came with the handshake, then joins the loop: the
// frames already read go first, before the loop can read what followed.
// The connection holds the socket by now, so a ping among them is
// answered.
func (ps *pollSock) begin() {
	ps.mu.Lock()
	pre := ps.partial
	ps.partial = nil
	ps.mu.Unlock()
	if len(pre) > 0 && !ps.consume(pre) {
		return // closed or closing already
	}
	l := ps.l
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.state == sockClosed {
		return
	}
	l.mu.Lock()
	l.socks[int32(ps.fd)] = ps
	l.mu.Unlock()
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, ps.fd, &unix.EpollEvent{Events: ps.eventsLocked(), Fd: int32(ps.fd)}); err != nil {
		ps.finishLocked()
		go ps.c.finish()
		return
	}
	ps.registered = true
}

// deadSock is a socket that failed while moving to a loop: it takes
// nothing, and its connection finishes once told to close.
type deadSock struct{ c sockOwner }

func (d deadSock) begin()               {}
func (d deadSock) send([]byte, int) int { return sendClosed }
func (d deadSock) closeWith(int, string) {
	go d.c.finish() // the caller holds the connection's lock
}

func (l *loop) run() {
	evs := make([]unix.EpollEvent, 256)
	wait := int(max(l.tick/time.Millisecond, 1))
	for !l.stop.Load() {
		n, err := unix.EpollWait(l.epfd, evs, wait)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		for i := range max(n, 0) {
			e := evs[i]
			if int(e.Fd) == l.efd {
				continue // stop, checked by the loop
			}
			l.mu.Lock()
			ps := l.socks[e.Fd]
			l.mu.Unlock()
			if ps == nil {
				continue
			}
			if e.Events&unix.EPOLLOUT != 0 {
				ps.flush()
			}
			if e.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				ps.readable()
			}
		}
		if now := time.Now(); now.Sub(l.swept) >= l.tick {
			l.swept = now
			l.sweepHellos()
		}
	}
}

// readable reads the socket into the loop's buffer, at most
// maxReadsPerWake times, and hands whole frames to the connection,
// outside the socket's lock (the connection takes its own first, then the
// socket's). What it leaves unread, epoll reports again (level-triggered).
func (ps *pollSock) readable() {
	buf := ps.l.buf
	for range maxReadsPerWake {
		ps.mu.Lock()
		if ps.state == sockClosed {
			ps.mu.Unlock()
			return
		}
		if ps.deaf {
			// Only a hang-up or an error wakes a deaf socket: its client
			// is gone, or past answering our close.
			ps.finishLocked()
			ps.mu.Unlock()
			ps.c.finish()
			return
		}
		n, err := unix.Read(ps.fd, buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			ps.mu.Unlock()
			return
		}
		if err != nil || n == 0 {
			ps.finishLocked()
			ps.mu.Unlock()
			ps.c.finish()
			return
		}
		if ps.state == sockClosing {
			if ps.closingRead += n; ps.closingRead >= closingReadLimit {
				ps.deaf = true
				ps.rearmLocked()
				ps.mu.Unlock()
				return
			}
		}
		data := buf[:n]
		if ps.partial != nil {
			data = append(ps.partial, data...)
			ps.partial = nil
		}
		ps.mu.Unlock()
		if !ps.consume(data) || n < len(buf) {
			return
		}
	}
}

// consume handles the whole frames in data and keeps the rest; false:
// the socket is closed or closing.
func (ps *pollSock) consume(data []byte) bool {
	c := ps.c
	limit := c.touched()
	for len(data) > 0 {
		f, n, err := parseClientFrame(data, limit)
		if err != nil {
			c.kick(frameErrCode(err), "bad frame")
			return false
		}
		if n == 0 {
			break
		}
		data = data[n:]
		if f.op == ws.OpClose {
			ps.peerClosed(f.payload)
			return false
		}
		if !c.onFrame(f) {
			if h, ok := c.(*helloWait); ok {
				h.handOff(ps, data) // the hello: the rest is the connection's
			}
			return false
		}
	}
	if len(data) > 0 {
		ps.mu.Lock()
		if ps.state != sockClosed {
			ps.partial = append([]byte(nil), data...)
		}
		ps.mu.Unlock()
	}
	return true
}

// peerClosed answers the client's close frame (unless it answers ours)
// and closes.
func (ps *pollSock) peerClosed(payload []byte) {
	ps.mu.Lock()
	if ps.state == sockClosed {
		ps.mu.Unlock()
		return
	}
	if ps.state == sockOpen {
		_, _ = unix.Write(ps.fd, echoClose(payload))
	}
	ps.finishLocked()
	ps.mu.Unlock()
	ps.c.finish()
}

func (ps *pollSock) send(frame []byte, max int) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.state != sockOpen {
		return sendClosed
	}
	if len(ps.pending) > 0 {
		if len(ps.pending) >= max {
			return sendFull
		}
		ps.pending = append(ps.pending, frame)
		return sendOK
	}
	if !ps.writeLocked(frame) {
		return sendClosed
	}
	return sendOK
}

// writeLocked writes frame, keeping what the socket did not take; false
// when the socket failed (its loop then sees the hang-up and closes it).
func (ps *pollSock) writeLocked(frame []byte) bool {
	n, err := rawWrite(ps.fd, frame)
	if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
		_ = unix.Shutdown(ps.fd, unix.SHUT_RDWR)
		return false
	}
	if n = max(n, 0); n < len(frame) {
		ps.pending, ps.off = append(ps.pending, frame), n
		ps.armLocked(true)
	}
	return true
}

// flush writes what is pending with one writev, once the socket drains.
func (ps *pollSock) flush() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.state == sockClosed || len(ps.pending) == 0 {
		return
	}
	iov := make([][]byte, min(len(ps.pending), 1024))
	copy(iov, ps.pending)
	iov[0] = iov[0][ps.off:]
	n, err := unix.Writev(ps.fd, iov)
	if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
		_ = unix.Shutdown(ps.fd, unix.SHUT_RDWR)
		return
	}
	n = max(n, 0)
	for n > 0 && len(ps.pending) > 0 {
		left := len(ps.pending[0]) - ps.off
		if n < left {
			ps.off += n
			break
		}
		n -= left
		ps.pending[0] = nil
		ps.pending, ps.off = ps.pending[1:], 0
	}
	if len(ps.pending) == 0 {
		ps.pending, ps.off = nil, 0 // let the queue's memory go
		ps.armLocked(false)
	}
}

func (ps *pollSock) armLocked(out bool) {
	if ps.out == out {
		return
	}
	ps.out = out
	ps.rearmLocked()
}

// rearmLocked tells epoll what the socket waits for now, once registered
// (begin registers it with eventsLocked).
func (ps *pollSock) rearmLocked() {
	if ps.registered {
		_ = unix.EpollCtl(ps.l.epfd, unix.EPOLL_CTL_MOD, ps.fd, &unix.EpollEvent{Events: ps.eventsLocked(), Fd: int32(ps.fd)})
	}
}

// eventsLocked is what the socket waits for: reading (unless deaf), the
// peer's hang-up, and writing while frames are pending.
func (ps *pollSock) eventsLocked() uint32 {
	ev := uint32(unix.EPOLLRDHUP)
	if !ps.deaf {
		ev |= unix.EPOLLIN
	}
	if ps.out {
		ev |= unix.EPOLLOUT
	}
	return ev
}

// closeWith is called with the connection's lock held: the connection
// finishes on another goroutine.
func (ps *pollSock) closeWith(code int, text string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.state != sockOpen {
		return
	}
	if code == 0 {
		ps.finishLocked()
		go ps.c.finish()
		return
	}
	// Behind what is pending: the client reads everything sent before.
	cf := closeFrame(code, text)
	if len(ps.pending) > 0 {
		ps.pending = append(ps.pending, cf)
	} else if !ps.writeLocked(cf) {
		ps.finishLocked()
		go ps.c.finish()
		return
	}
	// Let the client answer and close first: it then holds the
	// TIME_WAIT, not this node with its 100k sockets.
	ps.state = sockClosing
	ps.timer = time.AfterFunc(closeGrace, ps.expire)
}

// expire closes a socket whose client did not answer our close in time.
func (ps *pollSock) expire() {
	ps.mu.Lock()
	if ps.state == sockClosed {
		ps.mu.Unlock()
		return
	}
	ps.finishLocked()
	ps.mu.Unlock()
	ps.c.finish()
}

// finishLocked closes the socket. The fd is closed under the loop's lock
// too, after it left the loop's map: its number cannot be reused by a new
// socket while a stale entry could still reach it.
func (ps *pollSock) finishLocked() {
	if ps.state == sockClosed {
		return
	}
	ps.state = sockClosed
	ps.pending, ps.partial = nil, nil
	if ps.timer != nil {
		ps.timer.Stop()
		ps.timer = nil
	}
	l := ps.l
	l.mu.Lock()
	if l.socks[int32(ps.fd)] == ps {
		delete(l.socks, int32(ps.fd))
	}
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, ps.fd, nil)
	unix.Close(ps.fd)
	l.mu.Unlock()
}

// detach takes the socket out of its loop, open (a hello's, handed to a
// goroutine), and returns its fd; false when it is closing or closed.
func (ps *pollSock) detach() (int, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.state != sockOpen {
		return -1, false
	}
	ps.state = sockClosed
	ps.pending, ps.partial = nil, nil
	l := ps.l
	l.mu.Lock()
	if l.socks[int32(ps.fd)] == ps {
		delete(l.socks, int32(ps.fd))
	}
	if ps.registered {
		_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, ps.fd, nil)
	}
	l.mu.Unlock()
	fd := ps.fd
	ps.fd = -1
	return fd, true
}

// rawWrite is write(2) without the scheduler's syscall bookkeeping: on a
// non-blocking socket it never blocks, and the fan-out makes one per
// connection and frame, where entering and leaving a syscall through the
// runtime is a visible share of the edge's own cost.
func rawWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

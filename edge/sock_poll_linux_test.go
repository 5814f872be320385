package edge

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// countingOwner takes every frame and counts them.
type countingOwner struct {
	frames   int
	finished bool
}

func (o *countingOwner) touched() int64           { return defaultReadLimit }
func (o *countingOwner) onFrame(clientFrame) bool { o.frames++; return true }
func (o *countingOwner) kick(int, string) bool    { return true }
func (o *countingOwner) finish()                  { o.finished = true }

// TestReadBoundedPerWake: one wake-up reads a socket at most
// maxReadsPerWake times, however much it holds; the rest waits for the
// next (epoll reports it again, level-triggered), after the neighbours.
func TestReadBoundedPerWake(t *testing.T) {
	ps, o, pong := floodedSock(t)
	ps.readable()
	if max := maxReadsPerWake * pollReadBuffer / len(pong); o.frames == 0 || o.frames > max {
		t.Fatalf("one wake-up handled %d frames; want 1..%d (%d reads of %d bytes)", o.frames, max, maxReadsPerWake, pollReadBuffer)
	}
	first := o.frames
	ps.readable()
	if o.frames <= first {
		t.Fatalf("the next wake-up handled nothing more (%d frames)", o.frames)
	}
}

// TestDeafAfterClose: a socket that keeps sending after our close frame
// is read for at most closingReadLimit more, then no more (EPOLLIN
// disarmed: its kernel buffer fills and TCP holds the client back), and
// its next wake-up (a hang-up) closes it.
func TestDeafAfterClose(t *testing.T) {
	ps, o, pong := floodedSock(t)
	ps.state = sockClosing
	for i := 0; !ps.deaf; i++ {
		if i > closingReadLimit/pollReadBuffer+1 {
			t.Fatalf("still reading after %d wake-ups (%d frames)", i, o.frames)
		}
		ps.readable()
	}
	if max := closingReadLimit / len(pong); o.frames > max {
		t.Fatalf("%d frames handled after the close, want at most %d", o.frames, max)
	}
	ps.readable() // what wakes a deaf socket: a hang-up
	if ps.state != sockClosed || !o.finished {
		t.Fatalf("a deaf socket woken up: state %d, finished %v; want closed", ps.state, o.finished)
	}
}

// floodedSock is a loop's socket whose client sent it far more than one
// wake-up reads: masked pongs, as a client sends them.
func floodedSock(t *testing.T) (*pollSock, *countingOwner, []byte) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	_ = unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
	_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	pong := rawFrame(0x8A, true, []byte(strings.Repeat("p", 125)))
	var flood []byte
	for range 1024 {
		flood = append(flood, pong...)
	}
	written := 0
	for written < 2*maxReadsPerWake*pollReadBuffer {
		n, err := unix.Write(fds[1], flood)
		if err != nil {
			break // the socket's buffer is full
		}
		written += n
	}
	if written <= maxReadsPerWake*pollReadBuffer {
		t.Skipf("the socket took only %d bytes", written)
	}
	o := &countingOwner{}
	ps := &pollSock{l: &loop{epfd: -1, buf: make([]byte, pollReadBuffer), socks: map[int32]*pollSock{}}, c: o, fd: fds[0]}
	t.Cleanup(func() { ps.mu.Lock(); ps.finishLocked(); ps.mu.Unlock() })
	return ps, o, pong
}

package edge

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// countingOwner takes every frame and counts them.
type countingOwner struct{ frames int }

func (o *countingOwner) touched() int64           { return defaultReadLimit }
func (o *countingOwner) onFrame(clientFrame) bool { o.frames++; return true }
func (o *countingOwner) kick(int, string) bool    { return true }
func (o *countingOwner) finish()                  {}

// TestReadBoundedPerWake: one wake-up reads a socket at most
// maxReadsPerWake times, however much it holds; the rest waits for the
// next (epoll reports it again, level-triggered), after the neighbours.
func TestReadBoundedPerWake(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
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
	defer func() { ps.mu.Lock(); ps.finishLocked(); ps.mu.Unlock() }()

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

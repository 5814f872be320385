package edge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// scalePoller reads the load client's connections with one epoll loop:
// each wake-up of the loop reads every socket that has data, so the edge's
// writes do not each wake a goroutine of the client (which would charge
// the shared cores, and the edge's own writes, for a thread wake-up per
// frame). Connections join once their handshake and first pong are done.
type scalePoller struct {
	epfd  int
	mu    sync.Mutex
	conns map[int32]*scalePolled
}

type scalePolled struct {
	fd      int
	sc      *scaleConn
	partial []byte
}

func newScalePoller() *scalePoller {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil // the goroutine reader then
	}
	p := &scalePoller{epfd: epfd, conns: map[int32]*scalePolled{}}
	go p.run()
	return p
}

// add moves c into the loop; pre is what its reader had buffered.
func (p *scalePoller) add(c net.Conn, pre []byte, sc *scaleConn) error {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	fd := -1
	if cerr := rc.Control(func(f uintptr) { fd, err = unix.Dup(int(f)) }); cerr != nil || err != nil {
		return fmt.Errorf("dup: %v %v", cerr, err)
	}
	c.Close()
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return err
	}
	pc := &scalePolled{fd: fd, sc: sc, partial: append([]byte(nil), pre...)}
	p.mu.Lock()
	p.conns[int32(fd)] = pc
	p.mu.Unlock()
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
		p.drop(pc)
		return err
	}
	return nil
}

func (p *scalePoller) drop(pc *scalePolled) {
	p.mu.Lock()
	delete(p.conns, int32(pc.fd))
	p.mu.Unlock()
	_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, pc.fd, nil)
	unix.Close(pc.fd)
	pc.sc.finish()
}

func (p *scalePoller) run() {
	evs := make([]unix.EpollEvent, 512)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.EpollWait(p.epfd, evs, -1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		for _, e := range evs[:max(n, 0)] {
			p.mu.Lock()
			pc := p.conns[e.Fd]
			p.mu.Unlock()
			if pc != nil {
				p.read(pc, buf)
			}
		}
	}
}

// read drains pc's socket and hands the edge's frames to its scaleConn.
func (p *scalePoller) read(pc *scalePolled, buf []byte) {
	for {
		n, err := unix.Read(pc.fd, buf)
		// The clock after the read: one read at the loop's wake-up came
		// before sockets read later in it had their data, and a gift
		// appended in between showed a negative latency.
		now := time.Now().UnixNano()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return
		}
		if err != nil || n == 0 {
			pc.sc.fail(fmt.Errorf("read: %v (%d bytes)", err, n))
			p.drop(pc)
			return
		}
		data := buf[:n]
		if len(pc.partial) > 0 {
			data = append(pc.partial, data...)
			pc.partial = nil
		}
		for len(data) > 0 {
			op, payload, used := serverFrameAt(data)
			if used == 0 {
				break
			}
			data = data[used:]
			pong, stop := pc.sc.frame(op, payload, now)
			if pong != nil {
				_, _ = unix.Write(pc.fd, pong) // tiny: the socket takes it
			}
			if stop {
				p.drop(pc)
				return
			}
		}
		if len(data) > 0 {
			pc.partial = append([]byte(nil), data...)
		}
		if n < len(buf) {
			return
		}
	}
}

// serverFrameAt parses one unmasked server frame at the front of data:
// its opcode, payload and length; used == 0 when data holds only part.
func serverFrameAt(data []byte) (op byte, payload []byte, used int) {
	if len(data) < 2 {
		return 0, nil, 0
	}
	op = data[0] & 0x0F
	hl, l := 2, int(data[1]&0x7F)
	switch l {
	case 126:
		if len(data) < 4 {
			return 0, nil, 0
		}
		hl, l = 4, int(binary.BigEndian.Uint16(data[2:]))
	case 127:
		if len(data) < 10 {
			return 0, nil, 0
		}
		hl, l = 10, int(binary.BigEndian.Uint64(data[2:]))
	}
	if len(data) < hl+l {
		return 0, nil, 0
	}
	return op, data[hl : hl+l], hl + l
}

//go:build unix

package edge

import (
	"danmaku/internal/sysload"
	"syscall"
	"time"
)

// smallRcvBuf is a net.Dialer Control that shrinks the receive buffer.
func smallRcvBuf(network, address string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
	})
}

// cpuTime returns the CPU time (user + system) this process has used.
func cpuTime() time.Duration { return sysload.ProcessTime() }

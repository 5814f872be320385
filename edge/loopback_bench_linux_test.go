package edge

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkLoopbackWrite measures the floor under the edge's CPU per frame
// on this machine: one thread writing a 200-byte frame to each of 1,000
// loopback TCP sockets in turn (their readers drain them elsewhere), and
// that thread's own CPU time per write (RUSAGE_THREAD). On loopback the
// write also runs the receiving side's TCP processing and the reader's
// wake-up — the kernel delivers the segment in the sender's context — so
// this is what an edge pays per connection and frame here, before any
// code of its own.
func BenchmarkLoopbackWrite(b *testing.B) {
	const socks = 1000
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	fds := make([]int, 0, socks)
	for range socks {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		rc, _ := c.(*net.TCPConn).SyscallConn()
		_ = rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) })
	}
	frame := make([]byte, 200)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r0, r1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &r0)
	b.ResetTimer()
	writes := 0
	for i := 0; i < b.N; i++ {
		for _, fd := range fds {
			// Blocking sockets under Go's netpoller are non-blocking: a
			// full one is skipped (its reader is behind), not waited on.
			if _, err := unix.Write(fd, frame); err == nil {
				writes++
			}
		}
		time.Sleep(time.Millisecond) // the readers drain between rounds
	}
	b.StopTimer()
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &r1)
	cpu := time.Duration(unix.TimevalToNsec(r1.Utime) - unix.TimevalToNsec(r0.Utime) + unix.TimevalToNsec(r1.Stime) - unix.TimevalToNsec(r0.Stime))
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(max(writes, 1)), "cpu-µs/write")
}

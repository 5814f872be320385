package edge

import (
	"bufio"
	"net"
	"runtime"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/wsbench"
)

// TestHelloWaitsInLoop: plain sockets waiting for their hello hold no
// goroutine each (they wait in the epoll loops, as idle connections do),
// and are all closed 4408 once the server's clock passes the hello
// timeout — a fake clock here, nothing slept.
func TestHelloWaitsInLoop(t *testing.T) {
	clk := clock.NewFake(time.Now())
	e := newEnv(t, envOpts{cfg: func(c *Config) {
		c.Clock = clk
		c.ConnectRate, c.MaxHelloWaitsPerAddr = -1, -1
	}})
	addr := e.ts.Listener.Addr().String()
	base := runtime.NumGoroutine()
	const n = 100
	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	clients := make([]client, n)
	for i := range clients {
		c, br, err := wsbench.Dial(addr, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients[i] = client{c, br}
	}
	// The loops themselves and a few of the runtime's or net/http's may
	// come and go; a goroutine per wait would be n more.
	waitFor(t, "every socket to wait in a loop, without a goroutine of its own", func() bool {
		return loopWaits(e.srv) == n && runtime.NumGoroutine() <= base+maxLoops+10
	})
	if got := e.srv.Load().Conns; got != n {
		t.Fatalf("%d slots held, want %d", got, n)
	}
	clk.Advance(defaultHelloTimeout)
	for i, cl := range clients {
		if got := readCloseCode(t, cl.c, cl.br); got != CloseHelloTimeout {
			t.Fatalf("socket %d: close code %d, want %d", i, got, CloseHelloTimeout)
		}
	}
	waitFor(t, "every slot and wait to free", func() bool { return e.srv.Load().Conns == 0 && e.srv.hellos.n.Load() == 0 })
	if got := counter(e.srv.m.rejects.WithLabelValues(CodeHelloTimeout)); got != n {
		t.Fatalf("%v hello timeouts counted, want %d", got, n)
	}
}

// loopWaits counts the sockets waiting for their hello in the server's
// epoll loops.
func loopWaits(s *Server) int {
	p := s.poller()
	if p == nil {
		return 0
	}
	n := 0
	for _, l := range p.loops {
		l.hmu.Lock()
		for _, w := range l.hellos {
			w.mu.Lock()
			if w.state == waitOpen {
				n++
			}
			w.mu.Unlock()
		}
		l.hmu.Unlock()
	}
	return n
}

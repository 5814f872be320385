package edge

import (
	"bufio"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/edge/edgetest"
	"danmaku/internal/clock"
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
		c, br, err := edgetest.Dial(addr, "")
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

// TestHelloPongFloodClosed: a socket waiting in a loop for its hello that
// sends pongs instead is closed 1008 past the allowance's burst, on a
// frozen clock (the hello timeout plays no part); a few control frames
// before a hello are skipped, as before.
func TestHelloPongFloodClosed(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.Clock = clock.NewFake(time.Now()) }})
	ws, _, err := e.dialBrowser("")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for range 3 * clientMsgBurst {
		if err := ws.WriteControl(websocket.PongMessage, []byte("p"), time.Now().Add(safety)); err != nil {
			break // closed under us
		}
	}
	if got := closeCode(t, ws); got != ClosePolicy {
		t.Fatalf("close code %d, want %d", got, ClosePolicy)
	}

	ok, _, err := e.dialBrowser("")
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	for range clientMsgBurst {
		if err := ok.WriteControl(websocket.PongMessage, []byte("p"), time.Now().Add(safety)); err != nil {
			t.Fatal(err)
		}
	}
	if err := text(`{"token":"` + e.token("r1") + `"}`)(ok); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection to join", func() bool { return e.srv.OnlineRooms()["r1"] == 1 })
	want := e.append("r1", sys("after the pongs"))[0].ID
	if _, err := readUntil(ok, "r1", untilID(want)); err != nil {
		t.Fatalf("a hello after %d pongs: %v", clientMsgBurst, err)
	}
}

package wsbench

import (
	"encoding/binary"
	"os"
	"testing"
	"time"
)

func forEach(t *testing.T, f func(t *testing.T, newSrv func(Options) (Server, error))) {
	for _, c := range Candidates {
		t.Run(c.Name, func(t *testing.T) {
			if raceEnabled && c.Name == "nbio" && os.Getenv("WSBENCH_RACE_NBIO") == "" {
				t.Skip("nbio: the race detector reports races inside nbhttp (socket handoff through epoll)")
			}
			f(t, c.New)
		})
	}
}

func start(t *testing.T, newSrv func(Options) (Server, error), opt Options) Server {
	t.Helper()
	s, err := newSrv(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitConns(t *testing.T, s Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); s.Conns() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("server has %d connections, want %d", s.Conns(), n)
		}
	}
}

func TestRejectsWithoutToken(t *testing.T) {
	forEach(t, func(t *testing.T, newSrv func(Options) (Server, error)) {
		s := start(t, newSrv, Options{})
		if c, _, err := Dial(s.Addr(), ""); err == nil {
			c.Close()
			t.Fatal("upgraded without a bearer token")
		}
	})
}

// TestBroadcastPingText: pongs answer pings, text frames are read and
// dropped, every connection gets every broadcast.
func TestBroadcastPingText(t *testing.T) {
	forEach(t, func(t *testing.T, newSrv func(Options) (Server, error)) {
		s := start(t, newSrv, Options{})
		const n, bc = 20, 3
		ready, go_ := make(chan struct{}), make(chan struct{})
		done := make(chan ClientResult, 1)
		errc := make(chan error, 1)
		go func() {
			r, err := RunClient(ClientConfig{Addr: s.Addr(), Conns: n, Broadcasts: bc, Timeout: 10 * time.Second,
				Ready: func() { close(ready) }, Start: go_})
			errc <- err
			done <- r
		}()
		select {
		case <-ready:
		case err := <-errc:
			t.Fatal(err)
		}
		waitConns(t, s, n)
		close(go_)
		for i := range bc {
			s.Broadcast(NewPayload(i))
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.Deliveries != n*bc {
			t.Fatalf("delivered %d of %d", r.Deliveries, n*bc)
		}
	})
}

func TestServerPings(t *testing.T) {
	forEach(t, func(t *testing.T, newSrv func(Options) (Server, error)) {
		s := start(t, newSrv, Options{PingInterval: 100 * time.Millisecond})
		c, br, err := Dial(s.Addr(), "tok")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := ReadFrame(br)
		if err != nil || f.Op != 0x9 {
			t.Fatalf("want a ping, got op %d, %v", f.Op, err)
		}
	})
}

// TestSlowClientResume: a client that never reads is closed with
// CloseResume once its queue is full.
func TestSlowClientResume(t *testing.T) {
	forEach(t, func(t *testing.T, newSrv func(Options) (Server, error)) {
		s := start(t, newSrv, Options{QueueSize: 4})
		c, br, err := Dial(s.Addr(), "tok")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		waitConns(t, s, 1)
		big := make([]byte, 64<<10)
		for i := 0; i < 2000 && s.Conns() == 1; i++ {
			s.Broadcast(big)
		}
		waitConns(t, s, 0)
		// Drain: the close frame, when the socket had room for it, is last.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			f, err := ReadFrame(br)
			if err != nil {
				t.Logf("no close frame (socket was full): %v", err)
				return
			}
			if f.Op == 0x8 {
				if code := binary.BigEndian.Uint16(f.Payload); code != CloseResume {
					t.Fatalf("close code %d, want %d", code, CloseResume)
				}
				return
			}
		}
	})
}

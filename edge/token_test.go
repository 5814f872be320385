package edge

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/internal/clock"
)

// TestTokenRefreshInBand: a connection whose token nears its expiry is
// asked for a fresh one; a fresh token for the same user and room (even one
// naming other edges) sent in-band keeps it open past the old expiry;
// another user's is refused; without a fresh one past expiry and grace it
// is closed with 4401.
func TestTokenRefreshInBand(t *testing.T) {
	clk := clock.NewFake(time.Now())
	keys := newKeyring(t, clk)
	e := newEnv(t, envOpts{cfg: func(c *Config) {
		c.Verifier, c.Clock = keys, clk
		// A grace far beyond any pause of a loaded machine: the test is
		// about tokens, and a pong late by a second must not close it.
		c.PingInterval, c.PongGrace, c.TokenGrace = 20*time.Millisecond, safety, time.Minute
	}})
	tok := signTokenFor(t, keys, "ann", "r1", e.addr)
	ws, _, err := e.dialWith(&websocket.Dialer{HandshakeTimeout: safety}, tok, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	// Pings count the server's ticks: it sends one only once the last is
	// answered, and checks the token's expiry in the same tick, after it.
	var pings atomic.Int64
	ws.SetPingHandler(func(data string) error {
		pings.Add(1)
		return ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(safety))
	})
	asks := make(chan tokenAsk, 4)
	closed := make(chan int, 1)
	go func() {
		for {
			typ, b, err := ws.ReadMessage()
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				closed <- ce.Code
				return
			}
			if err != nil {
				closed <- 0
				return
			}
			var a tokenAsk
			if typ == websocket.TextMessage && json.Unmarshal(b, &a) == nil && a.Refresh == "token" {
				asks <- a
			}
		}
	}()
	send := func(tok string) {
		t.Helper()
		b, _ := json.Marshal(report{Token: tok})
		if err := ws.WriteMessage(websocket.TextMessage, b); err != nil {
			t.Fatal(err)
		}
	}

	exp := clk.Now().Add(10 * time.Minute).Truncate(time.Second).UnixMilli() // tokens carry whole seconds
	clk.Advance(10*time.Minute - 20*time.Millisecond)                        // within two ping intervals of the expiry
	select {
	case a := <-asks:
		if a.ExpMs != exp {
			t.Errorf("ask for exp %d, want the token's %d", a.ExpMs, exp)
		}
	case code := <-closed:
		t.Fatalf("closed (%d) instead of asked", code)
	case <-time.After(safety):
		t.Fatalf("no ask for a fresh token (asks %v, conns %d)", counter(e.srv.m.tokenAsks), e.srv.Load().Conns)
	}
	send(signTokenFor(t, keys, "bob", "r1", e.addr)) // not this connection's user
	send(signTokenFor(t, keys, "ann", "r1", "ws://another-edge:1"))
	waitFor(t, "the fresh token to be taken", func() bool {
		return counter(e.srv.m.tokenRefreshes.WithLabelValues("ok")) == 1 && counter(e.srv.m.tokenRefreshes.WithLabelValues("refused")) == 1
	})

	clk.Advance(3 * time.Minute) // past the old expiry and its grace
	// Ping p+1 may be on its way; p+2 is sent by a tick after the advance,
	// and p+3 only once that tick (and its expiry check) is done.
	p := pings.Load()
	waitFor(t, "three more pings", func() bool { return pings.Load() >= p+3 })
	select {
	case code := <-closed:
		t.Fatalf("closed (%d) although a fresh token came in-band", code)
	default:
	}

	clk.Advance(10 * time.Minute) // past the fresh token's expiry and grace
	select {
	case code := <-closed:
		if code != CloseTokenRejected {
			t.Fatalf("closed with %d, want %d", code, CloseTokenRejected)
		}
	case <-time.After(safety):
		t.Fatal("an expired connection stayed open")
	}
	if n := counter(e.srv.m.tokenExpired); n != 1 {
		t.Errorf("token_expired = %v, want 1", n)
	}
}

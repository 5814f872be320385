package edge

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/internal/clock"
)

// TestAdmissionConnectRate: beyond the bucket, a handshake is answered 503
// connect_rate at once with a Retry-After of 1-3 s; the bucket refills.
// The bucket runs on a fake clock: on a busy machine the real one would
// refill it between two dials.
func TestAdmissionConnectRate(t *testing.T) {
	clk := clock.NewFake(time.Now())
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.ConnectRate, c.ConnectBurst, c.Clock = 20, 2, clk }})
	d := &websocket.Dialer{HandshakeTimeout: safety}
	for range 2 {
		ws, _, err := e.dialWith(d, e.token("r1"), "")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
	}
	_, resp, err := e.dialWith(d, e.token("r1"), "")
	if err == nil {
		t.Fatal("a third connection passed a bucket of 2")
	}
	checkCoded(t, resp, http.StatusServiceUnavailable, CodeConnectRate)
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < connectRetryMin || ra > connectRetryMax {
		t.Fatalf("Retry-After %q, want %d-%d", resp.Header.Get("Retry-After"), connectRetryMin, connectRetryMax)
	}
	clk.Advance(time.Second / 20) // one token back
	ws, _, err := e.dialWith(d, e.token("r1"), "")
	if err != nil {
		t.Fatalf("no connection once the bucket refilled: %v", err)
	}
	ws.Close()
}

func TestConnectBucket(t *testing.T) {
	b := newConnectBucket(10, 3)
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := b.take(now); !ok {
			t.Fatalf("take %d of a full bucket of 3 refused", i)
		}
	}
	if ok, retry := b.take(now); ok || retry < time.Second {
		t.Fatalf("take of an empty bucket: %v, retry %v", ok, retry)
	}
	if ok, _ := b.take(now.Add(100 * time.Millisecond)); !ok { // 10/s: one token back
		t.Fatal("no token after a tenth of a second at 10/s")
	}
	if ok, _ := newConnectBucket(-1, 0).take(now); !ok {
		t.Fatal("an unlimited bucket refused")
	}
}

// TestAdmissionPerUser: one user's connections are capped, by header and
// by hello, and a slot frees when one closes; other users are not held.
func TestAdmissionPerUser(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.MaxConnsPerUser = 2 }})
	d := &websocket.Dialer{HandshakeTimeout: safety}
	var held []*websocket.Conn
	for range 2 {
		ws, _, err := e.dialWith(d, e.tokenFor("ann", "r1"), "")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ws)
	}
	_, resp, err := e.dialWith(d, e.tokenFor("ann", "r2"), "")
	if err == nil {
		t.Fatal("a third connection of one user accepted")
	}
	checkCoded(t, resp, http.StatusTooManyRequests, CodeTooManyConns)
	// A browser's hello is refused the same way, after the upgrade.
	ws, _, err := e.dialBrowser("")
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"token":"`+e.tokenFor("ann", "r1")+`"}`)); err != nil {
		t.Fatal(err)
	}
	if got := closeCode(t, ws); got != 4429 {
		t.Fatalf("hello of a third connection: close %d, want 4429", got)
	}
	ws.Close()
	other := e.connect("r1", "") // another user
	other.Close()
	held[0].Close()
	waitFor(t, "ann's slot to free", func() bool {
		ws, _, err := e.dialWith(d, e.tokenFor("ann", "r1"), "")
		if err == nil {
			ws.Close()
		}
		return err == nil
	})
	held[1].Close()
	waitFor(t, "every count to return to zero", func() bool {
		e.srv.users.mu.Lock()
		defer e.srv.users.mu.Unlock()
		return len(e.srv.users.n) == 0 && e.srv.Load().Conns == 0
	})
}

// TestAdmissionRoomFull: a room holding MaxRoomConns connections on this
// node refuses the next one with 503 room_full; other rooms are open.
func TestAdmissionRoomFull(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.MaxRoomConns = 2 }})
	e.connect("hot", "")
	e.connect("hot", "")
	_, resp, err := e.dialWith(&websocket.Dialer{HandshakeTimeout: safety}, e.token("hot"), "")
	if err == nil {
		t.Fatal("a third connection to a room capped at 2 accepted")
	}
	checkCoded(t, resp, http.StatusServiceUnavailable, CodeRoomFull)
	e.connect("cold", "")
}

// TestOnlineCountsUsers: a room's online count is of distinct users, not
// connections (one viewer with two tabs is one viewer).
func TestOnlineCountsUsers(t *testing.T) {
	e := newEnv(t, envOpts{})
	d := &websocket.Dialer{HandshakeTimeout: safety}
	var conns []*websocket.Conn
	for _, u := range []string{"ann", "ann", "bob"} {
		ws, _, err := e.dialWith(d, e.tokenFor(u, "r1"), "")
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, ws)
	}
	waitFor(t, "two viewers on three connections", func() bool {
		return e.srv.OnlineRooms()["r1"] == 2 && e.srv.Load().Conns == 3
	})
	conns[0].Close()
	waitFor(t, "ann's second tab to keep her online", func() bool { return e.srv.Load().Conns == 2 })
	if n := e.srv.OnlineRooms()["r1"]; n != 2 {
		t.Fatalf("online %d after one of ann's two tabs closed, want 2", n)
	}
	conns[1].Close()
	waitFor(t, "ann to leave", func() bool { return e.srv.OnlineRooms()["r1"] == 1 })
	conns[2].Close()
}

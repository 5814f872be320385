package edge

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/internal/ban"
	"danmaku/internal/clock"
)

// TestBans: a ban closes the banned user's open connections with
// CloseBanned — a room's ban that room's only, a global ban every one —
// and keeps their neighbours; a banned handshake is refused (403 banned
// before the upgrade, CloseBanned after a hello); lifted or lapsed, the
// user is admitted again. The bans are refreshed by hand on an injected
// clock: no reload interval is waited for.
func TestBans(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	store := ban.NewMemoryStore()
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.Bans, c.Clock = store, clk }})
	dial := func(user, room string) (*websocket.Conn, *http.Response, error) {
		return e.dialWith(&websocket.Dialer{HandshakeTimeout: safety}, e.tokenFor(user, room), "")
	}
	connect := func(user, room string) *websocket.Conn {
		t.Helper()
		ws, resp, err := dial(user, room)
		if err != nil {
			t.Fatalf("dial %s in %s: %v (%v)", user, room, err, resp)
		}
		t.Cleanup(func() { ws.Close() })
		return ws
	}
	put := func(b ban.Ban) {
		t.Helper()
		b.At = clk.Now()
		if err := store.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := e.srv.RefreshBans(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// alive: a gift appended to room reaches ws, so its connection is open.
	alive := func(ws *websocket.Conn, room string) {
		t.Helper()
		got := e.append(room, gift(1000, 1))
		if _, err := readUntil(ws, room, untilID(got[0].ID)); err != nil {
			t.Fatalf("a neighbour lost its connection: %v", err)
		}
	}
	refused := func(user, room string) {
		t.Helper()
		_, resp, err := dial(user, room)
		if err == nil {
			t.Fatalf("%s connected to %s while banned", user, room)
		}
		checkCoded(t, resp, http.StatusForbidden, CodeBanned)
	}

	badR1, badR2 := connect("bad", "r1"), connect("bad", "r2")
	good := connect("good", "r1")

	put(ban.Ban{User: "bad", Room: "r1"})
	if got := closeCode(t, badR1); got != CloseBanned {
		t.Fatalf("banned connection closed with %d, want %d", got, CloseBanned)
	}
	alive(good, "r1")
	alive(badR2, "r2") // a ban of r1 only
	refused("bad", "r1")

	put(ban.Ban{User: "bad", Until: clk.Now().Add(time.Minute)})
	if got := closeCode(t, badR2); got != CloseBanned {
		t.Fatalf("globally banned connection closed with %d, want %d", got, CloseBanned)
	}
	refused("bad", "r2")
	alive(good, "r1")

	// A browser's hello is refused with the close code.
	ws, _, err := e.dialBrowser("")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"token":"`+e.tokenFor("bad", "r2")+`"}`)); err != nil {
		t.Fatal(err)
	}
	if got := closeCode(t, ws); got != CloseBanned {
		t.Fatalf("banned hello closed with %d, want %d", got, CloseBanned)
	}

	// The global ban lapses (r1's stays); r1's is lifted.
	clk.Advance(time.Minute)
	connect("bad", "r2")
	refused("bad", "r1")
	if err := store.Delete(ctx, "bad", "r1"); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.RefreshBans(ctx); err != nil {
		t.Fatal(err)
	}
	alive(connect("bad", "r1"), "r1")
	if n := counter(e.srv.m.closes.WithLabelValues(reasonBanned)); n != 2 {
		t.Fatalf("%v closes counted as banned, want 2", n)
	}
}

// TestBannedConnsCost: a sweep walks the smaller side of each hub, so a
// long ban list costs a small room nothing per user, and both walks find
// the same connections: the room's bans and its event's, not another
// event's.
func TestBannedConnsCost(t *testing.T) {
	ctx := context.Background()
	store := ban.NewMemoryStore()
	for i := range 2000 {
		if err := store.Put(ctx, ban.Ban{User: fmt.Sprintf("b%d", i), At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []ban.Ban{{User: "x", Room: "r1"}, {User: "y", Event: "show"}, {User: "z", Event: "other"}} {
		b.At = time.Now()
		if err := store.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	l, err := ban.NewList(ban.ListConfig{Store: store, EventOf: func(room string) string { return map[string]string{"r1": "show"}[room] }})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 5000} { // fewer users than bans, then more
		h := &hub{room: "r1", users: map[string]int{}}
		for i := range n {
			c := &conn{user: fmt.Sprintf("u%d", i)}
			h.conns = append(h.conns, c)
			h.users[c.user]++
		}
		x, y, z := &conn{user: "x"}, &conn{user: "y"}, &conn{user: "z"}
		h.conns = append(h.conns, x, y, z)
		h.users["x"]++
		h.users["y"]++
		h.users["z"]++
		got := h.bannedConns(l)
		if len(got) != 2 || !slices.Contains(got, x) || !slices.Contains(got, y) {
			t.Fatalf("%d users: banned %d connections, want x (the room's ban) and y (its event's)", n, len(got))
		}
	}
}

// BenchmarkBannedSweep is what a change of the bans costs one room: its
// walk over the smaller of its users and the bans (5,000 bans, none of
// them in the room). Nothing of it runs per frame.
func BenchmarkBannedSweep(b *testing.B) {
	ctx := context.Background()
	store := ban.NewMemoryStore()
	for i := range 5000 {
		if err := store.Put(ctx, ban.Ban{User: fmt.Sprintf("b%d", i), At: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	l, err := ban.NewList(ban.ListConfig{Store: store})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	for _, users := range []int{100, 10_000} {
		h := &hub{room: "r1", users: map[string]int{}}
		for i := range users {
			c := &conn{user: fmt.Sprintf("u%d", i)}
			h.conns = append(h.conns, c)
			h.users[c.user]++
		}
		b.Run(fmt.Sprintf("users=%d", users), func(b *testing.B) {
			for b.Loop() {
				if len(h.bannedConns(l)) != 0 {
					b.Fatal("banned a connection")
				}
			}
		})
	}
}

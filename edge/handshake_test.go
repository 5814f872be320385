package edge

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
)

// dialBrowser opens a connection the way a page does: no Authorization
// header, an Origin, the token left for the first frame.
func (e *testEnv) dialBrowser(origin string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	return (&websocket.Dialer{HandshakeTimeout: safety}).Dial(e.wsURL, h)
}

// closeCode reads until the connection ends and returns the close code.
func closeCode(t *testing.T, ws *websocket.Conn) int {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(safety))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		t.Fatalf("connection ended without a close frame: %v", err)
	}
}

// TestHelloAccepted: a browser sends its token in the first frame and then
// gets pushes like any client, resuming after last when the hello names it.
func TestHelloAccepted(t *testing.T) {
	origins, err := httpx.ParseOrigins([]string{"http://page.test"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.AllowOrigins = origins }})
	before := e.append("r1", sys("before-1"), sys("before-2"))

	ws, _, err := e.dialBrowser("http://page.test")
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	hello := `{"token":"` + e.token("r1") + `","last":"` + before[0].ID + `"}`
	if err := ws.WriteMessage(websocket.TextMessage, []byte(hello)); err != nil {
		t.Fatal(err)
	}
	// The catch-up after last, then a live one.
	waitFor(t, "the viewer to join", func() bool { return e.srv.OnlineRooms()["r1"] == 1 })
	live := e.append("r1", sys("live"))[0].ID
	got, err := readUntil(ws, "r1", untilID(live))
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "browser", got, []string{before[1].ID, live})

	// Counter reports keep working after the hello.
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"drops":3}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the report", func() bool { return counter(e.srv.m.renderDrops) == 3 })
}

// TestHelloRefused: every way a first frame can fail closes with its code
// (mirroring the HTTP answers of a header handshake), counts the rejection
// and frees the slot and the wait — on a socket waiting in an epoll loop
// and on one waiting on a goroutine (TLS, other systems).
func TestHelloRefused(t *testing.T) {
	for _, kind := range socketKinds {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, envOpts{wrap: kind.wrap, cfg: func(c *Config) { c.HelloTimeout = 200 * time.Millisecond }})
			testHelloRefused(t, e)
			waitFor(t, "every slot and wait to free", func() bool { return e.srv.Load().Conns == 0 && e.srv.hellos.n.Load() == 0 })
		})
	}
}

// socketKinds are the two ways a socket is served: by an epoll loop
// (Linux, plain TCP) and by goroutines (a listener that hides the
// *net.TCPConn, as TLS does).
var socketKinds = []struct {
	name string
	wrap func(net.Listener) net.Listener
}{
	{"epoll", nil},
	{"goroutines", func(l net.Listener) net.Listener { return opaqueListener{l} }},
}

func testHelloRefused(t *testing.T, e *testEnv) {
	otherEpoch := signToken(t, newKeyring(t, clock.NewFake(time.Now().Add(24*time.Hour))), "r1", e.addr)
	tests := []struct {
		name  string
		send  func(*websocket.Conn) error
		close int
		code  string
	}{
		{"not JSON", text("hello"), CloseBadHello, CodeBadHello},
		{"no token", text(`{"last":"1-0"}`), CloseBadHello, CodeBadHello},
		{"binary frame", func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.BinaryMessage, []byte(`{"token":"`+e.token("r1")+`"}`))
		}, CloseBadHello, CodeBadHello},
		{"bad last", text(`{"token":"` + e.token("r1") + `","last":"abc"}`), CloseBadHello, CodeBadHello},
		// Names are exact and none repeats, as in a request body: a valid
		// token under "TOKEN", or after a bad one, connected.
		{"token in capitals", text(`{"TOKEN":"` + e.token("r1") + `"}`), CloseBadHello, CodeBadHello},
		{"token repeated", text(`{"token":"x","token":"` + e.token("r1") + `"}`), CloseBadHello, CodeBadHello},
		{"last in another case", text(`{"token":"` + e.token("r1") + `","Last":"1-0"}`), CloseBadHello, CodeBadHello},
		{"too large", text(`{"token":"` + strings.Repeat("x", 5000) + `"}`), websocket.CloseMessageTooBig, CodeBadHello},
		{"garbage token", text(`{"token":"x.y.z"}`), CloseTokenRejected, CodeUnauthorized},
		{"unknown epoch", text(`{"token":"` + otherEpoch + `"}`), CloseTokenRejected, CodeTokenEpoch},
		{"wrong node", text(`{"token":"` + signToken(t, e.keys, "r1", "ws://elsewhere:1") + `"}`), CloseWrongNode, CodeWrongNode},
		{"ingest-only token", text(`{"token":"` + signAudience(t, e.keys, 1, e.addr, "ws://edge-9") + `"}`), CloseWrongNode, CodeWrongNode},
		{"token without ni", text(`{"token":"` + signAudience(t, e.keys, 0, "http://ingest-0", e.addr) + `"}`), CloseWrongNode, CodeWrongNode},
		{"silence", func(*websocket.Conn) error { return nil }, CloseHelloTimeout, CodeHelloTimeout},
		// A client that leaves first gets its close answered, not refused.
		{"close first", func(ws *websocket.Conn) error {
			return ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4321, "bye"))
		}, 4321, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := counter(e.srv.m.rejects.WithLabelValues(tt.code))
			ws, _, err := e.dialBrowser("")
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			if err := tt.send(ws); err != nil {
				t.Fatal(err)
			}
			if got := closeCode(t, ws); got != tt.close {
				t.Fatalf("close code %d, want %d", got, tt.close)
			}
			if tt.code == "" {
				return
			}
			// The library itself closes a too-large read before the edge
			// counts it: wait rather than race.
			waitFor(t, "the rejection to be counted", func() bool {
				return counter(e.srv.m.rejects.WithLabelValues(tt.code)) == before+1
			})
		})
	}
}

// TestOriginChecked: a page from an origin not in AllowOrigins cannot
// connect; a native client (no Origin) always can.
func TestOriginChecked(t *testing.T) {
	e := newEnv(t, envOpts{}) // no origin allowed
	if _, resp, err := e.dialBrowser("https://evil.example"); err == nil {
		t.Fatal("a foreign origin connected")
	} else {
		checkCoded(t, resp, http.StatusForbidden, CodeOrigin)
	}
	ws := e.connect("r1", "") // Authorization header, no Origin
	ws.Close()
}

func text(s string) func(*websocket.Conn) error {
	return func(ws *websocket.Conn) error { return ws.WriteMessage(websocket.TextMessage, []byte(s)) }
}

func FuzzParseHello(f *testing.F) {
	for _, s := range []string{`{"token":"a.b.c"}`, `{"token":"a","last":"1-0"}`, `{}`, `null`, ``, `[]`, `{"token":1}`, `{"token":"` + strings.Repeat("a", maxTokenLen+1) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHello(b)
		if err != nil {
			if h != (hello{}) {
				t.Fatalf("parseHello(%q) = %+v with error", b, h)
			}
			return
		}
		if h.Token == "" || len(h.Token) > maxTokenLen {
			t.Fatalf("parseHello(%q) accepted token of %d bytes", b, len(h.Token))
		}
	})
}

// TestOnlyLiveRooms: a token for a room of no live event is refused, and
// when a room's event ends its viewers are told (4004) and its hub goes.
func TestOnlyLiveRooms(t *testing.T) {
	ctx := context.Background()
	store := event.NewMemoryStore()
	now := time.Now()
	ev := event.Event{ID: "show", Start: now.Add(-time.Minute), End: now.Add(time.Hour), Rooms: []event.Room{{ID: "r1"}}}
	if err := store.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	dir, err := event.NewDirectory(event.DirectoryConfig{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.Events = dir }})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = e.srv.Run(runCtx) }()

	_, resp, err := e.dialWith(&websocket.Dialer{HandshakeTimeout: safety}, e.token("r9"), "")
	if err == nil {
		t.Fatal("a room of no event connected")
	}
	checkCoded(t, resp, http.StatusNotFound, "no_such_room")

	ws := e.connect("r1", "")
	ended := time.Now()
	ev.EndedAt = &ended
	if err := store.Update(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := dir.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := closeCode(t, ws); got != CloseRoomEnded {
		t.Fatalf("close code %d, want %d (room ended)", got, CloseRoomEnded)
	}
	waitFor(t, "the hub to go", func() bool { return e.srv.roomCount() == 0 })
}

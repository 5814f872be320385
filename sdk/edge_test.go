package sdk

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/sdk/wire"
)

// Gifts and system messages come first over the edge and again in a segment;
// each is delivered once. A merged gift whose ids were all delivered is
// skipped; one whose ids were partly delivered is cut to the rest.
func TestDedupEdgeAndSegments(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	gift := func(off int64, n uint64) Message {
		m := msgAt(s0, off, n, KindGift, "")
		m.Gift, m.Value, m.User = "rose", 100, "bob"
		return m
	}
	g1, y1 := gift(200, 0), msgAt(s0, 210, 0, KindSystem, "welcome")
	g2, g3, g4, g5 := gift(300, 0), gift(300, 1), gift(400, 0), gift(400, 1)
	g6 := gift(500, 0)
	edgeSent := make(chan struct{})
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		if n == 0 {
			_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, g1, y1))
			_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, g2, g3, g4))
			close(edgeSent)
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	m1 := g2
	m1.Count, m1.Merged = 2, []string{g2.ID, g3.ID} // all shown from the edge
	m2 := g4
	m2.Count, m2.Merged = 2, []string{g4.ID, g5.ID} // half shown from the edge
	b1 := msgAt(s0+1, 0, 0, KindBarrage, "hi")
	w.putSegment(s0+1, w.seqOf(s0+1), b1, g1, y1, m1, m2, g6)

	c := w.newClient(nil)
	<-edgeSent
	fromEdge := receive(t, c, 5)
	if want := ids([]Message{g1, y1, g2, g3, g4}); !slices.Equal(ids(fromEdge), want) {
		t.Fatalf("edge messages = %v, want %v", ids(fromEdge), want)
	}
	w.run()
	fromSeg := receive(t, c, 3)
	if want := ids([]Message{b1, g5, g6}); !slices.Equal(ids(fromSeg), want) {
		t.Fatalf("segment messages = %v, want %v", ids(fromSeg), want)
	}
	if got := fromSeg[1]; got.ID != g5.ID || got.Count != 1 || !slices.Equal(got.Merged, []string{g5.ID}) {
		t.Errorf("partly shown merged gift = id %s count %d ids %v, want id, ids [%s] and count 1", got.ID, got.Count, got.Merged, g5.ID)
	}
	quiet(t, w, c, 2)
	if st := c.Stats(); st.Duplicates != 3 || st.Delivered != 8 || st.EdgeFrames != 2 {
		t.Errorf("stats = %+v", st)
	}
	w.lock(func() {
		if q := w.edgeConns[0]; q.Get("token") != "tok-1" || q.Has("last") {
			t.Errorf("first edge query = %v", q)
		}
	})
	w.noEarly()
}

// The edge's close codes: 4001 reconnects at once with last; 4003 and 4401
// re-fetch the entry first; a 401 on the handshake does too.
func TestEdgeCloseCodes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      int // close code sent after one frame; 0: refuse the first handshake with 401
		wantEntry int // entry fetches before the second connection
	}{
		{"resume", CloseResume, 1},
		{"resume gap", CloseResumeGap, 1},
		{"draining", CloseDraining, 2},
		{"token rejected", CloseTokenRejected, 2},
		{"handshake 401", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			s0 := w.serverSecond()
			g := msgAt(s0, 100, 3, KindGift, "")
			w.noEdge = false
			if tc.code == 0 {
				w.edgeReject = func(q url.Values, n int) int {
					if n == 0 {
						return http.StatusUnauthorized
					}
					return 0
				}
			}
			w.edgeHandler = func(conn *websocket.Conn, n int) {
				if n == 0 {
					_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, g))
					_ = conn.WriteControl(websocket.CloseMessage,
						websocket.FormatCloseMessage(tc.code, "bye"), time.Now().Add(time.Second))
				}
				for {
					if _, _, err := conn.ReadMessage(); err != nil {
						return
					}
				}
			}
			c := w.newClient(func(cfg *Config) {
				if tc.code == CloseDraining {
					cfg.RejoinJitter = 3 * time.Second // waited on the fake clock
				}
			})
			w.run()
			eventually(t, "a second edge connection", func() bool {
				var n int
				w.lock(func() { n = len(w.edgeConns) })
				return n >= 2
			})
			w.lock(func() {
				q := w.edgeConns[1]
				if want := "tok-" + string(rune('0'+tc.wantEntry)); q.Get("token") != want {
					t.Errorf("second connection's token = %q, want %q", q.Get("token"), want)
				}
				wantLast := g.ID
				if tc.code == CloseResumeGap {
					wantLast = "" // the edge cannot resume from it: start fresh
				}
				if tc.code != 0 && q.Get("last") != wantLast {
					t.Errorf("second connection's last = %q, want %q", q.Get("last"), wantLast)
				}
				if tc.code == CloseDraining && w.entryAt[1].Sub(w.entryAt[0]) > 3*time.Second+100*time.Millisecond {
					t.Errorf("re-join waited %v of fake time, jitter is at most 3s", w.entryAt[1].Sub(w.entryAt[0]))
				}
			})
			eventually(t, "the reconnect", func() bool {
				return c.Stats().EdgeConnects >= 1 && c.Stats().EdgeReconnects+c.Stats().EdgeDialErrors >= 1
			})
		})
	}
}

// An edge that refuses a connection with a Retry-After (connect_rate at a
// show's start) is not dialled again before it: the client waits out the
// delay, then connects.
func TestEdgeRetryAfterHonoured(t *testing.T) {
	w := newWorld(t)
	w.edgeRetry = "5"
	w.edgeReject = func(q url.Values, n int) int {
		if n == 0 {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	c := w.newClient(nil)
	w.run()
	eventually(t, "a connection after the refusal", func() bool { return c.Stats().EdgeConnects >= 1 })
	w.lock(func() {
		if len(w.edgeAt) < 2 {
			t.Fatalf("%d handshakes", len(w.edgeAt))
		}
		if d := w.edgeAt[1].Sub(w.edgeAt[0]); d < 5*time.Second {
			t.Fatalf("dialled again %v after a Retry-After of 5 s", d)
		}
	})
}

// An edge address that does not answer is skipped for the next one.
func TestEdgeFallback(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	dead := "ws://127.0.0.1:1/v1/ws"
	w.extraEdges = []string{dead}
	s0 := w.serverSecond()
	g := msgAt(s0, 100, 0, KindSystem, "hello")
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, g))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	c := w.newClient(nil)
	if got := receive(t, c, 1); got[0].ID != g.ID {
		t.Fatalf("got %v", got)
	}
	if st := c.Stats(); st.EdgeDialErrors < 1 || st.EdgeConnects != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// A frame that does not decode is counted and skipped; the connection stays.
func TestEdgeBadFrameSkipped(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	s0 := w.serverSecond()
	g := msgAt(s0, 100, 0, KindGift, "")
	other, _ := wire.EncodeFrame(&wire.Frame{V: 1, Room: "other", Messages: []Message{msgAt(s0, 1, 0, KindGift, "")}})
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		_ = conn.WriteMessage(websocket.BinaryMessage, []byte{0xc1, 0x00})
		_ = conn.WriteMessage(websocket.BinaryMessage, other)
		_ = conn.WriteMessage(websocket.TextMessage, []byte("ignored"))
		_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, g))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	c := w.newClient(nil)
	if got := receive(t, c, 1); got[0].ID != g.ID {
		t.Fatalf("got %v", got)
	}
	if st := c.Stats(); st.EdgeDecodeErrors != 2 || st.EdgeConnects != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// A drain close after a token refresh still re-fetches the entry: the
// session to replace is the one current at close time, not at dial time.
func TestDrainAfterTokenRefreshRejoins(t *testing.T) {
	w := newWorld(t)
	w.tokenTTL = 10 * time.Second // refreshed at 8 s of fake time
	var client atomic.Pointer[Client]
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		if n == 0 {
			// Close once the client holds the refreshed entry.
			for c := client.Load(); c == nil || c.Entry().Token != "tok-2"; c = client.Load() {
				time.Sleep(5 * time.Millisecond)
			}
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(CloseDraining, "bye"), time.Now().Add(time.Second))
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	client.Store(w.newClient(nil))
	w.run()
	eventually(t, "a second edge connection", func() bool {
		var n int
		w.lock(func() { n = len(w.edgeConns) })
		return n >= 2
	})
	w.lock(func() {
		if w.entryHits < 3 {
			t.Errorf("entry fetched %d times: the drain did not re-join", w.entryHits)
		}
		if got := w.edgeConns[1].Get("token"); got != "tok-3" {
			t.Errorf("second connection's token = %q, want tok-3", got)
		}
	})
}

// A connection resumed after longer than the seen-set remembers starts
// fresh: the edge's replay would show gifts the segments already showed.
func TestStaleResumeStartsFresh(t *testing.T) {
	w := newWorld(t)
	s0 := w.serverSecond()
	g := msgAt(s0, 100, 3, KindGift, "")
	release := make(chan struct{})
	var accept atomic.Bool
	w.edgeReject = func(q url.Values, n int) int {
		if n > 0 && !accept.Load() {
			return http.StatusServiceUnavailable // the edges are away
		}
		return 0
	}
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		if n == 0 {
			_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, g))
			<-release
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(CloseResume, "bye"), time.Now().Add(time.Second))
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	c := w.newClient(func(cfg *Config) { cfg.SeenWindow = 4 * time.Second })
	w.run()
	receive(t, c, 1)
	closedAt := w.serverNow()
	close(release)
	// Redials fail for more than half the seen window of fake time.
	eventually(t, "three seconds of failed redials", func() bool {
		return w.serverNow().Sub(closedAt) > 3*time.Second && c.Stats().EdgeDialErrors > 0
	})
	accept.Store(true)
	eventually(t, "a resumed connection", func() bool { return c.Stats().EdgeReconnects >= 1 })
	w.lock(func() {
		q := w.edgeConns[len(w.edgeConns)-1]
		if got := q.Get("last"); got != "" {
			t.Errorf("resumed with last=%q after the seen window", got)
		}
	})
}

// The edge's ask for a fresh token (the connection's expires soon) is
// answered in-band: the client refreshes its entry and sends the new token
// on the same connection, without reconnecting.
func TestEdgeTokenAskAnsweredInBand(t *testing.T) {
	w := newWorld(t)
	got := make(chan string, 4)
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		if n == 0 {
			_ = conn.WriteMessage(websocket.TextMessage, []byte(`{"refresh":"token","exp_ms":1}`))
		}
		for {
			typ, b, err := conn.ReadMessage()
			if err != nil {
				return
			}
			var m struct {
				Token string `json:"token"`
			}
			if typ == websocket.TextMessage && json.Unmarshal(b, &m) == nil && m.Token != "" {
				got <- m.Token
			}
		}
	}
	c := w.newClient(nil)
	w.run()
	select {
	case tok := <-got:
		if tok != "tok-2" {
			t.Fatalf("in-band token %q, want the refreshed entry's tok-2", tok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no token sent in-band after the edge asked")
	}
	if st := c.Stats(); st.EdgeTokenAsks != 1 || st.EdgeConnects != 1 || st.EdgeReconnects != 0 {
		t.Errorf("stats = %+v, want one ask on one connection", st)
	}
}

// A site-wide broadcast pushed by the edge is delivered, but its id (the
// site stream's) does not move the resume point: the reconnect after a
// resume close asks for what follows the room's own last message.
func TestEdgeSiteMessageKeepsLast(t *testing.T) {
	w := newWorld(t)
	s0 := w.serverSecond()
	g := msgAt(s0, 100, 0, KindGift, "")
	site := msgAt(s0, 900, 5, KindSystem, "site news")
	site.Site = true
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		if n == 0 {
			_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, g, site))
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(CloseResume, "bye"), time.Now().Add(time.Second))
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	c := w.newClient(nil)
	w.run()
	got := receive(t, c, 2)
	if !got[1].Site && !got[0].Site {
		t.Fatalf("the site message was not delivered: %+v", got)
	}
	eventually(t, "the resumed connection", func() bool {
		var n int
		w.lock(func() { n = len(w.edgeConns) })
		return n >= 2
	})
	w.lock(func() {
		if last := w.edgeConns[1].Get("last"); last != g.ID {
			t.Fatalf("resumed with last %q, want the room gift's %q (not the site message's)", last, g.ID)
		}
	})
}

// A ban closes the connection with 4451: the client does not reconnect, and
// says so in its stats.
func TestEdgeBanned(t *testing.T) {
	w := newWorld(t)
	g := msgAt(w.serverSecond(), 100, 3, KindGift, "")
	w.noEdge = false
	w.edgeHandler = func(conn *websocket.Conn, n int) {
		_ = conn.WriteMessage(websocket.BinaryMessage, frameBytes(t, g))
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(CloseBanned, "banned"), time.Now().Add(time.Second))
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}
	c := w.newClient(nil)
	w.run()
	eventually(t, "the client to take the ban", func() bool { return c.Stats().EdgeBanned == 1 })
	// EdgeBanned is set as the edge loop returns: no connection follows.
	w.lock(func() {
		if n := len(w.edgeConns); n != 1 {
			t.Errorf("%d edge connections, want the one that was closed", n)
		}
	})
}

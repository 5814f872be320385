package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

func TestNewConfig(t *testing.T) {
	store := stream.NewMemoryStore(nil)
	keys := newKeyring(t, nil)
	valid := func() Config { return Config{Store: store, Verifier: keys, Addr: "ws://e1"} }
	tests := []struct {
		name string
		mut  func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"no store", func(c *Config) { c.Store = nil }, false},
		{"no verifier", func(c *Config) { c.Verifier = nil }, false},
		{"no addr", func(c *Config) { c.Addr = "" }, false},
		{"merge window below 50ms", func(c *Config) { c.MergeWindow = 49 * time.Millisecond }, false},
		{"merge window 50ms", func(c *Config) { c.MergeWindow = 50 * time.Millisecond }, true},
		{"negative queue", func(c *Config) { c.QueueSize = -1 }, false},
		{"negative max conns", func(c *Config) { c.MaxConns = -1 }, false},
		{"negative min gift", func(c *Config) { c.MinGiftValue = -1 }, false},
		{"negative drain", func(c *Config) { c.DrainPeriod = -time.Second }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.mut(&cfg)
			s, err := New(cfg)
			if tt.ok != (err == nil) {
				t.Fatalf("New: err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			if tt.name == "defaults" {
				c := s.cfg
				if c.MergeWindow != defaultMergeWindow || c.QueueSize != defaultQueueSize || c.RingSize != defaultRingSize ||
					c.PingInterval != defaultPingInterval || c.DrainPeriod != defaultDrainPeriod || c.ReadLimit != defaultReadLimit ||
					c.NodeID != "ws://e1" {
					t.Fatalf("defaults not applied: %+v", c)
				}
			}
		})
	}
}

func TestPushable(t *testing.T) {
	tests := []struct {
		name string
		min  int64
		m    wire.Message
		want bool
	}{
		{"system", 1000, sys("hi"), true},
		{"barrage never", 0, wire.Message{Kind: wire.KindBarrage, Text: "x"}, false},
		{"any gift without minimum", 0, gift(1, 0), true},
		{"gift at minimum", 100, gift(100, 0), true},
		{"gift below minimum", 100, gift(99, 1), false},
		{"count makes it", 100, gift(30, 4), true},
		{"count falls short", 100, gift(33, 3), false},
		{"zero value gift", 100, gift(0, 9), false},
		{"product beyond int64 counts", 1 << 62, gift(1<<40, 1<<32-1), true},
		{"large product falls short", 1 << 62, gift(1<<20, 1<<32-1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pushable(&tt.m, tt.min); got != tt.want {
				t.Fatalf("pushable = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHandshakeRejected(t *testing.T) {
	e := newEnv(t, envOpts{})
	otherEpoch := func() string {
		// A keyring living a day ahead signs with an epoch this node
		// does not hold.
		fake := clock.NewFake(time.Now().Add(24 * time.Hour))
		return signToken(t, newKeyring(t, fake), "r1", e.addr)
	}()
	good := e.token("r1")
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	tests := []struct {
		name   string
		method string
		query  url.Values
		header http.Header
		status int
		code   string
	}{
		{"no token, no upgrade", "GET", nil, nil, 400, CodeBadRequest},
		{"token in the URL", "GET", url.Values{"token": {good}}, nil, 400, CodeTokenInURL},
		{"garbage bearer", "GET", nil, bearer("x.y.z"), 401, CodeUnauthorized},
		{"unknown epoch", "GET", nil, bearer(otherEpoch), 401, CodeTokenEpoch},
		{"wrong node", "GET", nil, bearer(signToken(t, e.keys, "r1", "ws://elsewhere:1")), 403, CodeWrongNode},
		// A token's audience is its address partition: this node's
		// address among the ingests' is not an edge token for it.
		{"ingest-only token", "GET", nil, bearer(signAudience(t, e.keys, 1, e.addr, "ws://edge-9")), 403, CodeWrongNode},
		{"token without ni", "GET", nil, bearer(signAudience(t, e.keys, 0, "http://ingest-0", e.addr)), 403, CodeWrongNode},
		{"invalid room", "GET", nil, bearer(signToken(t, e.keys, "no room!", e.addr)), 400, CodeBadRequest},
		{"bad last", "GET", url.Values{"last": {"abc"}}, bearer(good), 400, CodeBadRequest},
		{"last without seq", "GET", url.Values{"last": {"17-"}}, bearer(good), 400, CodeBadRequest},
		{"negative last", "GET", url.Values{"last": {"-1-0"}}, bearer(good), 400, CodeBadRequest},
		{"last too long", "GET", url.Values{"last": {strings.Repeat("1", 60) + "-0"}}, bearer(good), 400, CodeBadRequest},
		{"not an upgrade, bearer", "GET", nil, bearer(good), 400, CodeBadRequest},
		{"bad websocket version", "GET", nil, http.Header{
			"Authorization": {"Bearer " + good},
			"Connection":    {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"8"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
		}, 400, CodeBadRequest},
		{"foreign origin", "GET", nil, http.Header{
			"Authorization": {"Bearer " + good}, "Origin": {"https://evil.example"},
			"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="},
		}, 403, CodeOrigin},
		{"post", "POST", nil, bearer(good), 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, e.ts.URL+Path+"?"+tt.query.Encode(), nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header[k] = v
			}
			before := counter(e.srv.m.rejects.WithLabelValues(tt.code))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			checkCoded(t, resp, tt.status, tt.code)
			if tt.method == "GET" {
				if got := counter(e.srv.m.rejects.WithLabelValues(tt.code)); got != before+1 {
					t.Fatalf("rejections{code=%s} = %v, want %v", tt.code, got, before+1)
				}
			}
		})
	}
	if n := e.srv.Load().Conns; n != 0 {
		t.Fatalf("Conns = %d after rejected handshakes, want 0", n)
	}
}

// checkCoded checks a response is the coded JSON error.
func checkCoded(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d (body %s)", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q, want JSON", ct)
	}
	var v struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if v.Error.Code != code || v.Error.Message == "" {
		t.Fatalf("error %+v, want code %q with a message", v.Error, code)
	}
}

func TestHandshakeAccepted(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.MaxConns = 2 }})
	d := &websocket.Dialer{HandshakeTimeout: safety}

	// The token in a Bearer header instead of the query.
	ws, _, err := d.Dial(e.wsURL, http.Header{"Authorization": {"Bearer " + e.token("r1")}})
	if err != nil {
		t.Fatalf("dial with bearer: %v", err)
	}
	defer ws.Close()
	ws2 := e.connect("r2", "")

	// Full: the next handshake is refused before the upgrade.
	_, resp, err := e.dialWith(d, e.token("r1"), "")
	if err == nil {
		t.Fatal("third connection accepted above MaxConns")
	}
	checkCoded(t, resp, http.StatusServiceUnavailable, CodeOverCapacity)

	l, rooms := e.srv.Load(), e.srv.OnlineRooms()
	if l.Conns != 2 || l.Capacity != 2 || rooms["r1"] != 1 || rooms["r2"] != 1 || l.Kind != loadtable.KindEdge || l.Addr != e.addr {
		t.Fatalf("Load = %+v, OnlineRooms = %v", l, rooms)
	}

	// A slot frees up when a client leaves, and an empty room's hub goes.
	ws2.Close()
	waitFor(t, "r2 to empty", func() bool { _, ok := e.srv.OnlineRooms()["r2"]; return !ok && e.srv.roomCount() == 1 })
	ws3 := e.connect("r1", "")
	defer ws3.Close()
	waitFor(t, "two viewers in r1", func() bool { return e.srv.OnlineRooms()["r1"] == 2 })
}

// TestFanout: every viewer of a room gets every pushable message exactly
// once, in stream order; cheap gifts and barrage are not pushed.
func TestFanout(t *testing.T) {
	const viewers = 50
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.MinGiftValue = 100 }})
	conns := make([]*websocket.Conn, viewers)
	for i := range conns {
		conns[i] = e.connect("r1", "")
	}
	other := e.connect("r2", "")

	var want []string
	for batch := range 12 {
		msgs := []wire.Message{
			gift(100, 0),        // at the minimum
			gift(50, 1),         // below: segments only
			gift(30, 4),         // 120 in total
			gift(99, 0),         // below
			sys("announcement"), // always
			{Kind: wire.KindBarrage, Text: "no push"}, // never on the edge
		}
		out := e.append("r1", msgs...)
		for _, i := range []int{0, 2, 4} {
			want = append(want, out[i].ID)
		}
		if batch%3 == 0 {
			time.Sleep(time.Millisecond) // vary how messages fall into windows
		}
	}
	sentinel := e.append("r1", sys("end"))[0].ID
	want = append(want, sentinel)

	var wg sync.WaitGroup
	errs := make([]error, viewers)
	got := make([][]wire.Message, viewers)
	for i, ws := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = readUntil(ws, "r1", untilID(sentinel))
		}()
	}
	wg.Wait()
	for i := range conns {
		if errs[i] != nil {
			t.Fatalf("viewer %d: %v", i, errs[i])
		}
		sameIDs(t, "viewer", got[i], want)
	}
	// Slimmed on the way: nickname cut, offset filled, order id gone.
	m := got[0][0]
	if m.Nick != wire.TruncateRunes("a-long-nickname", wire.MaxNickRunes) || m.Order != "" || m.Value != 100 {
		t.Fatalf("message not slimmed: %+v", m)
	}
	ms, _, _ := wire.ParseID(m.ID)
	if m.Offset != uint16(ms%1000) {
		t.Fatalf("offset %d, want %d", m.Offset, ms%1000)
	}

	// Another room's viewer got nothing of r1.
	last := e.append("r2", sys("r2 only"))[0].ID
	o, err := readUntil(other, "r2", untilID(last))
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "r2 viewer", o, []string{last})
	if sent := counter(e.srv.m.messagesSent); sent < float64(viewers*len(want)) {
		t.Fatalf("messages_sent = %v, want at least %d", sent, viewers*len(want))
	}
}

// TestResume: a client reconnecting with last gets exactly what it missed,
// from the ring or the store, then the live messages.
func TestResume(t *testing.T) {
	tests := []struct {
		name      string
		ringSize  int
		keeper    bool // another viewer keeps the room's hub (and ring) alive
		before    int  // messages appended before the resume
		resumeAt  int  // index of the last message the client had; -1: "0-0"
		fromStore bool // the catch-up must use the store
	}{
		{"from ring", 0, true, 20, 4, false},
		{"from store, older than ring", 4, true, 20, 4, true},
		{"from store, fresh hub", 0, false, 20, 4, true},
		{"everything", 0, true, 10, -1, false},
		{"nothing missed", 0, true, 10, 9, false},
		{"nothing missed, fresh hub", 0, false, 10, 9, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOpts{cfg: func(c *Config) { c.RingSize = tt.ringSize; c.MinGiftValue = 10 }})
			var keeper *websocket.Conn
			if tt.keeper {
				keeper = e.connect("r1", "")
			}
			var pushed []string
			for i := range tt.before {
				m := gift(int64(10+i), 0)
				if i%3 == 1 {
					m = gift(1, 1) // not pushed: must not appear in the catch-up either
				}
				out := e.append("r1", m)
				if i%3 != 1 {
					pushed = append(pushed, out[0].ID)
				}
			}
			if keeper != nil {
				// The hub has read and fanned out everything.
				if _, err := readUntil(keeper, "r1", untilID(pushed[len(pushed)-1])); err != nil {
					t.Fatal(err)
				}
			}
			last, want := "0-0", pushed
			if tt.resumeAt >= 0 {
				k := tt.resumeAt / 3 * 2 // index among pushed of message resumeAt (not a multiple of 3 minus 1)
				last, want = pushed[k], pushed[k+1:]
			}
			storeBefore := counter(e.srv.m.catchUp.WithLabelValues("store"))

			ws := e.connect("r1", last)
			live := e.append("r1", sys("live 1"), gift(1, 0), sys("live 2"))
			want = append(append([]string(nil), want...), live[0].ID, live[2].ID)
			got, err := readUntil(ws, "r1", untilID(live[2].ID))
			if err != nil {
				t.Fatal(err)
			}
			sameIDs(t, "resumed", got, want)
			usedStore := counter(e.srv.m.catchUp.WithLabelValues("store")) > storeBefore
			if usedStore != tt.fromStore {
				t.Fatalf("catch-up used the store: %v, want %v", usedStore, tt.fromStore)
			}
		})
	}
}

// TestResumeGap: a client whose resume point the stream no longer holds
// (trimmed past it) is told so with CloseResumeGap rather than replayed
// from after the trim, silently missing what it took — whether another
// viewer keeps the room's hub (its ring too short) or the hub starts fresh;
// one whose point is still held is replayed as before.
func TestResumeGap(t *testing.T) {
	for _, keeper := range []bool{true, false} {
		t.Run(fmt.Sprintf("hub kept %v", keeper), func(t *testing.T) {
			e := newEnv(t, envOpts{cfg: func(c *Config) { c.RingSize = 2 }})
			if keeper {
				e.connect("r1", "")
			}
			var ids []string
			for i := range 10 {
				ids = append(ids, e.append("r1", sys(fmt.Sprintf("m%d", i)))[0].ID)
			}
			if err := e.store.TrimBefore(context.Background(), stream.Key{Room: "r1", Lane: stream.Live}, ids[5]); err != nil {
				t.Fatal(err)
			}
			before := counter(e.srv.m.closes.WithLabelValues(reasonGap))
			ws := e.connect("r1", ids[2]) // trimmed away
			if got := closeCode(t, ws); got != CloseResumeGap {
				t.Fatalf("resume from a trimmed id: close %d, want %d", got, CloseResumeGap)
			}
			waitFor(t, "the gap close to be counted", func() bool {
				return counter(e.srv.m.closes.WithLabelValues(reasonGap)) == before+1
			})
			// Still held: replayed.
			ws = e.connect("r1", ids[6])
			got, err := readUntil(ws, "r1", untilID(ids[9]))
			if err != nil {
				t.Fatal(err)
			}
			sameIDs(t, "resumed from a held id", got, ids[7:])
		})
	}
}

// TestResumeAhead: a client that already has messages this node has not
// read yet (it came from a node that was ahead) does not get them twice.
func TestResumeAhead(t *testing.T) {
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	e := newEnv(t, envOpts{clock: clk})
	keeper := e.connect("r1", "")
	first := e.append("r1", sys("a"))[0]
	if _, err := readUntil(keeper, "r1", untilID(first.ID)); err != nil {
		t.Fatal(err)
	}
	// The client saw up to id t+5ms-1 elsewhere.
	last := wire.FormatID(1_700_000_000_005, 1)
	ws := e.connect("r1", last)
	clk.Advance(5 * time.Millisecond)
	// These two share the client's millisecond: one it has, one it lacks.
	had := e.append("r1", sys("had"), sys("had too"), sys("new"))
	clk.Advance(time.Millisecond)
	later := e.append("r1", sys("later"))[0]
	got, err := readUntil(ws, "r1", untilID(later.ID))
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "ahead", got, []string{had[2].ID, later.ID})
}

// TestResumeRace reconnects a client again and again while messages flow;
// stitched together, its sessions hold every pushable message exactly once.
func TestResumeRace(t *testing.T) {
	for _, keeper := range []bool{true, false} {
		name := "fresh hub"
		if keeper {
			name = "live hub"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOpts{cfg: func(c *Config) { c.RingSize = 16; c.MinGiftValue = 2 }})
			if keeper {
				k := e.connect("r1", "")
				go func() { // drain it so it is never slow
					for {
						if _, _, err := k.ReadMessage(); err != nil {
							return
						}
					}
				}()
			}
			var (
				mu     sync.Mutex
				pushed []string
				stop   = make(chan struct{})
				done   = make(chan struct{})
			)
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					out, err := e.store.Append(context.Background(), stream.Key{Room: "r1", Lane: stream.Live},
						[]wire.Message{gift(int64(i%3+1), 0), sys("s")})
					if err != nil {
						return
					}
					mu.Lock()
					for _, m := range out {
						if m.Kind == wire.KindSystem || m.Value >= 2 {
							pushed = append(pushed, m.ID)
						}
					}
					mu.Unlock()
					time.Sleep(200 * time.Microsecond)
				}
			}()

			var all []wire.Message
			last := "0-0"
			for session := range 8 {
				ws := e.connect("r1", last)
				got, err := readUntil(ws, "r1", func(ms []wire.Message) bool { return len(ms) >= 10+session*7 })
				if err != nil {
					t.Fatalf("session %d: %v", session, err)
				}
				ws.Close()
				all = append(all, got...)
				last = got[len(got)-1].ID
			}
			close(stop)
			<-done
			end := e.append("r1", sys("end"))[0].ID
			ws := e.connect("r1", last)
			got, err := readUntil(ws, "r1", untilID(end))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, got...)
			mu.Lock()
			want := append(pushed, end)
			mu.Unlock()
			sameIDs(t, "stitched sessions", all, want)
		})
	}
}

func TestNewClientGetsOnlyNewMessages(t *testing.T) {
	e := newEnv(t, envOpts{})
	keeper := e.connect("r1", "")
	old := e.append("r1", sys("old"))[0].ID
	if _, err := readUntil(keeper, "r1", untilID(old)); err != nil {
		t.Fatal(err)
	}
	ws := e.connect("r1", "")
	fresh := e.append("r1", sys("new"))[0].ID
	got, err := readUntil(ws, "r1", untilID(fresh))
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "new client", got, []string{fresh})
}

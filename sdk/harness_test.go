package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/sdk/wire"
)

const (
	testRoom   = "r1"
	testTicket = "ticket-alice"
	testDelay  = 300 // publish delay, ms
)

// world is a fake deployment: entry, CDN, ingest and edge servers that share
// one fake clock. The server clock runs ahead of the client's local clock by
// serverOffset, so the client must learn the offset from the entry answer.
type world struct {
	t            *testing.T
	clk          *FakeClock
	serverOffset time.Duration
	speed        atomic.Int64 // fake ns advanced per real ms; 0 = paused

	mu       sync.Mutex
	segments map[int64][]byte
	hold     map[int64]int // second → 404s to answer before serving it
	// autoEmpty serves an empty segment with seq = second - seqBase for every
	// due second not in segments.
	autoEmpty bool
	seqBase   int64
	requests  []cdnRequest
	manifests []wire.Manifest
	// manifestAt, when set, names the manifest's second for a live second
	// (a slicer behind live); nil: the manifest follows live.
	manifestAt func(live int64) int64
	early      []string // requests made before their second was due
	// tdList is the room's takedowns.json (nil: 404, none yet); listHits
	// counts its requests. manifestTD is the manifest's td.
	tdList     *wire.TakedownList
	listHits   int
	manifestTD uint64

	role        string
	tokenTTL    time.Duration
	refreshMs   int64 // the entry's refresh_ms hint; 0: none, as without rate limits
	entrySync   bool  // the entry's sync: the client may hold to its playhead
	noEdge      bool
	extraEdges  []string // put before the real edge address
	entryHits   int
	timeHits    int
	entrySlow   atomic.Int64 // fake time an entry request takes
	entryAt     []time.Time  // server time of each entry request
	entryAnswer func(n int) (status int, header http.Header, body string)

	posts        []post
	ingestAnswer func(p post) (status int, body string)
	ingestTwice  bool // the entry names the ingest twice (a fallback)

	edgeConns   []url.Values
	edgeHandler func(conn *websocket.Conn, n int)
	edgeReject  func(q url.Values, n int) int // status to refuse the upgrade with, 0 to accept
	edgeRetry   string                        // Retry-After of a refused upgrade
	edgeAt      []time.Time                   // server time of each edge handshake

	entry, cdn, ingest, edge *httptest.Server
}

type cdnRequest struct {
	second int64 // -1 for the manifest
	at     time.Time
	status int
}

type post struct {
	path, text, token string
	playhead          int64     // the body's playhead_ms; 0: none
	at                time.Time // client-local fake time
}

// start is the local fake time every test begins at: half a second into a
// unix second, so that the server second (offset below) is well inside one.
var start = time.Unix(1_700_000_000, 500_000_000)

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{
		t:            t,
		clk:          NewFakeClock(start),
		serverOffset: 90*time.Minute + 123*time.Millisecond,
		segments:     map[int64][]byte{},
		hold:         map[int64]int{},
		autoEmpty:    true,
		role:         "viewer",
		tokenTTL:     10 * time.Minute,
	}
	w.seqBase = w.serverSecond() - 100
	w.entry = httptest.NewServer(http.HandlerFunc(w.serveEntry))
	w.cdn = httptest.NewServer(http.HandlerFunc(w.serveCDN))
	w.ingest = httptest.NewServer(http.HandlerFunc(w.serveIngest))
	w.edge = httptest.NewServer(http.HandlerFunc(w.serveEdge))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if d := w.speed.Load(); d > 0 {
					w.clk.Advance(time.Duration(d))
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		w.edge.CloseClientConnections()
		w.edge.Close()
		w.entry.Close()
		w.cdn.Close()
		w.ingest.Close()
	})
	return w
}

// run lets fake time flow at 10× real time (10 ms per real ms); pause stops it.
func (w *world) run()   { w.speed.Store(int64(10 * time.Millisecond)) }
func (w *world) pause() { w.speed.Store(0) }

func (w *world) serverNow() time.Time { return w.clk.Now().Add(w.serverOffset) }

func (w *world) serverSecond() int64 { return w.serverNow().Unix() }

func dueMs(second int64) int64 { return (second+1)*1000 + testDelay }

func (w *world) serveEntry(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/time" {
		w.mu.Lock()
		w.timeHits++
		w.mu.Unlock()
		fmt.Fprintf(rw, `{"server_time_ms":%d}`, w.serverNow().UnixMilli())
		return
	}
	if d := w.entrySlow.Load(); d > 0 {
		// A busy gslb: the answer is stamped at the end of a long round trip.
		w.clk.Advance(time.Duration(d))
	}
	w.mu.Lock()
	n := w.entryHits
	w.entryHits++
	w.entryAt = append(w.entryAt, w.serverNow())
	answer := w.entryAnswer
	w.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+testTicket || r.URL.Query().Get("room") != testRoom || r.URL.Path != "/v1/entry" {
		http.Error(rw, `{"error":{"code":"bad_ticket","message":"no"}}`, http.StatusUnauthorized)
		return
	}
	if answer != nil {
		if status, h, body := answer(n); status != 0 {
			for k, v := range h {
				rw.Header()[k] = v
			}
			rw.WriteHeader(status)
			_, _ = io.WriteString(rw, body)
			return
		}
	}
	now := w.serverNow()
	edges := append([]string(nil), w.extraEdges...)
	edges = append(edges, "ws"+strings.TrimPrefix(w.edge.URL, "http")+"/v1/ws")
	if w.noEdge {
		edges = nil
	}
	e := map[string]any{
		"room":             testRoom,
		"user":             "alice",
		"role":             w.role,
		"ingest":           w.ingestAddrs(),
		"edge":             edges,
		"cdn":              w.cdn.URL, // no trailing slash: the client adds it
		"token":            "tok-" + strconv.Itoa(n+1),
		"token_expires_ms": now.Add(w.tokenTTL).UnixMilli(),
		"server_time_ms":   now.UnixMilli(),
		"segment_ms":       1000,
		"publish_delay_ms": testDelay,
	}
	if w.refreshMs != 0 {
		e["refresh_ms"] = w.refreshMs
	}
	if w.entrySync {
		e["sync"] = true
	}
	_ = json.NewEncoder(rw).Encode(e)
}

func (w *world) serveCDN(rw http.ResponseWriter, r *http.Request) {
	now := w.serverNow()
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.URL.Path == "/"+wire.ManifestKey(testRoom) {
		live := (now.UnixMilli()-testDelay)/1000 - 1
		if w.manifestAt != nil {
			live = w.manifestAt(live)
		}
		m := wire.Manifest{V: 1, Room: testRoom, Second: live, Seq: uint64(live - w.seqBase), Dur: 1000, Takedowns: w.manifestTD}
		w.manifests = append(w.manifests, m)
		w.requests = append(w.requests, cdnRequest{-1, now, 200})
		b, _ := wire.EncodeManifest(&m)
		_, _ = rw.Write(b)
		return
	}
	if r.URL.Path == "/"+wire.TakedownListKey(testRoom) {
		w.listHits++
		if w.tdList == nil {
			rw.WriteHeader(http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(rw).Encode(w.tdList)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/rooms/"+testRoom+"/s/")
	sec, err := strconv.ParseInt(strings.TrimSuffix(rest, ".msgpack"), 10, 64)
	if !ok || err != nil {
		rw.WriteHeader(http.StatusForbidden)
		return
	}
	status := http.StatusOK
	var body []byte
	switch {
	case now.UnixMilli() < dueMs(sec):
		w.early = append(w.early, fmt.Sprintf("second %d requested at %d, due %d", sec, now.UnixMilli(), dueMs(sec)))
		status = http.StatusNotFound
	case w.hold[sec] > 0:
		w.hold[sec]--
		status = http.StatusNotFound
	case w.segments[sec] != nil:
		body = w.segments[sec]
	case w.autoEmpty:
		body = encodeSeg(w.t, &wire.Segment{V: 1, Room: testRoom, Second: sec, Seq: uint64(sec - w.seqBase), Dur: 1000})
	default:
		status = http.StatusNotFound
	}
	w.requests = append(w.requests, cdnRequest{sec, now, status})
	rw.WriteHeader(status)
	_, _ = rw.Write(body)
}

func (w *world) ingestAddrs() []string {
	if w.ingestTwice {
		return []string{w.ingest.URL, w.ingest.URL}
	}
	return []string{w.ingest.URL}
}

func (w *world) serveIngest(rw http.ResponseWriter, r *http.Request) {
	var body struct {
		Text     string `json:"text"`
		Playhead int64  `json:"playhead_ms"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	p := post{path: r.URL.Path, text: body.Text, playhead: body.Playhead, token: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), at: w.clk.Now()}
	w.mu.Lock()
	w.posts = append(w.posts, p)
	answer := w.ingestAnswer
	w.mu.Unlock()
	if answer != nil {
		if status, b := answer(p); status != 0 {
			rw.WriteHeader(status)
			_, _ = io.WriteString(rw, b)
			return
		}
	}
	if strings.HasSuffix(p.path, "/announce") {
		_, _ = io.WriteString(rw, `{"ok":true,"id":"1700-7"}`)
		return
	}
	_, _ = io.WriteString(rw, `{"ok":true}`)
}

func (w *world) serveEdge(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	n := len(w.edgeConns)
	// Recorded as if the token were a query parameter, so tests read one
	// place; it must come in the header and never in the URL.
	q := r.URL.Query()
	if q.Has("token") {
		q.Set("token", "IN-THE-URL")
	} else {
		q.Set("token", strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	}
	w.edgeConns = append(w.edgeConns, q)
	w.edgeAt = append(w.edgeAt, w.serverNow())
	reject, handler, retry := w.edgeReject, w.edgeHandler, w.edgeRetry
	w.mu.Unlock()
	if reject != nil {
		if status := reject(r.URL.Query(), n); status != 0 {
			if retry != "" {
				rw.Header().Set("Retry-After", retry)
			}
			http.Error(rw, "refused", status)
			return
		}
	}
	up := websocket.Upgrader{}
	conn, err := up.Upgrade(rw, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	if handler != nil {
		handler(conn, n)
		return
	}
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			return
		}
	}
}

// lock runs f with the world locked, for reading what the servers recorded.
func (w *world) lock(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
}

// noEarly fails the test if any segment was requested before it was due.
func (w *world) noEarly() {
	w.t.Helper()
	w.lock(func() {
		for _, e := range w.early {
			w.t.Errorf("early request: %s", e)
		}
	})
}

func encodeSeg(t testing.TB, s *wire.Segment) []byte {
	t.Helper()
	b, err := wire.EncodeSegment(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (w *world) putSegment(second int64, seq uint64, msgs ...Message) {
	b := encodeSeg(w.t, &wire.Segment{V: 1, Room: testRoom, Second: second, Seq: seq, Dur: 1000, Messages: msgs})
	w.lock(func() { w.segments[second] = b })
}

// seqOf is the seq autoEmpty gives second.
func (w *world) seqOf(second int64) uint64 { return uint64(second - w.seqBase) }

func msgAt(second int64, offMs int64, n uint64, kind Kind, text string) Message {
	return wire.Slim(Message{ID: wire.FormatID(second*1000+offMs, n), Kind: kind, Text: text})
}

func frameBytes(t testing.TB, msgs ...Message) []byte {
	t.Helper()
	b, err := wire.EncodeFrame(&wire.Frame{V: 1, Room: testRoom, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newClient builds a client against w, runs it, and waits for its first
// join.
func (w *world) newClient(mutate func(*Config)) *Client {
	w.t.Helper()
	c := w.buildClient(mutate)
	w.startClient(c)
	return c
}

// buildClient builds a client against w without running it.
func (w *world) buildClient(mutate func(*Config)) *Client {
	w.t.Helper()
	cfg := Config{
		EntryURL:     w.entry.URL,
		Room:         testRoom,
		Ticket:       testTicket,
		Clock:        w.clk,
		Logger:       slog.New(slog.DiscardHandler),
		RejoinJitter: -1,
		// Tests that want the first join's jitter set it.
		FirstJoinJitter: -1,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

// startClient runs c and waits for its first join. Cleanup stops it and
// waits for Run to return.
func (w *world) startClient(c *Client) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	w.t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			w.t.Errorf("Run: %v", err)
		}
	})
	if _, err := c.waitJoined(ctx); err != nil {
		w.t.Fatal(err)
	}
}

// eventually polls cond until it holds. The real-time limit is only a guard
// against a hung test; nothing asserts how long it took.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // as internal/testwait.Limit
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// receive reads n messages from c.
func receive(t *testing.T, c *Client, n int) []Message {
	t.Helper()
	var got []Message
	guard := time.NewTimer(10 * time.Second)
	defer guard.Stop()
	for len(got) < n {
		select {
		case m, ok := <-c.Messages():
			if !ok {
				t.Fatalf("channel closed after %d of %d messages", len(got), n)
			}
			got = append(got, m)
		case <-guard.C:
			t.Fatalf("timed out after %d of %d messages: %v", len(got), n, ids(got))
		}
	}
	return got
}

// quiet asserts that nothing more is delivered while the poller walks
// through the given number of further seconds.
func quiet(t *testing.T, w *world, c *Client, seconds int64) {
	t.Helper()
	target := c.Stats().SegmentsFetched + seconds
	eventually(t, "more segments", func() bool { return c.Stats().SegmentsFetched >= target })
	select {
	case m := <-c.Messages():
		t.Fatalf("unexpected message %+v", m)
	default:
	}
}

func ids(ms []Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func segmentOf(room string, second int64, seq uint64, msgs ...Message) *wire.Segment {
	return &wire.Segment{V: 1, Room: room, Second: second, Seq: seq, Dur: 1000, Messages: msgs}
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/gslb"
	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/internal/httpx"
	"danmaku/internal/loadtable"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

var (
	t0         = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	discard    = slog.New(slog.NewTextHandler(io.Discard, nil))
	testMaster = []byte("ingest-test-master-key-0123456789-abcdef")
)

const (
	room       = "room-1"
	serviceKey = "svc-key-0123456789"
	selfAddr   = "http://ingest-1"
)

// fixture is one ingest node on a fake clock, wired as in production: memory
// stream store, keyring fed by an auth center, load table, own registry.
type fixture struct {
	clk    *clock.Fake
	store  *stream.MemoryStore
	ring   *auth.Keyring
	table  *loadtable.MemoryTable
	reg    *prometheus.Registry
	srv    *Server
	engine *gin.Engine
}

func newFixture(tb testing.TB, mod func(*Config)) *fixture {
	tb.Helper()
	clk := clock.NewFake(t0)
	return newFixtureOn(tb, clk, stream.NewMemoryStore(clk), mod)
}

func newFixtureOn(tb testing.TB, clk clock.Clock, store *stream.MemoryStore, mod func(*Config)) *fixture {
	tb.Helper()
	secrets := auth.NewMemorySecrets()
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: testMaster, Clock: clk, Logger: discard})
	if err != nil {
		tb.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: testMaster, Clock: clk, Logger: discard})
	if err != nil {
		tb.Fatal(err)
	}
	if err := center.Publish(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if err := ring.Refresh(context.Background()); err != nil {
		tb.Fatal(err)
	}
	f := &fixture{store: store, ring: ring, table: loadtable.NewMemoryTable(), reg: prometheus.NewRegistry()}
	if fc, ok := clk.(*clock.Fake); ok {
		f.clk = fc
	}
	cfg := Config{
		Streams:    store,
		Keyring:    ring,
		Load:       f.table,
		GiftKeys:   []string{"old-key", serviceKey},
		Registerer: f.reg,
		Clock:      clk,
		Logger:     discard,
		// A comment is answered once its window is flushed: tests send
		// one at a time, and a millisecond keeps them quick.
		FlushWindow: time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	f.srv = srv
	f.engine = httpx.NewEngine(httpx.EngineConfig{Role: "ingest", Logger: discard, Gatherer: f.reg})
	srv.Register(f.engine)
	return f
}

// token signs a dynamic token for user in rm with role, bound to addrs
// (default: this node).
//
// The first address is the token's ingest (Ingests 1); audienceToken signs
// any partition.
func (f *fixture) token(tb testing.TB, rm, user, role string, addrs ...string) string {
	tb.Helper()
	if addrs == nil {
		addrs = []string{selfAddr, "ws://edge-1"}
	}
	tok, _, err := f.ring.Sign(auth.Claims{
		// The first address is the ingest's, as the gslb signs them.
		Room: rm, Nick: "nick", Avatar: "a1", Role: role, Addrs: addrs, Ingests: min(1, len(addrs)),
		RegisteredClaims: jwt.RegisteredClaims{Subject: user},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// audienceToken signs u1's token in room bound to addrs, the first ingests
// of them ingests'.
func (f *fixture) audienceToken(tb testing.TB, ingests int, addrs ...string) string {
	tb.Helper()
	tok, _, err := f.ring.Sign(auth.Claims{
		Room: room, Role: auth.RoleViewer, Addrs: addrs, Ingests: ingests,
		RegisteredClaims: jwt.RegisteredClaims{Subject: "u1"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func (f *fixture) do(method, path, token, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	f.engine.ServeHTTP(rec, req)
	return rec
}

func barragePath(rm string) string  { return "/v1/rooms/" + rm + "/barrage" }
func announcePath(rm string) string { return "/v1/rooms/" + rm + "/announce" }

func (f *fixture) barrage(tb testing.TB, token, text string) {
	tb.Helper()
	b, _ := json.Marshal(map[string]string{"text": text})
	rec := f.do(http.MethodPost, barragePath(room), token, string(b))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"ok":true}` {
		tb.Fatalf("barrage: %d %s", rec.Code, rec.Body)
	}
}

func (f *fixture) entries(tb testing.TB, rm string, lane stream.Lane) []wire.Message {
	tb.Helper()
	es, err := f.store.Read(context.Background(), stream.Key{Room: rm, Lane: lane}, "", 100_000, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return es
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func errorCode(tb testing.TB, rec *httptest.ResponseRecorder) string {
	tb.Helper()
	var b errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		tb.Fatalf("error body %q is not JSON: %v", rec.Body.String(), err)
	}
	if b.Error.Code == "" || b.Error.Message == "" {
		tb.Fatalf("error body %q lacks code or message", rec.Body.String())
	}
	return b.Error.Code
}

// metric reads a counter from the registry by name and labels.
func metric(tb testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			// Summed over the labels not asked for (event and room).
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func rejected(tb testing.TB, reg *prometheus.Registry, layer, reason string) float64 {
	tb.Helper()
	return metric(tb, reg, "danmaku_ingest_rejected_total", map[string]string{"layer": layer, "reason": reason})
}

type badCase struct {
	name   string
	token  string // "-" = none
	body   string
	status int
	code   string
}

func (f *fixture) runBad(t *testing.T, path, defaultToken string, cases []badCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.token
			switch tok {
			case "":
				tok = defaultToken
			case "-":
				tok = ""
			}
			rec := f.do(http.MethodPost, path, tok, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status = %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if code := errorCode(t, rec); code != tc.code {
				t.Fatalf("code = %q, want %q (%s)", code, tc.code, rec.Body)
			}
		})
	}
}

// textBodyCases are the bad bodies of barrage and announce.
func textBodyCases() []badCase {
	return []badCase{
		{name: "malformed JSON", body: `{"text":`, status: 400, code: "bad_json"},
		{name: "not JSON", body: `text=hi`, status: 400, code: "bad_json"},
		{name: "empty body", body: ``, status: 400, code: "bad_json"},
		{name: "whitespace body", body: " \n", status: 400, code: "bad_json"},
		{name: "trailing garbage", body: `{"text":"hi"} x`, status: 400, code: "bad_json"},
		{name: "two values", body: `{"text":"hi"}{"text":"hi"}`, status: 400, code: "bad_json"},
		{name: "unknown field", body: `{"text":"hi","color":"red"}`, status: 400, code: "bad_json"},
		{name: "text a number", body: `{"text": 5}`, status: 400, code: "bad_json"},
		{name: "text an object", body: `{"text": {}}`, status: 400, code: "bad_json"},
		{name: "body an array", body: `["hi"]`, status: 400, code: "bad_json"},
		{name: "missing text", body: `{}`, status: 400, code: "missing_field"},
		{name: "null text", body: `{"text":null}`, status: 400, code: "missing_field"},
		{name: "null body", body: `null`, status: 400, code: "missing_field"},
		{name: "oversized body", body: `{"text":"` + strings.Repeat("a", 5000) + `"}`, status: 413, code: "body_too_large"},
		{name: "oversized trailing space", body: `{"text":"hi"}` + strings.Repeat(" ", 5000), status: 413, code: "body_too_large"},
		{name: "empty text", body: `{"text":""}`, status: 400, code: "empty_text"},
		{name: "text empty after normalisation", body: `{"text":" \u200b\t\u202e\u0000 "}`, status: 400, code: "empty_text"},
		{name: "text too long", body: `{"text":"` + strings.Repeat("字", 61) + `"}`, status: 400, code: "text_too_long"},
		{name: "missing token", token: "-", body: `{"text":"hi"}`, status: 401, code: "no_token"},
		{name: "garbage token", token: "garbage", body: `{"text":"hi"}`, status: 401, code: "bad_token"},
	}
}

func TestBarrageBadInput(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Addr = selfAddr })
	good := f.token(t, room, "u1", auth.RoleViewer)
	cases := append(textBodyCases(),
		badCase{name: "token for another room", token: f.token(t, "room-2", "u1", auth.RoleViewer), body: `{"text":"hi"}`, status: 403, code: "wrong_room"},
		badCase{name: "token for another node", token: f.token(t, room, "u1", auth.RoleViewer, "http://ingest-2", "ws://edge-1"), body: `{"text":"hi"}`, status: 403, code: "wrong_node"},
		// A token's audience is its address partition (auth.Claims.Ingests).
		badCase{name: "edge-only token", token: f.audienceToken(t, 1, "http://ingest-2", selfAddr), body: `{"text":"hi"}`, status: 403, code: "wrong_node"},
		badCase{name: "token without ni", token: f.audienceToken(t, 0, selfAddr, "ws://edge-1"), body: `{"text":"hi"}`, status: 403, code: "wrong_node"},
		badCase{name: "token with no addresses", token: f.token(t, room, "u1", auth.RoleViewer, []string{}...), body: `{"text":"hi"}`, status: 403, code: "wrong_node"},
	)
	f.runBad(t, barragePath(room), good, cases)
	if es := f.entries(t, room, stream.Barrage); len(es) != 0 {
		t.Errorf("bad requests stored %d messages", len(es))
	}
	for _, m := range []struct{ layer, reason string }{
		{"input", "bad_json"}, {"input", "body_too_large"}, {"input", "empty_text"},
		{"auth", "no_token"}, {"auth", "wrong_room"}, {"auth", "wrong_node"},
	} {
		if rejected(t, f.reg, m.layer, m.reason) == 0 {
			t.Errorf("rejected{layer=%s,reason=%s} not counted", m.layer, m.reason)
		}
	}
	// The controls pass: 60 characters, and JSON followed by white space.
	ok := f.token(t, room, "u2", auth.RoleViewer)
	for _, body := range []string{`{"text":"` + strings.Repeat("字", 60) + `"}`, "{\"text\":\"hi\"}\n"} {
		if rec := f.do(http.MethodPost, barragePath(room), ok, body); rec.Code != http.StatusOK {
			t.Errorf("control %.30q: %d %s", body, rec.Code, rec.Body)
		}
	}
}

// Without Config.Addr the node does not check the address binding.
func TestBarrageNoAddrCheckWithoutAddr(t *testing.T) {
	f := newFixture(t, nil)
	f.barrage(t, f.token(t, room, "u1", auth.RoleViewer, "http://elsewhere"), "hi")
	if n := len(f.entries(t, room, stream.Barrage)); n != 1 {
		t.Fatalf("stored %d, want 1", n)
	}
}

func TestTokenOfAnUnknownEpoch(t *testing.T) {
	f := newFixture(t, nil)
	tok := f.token(t, room, "u1", auth.RoleViewer)
	// Three epochs later the keyring no longer holds the token's secret.
	f.clk.Advance(30 * time.Minute)
	if err := f.ring.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := f.do(http.MethodPost, barragePath(room), tok, `{"text":"hi"}`)
	if rec.Code != http.StatusUnauthorized || errorCode(t, rec) != "token_epoch" {
		t.Fatalf("%d %s, want 401 token_epoch", rec.Code, rec.Body)
	}
}

func TestBarrageStored(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Addr = selfAddr })
	f.barrage(t, f.token(t, room, "u1", auth.RoleViewer), "  hello \t  world\u200b ")
	es := f.entries(t, room, stream.Barrage)
	if len(es) != 1 {
		t.Fatalf("stored %d messages, want 1", len(es))
	}
	m := es[0]
	if m.Kind != wire.KindBarrage || m.User != "u1" || m.Nick != "nick" || m.Avatar != "a1" || m.Text != "hello world" || m.ID == "" {
		t.Errorf("stored %+v", m)
	}
	if n := len(f.entries(t, room, stream.Live)); n != 0 {
		t.Errorf("barrage reached the live lane: %d", n)
	}
	if n := metric(t, f.reg, "danmaku_ingest_accepted_total", map[string]string{"kind": "barrage"}); n != 1 {
		t.Errorf("accepted{kind=barrage} = %v", n)
	}
}

func TestAnnounceBadInput(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Addr = selfAddr })
	host := f.token(t, room, "h1", auth.RoleHost)
	cases := append(textBodyCases(),
		badCase{name: "viewer token", token: f.token(t, room, "u1", auth.RoleViewer), body: `{"text":"hi"}`, status: 403, code: "forbidden"},
		badCase{name: "token for another room", token: f.token(t, "room-2", "h1", auth.RoleHost), body: `{"text":"hi"}`, status: 403, code: "wrong_room"},
		badCase{name: "token for another node", token: f.token(t, room, "h1", auth.RoleHost, "http://ingest-2"), body: `{"text":"hi"}`, status: 403, code: "wrong_node"},
	)
	f.runBad(t, announcePath(room), host, cases)
	if es := f.entries(t, room, stream.Live); len(es) != 0 {
		t.Errorf("bad announcements stored %d messages", len(es))
	}
}

func TestAnnounce(t *testing.T) {
	for _, role := range []string{auth.RoleHost, auth.RoleAdmin} {
		t.Run(role, func(t *testing.T) {
			f := newFixture(t, nil)
			rec := f.do(http.MethodPost, announcePath(room), f.token(t, room, "h1", role), `{"text":"  lottery   at 9 "}`)
			if rec.Code != http.StatusOK {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			var resp struct {
				OK bool   `json:"ok"`
				ID string `json:"id"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || !resp.OK || resp.ID == "" {
				t.Fatalf("response %s", rec.Body)
			}
			es := f.entries(t, room, stream.Live)
			if len(es) != 1 {
				t.Fatalf("live lane holds %d, want 1", len(es))
			}
			m := es[0]
			if m.Kind != wire.KindSystem || m.Role != role || m.Text != "lottery at 9" || m.User != "h1" || m.ID != resp.ID {
				t.Errorf("stored %+v (response id %s)", m, resp.ID)
			}
			if n := len(f.entries(t, room, stream.Barrage)); n != 0 {
				t.Errorf("announcement reached the barrage lane")
			}
		})
	}
}

// A business server announces with an announcement key: no sender, role
// ops. A gift key is not an announcement key.
func TestAnnounceWithServiceKey(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AnnounceKeys = []string{"announce-key"} })
	if rec := f.do(http.MethodPost, announcePath(room), "announce-key", `{"text":"doors open"}`); rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	es := f.entries(t, room, stream.Live)
	if len(es) != 1 || es[0].Role != auth.RoleOps || es[0].User != "" || es[0].Text != "doors open" {
		t.Fatalf("stored %+v", es)
	}
	if rec := f.do(http.MethodPost, announcePath(room), serviceKey, `{"text":"x"}`); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a gift key announced: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(http.MethodPost, announcePath("bad_room!"), "announce-key", `{"text":"x"}`); rec.Code != http.StatusBadRequest && rec.Code != http.StatusNotFound {
		t.Fatalf("bad room: %d %s", rec.Code, rec.Body)
	}
}

// Announcements skip the buckets: a host is never silently dropped.
func TestAnnounceSkipsBuckets(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.RoomBase = 1; c.RoomCeiling = 1 })
	host := f.token(t, room, "h1", auth.RoleHost)
	for i := range 10 {
		if rec := f.do(http.MethodPost, announcePath(room), host, fmt.Sprintf(`{"text":"a%d"}`, i)); rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	if n := len(f.entries(t, room, stream.Live)); n != 10 {
		t.Fatalf("stored %d announcements, want 10", n)
	}
}

// TestAnnounceFastLaneCap: announcements skip the buckets but not the
// room's fast-lane cap: over it, 429 fast_lane_full with Retry-After, and
// the next second takes them again.
func TestAnnounceFastLaneCap(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.FastLaneCap = 5 })
	host := f.token(t, room, "h1", auth.RoleHost)
	for i := range 5 {
		if rec := f.do(http.MethodPost, announcePath(room), host, fmt.Sprintf(`{"text":"a%d"}`, i)); rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	rec := f.do(http.MethodPost, announcePath(room), host, `{"text":"one too many"}`)
	if rec.Code != http.StatusTooManyRequests || errorCode(t, rec) != "fast_lane_full" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("%d %s %v, want 429 fast_lane_full with Retry-After", rec.Code, rec.Body, rec.Header())
	}
	f.clk.Advance(time.Second)
	if rec := f.do(http.MethodPost, announcePath(room), host, `{"text":"next second"}`); rec.Code != http.StatusOK {
		t.Fatalf("next second: %d %s", rec.Code, rec.Body)
	}
	if n := len(f.entries(t, room, stream.Live)); n != 6 {
		t.Fatalf("stored %d announcements, want 6", n)
	}
}

// TestLotteryEntryThroughBarrage: a viewer typing a running lottery's
// keyword enters it (once, however often typed) instead of commenting, and
// skips the buckets.
func TestLotteryEntryThroughBarrage(t *testing.T) {
	clk := clock.NewFake(t0)
	lotteries := NewMemoryLotteryStore(clk)
	f := newFixtureOn(t, clk, stream.NewMemoryStore(clk), func(c *Config) { c.Lotteries = lotteries; c.UserCapacity = 1 })
	if _, err := lotteries.Start(context.Background(), Lottery{ID: "l1", Room: room, Keyword: "抽奖", Until: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Lotteries().Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	tok := f.token(t, room, "u1", auth.RoleViewer)
	for range 3 {
		rec := f.do(http.MethodPost, barragePath(room), tok, `{"text":"抽奖"}`)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"lottery":"l1"`) {
			t.Fatalf("%d %s, want an entry of l1", rec.Code, rec.Body)
		}
	}
	if n, err := lotteries.Count(context.Background(), room, "l1"); err != nil || n != 1 {
		t.Fatalf("count %d, %v; want 1", n, err)
	}
	// The user's bucket (1) was not spent by the entries.
	f.barrage(t, tok, "an ordinary comment")
	if n := len(f.entries(t, room, stream.Barrage)); n != 2 {
		t.Fatalf("barrage lane holds %d, want the one shown entry and the comment", n)
	}

	// A banned user's keyword is dropped like any comment of theirs: no
	// entry, nothing shown.
	if err := f.srv.BanStore().Put(context.Background(), Ban{User: "u2", At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Bans().Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := f.do(http.MethodPost, barragePath(room), f.token(t, room, "u2", auth.RoleViewer), `{"text":"抽奖"}`)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "lottery") {
		t.Fatalf("banned entrant: %d %s, want a silent drop", rec.Code, rec.Body)
	}
	if n, err := lotteries.Count(context.Background(), room, "l1"); err != nil || n != 1 {
		t.Fatalf("count after a banned entrant %d, %v; want 1", n, err)
	}
}

func TestUserBucket(t *testing.T) {
	f := newFixture(t, nil)
	tok := f.token(t, room, "u1", auth.RoleViewer)
	other := f.token(t, room, "u2", auth.RoleViewer)
	stored := func() int { return len(f.entries(t, room, stream.Barrage)) }

	for i := range 4 {
		f.barrage(t, tok, fmt.Sprintf("m%d", i)) // 200 {"ok":true} every time
	}
	if n := stored(); n != 3 {
		t.Fatalf("stored %d of 4 sent in one instant, want 3", n)
	}
	if got := rejected(t, f.reg, "gateway", "user_bucket"); got != 1 {
		t.Errorf("registry: rejected{gateway,user_bucket} = %v, want 1", got)
	}
	if got := metric(t, f.reg, "danmaku_ingest_bucket_overflow_total", map[string]string{"bucket": "user"}); got != 1 {
		t.Errorf("overflow{bucket=user} = %v, want 1", got)
	}
	for _, m := range f.entries(t, room, stream.Barrage) {
		if m.Text == "m3" {
			t.Error("the dropped 4th message is in the stream")
		}
	}

	// Another user is not affected.
	f.barrage(t, other, "other")
	if n := stored(); n != 4 {
		t.Fatalf("stored %d after another user's message, want 4", n)
	}

	// Not yet a whole token after 1 s; one after 1.5 s, and only one.
	f.clk.Advance(time.Second)
	f.barrage(t, tok, "early")
	if n := stored(); n != 4 {
		t.Fatalf("a message 1 s later passed (stored %d)", n)
	}
	f.clk.Advance(500 * time.Millisecond)
	f.barrage(t, tok, "refilled")
	f.barrage(t, tok, "too soon")
	es := f.entries(t, room, stream.Barrage)
	if len(es) != 5 || es[4].Text != "refilled" {
		t.Fatalf("after 1.5 s: stored %d, last %+v; want the refilled one only", len(es), es[len(es)-1])
	}
	if got := rejected(t, f.reg, "gateway", "user_bucket"); got != 3 {
		t.Errorf("rejected{gateway,user_bucket} = %v, want 3", got)
	}

	// A long pause (within the token's lifetime) refills to capacity, not beyond.
	f.clk.Advance(5 * time.Minute)
	for i := range 5 {
		f.barrage(t, tok, fmt.Sprintf("burst%d", i))
	}
	if n := stored(); n != 8 {
		t.Fatalf("stored %d after a burst of 5, want 8 (capacity 3)", n)
	}
}

func TestRoomBucketFollowsOnline(t *testing.T) {
	type report struct {
		load  loadtable.NodeLoad
		rooms map[string]int
	}
	for _, tc := range []struct {
		name    string
		base    float64
		ceiling float64
		reports []report
		want    int // of 30 senders
	}{
		{"nobody online", 2, 1000, nil, 2},
		{"80 online over two edges", 2, 1000, []report{
			{loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge}, map[string]int{room: 50, "other": 800}},
			{loadtable.NodeLoad{ID: "e2", Kind: loadtable.KindEdge}, map[string]int{room: 30}},
		}, 12}, // 80/8 + 2
		{"capped by the ceiling", 2, 7, []report{
			{loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge}, map[string]int{room: 8000}},
		}, 7},
		{"ingest reports do not count", 2, 1000, []report{
			{loadtable.NodeLoad{ID: "i1", Kind: loadtable.KindIngest}, map[string]int{room: 800}},
		}, 2},
		{"a silent edge does not count", 2, 1000, []report{
			{loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge, At: t0.Add(-time.Minute)}, map[string]int{room: 800}},
		}, 2},
		{"an edge not in the load table does not count", 2, 1000, []report{
			{loadtable.NodeLoad{}, map[string]int{room: 800}},
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *Config) {
				c.RoomBase = tc.base
				c.RoomCeiling = tc.ceiling
				c.RoomRefill = 0.001 // nothing refills within the test
			})
			for i, r := range tc.reports {
				l := r.load
				if l.At.IsZero() {
					l.At = f.clk.Now()
				}
				if l.ID != "" {
					if err := f.table.Report(context.Background(), l); err != nil {
						t.Fatal(err)
					}
				}
				node := l.ID
				if node == "" {
					node = fmt.Sprintf("gone-%d", i)
				}
				if err := f.table.ReportOnline(context.Background(), node, r.rooms); err != nil {
					t.Fatal(err)
				}
			}
			f.srv.syncOnline(context.Background())
			for i := range 30 {
				f.barrage(t, f.token(t, room, fmt.Sprintf("u%d", i), auth.RoleViewer), fmt.Sprintf("hi %d", i))
			}
			if n := len(f.entries(t, room, stream.Barrage)); n != tc.want {
				t.Fatalf("stored %d of 30, want %d", n, tc.want)
			}
			if got := rejected(t, f.reg, "gateway", "room_bucket"); got != float64(30-tc.want) {
				t.Errorf("rejected{gateway,room_bucket} = %v, want %d", got, 30-tc.want)
			}
			if got := rejected(t, f.reg, "gateway", "user_bucket"); got != 0 {
				t.Errorf("user bucket dropped %v", got)
			}
		})
	}
}

// Run reports the node into the load table, picks up the edges' online
// counts, and removes the node when it stops.
func TestRunReportsAndSyncsOnline(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Addr = selfAddr; c.Line = "A"; c.RoomBase = 2 })
	if err := f.table.Report(context.Background(), loadtable.NodeLoad{ID: "e1", Kind: loadtable.KindEdge, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := f.table.ReportOnline(context.Background(), "e1", map[string]int{room: 800}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Run(ctx) }()
	reported := func() *loadtable.NodeLoad {
		ls, _ := f.table.Snapshot(context.Background())
		for _, l := range ls {
			if l.ID == selfAddr {
				return &l
			}
		}
		return nil
	}
	// Wait, without asserting how long, for the first report and sync.
	for reported() == nil || f.srv.roomCapacity(room, f.srv.cfg.RoomCeiling) != 102 {
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	l := reported()
	if l.Kind != loadtable.KindIngest || l.Addr != selfAddr || l.Line != "A" || !l.At.Equal(t0) {
		t.Errorf("report = %+v", l)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if reported() != nil {
		t.Error("node still in the load table after Run returned")
	}
}

// flakyStore fails Append while broken is set.
type flakyStore struct {
	stream.Store
	broken atomic.Bool
}

func (s *flakyStore) Append(ctx context.Context, key stream.Key, msgs []wire.Message) ([]wire.Message, error) {
	if s.broken.Load() {
		return nil, errors.New("stream down")
	}
	return s.Store.Append(ctx, key, msgs)
}

// flakyGifts fails AppendGift while broken is set: before appending, or,
// with landed also set, after appending (the answer lost on the way back, as
// with a Redis timeout after the script ran).
type flakyGifts struct {
	GiftLog
	broken, landed atomic.Bool
}

func (g *flakyGifts) AppendGift(ctx context.Context, room, orderID string, m wire.Message) (string, bool, error) {
	if !g.broken.Load() {
		return g.GiftLog.AppendGift(ctx, room, orderID, m)
	}
	if g.landed.Load() {
		if _, _, err := g.GiftLog.AppendGift(ctx, room, orderID, m); err != nil {
			return "", false, err
		}
	}
	return "", false, errors.New("gift log down")
}

// newFlakyFixture is a fixture whose stream store and gift log fail on demand.
func newFlakyFixture(t *testing.T) (*fixture, *flakyStore, *flakyGifts) {
	t.Helper()
	clk := clock.NewFake(t0)
	mem := stream.NewMemoryStore(clk)
	gifts, err := NewMemoryGiftLog(MemoryGiftLogConfig{Streams: mem, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	flaky, flakyG := &flakyStore{Store: mem}, &flakyGifts{GiftLog: gifts}
	f := newFixtureOn(t, clk, mem, func(c *Config) {
		c.Streams, c.Gifts = flaky, flakyG
		// A comment admitted by the node's share waits this long for the
		// gate before its 503.
		c.Hold = 50 * time.Millisecond
	})
	return f, flaky, flakyG
}

func TestBackendErrors(t *testing.T) {
	f, flaky, flakyG := newFlakyFixture(t)
	flaky.broken.Store(true)
	flakyG.broken.Store(true)
	for _, tc := range []struct {
		name, path, token, body string
	}{
		{"barrage", barragePath(room), f.token(t, room, "u1", auth.RoleViewer), `{"text":"hi"}`},
		{"announce", announcePath(room), f.token(t, room, "h1", auth.RoleHost), `{"text":"hi"}`},
		{"gift", "/v1/gifts", serviceKey, giftBody(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(http.MethodPost, tc.path, tc.token, tc.body)
			if rec.Code != http.StatusServiceUnavailable || errorCode(t, rec) != "backend_unavailable" {
				t.Fatalf("%d %s, want 503 backend_unavailable", rec.Code, rec.Body)
			}
			if rec.Header().Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
		})
	}
	// The failed gift was not stored: the retry stores it.
	flaky.broken.Store(false)
	flakyG.broken.Store(false)
	rec := f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"duplicate":false`) {
		t.Fatalf("gift retry: %d %s", rec.Code, rec.Body)
	}
	if n := len(f.entries(t, room, stream.Live)); n != 1 {
		t.Fatalf("live lane holds %d, want the one retried gift", n)
	}
}

// TestGiftRetryAfterAmbiguousError is the case the gift log exists for: the
// gift was stored but the answer was lost, so the business server saw a 503
// and retries. The retry answers the stored id and stores nothing.
func TestGiftRetryAfterAmbiguousError(t *testing.T) {
	f, _, flakyG := newFlakyFixture(t)
	flakyG.broken.Store(true)
	flakyG.landed.Store(true)
	for range 3 { // the business server retries while the backend flaps
		rec := f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(nil))
		if rec.Code != http.StatusServiceUnavailable || errorCode(t, rec) != "backend_unavailable" || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("%d %s %v, want 503 backend_unavailable with Retry-After", rec.Code, rec.Body, rec.Header())
		}
	}
	flakyG.broken.Store(false)
	g := decodeGift(t, f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(nil)))
	es := f.entries(t, room, stream.Live)
	if len(es) != 1 {
		t.Fatalf("live lane holds %d entries for one order, want 1", len(es))
	}
	if !g.Duplicate || g.ID != es[0].ID {
		t.Fatalf("retry answered %+v, want the stored id %s as a duplicate", g, es[0].ID)
	}
	// The gift API's own answers tell its 5xx from the uploads'.
	for status, want := range map[string]float64{"503": 3, "200": 1} {
		if n := metric(t, f.reg, "danmaku_ingest_gift_answers_total", map[string]string{"status": status}); n != want {
			t.Errorf("gift_answers{status=%s} = %v, want %v", status, n, want)
		}
	}
}

// giftBody is a valid gift request with fields overridden by mod.
func giftBody(mod func(map[string]any)) string {
	g := map[string]any{
		"order_id": "order-1", "room": room, "user": "u1", "nick": "nick", "avatar": "a1",
		"gift": "rocket", "value": 500, "count": 2,
	}
	if mod != nil {
		mod(g)
	}
	b, _ := json.Marshal(g)
	return string(b)
}

func set(k string, v any) func(map[string]any) { return func(g map[string]any) { g[k] = v } }
func del(k string) func(map[string]any)        { return func(g map[string]any) { delete(g, k) } }

func TestGiftBadInput(t *testing.T) {
	f := newFixture(t, nil)
	long := func(n int) string { return strings.Repeat("x", n) }
	f.runBad(t, "/v1/gifts", serviceKey, []badCase{
		{name: "no service key", token: "-", body: giftBody(nil), status: 401, code: "bad_service_key"},
		{name: "wrong service key", token: "svc-key-012345678", body: giftBody(nil), status: 401, code: "bad_service_key"},
		{name: "viewer token as service key", token: f.token(t, room, "u1", auth.RoleViewer), body: giftBody(nil), status: 401, code: "bad_service_key"},
		{name: "malformed JSON", body: `{"order_id":`, status: 400, code: "bad_json"},
		{name: "empty body", body: ``, status: 400, code: "bad_json"},
		{name: "trailing garbage", body: giftBody(nil) + `]`, status: 400, code: "bad_json"},
		{name: "unknown field", body: giftBody(set("price", 1)), status: 400, code: "bad_json"},
		{name: "value a string", body: giftBody(set("value", "x")), status: 400, code: "bad_json"},
		{name: "value a float", body: giftBody(set("value", 1.5)), status: 400, code: "bad_json"},
		{name: "count negative", body: giftBody(set("count", -1)), status: 400, code: "bad_json"},
		{name: "count beyond uint32", body: giftBody(set("count", 1<<33)), status: 400, code: "bad_json"},
		{name: "room a number", body: giftBody(set("room", 5)), status: 400, code: "bad_json"},
		{name: "oversized body", body: giftBody(set("nick", long(5000))), status: 413, code: "body_too_large"},
		{name: "empty object", body: `{}`, status: 400, code: "bad_field"},
		{name: "null body", body: `null`, status: 400, code: "bad_field"},
		{name: "order_id missing", body: giftBody(del("order_id")), status: 400, code: "bad_field"},
		{name: "order_id too long", body: giftBody(set("order_id", long(65))), status: 400, code: "bad_field"},
		{name: "room missing", body: giftBody(del("room")), status: 400, code: "bad_field"},
		{name: "room invalid", body: giftBody(set("room", "a/b")), status: 400, code: "bad_field"},
		{name: "room too long", body: giftBody(set("room", long(65))), status: 400, code: "bad_field"},
		{name: "user missing", body: giftBody(del("user")), status: 400, code: "bad_field"},
		{name: "user too long", body: giftBody(set("user", long(65))), status: 400, code: "bad_field"},
		{name: "gift missing", body: giftBody(del("gift")), status: 400, code: "bad_field"},
		{name: "gift too long", body: giftBody(set("gift", long(33))), status: 400, code: "bad_field"},
		{name: "value missing", body: giftBody(del("value")), status: 400, code: "bad_field"},
		{name: "value null", body: giftBody(set("value", nil)), status: 400, code: "bad_field"},
		{name: "value negative", body: giftBody(set("value", -1)), status: 400, code: "bad_field"},
		{name: "count too large", body: giftBody(set("count", 100001)), status: 400, code: "bad_field"},
		{name: "user with NUL", body: giftBody(set("user", "fan\x00x")), status: 400, code: "bad_field"},
		{name: "user with newline", body: giftBody(set("user", "fan\nx")), status: 400, code: "bad_field"},
		{name: "user with bidi override", body: giftBody(set("user", "fan\u202ex")), status: 400, code: "bad_field"},
		{name: "user with zero-width space", body: giftBody(set("user", "fan\u200bx")), status: 400, code: "bad_field"},
		{name: "order_id with control", body: giftBody(set("order_id", "o\x01")), status: 400, code: "bad_field"},
		{name: "gift with bidi override", body: giftBody(set("gift", "rock\u202eet")), status: 400, code: "bad_field"},
		{name: "avatar with space", body: giftBody(set("avatar", "a b")), status: 400, code: "bad_field"},
		{name: "avatar too long", body: giftBody(set("avatar", long(33))), status: 400, code: "bad_field"},
	})
	if n := len(f.entries(t, room, stream.Live)); n != 0 {
		t.Errorf("bad gifts stored %d messages", n)
	}
	// The boundaries pass.
	for name, body := range map[string]string{
		"longest fields": giftBody(func(g map[string]any) {
			g["order_id"], g["room"], g["user"], g["gift"], g["nick"], g["avatar"] = long(64), long(64), long(64), long(32), long(64), long(32)
		}),
		"free gift, count omitted": giftBody(func(g map[string]any) { g["order_id"] = "o2"; g["value"] = 0; delete(g, "count") }),
		"max count":                giftBody(func(g map[string]any) { g["order_id"] = "o3"; g["count"] = 100000 }),
	} {
		if rec := f.do(http.MethodPost, "/v1/gifts", serviceKey, body); rec.Code != http.StatusOK {
			t.Errorf("control %s: %d %s", name, rec.Code, rec.Body)
		}
	}
}

func TestGiftNoServiceKeysConfigured(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.GiftKeys = nil })
	for _, key := range []string{"", serviceKey, "anything"} {
		rec := f.do(http.MethodPost, "/v1/gifts", key, giftBody(nil))
		if rec.Code != http.StatusUnauthorized || errorCode(t, rec) != "bad_service_key" {
			t.Errorf("key %q: %d %s", key, rec.Code, rec.Body)
		}
	}
	// An empty key in the list never matches an empty bearer.
	f = newFixture(t, func(c *Config) { c.GiftKeys = []string{""} })
	if rec := f.do(http.MethodPost, "/v1/gifts", "", giftBody(nil)); rec.Code != http.StatusUnauthorized {
		t.Errorf("empty key list entry accepted an empty bearer: %d", rec.Code)
	}
}

type giftResponse struct {
	OK        bool   `json:"ok"`
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

func decodeGift(tb testing.TB, rec *httptest.ResponseRecorder) giftResponse {
	tb.Helper()
	var g giftResponse
	if rec.Code != http.StatusOK {
		tb.Fatalf("gift: %d %s", rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &g); err != nil || !g.OK || g.ID == "" {
		tb.Fatalf("gift response %s", rec.Body)
	}
	return g
}

// TestGiftOrderConflict: an order id reused with another user, gift, value
// or count is a coded 409 naming what differs, and stores nothing; the same
// body again stays a 200 duplicate, a newer nickname or avatar too.
func TestGiftOrderConflict(t *testing.T) {
	f := newFixture(t, nil)
	first := decodeGift(t, f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(nil)))
	for _, c := range []struct {
		name  string
		mod   func(map[string]any)
		names string
	}{
		{"another user", set("user", "u2"), "differs in user"},
		{"another gift", set("gift", "rose"), "differs in gift"},
		{"another value", set("value", 1), "differs in value"},
		{"another count", set("count", 3), "differs in count"},
		{"another room", set("room", "room-2"), `first used in room room-1, not room-2`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(c.mod))
			if c.name == "another room" {
				if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), `"code":"order_conflict"`) || !strings.Contains(rec.Body.String(), c.names) {
					t.Fatalf("%d %s, want 409 order_conflict naming the first room", rec.Code, rec.Body)
				}
				return
			}
			if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), `"code":"order_conflict"`) ||
				!strings.Contains(rec.Body.String(), c.names) || !strings.Contains(rec.Body.String(), `user \"u1\", gift \"rocket\", value 500, count 2`) {
				t.Fatalf("%d %s, want 409 order_conflict naming the first gift and %q", rec.Code, rec.Body, c.names)
			}
		})
	}
	for _, mod := range []func(map[string]any){nil, set("nick", "newer"), set("avatar", "a2")} {
		if again := decodeGift(t, f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(mod))); !again.Duplicate || again.ID != first.ID {
			t.Fatalf("a retry answered %+v, want duplicate %s", again, first.ID)
		}
	}
	if n := len(f.entries(t, room, stream.Live)); n != 1 {
		t.Fatalf("live lane holds %d, want the first gift alone", n)
	}
	if n := metric(t, f.reg, "danmaku_ingest_rejected_total", map[string]string{"layer": "gift", "reason": "order_conflict"}); n != 5 {
		t.Errorf("rejected{gift, order_conflict} = %v, want 5", n)
	}
}

func TestGiftIdempotent(t *testing.T) {
	f := newFixture(t, nil)
	first := decodeGift(t, f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(nil)))
	f.clk.Advance(time.Minute)
	again := decodeGift(t, f.do(http.MethodPost, "/v1/gifts", "old-key", giftBody(nil)))
	if first.Duplicate || !again.Duplicate || first.ID != again.ID {
		t.Fatalf("first %+v, again %+v: want the same id, the second a duplicate", first, again)
	}
	es := f.entries(t, room, stream.Live)
	if len(es) != 1 {
		t.Fatalf("live lane holds %d, want 1", len(es))
	}
	m := es[0]
	if m.Kind != wire.KindGift || m.ID != first.ID || m.User != "u1" || m.Gift != "rocket" || m.Value != 500 || m.Count != 2 || m.Order != "order-1" {
		t.Errorf("stored %+v", m)
	}
	// The same order id in another room is not another order: 409
	// (TestGiftOrderConflict).
	if rec := f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(set("room", "room-2"))); rec.Code != http.StatusConflict {
		t.Errorf("same order id in another room: %d %s, want 409 order_conflict", rec.Code, rec.Body)
	}
	// Gifts skip the buckets and are never silently dropped.
	for i := range 20 {
		decodeGift(t, f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(set("order_id", fmt.Sprintf("burst-%d", i)))))
	}
	if n := len(f.entries(t, room, stream.Live)); n != 21 {
		t.Fatalf("live lane holds %d, want 21", n)
	}
	if n := metric(t, f.reg, "danmaku_ingest_accepted_total", map[string]string{"kind": "gift"}); n != 21 {
		t.Errorf("accepted{kind=gift} = %v, want 21", n)
	}
	// After the order TTL the id is forgotten.
	f.clk.Advance(25 * time.Hour)
	if g := decodeGift(t, f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(nil))); g.Duplicate {
		t.Error("order still deduplicated after its TTL")
	}
}

func TestGiftCountDefaultsToOne(t *testing.T) {
	f := newFixture(t, nil)
	decodeGift(t, f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(del("count"))))
	if es := f.entries(t, room, stream.Live); len(es) != 1 || es[0].Count != 1 {
		t.Fatalf("stored %+v, want count 1", es)
	}
}

func TestGiftConcurrentSameOrder(t *testing.T) {
	f := newFixture(t, nil)
	const n = 32
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		recs  [n]*httptest.ResponseRecorder
	)
	for i := range n {
		wg.Go(func() {
			<-start
			recs[i] = f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(nil))
		})
	}
	close(start)
	wg.Wait()

	es := f.entries(t, room, stream.Live)
	if len(es) != 1 {
		t.Fatalf("live lane holds %d entries for one order, want 1", len(es))
	}
	// Every call answers: the one that appended, and the others with its id.
	originals := 0
	for _, rec := range recs {
		g := decodeGift(t, rec)
		if g.ID != es[0].ID {
			t.Errorf("response id %s, stored %s", g.ID, es[0].ID)
		}
		if !g.Duplicate {
			originals++
		}
	}
	if originals != 1 {
		t.Errorf("%d responses claim to be the original, want 1", originals)
	}
}

func TestRoutes(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, barragePath(room), 405, "method_not_allowed"},
		{http.MethodGet, "/v1/gifts", 405, "method_not_allowed"},
		{http.MethodPost, "/v1/rooms/" + room, 404, "not_found"},
	} {
		rec := f.do(tc.method, tc.path, "", "")
		if rec.Code != tc.status || errorCode(t, rec) != tc.code {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, rec.Code, rec.Body)
		}
	}
	f.do(http.MethodPost, barragePath(room), "", `{"text":"hi"}`) // one counted rejection
	rec := f.do(http.MethodGet, "/metrics", "", "")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `danmaku_ingest_rejected_total{event="other",layer="auth",reason="no_token",room="other"} 1`) {
		t.Errorf("/metrics: %d %.300s", rec.Code, rec.Body)
	}
}

func TestConfig(t *testing.T) {
	clk := clock.NewFake(t0)
	store := stream.NewMemoryStore(clk)
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: auth.NewMemorySecrets(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"minimal", Config{Streams: store, Keyring: ring}, true},
		{"no streams", Config{Keyring: ring}, false},
		{"no keyring", Config{Streams: store}, false},
		{"gift log given", Config{Streams: &flakyStore{Store: store}, Keyring: ring, Gifts: &flakyGifts{}}, true},
		{"no gift log for a store not in memory", Config{Streams: &flakyStore{Store: store}, Keyring: ring}, false},
		{"user capacity under 1", Config{Streams: store, Keyring: ring, UserCapacity: 0.5}, false},
		{"negative refill", Config{Streams: store, Keyring: ring, UserRefill: -1}, false},
		{"ceiling under base", Config{Streams: store, Keyring: ring, RoomBase: 100, RoomCeiling: 10}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Registerer = prometheus.NewRegistry()
			_, err := New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New: err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// FuzzBarrageBody: whatever the body, the answer is never 5xx and always
// JSON; errors carry a code.
func FuzzBarrageBody(f *testing.F) {
	fx := newFixture(f, func(c *Config) {
		c.UserCapacity = 1e9 // exercise the append path, not only the drop
		c.RoomBase = 1e9
		c.RoomCeiling = 1e9
	})
	tok := fx.token(f, room, "u1", auth.RoleViewer)
	for _, s := range []string{
		`{"text":"hi"}`, ``, `{`, `null`, `{"text":5}`, `{"text":"hi"} x`, `{"text":"a\u0000b"}`,
		`{"text":"\u200b"}`, "{\"text\":\"\xff\xfe\"}", `{"text":"` + strings.Repeat("a", 5000) + `"}`,
		`{"text":"hi","x":1}`, `[]`, `"text"`, `{"TEXT":"hi"}`, `{"text":"e\u0301"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, barragePath(room), bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		fx.engine.ServeHTTP(rec, req)
		checkFuzzResponse(t, rec)
		if rec.Code == http.StatusOK && strings.TrimSpace(rec.Body.String()) != `{"ok":true}` {
			t.Fatalf("200 with body %s", rec.Body)
		}
	})
}

// FuzzGiftBody: like FuzzBarrageBody for the gift API.
func FuzzGiftBody(f *testing.F) {
	fx := newFixture(f, nil)
	for _, s := range []string{
		giftBody(nil), giftBody(del("value")), giftBody(set("value", "x")), ``, `{`, `null`, `{}`,
		giftBody(set("count", -1)), giftBody(set("room", "a b")), giftBody(nil) + `x`,
		`{"order_id":"o","room":"r","user":"u","gift":"g","value":0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/gifts", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+serviceKey)
		rec := httptest.NewRecorder()
		fx.engine.ServeHTTP(rec, req)
		checkFuzzResponse(t, rec)
		if rec.Code == http.StatusOK {
			var g giftResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &g); err != nil || !g.OK || g.ID == "" {
				t.Fatalf("200 with body %s", rec.Body)
			}
		}
	})
}

func checkFuzzResponse(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("status %d with a non-JSON body %q", rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		errorCode(t, rec)
	}
}

// BenchmarkBarrage measures barrage requests per second through the gin
// handler, many users over many rooms, on the real clock so buckets refill
// as in production (most requests beyond the room budgets are silent drops).
func BenchmarkBarrage(b *testing.B) {
	f := newFixtureOn(b, clock.Real{}, stream.NewMemoryStore(nil), func(c *Config) { c.Addr = selfAddr })
	const users, rooms = 4096, 64
	type sender struct{ path, auth string }
	senders := make([]sender, users)
	for i := range senders {
		rm := fmt.Sprintf("room-%d", i%rooms)
		senders[i] = sender{barragePath(rm), "Bearer " + f.token(b, rm, fmt.Sprintf("user-%d", i), auth.RoleViewer)}
	}
	body := []byte(`{"text":"好听！encore  encore"}`)
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(worker.Add(1)) * 7919
		for pb.Next() {
			s := senders[i%users]
			i++
			req := httptest.NewRequest(http.MethodPost, s.path, bytes.NewReader(body))
			req.Header.Set("Authorization", s.auth)
			rec := httptest.NewRecorder()
			f.engine.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("%d %s", rec.Code, rec.Body)
				return
			}
		}
	})
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "req/s")
	}
}

// TestEntryThenBarrage runs the client's path over real HTTP servers on
// random ports: the entry endpoint hands out this node's address and a token
// bound to it, and the node accepts a comment with that token.
func TestEntryThenBarrage(t *testing.T) {
	clk := clock.NewFake(time.Now()) // MintTicket stamps tickets with time.Now
	store := stream.NewMemoryStore(clk)

	var ingestHandler atomic.Pointer[http.Handler]
	ingestHTTP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*ingestHandler.Load()).ServeHTTP(w, r)
	}))
	defer ingestHTTP.Close()

	f := newFixtureOn(t, clk, store, func(c *Config) { c.Addr = ingestHTTP.URL })
	var h http.Handler = f.engine
	ingestHandler.Store(&h)

	// The node and one edge report into the load table the allocator reads.
	self := f.srv.Load()
	self.At = clk.Now()
	for _, l := range []loadtable.NodeLoad{self, {ID: "e1", Kind: loadtable.KindEdge, Addr: "ws://edge-1", At: clk.Now()}} {
		if err := f.table.Report(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	alloc, err := gslb.NewAllocator(gslb.AllocatorConfig{Table: f.table, Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := alloc.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	tickets, err := auth.NewTicketVerifier(auth.DevTicketKey, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	entrySrv, err := gslb.NewServer(gslb.ServerConfig{Allocator: alloc, Keyring: f.ring, Tickets: tickets, CDN: "http://cdn/", Clock: clk, Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	entryEngine := httpx.NewEngine(httpx.EngineConfig{Role: "gslb", Logger: discard})
	entrySrv.Register(entryEngine)
	gslbHTTP := httptest.NewServer(entryEngine)
	defer gslbHTTP.Close()

	ticket, err := auth.MintTicket(auth.DevTicketKey, "viewer-1", auth.Ticket{Nick: "Ann"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, gslbHTTP.URL+"/v1/entry?room="+room, nil)
	req.Header.Set("Authorization", "Bearer "+ticket)
	resp, err := gslbHTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var entry gslb.Entry
	err = json.NewDecoder(resp.Body).Decode(&entry)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("entry: %d %v", resp.StatusCode, err)
	}
	if len(entry.Ingest) != 1 || entry.Ingest[0] != ingestHTTP.URL {
		t.Fatalf("entry ingest = %v, want [%s]", entry.Ingest, ingestHTTP.URL)
	}

	req, _ = http.NewRequest(http.MethodPost, entry.Ingest[0]+barragePath(room), strings.NewReader(`{"text":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+entry.Token)
	resp, err = ingestHTTP.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("barrage: %d %s", resp.StatusCode, body)
	}
	es := f.entries(t, room, stream.Barrage)
	if len(es) != 1 || es[0].User != "viewer-1" || es[0].Nick != "Ann" || es[0].Text != "hello" {
		t.Fatalf("stored %+v", es)
	}
}

// TestOnlyLiveRooms: barrage, announcements and gifts reach only rooms of a
// live event; the others get a code, and nothing is stored.
func TestOnlyLiveRooms(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		dir, err := event.DirectoryOf(c.Clock,
			event.Event{ID: "live", Start: t0.Add(-time.Minute), End: t0.Add(time.Hour), Rooms: []event.Room{{ID: room}}},
			event.Event{ID: "later", Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour), Rooms: []event.Room{{ID: "encore"}}})
		if err != nil {
			t.Fatal(err)
		}
		c.Events = dir
	})
	for _, tc := range []struct {
		name, path, token, body string
		status                  int
		code                    string
	}{
		{"barrage, live room", barragePath(room), f.token(t, room, "u1", auth.RoleViewer), `{"text":"hi"}`, 200, ""},
		{"barrage, no event", barragePath("nowhere"), f.token(t, "nowhere", "u1", auth.RoleViewer), `{"text":"hi"}`, 404, "no_such_room"},
		{"announce, not started", announcePath("encore"), f.token(t, "encore", "h1", auth.RoleHost), `{"text":"hi"}`, 409, "room_not_live"},
		{"gift, no event", "/v1/gifts", serviceKey, giftBody(func(m map[string]any) { m["room"] = "nowhere" }), 404, "no_such_room"},
		{"gift, not started", "/v1/gifts", serviceKey, giftBody(func(m map[string]any) { m["room"] = "encore" }), 409, "room_not_live"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(http.MethodPost, tc.path, tc.token, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tc.status)
			}
			if tc.code != "" && !strings.Contains(rec.Body.String(), `"`+tc.code+`"`) {
				t.Fatalf("body %s, want code %s", rec.Body, tc.code)
			}
		})
	}
	for _, r := range []string{"nowhere", "encore"} {
		if n := len(f.entries(t, r, stream.Live)) + len(f.entries(t, r, stream.Barrage)); n != 0 {
			t.Errorf("room %s stored %d messages", r, n)
		}
	}
}

// TestEventLimits: a room's event may set its own upload limits; the
// per-user bucket of this room then holds its burst, not the node's.
func TestEventLimits(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		dir, err := event.DirectoryOf(c.Clock, event.Event{ID: "ev", Start: t0.Add(-time.Minute), End: t0.Add(time.Hour),
			Rooms: []event.Room{{ID: room, Limits: &event.Limits{UserBurst: 1, UserEveryMs: 60_000}}}})
		if err != nil {
			t.Fatal(err)
		}
		c.Events = dir
	})
	tok := f.token(t, room, "u1", auth.RoleViewer)
	for i := range 3 {
		if rec := f.do(http.MethodPost, barragePath(room), tok, fmt.Sprintf(`{"text":"m%d"}`, i)); rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	if n := len(f.entries(t, room, stream.Barrage)); n != 1 {
		t.Fatalf("stored %d of 3 with a burst of 1, want 1", n)
	}
	if l, _ := f.srv.limits(room); l.userCap != 1 || l.userPerSec != 1.0/60 || l.roomRefill != f.srv.cfg.RoomRefill {
		t.Fatalf("limits %+v", l)
	}
}

// fullBacklog is a GiftBacklog whose rooms are all over their bound.
type fullBacklog struct{}

func (fullBacklog) Admit(context.Context, string, float64) (float64, bool, error) {
	return 95, false, nil
}

// TestGiftBacklog: over the room's gift backlog bound a new order gets 429
// gift_backlog with Retry-After and is not stored; the business server
// retries it later with the same order id.
func TestGiftBacklog(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.GiftBacklog = fullBacklog{} })
	rec := f.do(http.MethodPost, "/v1/gifts", serviceKey, giftBody(nil))
	if rec.Code != http.StatusTooManyRequests || errorCode(t, rec) != "gift_backlog" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("%d %s %v, want 429 gift_backlog with Retry-After", rec.Code, rec.Body, rec.Header())
	}
	if n := len(f.entries(t, room, stream.Live)); n != 0 {
		t.Fatalf("live lane holds %d, want nothing", n)
	}
}

package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
	"danmaku/internal/httpx"
	"danmaku/internal/ratelimit"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// server is a gin engine with the limiter on /v1/entry, /v1/rooms/:room/x
// and /v1/admin/*; each handler answers whether the request came near.
type server struct {
	lim *ratelimit.Limiter
	clk *clock.Fake
	reg *prometheus.Registry
	e   *gin.Engine
}

func newServer(t *testing.T, cfg ratelimit.Config) *server {
	t.Helper()
	s := &server{clk: clock.NewFake(time.Unix(1_700_000_000, 0)), reg: prometheus.NewRegistry()}
	if cfg.Clock == nil {
		cfg.Clock = s.clk
	}
	cfg.Registerer, cfg.Logger = s.reg, quiet
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.lim = lim
	s.e = httpx.NewEngine(httpx.EngineConfig{Role: "test", Logger: quiet, TrustedProxies: []string{trustedProxy}})
	mw := lim.Handler(func(c *gin.Context) ratelimit.Identity {
		return ratelimit.Identity{User: c.GetHeader("X-Verified-User")}
	})
	h := func(c *gin.Context) {
		rule, near := ratelimit.Near(c)
		c.JSON(http.StatusOK, gin.H{"near": near, "rule": rule})
	}
	s.e.GET("/v1/entry", mw, h)
	s.e.POST("/v1/rooms/:room/x", mw, h)
	s.e.GET("/v1/admin/things", mw, h)
	return s
}

type reply struct {
	code       int
	near       bool
	retryAfter int
	errCode    string
}

// trustedProxy is the one balancer newServer's engine believes.
const trustedProxy = "192.0.2.1"

// do sends a request through the trusted proxy for the client at ip.
func (s *server) do(method, target, ip string, hdr ...string) reply {
	return s.doFrom(method, target, trustedProxy+":1234", ip, hdr...)
}

// doFrom sends a request whose TCP peer is peer ("host:port"), carrying
// X-Forwarded-For xff unless it is empty.
func (s *server) doFrom(method, target, peer, xff string, hdr ...string) reply {
	req := httptest.NewRequest(method, target, nil)
	req.RemoteAddr = peer
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	s.e.ServeHTTP(rec, req)
	r := reply{code: rec.Code}
	var body struct {
		Near  bool `json:"near"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	r.near, r.errCode = body.Near, body.Error.Code
	r.retryAfter, _ = strconv.Atoi(rec.Header().Get("Retry-After"))
	return r
}

func rules(t *testing.T, doc string) ratelimit.Rules {
	t.Helper()
	r, err := ratelimit.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func counter(t *testing.T, reg *prometheus.Registry, rule, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "danmaku_ratelimit_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			if ls["rule"] == rule && ls["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestLocalRule(t *testing.T) {
	s := newServer(t, ratelimit.Config{Rules: rules(t, `{"rules":[
		{"name":"ip","route":"GET /v1/entry","key":"ip","algorithm":"local","limit":2,"per":"1s","burst":5,"near":0.6}]}`)})
	var got []reply
	for range 6 {
		got = append(got, s.do("GET", "/v1/entry", "198.51.100.7"))
	}
	for i, r := range got[:5] {
		// 5 tokens, near from the 4th (more than 60 % used).
		if r.code != 200 || r.near != (i >= 3) {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if r := got[5]; r.code != 429 || r.errCode != "rate_limited" || r.retryAfter < 1 || r.retryAfter > 2 {
		t.Fatalf("over the bucket: %+v, want 429 rate_limited with Retry-After 1-2", r)
	}
	if r := s.do("GET", "/v1/entry", "198.51.100.8"); r.code != 200 || r.near {
		t.Fatalf("another address is limited: %+v", r)
	}
	s.clk.Advance(500 * time.Millisecond) // one token back
	if r := s.do("GET", "/v1/entry", "198.51.100.7"); r.code != 200 {
		t.Fatalf("after the refill: %+v", r)
	}
	if r := s.do("GET", "/v1/entry", "198.51.100.7"); r.code != 429 {
		t.Fatalf("refilled more than the rate: %+v", r)
	}
	if a, n, l := counter(t, s.reg, "ip", "allowed"), counter(t, s.reg, "ip", "near_limit"), counter(t, s.reg, "ip", "limited"); a != 4 || n != 3 || l != 2 {
		t.Fatalf("metrics allowed %v near %v limited %v, want 4 3 2", a, n, l)
	}
	// Routes the rule does not name pass.
	for range 10 {
		if r := s.do("POST", "/v1/rooms/r1/x", "198.51.100.7"); r.code != 200 {
			t.Fatalf("another route: %+v", r)
		}
	}
}

// An IPv6 client counts by its /64; IPv4 by its address.
func TestIPv6CountsBySlash64(t *testing.T) {
	s := newServer(t, ratelimit.Config{Rules: rules(t, `{"rules":[
		{"name":"ip","route":"*","key":"ip","algorithm":"local","limit":1,"per":"1m"}]}`)})
	if r := s.do("GET", "/v1/entry", "2001:db8:1:2::1"); r.code != 200 {
		t.Fatal(r)
	}
	if r := s.do("GET", "/v1/entry", "2001:db8:1:2::ffff"); r.code != 429 {
		t.Fatalf("another address of the same /64: %+v", r)
	}
	if r := s.do("GET", "/v1/entry", "2001:db8:1:3::1"); r.code != 200 {
		t.Fatalf("another /64: %+v", r)
	}
}

func TestKeysAndAllowlists(t *testing.T) {
	s := newServer(t, ratelimit.Config{
		Credentials: map[string][]string{"gift": {"gift-key"}, "operator": {"op-key"}},
		Rules: rules(t, `{"rules":[
			{"name":"user","route":"GET /v1/entry","key":"user","algorithm":"window","limit":1,"per":"1m"},
			{"name":"room","route":"POST /v1/rooms/*","key":"room","algorithm":"local","limit":1,"per":"1m"},
			{"name":"ops","route":"/v1/admin/*","key":"credential","credential":"gift","algorithm":"window","limit":1,"per":"1m"}],
			"allow":{"cidrs":["10.0.0.0/8"],"credentials":["operator"]}}`)})
	if r := s.do("GET", "/v1/entry", "198.51.100.1", "X-Verified-User", "alice"); r.code != 200 {
		t.Fatal(r)
	}
	if r := s.do("GET", "/v1/entry", "198.51.100.2", "X-Verified-User", "alice"); r.code != 429 {
		t.Fatalf("alice from another address: %+v", r)
	}
	if r := s.do("GET", "/v1/entry", "198.51.100.1", "X-Verified-User", "bob"); r.code != 200 {
		t.Fatalf("bob: %+v", r)
	}
	for range 3 { // no verified user: the user rule does not apply
		if r := s.do("GET", "/v1/entry", "198.51.100.1"); r.code != 200 {
			t.Fatalf("anonymous: %+v", r)
		}
	}
	if r := s.do("POST", "/v1/rooms/r1/x", "198.51.100.1"); r.code != 200 {
		t.Fatal(r)
	}
	if r := s.do("POST", "/v1/rooms/r1/x", "198.51.100.9"); r.code != 429 {
		t.Fatalf("room r1 again: %+v", r)
	}
	if r := s.do("POST", "/v1/rooms/r2/x", "198.51.100.1"); r.code != 200 {
		t.Fatalf("room r2: %+v", r)
	}
	gift := []string{"Authorization", "Bearer gift-key"}
	if r := s.do("GET", "/v1/admin/things", "198.51.100.1", gift...); r.code != 200 {
		t.Fatal(r)
	}
	if r := s.do("GET", "/v1/admin/things", "198.51.100.3", gift...); r.code != 429 {
		t.Fatalf("gift key again: %+v", r)
	}
	for range 3 {
		if r := s.do("GET", "/v1/admin/things", "198.51.100.1", "Authorization", "Bearer op-key"); r.code != 200 {
			t.Fatalf("allowlisted credential: %+v", r)
		}
		if r := s.do("GET", "/v1/admin/things", "10.1.2.3", gift...); r.code != 200 {
			t.Fatalf("allowlisted address: %+v", r)
		}
		if r := s.do("GET", "/v1/entry", "10.1.2.3", "X-Verified-User", "alice"); r.code != 200 {
			t.Fatalf("allowlisted address, limited user: %+v", r)
		}
	}
}

// TestClientAddress: a client behind a listed proxy is counted by its own
// address (the rightmost address the proxy appended, whatever the client
// wrote before it), so that its neighbours behind the same proxy are not
// limited with it; an unlisted peer's X-Forwarded-For is a forgery and
// the peer is counted, whatever address it claims.
func TestClientAddress(t *testing.T) {
	s := newServer(t, ratelimit.Config{Rules: rules(t, `{"rules":[
		{"name":"ip","route":"GET /v1/entry","key":"ip","algorithm":"local","limit":1,"per":"1m","burst":3}]}`)})
	const proxy = trustedProxy + ":40000"
	for i := range 3 {
		if r := s.doFrom("GET", "/v1/entry", proxy, "198.51.100.7"); r.code != 200 {
			t.Fatalf("client behind the proxy, request %d: %+v", i, r)
		}
	}
	for _, xff := range []string{"198.51.100.7", "203.0.113.1, 198.51.100.7", "10.0.0.1,198.51.100.7"} {
		if r := s.doFrom("GET", "/v1/entry", proxy, xff); r.code != 429 {
			t.Fatalf("X-Forwarded-For %q: %+v, want the client behind it limited", xff, r)
		}
	}
	for _, neighbour := range []string{"198.51.100.8", "198.51.100.9", "2001:db8::1"} {
		if r := s.doFrom("GET", "/v1/entry", proxy, neighbour); r.code != 200 {
			t.Fatalf("neighbour %s behind the same proxy: %+v", neighbour, r)
		}
	}
	// The proxy's own requests (no header) count the proxy.
	if r := s.doFrom("GET", "/v1/entry", proxy, ""); r.code != 200 {
		t.Fatalf("the proxy itself: %+v", r)
	}

	// An unlisted peer claims a new address each time: it is counted as
	// itself, and is limited after its burst like any one address.
	const forger = "203.0.113.66:5555"
	for i := range 4 {
		want := http.StatusOK
		if i == 3 {
			want = http.StatusTooManyRequests
		}
		if r := s.doFrom("GET", "/v1/entry", forger, fmt.Sprintf("198.51.100.%d", 100+i)); r.code != want {
			t.Fatalf("forged header, request %d: %+v, want %d", i, r, want)
		}
	}
	// ... and the address it claimed last is not charged for it.
	if r := s.doFrom("GET", "/v1/entry", proxy, "198.51.100.103"); r.code != 200 {
		t.Fatalf("the forged address was charged: %+v", r)
	}
}

// TestDefaultRulesLoopback: outside dev the built-in rules exempt nobody,
// loopback included (a proxy on the machine makes every client loopback);
// in dev loopback is exempt.
func TestDefaultRulesLoopback(t *testing.T) {
	for _, tt := range []struct {
		name    string
		dev     bool
		limited bool
	}{{"outside dev", false, true}, {"dev", true, false}} {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, ratelimit.Config{Rules: ratelimit.DefaultRules(ratelimit.Machine{Cores: 2, Dev: tt.dev})})
			// admin-ip: burst 100; the fake clock refills nothing.
			limited := false
			for _, peer := range []string{"127.0.0.1:1000", "[::1]:1000"} {
				for range 101 {
					if r := s.doFrom("GET", "/v1/admin/things", peer, ""); r.code == 429 {
						limited = true
					}
				}
				if limited != tt.limited {
					t.Fatalf("%s limited: %v, want %v", peer, limited, tt.limited)
				}
				limited = false
			}
		})
	}
}

// failingWindow is a shared window that is down.
type failingWindow struct{ calls int }

func (f *failingWindow) Take(context.Context, string, int64, time.Duration) (ratelimit.WindowResult, error) {
	f.calls++
	return ratelimit.WindowResult{}, errors.New("connection refused")
}

// With the shared window down, a window rule admits this node's share
// from a local bucket — never everything, never a 500 — and asks the
// window again only after RetryWindow.
func TestWindowDownFallsBackToShare(t *testing.T) {
	fw := &failingWindow{}
	s := newServer(t, ratelimit.Config{
		Window: fw, Nodes: func() int { return 4 }, RetryWindow: time.Second,
		Rules: rules(t, `{"rules":[{"name":"g","route":"GET /v1/entry","key":"global","algorithm":"window","limit":40,"per":"1s"}]}`),
	})
	ok := 0
	for range 30 {
		switch r := s.do("GET", "/v1/entry", "198.51.100.1"); r.code {
		case 200:
			ok++
		case 429:
		default:
			t.Fatalf("answer %+v with the window down", r)
		}
	}
	if ok != 10 {
		t.Fatalf("admitted %d with the window down, want the node's share 40/4 = 10", ok)
	}
	if fw.calls != 1 {
		t.Fatalf("asked the failed window %d times within RetryWindow, want 1", fw.calls)
	}
	s.clk.Advance(time.Second)
	s.do("GET", "/v1/entry", "198.51.100.1")
	if fw.calls != 2 {
		t.Fatalf("did not ask the window again after RetryWindow (%d calls)", fw.calls)
	}
	if n := sum(t, s.reg, "danmaku_ratelimit_window_errors_total"); n != 2 {
		t.Fatalf("window errors = %v, want 2", n)
	}
}

// sum adds up every series of the counter name.
func sum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// A rules file changed at run time is in force after the next Refresh; a
// broken one leaves the rules in force, and a rule that keeps its name
// keeps its counts.
func TestReloadFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.json")
	write := func(doc string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	s := newServer(t, ratelimit.Config{Source: ratelimit.FileSource{Path: path}})
	ctx := context.Background()
	if err := s.lim.Refresh(ctx); err != nil {
		t.Fatalf("no file yet: %v", err)
	}
	write(`{"rules":[{"name":"ip","route":"*","key":"ip","algorithm":"local","limit":1,"per":"1m","burst":2}]}`)
	if err := s.lim.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	s.do("GET", "/v1/entry", "198.51.100.1")
	s.do("GET", "/v1/entry", "198.51.100.1")
	if r := s.do("GET", "/v1/entry", "198.51.100.1"); r.code != 429 {
		t.Fatalf("file rule not in force: %+v", r)
	}
	write(`{"rules":[{"name":"ip","route":"*","key":"ip","algorithm":"local","limit":1,"per":"1m","burst":2,"nope":1}]}`)
	if err := s.lim.Refresh(ctx); !errors.Is(err, ratelimit.ErrBadRules) {
		t.Fatalf("broken file: %v", err)
	}
	if r := s.do("GET", "/v1/entry", "198.51.100.1"); r.code != 429 {
		t.Fatalf("a broken file dropped the rules in force: %+v", r)
	}
	// Same rule, larger burst: the bucket keeps its state (empty), so the
	// change does not hand out a fresh burst.
	write(`{"rules":[{"name":"ip","route":"*","key":"ip","algorithm":"local","limit":60,"per":"1m","burst":3}]}`)
	if err := s.lim.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r := s.do("GET", "/v1/entry", "198.51.100.1"); r.code != 429 {
		t.Fatalf("a reload refilled the bucket: %+v", r)
	}
	s.clk.Advance(time.Second)
	if r := s.do("GET", "/v1/entry", "198.51.100.1"); r.code != 200 {
		t.Fatalf("the new rate is not in force: %+v", r)
	}
	write(`{"rules":[]}`)
	if err := s.lim.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if r := s.do("GET", "/v1/entry", "198.51.100.1"); r.code != 200 {
			t.Fatalf("rule removed but in force: %+v", r)
		}
	}
	if got := sum(t, s.reg, "danmaku_ratelimit_reloads_total"); got != 4 {
		t.Fatalf("reloads = %v, want 4 (3 applied, 1 invalid)", got)
	}
}

func TestConfigChecks(t *testing.T) {
	if _, err := ratelimit.New(ratelimit.Config{Poll: -1}); err == nil {
		t.Fatal("negative Poll accepted")
	}
	if _, err := ratelimit.New(ratelimit.Config{Credentials: map[string][]string{"Bad Class": {"k"}}, Logger: quiet}); err == nil {
		t.Fatal("bad credential class accepted")
	}
	if _, err := ratelimit.New(ratelimit.Config{Rules: ratelimit.Rules{Rules: []ratelimit.Rule{{Name: "x"}}}}); !errors.Is(err, ratelimit.ErrBadRules) {
		t.Fatalf("bad initial rules: %v", err)
	}
}

// BenchmarkMiddleware is the limiter's cost on a request passing a local
// per-IP and a node-wide rule (what every entry pays), beside the same
// route without it, in one run.
func BenchmarkMiddleware(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	r, err := ratelimit.Parse([]byte(`{"rules":[
		{"name":"ip","route":"GET /v1/entry","key":"ip","algorithm":"local","limit":1000000000,"per":"1s"},
		{"name":"all","route":"GET /v1/entry","key":"global","algorithm":"local","limit":1000000000,"per":"1s"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := ratelimit.New(ratelimit.Config{Rules: r, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ok := func(c *gin.Context) { c.Status(http.StatusNoContent) }
	for _, tc := range []struct {
		name     string
		handlers []gin.HandlerFunc
	}{{"bare", []gin.HandlerFunc{ok}}, {"limited", []gin.HandlerFunc{lim.Handler(nil), ok}}} {
		b.Run(tc.name, func(b *testing.B) {
			e := gin.New()
			// As httpx.NewEngine without proxies: the peer is the client.
			_ = e.SetTrustedProxies(nil)
			e.GET("/v1/entry", tc.handlers...)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := httptest.NewRequest("GET", "/v1/entry", nil)
				w := httptest.NewRecorder()
				for pb.Next() {
					e.ServeHTTP(w, req)
				}
			})
		})
	}
}

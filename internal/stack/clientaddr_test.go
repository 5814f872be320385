package stack

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"danmaku/internal/ratelimit"
	"danmaku/internal/stream"
)

// fromAddr is an HTTP client whose connections leave from ip (any of
// 127.0.0.0/8 is local on Linux), so that a test can be several peers.
func fromAddr(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:       d.DialContext,
		DisableKeepAlives: true,
	}}
}

// statusOf sends method url with X-Forwarded-For xff (none if empty) and
// returns the status.
func statusOf(t *testing.T, c *http.Client, method, url, xff string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(""))
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestClientAddressEveryRole: at the gslb, the ingest and the edge alike,
// a client behind a listed proxy (-trusted-proxies) is counted by its own
// address — the one the proxy appended, whatever the client wrote before
// it — so that its neighbours behind the same proxy are not limited with
// it; a peer the list does not name is counted as itself, whatever
// X-Forwarded-For it sends. Real sockets: the proxy is 127.0.0.2, the
// forger 127.0.0.3.
func TestClientAddressEveryRole(t *testing.T) {
	rule := func(name, route string) ratelimit.Rule {
		// Two requests an address, then none for an hour: no refill
		// during the test, whatever the machine's pace.
		return ratelimit.Rule{Name: name, Route: route, Key: ratelimit.KeyIP, Algorithm: ratelimit.AlgorithmLocal, Limit: 1, Per: "1h", Burst: 2}
	}
	rules := ratelimit.Rules{Rules: []ratelimit.Rule{
		rule("time-ip", "GET /v1/time"), rule("upload-ip", "POST /v1/rooms/*"), rule("ws-ip", "GET /v1/ws"),
	}}
	st := startStack(t, Config{TrustedProxies: []string{"127.0.0.2/32"}, RateLimits: &rules})
	edgeHTTP := "http://" + strings.TrimPrefix(st.URLs[RoleEdge], "ws://")
	proxy, forger := fromAddr("127.0.0.2"), fromAddr("127.0.0.3")
	for _, r := range []struct{ role, method, url string }{
		{RoleGSLB, http.MethodGet, st.URLs[RoleGSLB] + "/v1/time"},
		// Refused for want of a token once past the limits: what counts
		// here is whether the limit refused it.
		{RoleIngest, http.MethodPost, st.URLs[RoleIngest] + "/v1/rooms/demo/barrage"},
		{RoleEdge, http.MethodGet, edgeHTTP},
	} {
		t.Run(r.role, func(t *testing.T) {
			limited := func(c *http.Client, xff string) bool {
				return statusOf(t, c, r.method, r.url, xff) == http.StatusTooManyRequests
			}
			for i := range 2 {
				if limited(proxy, "198.51.100.7") {
					t.Fatalf("client behind the proxy limited at request %d of its burst of 2", i+1)
				}
			}
			for _, xff := range []string{"198.51.100.7", "203.0.113.1, 198.51.100.7"} {
				if !limited(proxy, xff) {
					t.Fatalf("X-Forwarded-For %q through the listed proxy: not limited, want its client counted", xff)
				}
			}
			for _, neighbour := range []string{"198.51.100.8", "198.51.100.9"} {
				if limited(proxy, neighbour) {
					t.Fatalf("neighbour %s behind the same proxy limited", neighbour)
				}
			}
			for i := range 3 {
				claimed := fmt.Sprintf("198.51.100.%d", 20+i)
				if got := limited(forger, claimed); got != (i == 2) {
					t.Fatalf("unlisted peer claiming %s, request %d: limited %v; want it counted as itself (limited from the 3rd)", claimed, i+1, got)
				}
			}
			if limited(proxy, "198.51.100.22") {
				t.Fatal("the address an unlisted peer claimed was charged for it")
			}
		})
	}
}

// TestBuiltInRulesExemptNobody: outside dev the built-in rules allowlist
// no address, loopback included (a proxy on the machine would otherwise
// switch every limit off); in dev loopback stays exempt. admin-ip (a burst
// of 100, 20 a second) is the rule a loopback caller trips first.
func TestBuiltInRulesExemptNobody(t *testing.T) {
	for _, tt := range []struct {
		name string
		dev  bool
	}{{"outside dev", false}, {"dev", true}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Dev: tt.dev}
			if !tt.dev {
				cfg = Config{
					Roles: []string{RoleGSLB, RoleIngest, RoleEdge}, PublicCDN: "http://127.0.0.1:1/",
					MasterKey: []byte("0123456789abcdef0123456789abcdef"), TicketKey: []byte("exempt-nobody-ticket-key-0123456789"),
					GiftKeys: []string{"g"}, OperatorKeys: []string{"o"},
					// A store of its own keeps startStack from making it dev.
					Backends: Backends{Shared: SharedBackends{Streams: stream.NewMemoryStore(nil)}},
				}
			}
			st := startStack(t, cfg)
			c := fromAddr("127.0.0.1")
			url := st.URLs[RoleGSLB] + "/v1/admin/events"
			if tt.dev {
				for i := range 150 {
					if statusOf(t, c, http.MethodGet, url, "") == http.StatusTooManyRequests {
						t.Fatalf("dev limited loopback at request %d", i+1)
					}
				}
				return
			}
			// Until admin-ip refuses: past its burst of 100 as soon as the
			// requests outpace its refill of 20 a second. The bound only
			// ends a test that would otherwise never stop.
			for i := range 5000 {
				if statusOf(t, c, http.MethodGet, url, "") == http.StatusTooManyRequests {
					if i < 100 {
						t.Fatalf("limited at request %d, inside admin-ip's burst", i+1)
					}
					return
				}
			}
			t.Fatal("5,000 requests from loopback and none limited: loopback is exempt outside dev")
		})
	}
}

package edge

import (
	"net/http"
	"testing"

	"danmaku/internal/ratelimit"
)

// TestHandshakeRateLimited: the process's rate-limit rules stand in front
// of the handshake, counting the client address — behind a trusted
// balancer, the one its X-Forwarded-For names — with the coded 429.
func TestHandshakeRateLimited(t *testing.T) {
	lim, err := ratelimit.New(ratelimit.Config{Rules: ratelimit.Rules{Rules: []ratelimit.Rule{
		{Name: "ws-ip", Route: "GET /v1/ws", Key: ratelimit.KeyIP, Algorithm: ratelimit.AlgorithmLocal, Limit: 1, Per: "1h"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{cfg: func(c *Config) {
		c.RateLimit, c.TrustedProxies = lim, []string{"127.0.0.1/32"}
	}})
	try := func(client string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("GET", e.ts.URL+Path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", client)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	// Past the limiter, a request without an upgrade is refused by the
	// edge itself: 400, not 429.
	checkCoded(t, try("203.0.113.1"), http.StatusBadRequest, CodeBadRequest)
	checkCoded(t, try("203.0.113.2"), http.StatusBadRequest, CodeBadRequest)
	resp := try("203.0.113.1")
	checkCoded(t, resp, http.StatusTooManyRequests, "rate_limited")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
}

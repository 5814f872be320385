package stack

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"danmaku/internal/testenv"
)

// TestCDNRefusesPercentEscapes: Varnish, with the project's VCL, answers a
// path holding a percent-escape with the coded 404 itself, so that S3
// (which decodes %2F) never serves a key under a second URL the cache
// would keep apart. Paths as written still reach the origin.
func TestCDNRefusesPercentEscapes(t *testing.T) {
	var reached atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=1")
		_, _ = io.WriteString(w, `{"live":true}`)
	}))
	t.Cleanup(origin.Close)
	cdn := testenv.Varnish(t, origin.URL)

	do := func(t *testing.T, method, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, cdn+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	for _, path := range []string{
		"/rooms%2Fdemo%2Flive.json",
		"/rooms%2fdemo%2flive.json",
		"/rooms/de%6Do/live.json",
		"/rooms/demo/s/1.msgpack%00",
		"/rooms/demo/live.json%3Fx",
		"/%72ooms/demo/live.json?cb=1",
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			t.Run(method+" "+path, func(t *testing.T) {
				before := reached.Load()
				resp, body := do(t, method, path)
				if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("%d %q %s, want a coded 404", resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
				if resp.Header.Get("Access-Control-Allow-Origin") != "*" {
					t.Errorf("no CORS header: a page could not read the error")
				}
				if method == http.MethodGet {
					var got struct {
						Error struct{ Code, Message string }
					}
					if err := json.Unmarshal([]byte(body), &got); err != nil || got.Error.Code != "not_found" || got.Error.Message == "" {
						t.Errorf("body %q (%v), want the coded not_found", body, err)
					}
				}
				if n := reached.Load() - before; n != 0 {
					t.Errorf("%d requests reached the origin", n)
				}
			})
		}
	}

	// A key as written, and one with a query (cache busters are dropped
	// before the check, so an escape there refuses nothing), still reach
	// the origin.
	for _, path := range []string{"/rooms/demo/live.json", "/rooms/demo/s/2.msgpack?cb=%41"} {
		before := reached.Load()
		if resp, body := do(t, http.MethodGet, path); resp.StatusCode != http.StatusOK || body != `{"live":true}` {
			t.Errorf("GET %s: %d %s, want the origin's answer", path, resp.StatusCode, body)
		}
		if reached.Load() == before {
			t.Errorf("GET %s did not reach the origin", path)
		}
	}
}

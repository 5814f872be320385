package sdkweb_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"danmaku/internal/httpx"
	"danmaku/internal/sdkweb"
)

// TestServeConditional: preconditions and Range on the demo page and the
// SDK files. A failed precondition is the coded 412, never net/http's
// empty one; Range is ignored, so no request gets a 206 or a plain-text
// 416.
func TestServeConditional(t *testing.T) {
	e := httpx.NewEngine(httpx.EngineConfig{Role: "gslb"})
	sdkweb.Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()

	do := func(t *testing.T, method, path string, hdr map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
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
		return resp, b
	}

	for _, path := range []string{"/", "/sdk/danmaku.js"} {
		resp, whole := do(t, http.MethodGet, path, nil)
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != http.StatusOK || etag == "" || len(whole) < 100 {
			t.Fatalf("GET %s: %d, ETag %q, %d bytes", path, resp.StatusCode, etag, len(whole))
		}
		tests := []struct {
			name   string
			hdr    map[string]string
			status int
		}{
			{"if-match ours", map[string]string{"If-Match": etag}, http.StatusOK},
			{"if-match star", map[string]string{"If-Match": "*"}, http.StatusOK},
			{"if-match other", map[string]string{"If-Match": `"stale"`}, http.StatusPreconditionFailed},
			{"if-match weak of ours", map[string]string{"If-Match": "W/" + etag}, http.StatusPreconditionFailed},
			{"if-match before if-none-match", map[string]string{"If-Match": `"stale"`, "If-None-Match": etag}, http.StatusPreconditionFailed},
			{"if-none-match ours", map[string]string{"If-None-Match": etag}, http.StatusNotModified},
			{"if-none-match weak of ours", map[string]string{"If-None-Match": "W/" + etag}, http.StatusNotModified},
			{"if-none-match other", map[string]string{"If-None-Match": `"stale"`}, http.StatusOK},
			// No Last-Modified, so dates decide nothing.
			{"if-unmodified-since long ago", map[string]string{"If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}, http.StatusOK},
			{"if-modified-since far ahead", map[string]string{"If-Modified-Since": "Fri, 01 Jan 2100 00:00:00 GMT"}, http.StatusOK},
			// Range is ignored: the whole file, whatever the range says.
			{"range inside", map[string]string{"Range": "bytes=0-9"}, http.StatusOK},
			{"range outside", map[string]string{"Range": "bytes=99999999-"}, http.StatusOK},
			{"range malformed", map[string]string{"Range": "bytes=x"}, http.StatusOK},
			{"range with if-range", map[string]string{"Range": "bytes=0-9", "If-Range": etag}, http.StatusOK},
		}
		for _, tt := range tests {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				t.Run(method+" "+path+" "+tt.name, func(t *testing.T) {
					resp, body := do(t, method, path, tt.hdr)
					if resp.StatusCode != tt.status {
						t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.status)
					}
					if resp.Header.Get("Accept-Ranges") != "" || resp.Header.Get("Content-Range") != "" {
						t.Errorf("range headers on an answer that ignores Range: %v", resp.Header)
					}
					if method == http.MethodHead && len(body) != 0 {
						t.Errorf("HEAD: a body")
					}
					switch tt.status {
					case http.StatusOK:
						if resp.Header.Get("ETag") != etag || resp.Header.Get("Cache-Control") != "no-cache" {
							t.Errorf("validators: %v", resp.Header)
						}
						if method == http.MethodGet && string(body) != string(whole) {
							t.Errorf("%d bytes, want the whole file (%d)", len(body), len(whole))
						}
					case http.StatusNotModified:
						if len(body) != 0 || resp.Header.Get("ETag") != etag || resp.Header.Get("Cache-Control") != "no-cache" {
							t.Errorf("304: %d bytes, %v", len(body), resp.Header)
						}
					default:
						if resp.Header.Get("Content-Type") != "application/json; charset=utf-8" {
							t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
						}
						if method == http.MethodHead {
							return
						}
						var got struct {
							Error struct{ Code, Message string }
						}
						if err := json.Unmarshal(body, &got); err != nil || got.Error.Code != httpx.CodePreconditionFailed || got.Error.Message == "" {
							t.Errorf("body %s, want the coded %s", body, httpx.CodePreconditionFailed)
						}
					}
				})
			}
		}
	}
}

package origin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"danmaku/internal/httpx"
	"danmaku/internal/objstore"
	"danmaku/internal/origin"
	"danmaku/sdk/wire"
)

const segKey = "rooms/r1/s/1700000000.msgpack"

var segBody = []byte("\x86\xa1v\x01 pretend segment")

// newOrigin serves store on a random loopback port the way the origin role
// does; httptest waits until the listener accepts.
func newOrigin(t *testing.T, store objstore.Store) *httptest.Server {
	t.Helper()
	e := httpx.NewEngine(httpx.EngineConfig{Role: "origin"})
	origin.Register(e, store)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

func newStoreWithSegment(t *testing.T) (objstore.Store, string) {
	t.Helper()
	s := objstore.NewMemoryStore()
	etag, err := s.Put(context.Background(), segKey, segBody, objstore.PutOptions{
		ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl, IfNoneMatch: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, etag
}

func do(t *testing.T, method, url string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// rawGet sends path exactly as given, bypassing any client-side cleaning, and
// returns the status line's code, the headers and the body.
func rawGet(t *testing.T, srv *httptest.Server, path string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: cdn\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// expectCoded checks the one error shape clients see.
func expectCoded(t *testing.T, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d (body %s)", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want JSON", ct)
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %s is not the coded error JSON: %v", body, err)
	}
	if e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("error = %+v, want code %q with a message", e.Error, code)
	}
}

func TestGetSegment(t *testing.T) {
	store, etag := newStoreWithSegment(t)
	srv := newOrigin(t, store)
	resp, body := do(t, http.MethodGet, srv.URL+"/"+segKey, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, body %s", resp.StatusCode, body)
	}
	if string(body) != string(segBody) {
		t.Errorf("body = %q, want %q", body, segBody)
	}
	want := map[string]string{
		"Content-Type":                wire.SegmentContentType,
		"Cache-Control":               "public, max-age=31536000, immutable",
		"ETag":                        etag,
		"Content-Length":              fmt.Sprint(len(segBody)),
		"Access-Control-Allow-Origin": "*",
	}
	for h, v := range want {
		if got := resp.Header.Get(h); got != v {
			t.Errorf("%s = %q, want %q", h, got, v)
		}
	}
}

func TestGetManifestKeepsItsHeaders(t *testing.T) {
	store := objstore.NewMemoryStore()
	key := wire.ManifestKey("r1")
	etag, err := store.Put(context.Background(), key, []byte(`{"v":1}`), objstore.PutOptions{
		ContentType: wire.ManifestContentType, CacheControl: wire.ManifestCacheControl,
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, http.MethodGet, newOrigin(t, store).URL+"/"+key, nil)
	if resp.StatusCode != http.StatusOK || string(body) != `{"v":1}` {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if resp.Header.Get("Cache-Control") != wire.ManifestCacheControl || resp.Header.Get("ETag") != etag ||
		resp.Header.Get("Content-Type") != wire.ManifestContentType {
		t.Fatalf("headers = %v", resp.Header)
	}
}

func TestIfNoneMatch(t *testing.T) {
	store, etag := newStoreWithSegment(t)
	srv := newOrigin(t, store)
	resp, body := do(t, http.MethodGet, srv.URL+"/"+segKey, http.Header{"If-None-Match": {etag}})
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("status = %d, want 304", resp.StatusCode)
	}
	if len(body) != 0 {
		t.Errorf("304 carried a body: %q", body)
	}
	if resp.Header.Get("ETag") != etag || resp.Header.Get("Cache-Control") != wire.SegmentCacheControl {
		t.Errorf("304 headers = %v; a CDN refreshes its copy's headers from them", resp.Header)
	}
	// A stale validator gets the object.
	resp, body = do(t, http.MethodGet, srv.URL+"/"+segKey, http.Header{"If-None-Match": {`"stale"`}})
	if resp.StatusCode != http.StatusOK || string(body) != string(segBody) {
		t.Fatalf("stale If-None-Match: status %d body %q", resp.StatusCode, body)
	}
}

// TestConditionalGet: what a CDN revalidating its copy sends, answered as
// RFC 9110 says; 304s carry the headers a cache refreshes its copy from.
func TestConditionalGet(t *testing.T) {
	store, etag := newStoreWithSegment(t)
	srv := newOrigin(t, store)
	weak := "W/" + etag
	tests := []struct {
		name   string
		header http.Header
		status int
	}{
		{"star", http.Header{"If-None-Match": {"*"}}, http.StatusNotModified},
		{"weak", http.Header{"If-None-Match": {weak}}, http.StatusNotModified},
		{"list", http.Header{"If-None-Match": {`"old", ` + etag}}, http.StatusNotModified},
		{"two lines", http.Header{"If-None-Match": {`"old"`, weak}}, http.StatusNotModified},
		{"list without it", http.Header{"If-None-Match": {`"old", W/"older"`}}, http.StatusOK},
		{"a date alone is ignored: no Last-Modified", http.Header{"If-Modified-Since": {"Fri, 01 Jan 2100 00:00:00 GMT"}}, http.StatusOK},
		{"If-None-Match decides over a date", http.Header{"If-None-Match": {`"old"`}, "If-Modified-Since": {"Fri, 01 Jan 2100 00:00:00 GMT"}}, http.StatusOK},
		{"If-Match holds", http.Header{"If-Match": {etag}}, http.StatusOK},
		{"If-Match holds, If-None-Match matches", http.Header{"If-Match": {etag}, "If-None-Match": {etag}}, http.StatusNotModified},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				resp, body := do(t, method, srv.URL+"/"+segKey, tt.header)
				if resp.StatusCode != tt.status {
					t.Fatalf("%s: status %d, want %d", method, resp.StatusCode, tt.status)
				}
				if resp.Header.Get("ETag") != etag || resp.Header.Get("Cache-Control") != wire.SegmentCacheControl {
					t.Errorf("%s: headers %v", method, resp.Header)
				}
				if tt.status == http.StatusNotModified && len(body) != 0 {
					t.Errorf("%s: 304 with a body %q", method, body)
				}
			}
		})
	}
	// If-Match names another version: 412, coded.
	resp, body := do(t, http.MethodGet, srv.URL+"/"+segKey, http.Header{"If-Match": {`"old"`}})
	expectCoded(t, resp, body, http.StatusPreconditionFailed, origin.CodePreconditionFailed)
	// Conditions on a missing object change nothing: 404.
	resp, body = do(t, http.MethodGet, srv.URL+"/rooms/r1/s/1.msgpack", http.Header{"If-None-Match": {"*"}, "If-Match": {"*"}})
	expectCoded(t, resp, body, http.StatusNotFound, httpx.CodeNotFound)
}

// TestOneURLPerObject: an object is served under its key as written and no
// other spelling, so a cache never holds a manifest twice (one copy going
// stale under a second key).
func TestOneURLPerObject(t *testing.T) {
	store := objstore.NewMemoryStore()
	key := wire.ManifestKey("demo")
	if _, err := store.Put(context.Background(), key, []byte(`{"v":1}`), objstore.PutOptions{
		ContentType: wire.ManifestContentType, CacheControl: wire.ManifestCacheControl,
	}); err != nil {
		t.Fatal(err)
	}
	srv := newOrigin(t, store)
	if resp, body := rawGet(t, srv, "/"+key); resp.StatusCode != http.StatusOK {
		t.Fatalf("the key as written: %d %s", resp.StatusCode, body)
	}
	for _, path := range []string{
		"/rooms%2Fdemo%2Flive.json", "/rooms%2fdemo/live.json", "/rooms/de%6Do/live.json",
		"/%72ooms/demo/live.json", "/rooms/demo/live%2Ejson", "/rooms/demo%2F..%2Fdemo/live.json",
		"/rooms/demo/live.json%00", "/rooms/demo/live.json%3F",
	} {
		resp, body := rawGet(t, srv, path)
		expectCoded(t, resp, body, http.StatusNotFound, httpx.CodeNotFound)
		if cc := resp.Header.Get("Cache-Control"); cc != origin.NotFoundCacheControl {
			t.Errorf("%s: Cache-Control = %q", path, cc)
		}
	}
}

func TestHead(t *testing.T) {
	store, etag := newStoreWithSegment(t)
	resp, body := do(t, http.MethodHead, newOrigin(t, store).URL+"/"+segKey, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d", resp.StatusCode)
	}
	if len(body) != 0 {
		t.Errorf("HEAD returned a body: %q", body)
	}
	if resp.ContentLength != int64(len(segBody)) {
		t.Errorf("Content-Length = %d, want %d", resp.ContentLength, len(segBody))
	}
	if resp.Header.Get("Content-Type") != wire.SegmentContentType || resp.Header.Get("ETag") != etag ||
		resp.Header.Get("Cache-Control") != wire.SegmentCacheControl {
		t.Errorf("HEAD headers = %v", resp.Header)
	}
}

func TestMissingKeyIs404(t *testing.T) {
	store, _ := newStoreWithSegment(t)
	srv := newOrigin(t, store)
	// A second not yet written is 404 (never 403), and nobody may keep it.
	for _, path := range []string{"/rooms/r1/s/1700000001.msgpack", "/rooms/r1/live.json", "/rooms/r1/s"} {
		resp, body := do(t, http.MethodGet, srv.URL+path, nil)
		expectCoded(t, resp, body, http.StatusNotFound, httpx.CodeNotFound)
		if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("%s: Cache-Control = %q, want no-cache", path, cc)
		}
	}
	resp, body := do(t, http.MethodHead, srv.URL+"/rooms/r1/s/1700000001.msgpack", nil)
	if resp.StatusCode != http.StatusNotFound || len(body) != 0 {
		t.Errorf("HEAD of a missing key: status %d body %q", resp.StatusCode, body)
	}
}

func TestBadKeyIs404(t *testing.T) {
	store, _ := newStoreWithSegment(t)
	srv := newOrigin(t, store)
	for _, path := range []string{"/a/../b", "//x", "/rooms/r1/../r1/s/1700000000.msgpack", "/rooms//r1", "/./a", "/"} {
		resp, body := rawGet(t, srv, path)
		expectCoded(t, resp, body, http.StatusNotFound, httpx.CodeNotFound)
		if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("%s: Cache-Control = %q, want no-cache", path, cc)
		}
	}
}

func TestWriteMethodsAre405(t *testing.T) {
	store, _ := newStoreWithSegment(t)
	srv := newOrigin(t, store)
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		resp, body := do(t, method, srv.URL+"/"+segKey, nil)
		expectCoded(t, resp, body, http.StatusMethodNotAllowed, httpx.CodeNoMethod)
	}
	// The object is untouched.
	resp, body := do(t, http.MethodGet, srv.URL+"/"+segKey, nil)
	if resp.StatusCode != http.StatusOK || string(body) != string(segBody) {
		t.Fatalf("after write attempts: status %d body %q", resp.StatusCode, body)
	}
}

func TestHealthz(t *testing.T) {
	srv := newOrigin(t, objstore.NewMemoryStore())
	resp, body := do(t, http.MethodGet, srv.URL+"/healthz", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz status = %d, body %s", resp.StatusCode, body)
	}
	var h struct{ Status, Role string }
	if err := json.Unmarshal(body, &h); err != nil || h.Status != "ok" || h.Role != "origin" {
		t.Fatalf("/healthz body = %s (%v)", body, err)
	}
}

// failingStore is an object store whose backend is down.
type failingStore struct{ err error }

func (f failingStore) Put(context.Context, string, []byte, objstore.PutOptions) (string, error) {
	return "", f.err
}

func (f failingStore) Get(context.Context, string) (*objstore.Object, error) { return nil, f.err }

func TestStoreErrorIs503(t *testing.T) {
	srv := newOrigin(t, failingStore{errors.New("connection refused")})
	resp, body := do(t, http.MethodGet, srv.URL+"/"+segKey, nil)
	expectCoded(t, resp, body, http.StatusServiceUnavailable, httpx.CodeUnavailable)
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After = %q, want 1", ra)
	}
	if strings.Contains(string(body), "connection refused") {
		t.Errorf("503 body leaks the backend error: %s", body)
	}
	// A wrapped ErrNotFound is still a 404, not an outage.
	srv = newOrigin(t, failingStore{fmt.Errorf("s3 get: %w", objstore.ErrNotFound)})
	resp, body = do(t, http.MethodGet, srv.URL+"/"+segKey, nil)
	expectCoded(t, resp, body, http.StatusNotFound, httpx.CodeNotFound)
}

func TestDirStoreBackedOrigin(t *testing.T) {
	store, err := objstore.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	etag, err := store.Put(context.Background(), segKey, segBody, objstore.PutOptions{
		ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := newOrigin(t, store)
	resp, body := do(t, http.MethodGet, srv.URL+"/"+segKey, nil)
	if resp.StatusCode != http.StatusOK || string(body) != string(segBody) || resp.Header.Get("ETag") != etag {
		t.Fatalf("status %d body %q headers %v", resp.StatusCode, body, resp.Header)
	}
	// Below an existing object, and a sidecar's name: missing, not an outage.
	for _, path := range []string{"/" + segKey + "/x", "/" + segKey + ".meta"} {
		resp, body := do(t, http.MethodGet, srv.URL+path, nil)
		expectCoded(t, resp, body, http.StatusNotFound, httpx.CodeNotFound)
	}
}

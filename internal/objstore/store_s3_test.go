package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"danmaku/internal/hist"
	"danmaku/internal/objstore"
	"danmaku/internal/objstore/objstoretest"
	"danmaku/internal/testenv"
	"danmaku/sdk/wire"
)

// testPrefix returns a prefix no other test or run uses, so tests sharing a
// server never see each other's objects.
func testPrefix() string {
	return "t-" + strings.ToLower(rand.Text()) + "/"
}

// newS3Store returns a store on env under prefix, adjusted by fn.
func newS3Store(t testing.TB, env testenv.S3Env, prefix string, fn func(*objstore.S3Config)) *objstore.S3Store {
	t.Helper()
	cfg := objstore.S3Config{
		Bucket:    env.Bucket,
		Prefix:    prefix,
		Endpoint:  env.Endpoint,
		Region:    env.Region,
		PathStyle: true,
		AccessKey: env.AccessKey,
		SecretKey: env.SecretKey,
	}
	if fn != nil {
		fn(&cfg)
	}
	s, err := objstore.NewS3Store(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Store(t *testing.T) {
	// One server for the suite; each subtest gets a fresh prefix, which is
	// as empty as a fresh bucket. The server's directory goes with it.
	env := testenv.S3(t)
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		return newS3Store(t, env, testPrefix(), nil)
	})
}

// The CDN fetches objects anonymously over plain HTTP from the bucket URL,
// and must get the headers the slicer wrote.
func TestS3StoreServedAnonymously(t *testing.T) {
	env := testenv.S3(t)
	prefix := testPrefix()
	s := newS3Store(t, env, prefix, nil)
	ctx := context.Background()
	tests := []struct {
		key      string
		body     []byte
		ct, cc   string
		ifAbsent bool
	}{
		{wire.SegmentKey("r1", 1700000000), []byte("\x82\xa1s\x01segment"), wire.SegmentContentType, wire.SegmentCacheControl, true},
		{wire.ManifestKey("r1"), []byte(`{"second":1700000000}`), wire.ManifestContentType, wire.ManifestCacheControl, false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			etag, err := s.Put(ctx, tt.key, tt.body, objstore.PutOptions{ContentType: tt.ct, CacheControl: tt.cc, IfNoneMatch: tt.ifAbsent})
			if err != nil {
				t.Fatal(err)
			}
			url := env.BucketURL() + "/" + prefix + tt.key
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("anonymous GET %s: %s: %s", url, resp.Status, body)
			}
			if !bytes.Equal(body, tt.body) {
				t.Errorf("anonymous GET body = %q, want %q", body, tt.body)
			}
			if got := resp.Header.Get("Content-Type"); got != tt.ct {
				t.Errorf("Content-Type = %q, want %q", got, tt.ct)
			}
			if got := resp.Header.Get("Cache-Control"); got != tt.cc {
				t.Errorf("Cache-Control = %q, want %q", got, tt.cc)
			}
			if got := resp.Header.Get("ETag"); got != etag {
				t.Errorf("ETag = %q, want %q (the one Put returned)", got, etag)
			}
		})
	}
}

// Two stores with different prefixes on one bucket do not see each other.
func TestS3StorePrefixIsolates(t *testing.T) {
	env := testenv.S3(t)
	ctx := context.Background()
	a := newS3Store(t, env, testPrefix(), nil)
	b := newS3Store(t, env, testPrefix()+"nested/", nil)
	key := wire.SegmentKey("r1", 1)
	opts := objstore.PutOptions{IfNoneMatch: true}
	if _, err := a.Put(ctx, key, []byte("a"), opts); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("b.Get of a's key: %v, want ErrNotFound", err)
	}
	if _, err := b.Put(ctx, key, []byte("b"), opts); err != nil {
		t.Fatalf("b.Put IfNoneMatch of a's key: %v", err)
	}
	for s, want := range map[*objstore.S3Store]string{a: "a", b: "b"} {
		o, err := s.Get(ctx, key)
		if err != nil || string(o.Body) != want {
			t.Fatalf("Get = %v, %v; want body %q", o, err, want)
		}
	}
}

func TestS3StoreMaxObjectBytes(t *testing.T) {
	env := testenv.S3(t)
	ctx := context.Background()
	prefix := testPrefix()
	const limit = 1024
	writer := newS3Store(t, env, prefix, nil)
	small := newS3Store(t, env, prefix, func(c *objstore.S3Config) { c.MaxObjectBytes = limit })

	if _, err := small.Put(ctx, "big", make([]byte, limit+1), objstore.PutOptions{}); !errors.Is(err, objstore.ErrTooLarge) {
		t.Fatalf("Put over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := writer.Get(ctx, "big"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a refused Put wrote something: Get = %v, want ErrNotFound", err)
	}

	for _, n := range []int{limit, limit + 1, 3 * limit} {
		key := fmt.Sprintf("obj-%d", n)
		if _, err := writer.Put(ctx, key, bytes.Repeat([]byte{'x'}, n), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		o, err := small.Get(ctx, key)
		switch {
		case n <= limit && (err != nil || len(o.Body) != n):
			t.Errorf("Get of %d bytes with limit %d: %v", n, limit, err)
		case n > limit && !errors.Is(err, objstore.ErrTooLarge):
			t.Errorf("Get of %d bytes with limit %d: err = %v, want ErrTooLarge", n, limit, err)
		}
	}
}

// A body longer than the limit is refused even when the server sends no
// Content-Length (chunked), so the limit never depends on what the server
// claims.
func TestS3StoreMaxObjectBytesChunked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"x"`)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // no Content-Length: chunked
		w.Write(bytes.Repeat([]byte{'x'}, 4096))
	}))
	t.Cleanup(srv.Close)
	s := fakeS3Store(t, srv.URL, func(c *objstore.S3Config) { c.MaxObjectBytes = 1024 })
	if _, err := s.Get(context.Background(), "k"); !errors.Is(err, objstore.ErrTooLarge) {
		t.Fatalf("chunked body over the limit: %v, want ErrTooLarge", err)
	}
}

// fakeS3Store returns a store on a fake server, without retries.
func fakeS3Store(t *testing.T, endpoint string, fn func(*objstore.S3Config)) *objstore.S3Store {
	t.Helper()
	cfg := objstore.S3Config{
		Bucket: "b", Endpoint: endpoint, PathStyle: true,
		AccessKey: "k", SecretKey: "s", MaxRetries: -1,
	}
	if fn != nil {
		fn(&cfg)
	}
	s, err := objstore.NewS3Store(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The error answers of S3 itself, some of which versitygw never gives,
// replayed by a fake server.
func TestS3StoreErrorMapping(t *testing.T) {
	tests := []struct {
		name   string
		status int
		code   string
		get    error // want from Get; nil: an error that is none of the sentinels
		put    error // want from a conditional Put
	}{
		// The Put is an If-Match put: a missing object does not match.
		{"NoSuchKey", 404, "NoSuchKey", objstore.ErrNotFound, objstore.ErrPrecondition},
		{"Bare404", 404, "NotFound", objstore.ErrNotFound, objstore.ErrPrecondition},
		{"NoSuchBucket", 404, "NoSuchBucket", nil, nil},
		// Without s3:ListBucket S3 hides a missing key behind 403; the
		// store's own credentials can list, so 403 is a real failure.
		{"AccessDenied", 403, "AccessDenied", nil, nil},
		{"PreconditionFailed", 412, "PreconditionFailed", nil, objstore.ErrPrecondition},
		{"ConditionalRequestConflict", 409, "ConditionalRequestConflict", nil, objstore.ErrPrecondition},
		{"OtherConflict", 409, "OperationAborted", nil, nil},
		{"InternalError", 500, "InternalError", nil, nil},
	}
	sentinels := []error{objstore.ErrNotFound, objstore.ErrPrecondition, objstore.ErrBadKey, objstore.ErrTooLarge}
	check := func(t *testing.T, op string, err, want error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", op)
		}
		if want != nil {
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", op, err, want)
			}
			return
		}
		for _, s := range sentinels {
			if errors.Is(err, s) {
				t.Errorf("%s: %v, want none of the sentinels", op, err)
			}
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>fake</Message><RequestId>1</RequestId></Error>`, tt.code)
			}))
			t.Cleanup(srv.Close)
			s := fakeS3Store(t, srv.URL, nil)
			_, err := s.Get(context.Background(), "rooms/r1/live.json")
			check(t, "Get", err, tt.get)
			if err != nil && !strings.HasPrefix(err.Error(), "objstore: s3 get rooms/r1/live.json: ") {
				t.Errorf("Get error %q lacks the operation prefix", err)
			}
			_, err = s.Put(context.Background(), "rooms/r1/live.json", []byte("{}"), objstore.PutOptions{IfMatch: `"e"`})
			check(t, "Put", err, tt.put)
			if err != nil && !strings.HasPrefix(err.Error(), "objstore: s3 put rooms/r1/live.json: ") {
				t.Errorf("Put error %q lacks the operation prefix", err)
			}
		})
	}
}

// Put sends the conditions and headers S3 expects, and nothing for unset
// options.
func TestS3StorePutHeaders(t *testing.T) {
	var (
		mu  sync.Mutex
		got []http.Header
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("ETag", `"new"`)
	}))
	t.Cleanup(srv.Close)
	s := fakeS3Store(t, srv.URL, nil)
	tests := []struct {
		opts objstore.PutOptions
		want map[string]string // "" means absent
	}{
		{objstore.PutOptions{ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl, IfNoneMatch: true},
			map[string]string{"Content-Type": wire.SegmentContentType, "Cache-Control": wire.SegmentCacheControl, "If-None-Match": "*", "If-Match": ""}},
		{objstore.PutOptions{IfMatch: `"old"`},
			map[string]string{"Cache-Control": "", "If-None-Match": "", "If-Match": `"old"`}},
	}
	for i, tt := range tests {
		etag, err := s.Put(context.Background(), "k", []byte("body"), tt.opts)
		if err != nil || etag != `"new"` {
			t.Fatalf("Put %d = %q, %v", i, etag, err)
		}
		mu.Lock()
		h := got[len(got)-1]
		mu.Unlock()
		for name, want := range tt.want {
			if v := h.Get(name); v != want {
				t.Errorf("Put %d: header %s = %q, want %q", i, name, v, want)
			}
		}
	}
}

// A server that is gone, or that accepts connections and never answers (a
// stopped process, a black-holed route), gives an error rather than a hang.
// No duration is asserted: the test returning at all is the point.
func TestS3StoreServerDown(t *testing.T) {
	closed := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "http://" + addr
	}
	silent := func(t *testing.T) string {
		// The kernel completes the handshake from the backlog; nobody ever
		// reads or answers, exactly like a SIGSTOPped server.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return "http://" + l.Addr().String()
	}
	tests := []struct {
		name     string
		endpoint func(t *testing.T) string
	}{
		{"ClosedPort", closed},
		{"SilentServer", silent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeS3Store(t, tt.endpoint(t), func(c *objstore.S3Config) {
				c.Timeout = 200 * time.Millisecond
				c.MaxRetries = 1 // retries are bounded by Timeout too
			})
			ctx := context.Background()
			_, err := s.Put(ctx, wire.SegmentKey("r1", 1), []byte("seg"), objstore.PutOptions{IfNoneMatch: true})
			if err == nil || errors.Is(err, objstore.ErrPrecondition) {
				t.Fatalf("Put to a dead server: %v, want a failure", err)
			}
			_, err = s.Get(ctx, wire.SegmentKey("r1", 1))
			if err == nil || errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("Get from a dead server: %v, want a failure (not ErrNotFound)", err)
			}
			t.Logf("Get: %v", err)
		})
	}
}

func TestS3StoreBadKeysNeverReachTheServer(t *testing.T) {
	var calls int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	s := fakeS3Store(t, srv.URL, nil)
	for _, key := range []string{"", "/abs", "a/../b", "a//b", `a\b`} {
		if _, err := s.Put(context.Background(), key, nil, objstore.PutOptions{}); !errors.Is(err, objstore.ErrBadKey) {
			t.Errorf("Put(%q): %v, want ErrBadKey", key, err)
		}
		if _, err := s.Get(context.Background(), key); !errors.Is(err, objstore.ErrBadKey) {
			t.Errorf("Get(%q): %v, want ErrBadKey", key, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 {
		t.Fatalf("%d requests reached the server", calls)
	}
}

func TestNewS3StoreConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  objstore.S3Config
		ok   bool
	}{
		{"Minimal", objstore.S3Config{Bucket: "b", AccessKey: "k", SecretKey: "s"}, true},
		{"DefaultChain", objstore.S3Config{Bucket: "b"}, true},
		{"Full", objstore.S3Config{Bucket: "b", Prefix: "events/e1/", Endpoint: "https://s3.example.com:9000", Region: "eu-west-1",
			PathStyle: true, AccessKey: "k", SecretKey: "s", Timeout: time.Second, MaxRetries: -1, MaxObjectBytes: 1, HTTPClient: &http.Client{}}, true},
		{"NoBucket", objstore.S3Config{AccessKey: "k", SecretKey: "s"}, false},
		{"PrefixWithoutSlash", objstore.S3Config{Bucket: "b", Prefix: "events"}, false},
		{"PrefixAbsolute", objstore.S3Config{Bucket: "b", Prefix: "/events/"}, false},
		{"PrefixClimbs", objstore.S3Config{Bucket: "b", Prefix: "a/../"}, false},
		{"PrefixOnlySlash", objstore.S3Config{Bucket: "b", Prefix: "/"}, false},
		{"EndpointNotURL", objstore.S3Config{Bucket: "b", Endpoint: "127.0.0.1:7070"}, false},
		{"AccessKeyOnly", objstore.S3Config{Bucket: "b", AccessKey: "k"}, false},
		{"SecretKeyOnly", objstore.S3Config{Bucket: "b", SecretKey: "s"}, false},
		{"NegativeTimeout", objstore.S3Config{Bucket: "b", Timeout: -1}, false},
		{"NegativeMaxObjectBytes", objstore.S3Config{Bucket: "b", MaxObjectBytes: -1}, false},
	}
	// The default chain reads the environment and ~/.aws; keep a
	// developer's or CI's AWS settings out of the test.
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_PROFILE", "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := objstore.NewS3Store(context.Background(), tt.cfg)
			if tt.ok && err != nil {
				t.Fatalf("NewS3Store: %v", err)
			}
			if !tt.ok && err == nil {
				t.Fatal("NewS3Store accepted a bad config")
			}
		})
	}
}

// opsPerIter is how many requests one benchmark iteration makes. CI runs
// every benchmark with -benchtime=1x, i.e. one iteration; with one request
// per iteration p50 and p99 would be the same single sample, so each
// iteration makes enough requests for the percentiles to mean something.
// ns/op is therefore per opsPerIter requests; the p50-ms and p99-ms metrics
// are per request.
const opsPerIter = 50

// segmentBody is the size of a busy second's segment: about 60 slim messages.
var segmentBody = bytes.Repeat([]byte{0x93, 0xa4, 't', 'e', 'x', 't', 0x01}, 1536/7)

// reportLatency reports the 50th and 99th percentile of ds in milliseconds.
func reportLatency(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	pct := func(q float64) float64 { return float64(hist.Quantile(ds, q)) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkS3Put measures what the slicer pays per second per room: an
// If-None-Match PUT of a segment-sized body to a fresh key.
func BenchmarkS3Put(b *testing.B) {
	env := testenv.S3(b)
	s := newS3Store(b, env, testPrefix(), nil)
	ctx := context.Background()
	opts := objstore.PutOptions{ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl, IfNoneMatch: true}
	var ds []time.Duration
	sec := int64(1700000000)
	b.SetBytes(int64(len(segmentBody)) * opsPerIter)
	for b.Loop() {
		for range opsPerIter {
			key := wire.SegmentKey("bench", sec)
			sec++
			start := time.Now()
			if _, err := s.Put(ctx, key, segmentBody, opts); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
	}
	reportLatency(b, ds)
}

// BenchmarkS3Get measures an origin read of a segment-sized object, what the
// slicer does after a failover and what a CDN miss costs the server.
func BenchmarkS3Get(b *testing.B) {
	env := testenv.S3(b)
	s := newS3Store(b, env, testPrefix(), nil)
	ctx := context.Background()
	keys := make([]string, opsPerIter)
	for i := range keys {
		keys[i] = wire.SegmentKey("bench", 1700000000+int64(i))
		if _, err := s.Put(ctx, keys[i], segmentBody, objstore.PutOptions{ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl}); err != nil {
			b.Fatal(err)
		}
	}
	var ds []time.Duration
	b.SetBytes(int64(len(segmentBody)) * opsPerIter)
	for b.Loop() {
		for _, key := range keys {
			start := time.Now()
			o, err := s.Get(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
			if len(o.Body) != len(segmentBody) {
				b.Fatalf("Get %s: %d bytes, want %d", key, len(o.Body), len(segmentBody))
			}
		}
	}
	reportLatency(b, ds)
}

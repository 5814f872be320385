package sdkweb_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/auth"
	"danmaku/internal/browsertest"
	"danmaku/internal/sdkweb"
	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
)

func TestServe(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	sdkweb.Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()

	get := func(method, path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, tt := range []struct{ path, typ, contains string }{
		{"/", "text/html; charset=utf-8", `<script type="importmap">`},
		{"/sdk/danmaku.js", "text/javascript; charset=utf-8", "export class DanmakuClient"},
		{"/sdk/demo/demo.js", "text/javascript; charset=utf-8", "from '../danmaku.js'"},
		{"/sdk/demo/demo.css", "text/css; charset=utf-8", ".stage"},
		{"/sdk/vendor/msgpack.mjs", "text/javascript; charset=utf-8", "@msgpack/msgpack 3."},
		// hls.js, which the demo imports by path when there is video
		// (the scan of the page below does not see a dynamic import).
		{"/sdk/demo/demo.js", "text/javascript; charset=utf-8", "import('/sdk/vendor/hls.mjs')"},
		{"/sdk/vendor/hls.mjs", "text/javascript; charset=utf-8", "/*! hls.js "},
		{"/sdk/demo/index.html", "text/html; charset=utf-8", "/sdk/vendor/msgpack.mjs"},
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			resp, body := get(method, tt.path)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tt.typ || resp.Header.Get("Cache-Control") != "no-cache" {
				t.Errorf("%s %s: %d %q %q", method, tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
			}
			if method == http.MethodGet && !strings.Contains(body, tt.contains) {
				t.Errorf("GET %s: body lacks %q", tt.path, tt.contains)
			}
			if method == http.MethodHead && body != "" {
				t.Errorf("HEAD %s: a body", tt.path)
			}
		}
	}
	resp, _ := get(http.MethodGet, "/sdk/danmaku.js")
	if r, _ := get(http.MethodGet, "/sdk/danmaku.js", "If-None-Match", resp.Header.Get("ETag")); r.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: %d, want 304", r.StatusCode)
	}
	// Only what a page loads: not the Go source, the tests, the tooling.
	for _, path := range []string{"/sdk/web.go", "/sdk/../web.go", "/sdk/test/browser.mjs", "/sdk/package.json", "/sdk/demo", "/sdk/", "/sdk/nope.js"} {
		if r, body := get(http.MethodGet, path); r.StatusCode != http.StatusNotFound || !strings.Contains(body, `"not_found"`) {
			t.Errorf("GET %s: %d %s, want a coded 404", path, r.StatusCode, body)
		}
	}
	// Every script and style the page names is served.
	_, page := get(http.MethodGet, "/")
	for _, m := range regexp.MustCompile(`(?:src|href)="(/sdk/[^"]+)"|"@msgpack/msgpack": "([^"]+)"`).FindAllStringSubmatch(page, -1) {
		ref := m[1] + m[2]
		if r, _ := get(http.MethodGet, ref); r.StatusCode != http.StatusOK {
			t.Errorf("the page refers to %s: %d", ref, r.StatusCode)
		}
	}
}

// tools finds node, chromium and sdk/web's node_modules (browsertest.Node):
// a test that needs them skips when they are missing, or fails under
// CI/DANMAKU_REQUIRE_SERVERS.
func tools(tb testing.TB, browser bool) string { return browsertest.Node(tb, browser) }

// TestUnitJS runs the SDK's unit tests and its compatibility tests against
// the previous release's decoders (no browser).
func TestUnitJS(t *testing.T) {
	node := tools(t, false)
	runNode(t, node, nil, 2*time.Minute, "--test", "test/unit.test.mjs", "test/compat.test.mjs")
}

// TestBrowser runs the demo page in chromium against the whole pipeline in
// this process: join, send through the send box, a flood, hidden, a gift;
// in a room of 1 s segments and in one of 250 ms (version 2, keys in ms);
// then takedowns and reports.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser test runs half a minute of real segments")
	}
	node := tools(t, true)
	for _, ms := range []int64{1000, 250} {
		t.Run(fmt.Sprintf("segment_ms=%d", ms), func(t *testing.T) {
			// The page reports every second (?report=1000); the edge
			// takes reports that often here (its default is one per 5 s
			// against the SDKs' 10 s).
			st := startStack(t, stack.Config{SegmentMs: ms, EdgeReportEvery: time.Nanosecond})
			runNode(t, node, []string{"DANMAKU_GSLB=" + st.URLs[stack.RoleGSLB]}, 4*time.Minute, "test/browser.mjs")
			// The page's reports were all taken by the edge, and their
			// service-level fields reached its metrics.
			r := stacktest.Reports(t, st)
			t.Logf("edge: %+v", r)
			if r.Refused != 0 || r.FirstPolls == 0 || r.Latencies == 0 {
				t.Errorf("edge: %+v; want none refused, some first polls and latencies", r)
			}
		})
	}
	// Takedowns and reports on the demo page (test/takedown.mjs): a comment
	// taken down leaves the stage, the render queue and a late joiner's
	// screen; a viewer reports one, a host takes one down. The stack does
	// not publish takedowns yet, so the page's CDN and ingest requests for
	// them go through a fake in the browser (playwright routing) in front
	// of this real stack.
	// The host is a real one: a ticket scoped to the test's room, which the
	// page takes from its fragment.
	t.Run("takedown", func(t *testing.T) {
		st := startStack(t, stack.Config{})
		room := fmt.Sprintf("td-%d", time.Now().UnixNano()%1e9)
		host, err := auth.MintTicket(auth.DevTicketKey, "hana", auth.Ticket{Nick: "hana", Role: auth.RoleHost, Rooms: []string{room}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		env := []string{"DANMAKU_GSLB=" + st.URLs[stack.RoleGSLB], "DANMAKU_ROOM=" + room, "DANMAKU_HOST_TICKET=" + host}
		// Once the stack serves the takedown API (anything but 404 without
		// a key), the page also sees a takedown made through it, relayed
		// by the edge, and a page that joins afterwards holds it from the
		// list the slicer writes and the manifest's td names ("all").
		resp, err := http.Post(st.URLs[stack.RoleIngest]+"/v1/admin/rooms/"+room+"/takedowns", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			env = append(env, "DANMAKU_REAL_TAKEDOWNS=all")
		} else {
			t.Log("the stack serves no takedown API yet: the page's takedowns all come from the fake")
		}
		runNode(t, node, env, 4*time.Minute, "test/takedown.mjs")
	})
}

// BenchmarkBrowserFPS reports the demo page's frames per second with the
// CPU throttled 4× while 60 comments a second arrive for 10 s (test/fps.mjs).
// DANMAKU_SCREENSHOT=docs/demo-screenshot.png (relative to the repository
// root) also saves a screenshot under that load.
func BenchmarkBrowserFPS(b *testing.B) {
	node := tools(b, true)
	// A budget well above the 60 comments a second posted, so that the
	// slicer is not what limits the rate.
	st := startStack(b, stack.Config{Budget: 300})
	env := []string{"DANMAKU_GSLB=" + st.URLs[stack.RoleGSLB]}
	if p := os.Getenv("DANMAKU_SCREENSHOT"); p != "" && !filepath.IsAbs(p) {
		env = append(env, "DANMAKU_SCREENSHOT="+filepath.Join("..", "..", p))
	}
	var out string
	for range b.N {
		out = runNode(b, node, env, 3*time.Minute, "test/fps.mjs")
	}
	m := regexp.MustCompile(`fps: median (\d+), p5 (\d+)`).FindStringSubmatch(out)
	if m == nil {
		b.Fatalf("no fps figure in:\n%s", out)
	}
	median, _ := strconv.Atoi(m[1])
	p5, _ := strconv.Atoi(m[2])
	b.ReportMetric(float64(median), "fps-median")
	b.ReportMetric(float64(p5), "fps-p5")
}

// runNode runs node with args in sdk/web and fails unless it exits 0. It
// returns what it printed.
func runNode(tb testing.TB, node string, env []string, timeout time.Duration, args ...string) string {
	tb.Helper()
	return browsertest.Run(tb, node, "", append([]string{"DANMAKU_SERVICE_KEY=" + stack.DevServiceKey}, env...), timeout, args...)
}

// startStack runs every role with the demo page on free loopback ports
// until the test ends, as `danmaku dev` does on fixed ones.
func startStack(tb testing.TB, cfg stack.Config) *stack.Stack {
	tb.Helper()
	cfg.Dev = true
	st := stacktest.Start(tb, cfg)
	resp, err := http.Get(st.URLs[stack.RoleGSLB] + "/")
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("the gslb does not serve the demo page at / (%d): Config.Dev should call sdkweb.Register on its engine", resp.StatusCode)
	}
	return st
}

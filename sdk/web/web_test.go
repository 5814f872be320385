package web_test

import (
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"danmaku/sdk/web"
	"danmaku/sdk/wire"
)

// TestFiles: what a page loads is embedded, the tooling is not.
func TestFiles(t *testing.T) {
	for _, name := range []string{"danmaku.js", "demo/index.html", "demo/demo.js", "demo/demo.css", "vendor/msgpack.mjs"} {
		if b, err := fs.ReadFile(web.Files, name); err != nil || len(b) == 0 {
			t.Errorf("%s: %d bytes, %v", name, len(b), err)
		}
	}
	for _, name := range []string{"web.go", "package.json", "test/browser.mjs"} {
		if _, err := fs.Stat(web.Files, name); err == nil {
			t.Errorf("%s is embedded", name)
		}
	}
}

// TestReportBoundsMatchWire: the browser SDK's copy of the report's latency
// buckets and per-report bounds is the one the edge holds reports to.
func TestReportBoundsMatchWire(t *testing.T) {
	src, err := os.ReadFile("danmaku.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`LATENCY_BOUNDS_MS = Object\.freeze\(\[([0-9, ]+)\]\)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("danmaku.js: no LATENCY_BOUNDS_MS")
	}
	var got []int64
	for _, f := range strings.Split(string(m[1]), ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if !slices.Equal(got, wire.LatencyBoundsMs[:]) {
		t.Errorf("LATENCY_BOUNDS_MS = %v, wire.LatencyBoundsMs = %v", got, wire.LatencyBoundsMs)
	}
	b := regexp.MustCompile(`MAX_REPORT_SEGMENTS = (\d+), MAX_REPORT_LATENCIES = (\d+);`).FindSubmatch(src)
	if b == nil || string(b[1]) != strconv.Itoa(wire.MaxReportSegments) || string(b[2]) != strconv.Itoa(wire.MaxReportLatencies) {
		t.Errorf("danmaku.js report bounds %q, want %d and %d", b, wire.MaxReportSegments, wire.MaxReportLatencies)
	}
	if d := regexp.MustCompile(`MAX_REPORT_DELTA = (\d+);`).FindSubmatch(src); d == nil || string(d[1]) != strconv.Itoa(wire.MaxReportCounter) {
		t.Errorf("danmaku.js MAX_REPORT_DELTA %q, want %d", d, wire.MaxReportCounter)
	}
}

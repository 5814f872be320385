package sdkweb_test

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
	"danmaku/internal/testenv"
)

// TestBrowserPlayhead runs test/playhead.mjs: three chromium viewers of the
// stack's live HLS test stream (internal/hlsdemo) in one room, a sender 3 s
// behind live, a receiver 12 s behind and one at live. The receiver shows
// each of the sender's 50 comments when its own playhead reaches the
// sender's — never earlier, display skew p99 ≤ 150 ms — and the viewer
// ahead shows them at once, counted late. The clients' skew reports reach
// the edge's danmaku_client_display_skew_seconds. It needs ffmpeg (make
// deps installs it), and skips without it.
func TestBrowserPlayhead(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		msg := "no ffmpeg (Debian package ffmpeg; make deps installs it): no live HLS stream to play"
		if testenv.RequireServers() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node := tools(t, true)
	st := startStack(t, stack.Config{DevVideo: true, EdgeReportEvery: time.Nanosecond})
	out := runNode(t, node, []string{"DANMAKU_GSLB=" + st.URLs[stack.RoleGSLB]}, 5*time.Minute, "test/playhead.mjs")
	m := regexp.MustCompile(`display skew: p50 (-?\d+) ms, p99 (-?\d+) ms, max (-?\d+) ms`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no display skew in:\n%s", out)
	}
	p99, _ := strconv.Atoi(m[2])
	t.Logf("display skew over 50 comments: p50 %s ms, p99 %s ms, max %s ms", m[1], m[2], m[3])
	if p99 > 150 {
		t.Errorf("display skew p99 %d ms, want ≤ 150", p99)
	}
	// The receiver and the viewer ahead reported their skews to the edge.
	if r := stacktest.Reports(t, st); r.Refused != 0 || r.Skews < 2*50 {
		t.Errorf("edge: %+v; want none refused and at least %d display skews (two viewers' 50 comments)", r, 2*50)
	}
}

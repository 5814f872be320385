package sdkweb_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"danmaku/internal/stack"
	"danmaku/internal/testenv"
)

// TestBrowserVideo runs the demo page in chromium with dev's live HLS test
// stream (test/video.mjs): the video plays (currentTime advances, hls.js's
// playingDate is set), the delay control moves it from 3 s to 15 s behind
// live and back, replay seeks back and shows the controls, comments reach
// the stage, and the page logs no error. Without the stream (Config.DevVideo
// off: 404 no_video) the page falls back to the plain stage and the wall
// clock. DANMAKU_SCREENSHOT=docs/demo-video.png (relative to the repository
// root) also saves the page with video and barrage.
func TestBrowserVideo(t *testing.T) {
	if testing.Short() {
		t.Skip("the video test plays half a minute of live stream")
	}
	node := tools(t, true)
	t.Run("video", func(t *testing.T) {
		if _, err := exec.LookPath("ffmpeg"); err != nil {
			msg := "no ffmpeg: run `make deps` (Debian package ffmpeg) for dev's demo video"
			if testenv.RequireServers() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		st := startStack(t, stack.Config{DevVideo: true, DataDir: t.TempDir()})
		env := []string{"DANMAKU_GSLB=" + st.URLs[stack.RoleGSLB]}
		if p := os.Getenv("DANMAKU_SCREENSHOT"); p != "" && !filepath.IsAbs(p) {
			env = append(env, "DANMAKU_SCREENSHOT="+filepath.Join("..", "..", p))
		}
		runNode(t, node, env, 4*time.Minute, "test/video.mjs")
	})
	t.Run("no_video", func(t *testing.T) {
		st := startStack(t, stack.Config{})
		runNode(t, node, []string{"DANMAKU_GSLB=" + st.URLs[stack.RoleGSLB], "DANMAKU_VIDEO=none"}, 2*time.Minute, "test/video.mjs")
	})
}

package hlsdemo

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/testwait"
)

// The stream's playlist names segments with program date times one
// segment apart, and the handler serves the playlist uncached, segments
// cacheable, and nothing else.
func TestLiveStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Start(ctx, t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Start: %v (make deps installs ffmpeg)", err)
	}
	defer s.Stop()
	playlist := filepath.Join(s.Dir(), Playlist)
	var dates []time.Time
	var segs []string
	testwait.For(t, "three segments in the playlist", func() bool {
		select {
		case <-s.Done():
			t.Fatalf("ffmpeg stopped: %v", s.Err())
		default:
		}
		b, err := os.ReadFile(playlist)
		if err != nil {
			return false
		}
		dates, segs = nil, nil
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "#EXT-X-PROGRAM-DATE-TIME:"); ok {
				d, err := time.Parse("2006-01-02T15:04:05.999Z0700", v)
				if err != nil {
					t.Fatalf("program date time %q: %v", v, err)
				}
				dates = append(dates, d)
			}
			if strings.HasSuffix(line, ".ts") {
				segs = append(segs, line)
			}
		}
		return len(segs) >= 3
	})
	if len(dates) != len(segs) {
		t.Fatalf("%d program date times for %d segments", len(dates), len(segs))
	}
	for i := 1; i < len(dates); i++ {
		if d := dates[i].Sub(dates[i-1]); d < 500*time.Millisecond || d > 2*time.Second {
			t.Errorf("program date times %v apart, want about a segment (1 s)", d)
		}
	}

	gin.SetMode(gin.TestMode)
	e := gin.New()
	s.Register(e)
	get := func(p string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		return rec
	}
	if rec := get("/hls/" + Playlist); rec.Code != 200 || rec.Header().Get("Cache-Control") != "no-cache" || !strings.Contains(rec.Body.String(), "#EXT-X-PROGRAM-DATE-TIME") {
		t.Errorf("playlist: %d %v", rec.Code, rec.Header())
	}
	if rec := get("/hls/" + segs[0]); rec.Code != 200 || rec.Header().Get("Content-Type") != "video/mp2t" || rec.Body.Len() == 0 {
		t.Errorf("segment: %d %v", rec.Code, rec.Header())
	}
	for _, p := range []string{"/hls/../../etc/passwd", "/hls/seg999999.ts", "/hls/other.txt"} {
		if rec := get(p); rec.Code != 404 {
			t.Errorf("%s: %d, want 404", p, rec.Code)
		}
	}
	s.Stop()
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Errorf("the stream's directory outlived it: %v", err)
	}
}

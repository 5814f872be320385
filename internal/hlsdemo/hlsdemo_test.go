package hlsdemo

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	s := startStream(t, History)
	pl := waitPlaylist(t, s, "three segments in the playlist", func(pl playlistInfo) bool { return len(pl.segs) >= 3 })
	dates, segs := pl.dates, pl.segs
	// A young stream's playlist still names its first segment: it keeps
	// History, not the last few segments.
	if pl.seq != 0 || segs[0] != "seg0.ts" {
		t.Errorf("media sequence %d, first segment %s: want the stream from its start (seg0.ts)", pl.seq, segs[0])
	}
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

// The playlist reaches back History, an hour of one-second segments, as a
// sliding window: a live playlist (no EXT-X-PLAYLIST-TYPE, which would be
// an EVENT playlist growing for ever), whose segments leaving the window are
// deleted.
func TestHistoryArgs(t *testing.T) {
	a := Args("/x")
	i := slices.Index(a, "-hls_list_size")
	if i < 0 || a[i+1] != strconv.Itoa(int(History/time.Second)/segmentSeconds) || History != time.Hour {
		t.Errorf("-hls_list_size: %v (History %v), want an hour of %d s segments", a, History, segmentSeconds)
	}
	if slices.Contains(a, "-hls_playlist_type") {
		t.Errorf("a playlist type in %v: an EVENT playlist never drops a segment", a)
	}
	if i := slices.Index(a, "-hls_flags"); i < 0 || !strings.Contains(a[i+1], "delete_segments") {
		t.Errorf("-hls_flags without delete_segments: %v", a)
	}
}

// The window slides: a stream whose history is 3 s names its last three
// segments, in order, and the older ones are gone from the disk.
func TestHistorySlides(t *testing.T) {
	s := startStream(t, 3*time.Second)
	pl := waitPlaylist(t, s, "the window to slide past seg4", func(pl playlistInfo) bool { return pl.seq >= 5 })
	if len(pl.segs) != 3 || len(pl.dates) != 3 {
		t.Fatalf("%d segments, %d program date times in the window, want 3: %v", len(pl.segs), len(pl.dates), pl.segs)
	}
	for i, seg := range pl.segs {
		if want := fmt.Sprintf("seg%d.ts", pl.seq+i); seg != want {
			t.Errorf("segment %d of the window is %s, want %s (media sequence %d)", i, seg, want, pl.seq)
		}
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "seg0.ts")); !os.IsNotExist(err) {
		t.Errorf("seg0.ts left the window but not the disk: %v", err)
	}
}

// startStream runs ffmpeg for the test (stopped at its end), its playlist
// reaching back history.
func startStream(t *testing.T, history time.Duration) *Stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := start(ctx, t.TempDir(), slog.New(slog.DiscardHandler), history)
	if err != nil {
		t.Fatalf("start: %v (make deps installs ffmpeg)", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// waitPlaylist reads the stream's playlist until ok says it is what the
// test waits for; ffmpeg stopping fails the test.
func waitPlaylist(t *testing.T, s *Stream, what string, ok func(playlistInfo) bool) playlistInfo {
	t.Helper()
	var pl playlistInfo
	testwait.For(t, what, func() bool {
		select {
		case <-s.Done():
			t.Fatalf("ffmpeg stopped: %v", s.Err())
		default:
		}
		pl = readPlaylist(t, filepath.Join(s.Dir(), Playlist))
		return ok(pl)
	})
	return pl
}

type playlistInfo struct {
	seq   int // EXT-X-MEDIA-SEQUENCE: the first segment's number
	dates []time.Time
	segs  []string
}

// readPlaylist parses what the tests need of ffmpeg's playlist; a missing
// file (not written yet) is an empty one.
func readPlaylist(t *testing.T, name string) playlistInfo {
	t.Helper()
	var pl playlistInfo
	b, err := os.ReadFile(name)
	if err != nil {
		return pl
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "#EXT-X-MEDIA-SEQUENCE:"); ok {
			if pl.seq, err = strconv.Atoi(v); err != nil {
				t.Fatalf("media sequence %q: %v", v, err)
			}
		}
		if v, ok := strings.CutPrefix(line, "#EXT-X-PROGRAM-DATE-TIME:"); ok {
			d, err := time.Parse("2006-01-02T15:04:05.999Z0700", v)
			if err != nil {
				t.Fatalf("program date time %q: %v", v, err)
			}
			pl.dates = append(pl.dates, d)
		}
		if strings.HasSuffix(line, ".ts") {
			pl.segs = append(pl.segs, line)
		}
	}
	return pl
}

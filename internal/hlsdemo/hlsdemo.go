// Package hlsdemo makes the live video the demo page plays under the
// barrage: ffmpeg's test pattern with the wall clock burnt in and a beep each
// second, cut into one-second HLS segments whose playlist carries
// EXT-X-PROGRAM-DATE-TIME, served over HTTP. A player's program date time
// is then the moment on screen, and a viewer told to stay 3 s or 15 s behind
// live shows what playhead sync does (docs/architecture.md, "Playhead sync").
//
// It needs the ffmpeg binary (Debian package ffmpeg; `make deps` installs
// it). Without one, Start says so with ErrNoFFmpeg and the page plays no
// video: the barrage runs by the wall clock, as before.
package hlsdemo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"danmaku/internal/httpx"
)

// ErrNoFFmpeg is returned by Start when no ffmpeg binary is on the PATH.
var ErrNoFFmpeg = errors.New("hlsdemo: ffmpeg not found (Debian package ffmpeg)")

// Playlist is the live playlist's name under the stream's URL prefix.
const Playlist = "live.m3u8"

// segmentSeconds is one HLS segment's length.
const segmentSeconds = 1

// History is how far back the live playlist reaches: a sliding window of
// an hour's segments (3,600 names, about 270 KB of playlist), so that the
// demo page's replay mode can seek back into the show and a player can sit
// 15 s behind live. ffmpeg deletes the segments that leave the window, so a
// dev running all day keeps an hour on disk (about 100 MB), not the day an
// EVENT playlist (-hls_playlist_type event, which never drops a segment)
// would keep.
const History = time.Hour

// Stream is a running ffmpeg writing the live stream into a directory.
type Stream struct {
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  *slog.Logger
	once sync.Once
}

// Start runs ffmpeg until ctx ends or Stop is called, writing the stream
// into a new directory under dir (empty: the system's temporary directory),
// removed at the end.
func Start(ctx context.Context, dir string, log *slog.Logger) (*Stream, error) {
	return start(ctx, dir, log, History)
}

// start is Start with the playlist's reach (whole segments, at least one).
func start(ctx context.Context, dir string, log *slog.Logger, history time.Duration) (*Stream, error) {
	bin, err := exec.LookPath("ffmpeg")
	if err != nil {
		return nil, ErrNoFFmpeg
	}
	if log == nil {
		log = slog.Default()
	}
	out, err := os.MkdirTemp(dir, "danmaku-hls-")
	if err != nil {
		return nil, fmt.Errorf("hlsdemo: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, args(out, history)...)
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4 << 10}
	// Stop asks ffmpeg to finish its segment; a kill follows if it does not.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 3 * time.Second
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(out)
		return nil, fmt.Errorf("hlsdemo: start ffmpeg: %w", err)
	}
	s := &Stream{dir: out, cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		err := cmd.Wait()
		if ctx.Err() == nil && err != nil {
			s.err = fmt.Errorf("hlsdemo: ffmpeg: %w: %s", err, strings.TrimSpace(stderr.String()))
			log.Warn("hlsdemo: the demo video stopped", "err", s.err)
		}
		_ = os.RemoveAll(out)
		close(s.done)
	}()
	return s, nil
}

// Args are ffmpeg's arguments for a live stream into dir: a 640×360 test
// pattern at 25 fps with the wall clock (to the millisecond) drawn on it,
// a 1 kHz beep at each second, H.264 with a key frame each second so that
// every segment starts one, and a playlist with program date times naming
// the last History of segments.
func Args(dir string) []string { return args(dir, History) }

func args(dir string, history time.Duration) []string {
	listSize := max(1, int(history/(segmentSeconds*time.Second)))
	clock := "drawtext=text='%{localtime\\:%H\\\\\\:%M\\\\\\:%S}':fontsize=64:fontcolor=white:box=1:boxcolor=black@0.6:boxborderw=12:x=(w-tw)/2:y=h-th-40"
	return []string{
		"-hide_banner", "-loglevel", "error", "-nostdin",
		"-re", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25",
		"-re", "-f", "lavfi", "-i", "sine=frequency=1000:beep_factor=4:sample_rate=48000",
		"-vf", clock,
		"-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-pix_fmt", "yuv420p",
		"-g", "25", "-keyint_min", "25", "-sc_threshold", "0",
		"-c:a", "aac", "-b:a", "64k",
		"-f", "hls", "-hls_time", fmt.Sprint(segmentSeconds), "-hls_list_size", fmt.Sprint(listSize),
		"-hls_flags", "delete_segments+program_date_time+independent_segments",
		"-hls_segment_filename", filepath.Join(dir, "seg%d.ts"),
		filepath.Join(dir, Playlist),
	}
}

// Dir is where the stream is written.
func (s *Stream) Dir() string { return s.dir }

// Err is why ffmpeg stopped on its own, once Done is closed.
func (s *Stream) Err() error { <-s.done; return s.err }

// Done is closed when ffmpeg has exited and the directory is gone.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Stop ends ffmpeg and waits for it.
func (s *Stream) Stop() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(os.Interrupt)
		}
	})
	<-s.done
}

// Register serves the stream at /hls/FILE on e: the playlist uncached (it
// changes every second), segments cacheable (they never change). Only the
// names ffmpeg writes are served.
func (s *Stream) Register(e *gin.Engine) { RegisterFunc(e, func() *Stream { return s }) }

// RegisterFunc is Register for a stream that may not run yet, or any more:
// cur returns it, or nil (then every file is 404 no_video).
func RegisterFunc(e *gin.Engine, cur func() *Stream) {
	h := func(c *gin.Context) {
		s := cur()
		if s == nil {
			httpx.Abort(c, httpx.Errorf(http.StatusNotFound, "no_video", "no demo video: ffmpeg is not installed or has stopped"))
			return
		}
		name := path.Base(path.Clean("/" + c.Param("file")))
		switch {
		case name == Playlist:
			c.Header("Cache-Control", "no-cache")
			c.Header("Content-Type", "application/vnd.apple.mpegurl")
		case strings.HasPrefix(name, "seg") && strings.HasSuffix(name, ".ts"):
			c.Header("Cache-Control", "public, max-age=60")
			c.Header("Content-Type", "video/mp2t")
		default:
			httpx.Abort(c, httpx.Errorf(http.StatusNotFound, httpx.CodeNotFound, "no such file"))
			return
		}
		b, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			httpx.Abort(c, httpx.Errorf(http.StatusNotFound, httpx.CodeNotFound, "no such file"))
			return
		}
		c.Data(http.StatusOK, c.Writer.Header().Get("Content-Type"), b)
	}
	e.GET("/hls/*file", h)
	e.HEAD("/hls/*file", h)
}

// limitedWriter keeps the first n bytes written to it (ffmpeg's complaint).
type limitedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
	n  int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

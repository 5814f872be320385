package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"danmaku/internal/testenv"
	"danmaku/internal/testwait"
)

// TestNewcomerCommands is the scripted check of the README: it builds the
// binary, starts `danmaku dev`, runs `danmaku watch` and `danmaku send` the
// way a newcomer does in three terminals, and finds the comment in watch's
// output. Timeouts only guard against hanging.
func TestNewcomerCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := binary(t)
	ports := freePorts(t, 5)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	entry := "http://" + addr(0)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dev := exec.CommandContext(ctx, bin, "dev", "-gslb", addr(0), "-ingest", addr(1), "-edge", addr(2), "-origin", addr(3), "-slicer", addr(4))
	devOut := startLines(t, dev)
	devOut.waitFor(t, ctx, "press Ctrl-C to stop")
	// The demo video: dev runs ffmpeg (make deps installs it) and serves
	// its live playlist, with program date times, beside the demo page.
	testwait.For(t, "dev's demo video playlist", func() bool {
		resp, err := http.Get(entry + "/hls/live.m3u8")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), "#EXT-X-PROGRAM-DATE-TIME")
	})

	watch := exec.CommandContext(ctx, bin, "watch", "-entry", entry, "-room", "demo", "-n", "1")
	watchOut := startLines(t, watch)
	watchOut.waitFor(t, ctx, "watching room demo")

	const text = "hello from a newcomer"
	send := exec.CommandContext(ctx, bin, "send", "-entry", entry, "-room", "demo", "-user", "newbie", text)
	if out, err := send.CombinedOutput(); err != nil {
		t.Fatalf("danmaku send: %v\n%s", err, out)
	}
	line := watchOut.waitFor(t, ctx, text)
	if !strings.Contains(line, "barrage newbie: "+text) {
		t.Fatalf("watch printed %q", line)
	}
	if err := watch.Wait(); err != nil {
		t.Fatalf("watch -n 1 did not exit cleanly: %v\n%s", err, watchOut.all())
	}

	// The same comment replays from the segments.
	replay := exec.CommandContext(ctx, bin, "replay", "-cdn", "http://"+addr(3)+"/", "-room", "demo", "-last", "30s")
	if out, err := replay.CombinedOutput(); err != nil || !strings.Contains(string(out), "barrage newbie: "+text) {
		t.Fatalf("danmaku replay: %v\n%s", err, out)
	}

	// Ctrl-C stops dev cleanly.
	if err := dev.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := dev.Wait(); err != nil {
		t.Fatalf("dev exit: %v\n%s", err, devOut.all())
	}
	devOut.waitFor(t, ctx, "stopped")
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := testenv.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// lines collects a process's output (stdout and stderr: logs go to stderr)
// line by line.
type lines struct {
	mu    sync.Mutex
	lines []string
	added chan struct{}
}

func startLines(t *testing.T, cmd *exec.Cmd) *lines {
	t.Helper()
	l := &lines{added: make(chan struct{}, 1)}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // the child holds its own copy; EOF comes when it exits
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path)+" "+cmd.Args[1], l.all())
		}
	})
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			l.mu.Unlock()
			select {
			case l.added <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

func (l *lines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *lines) waitFor(t *testing.T, ctx context.Context, sub string) string {
	t.Helper()
	for {
		l.mu.Lock()
		for _, s := range l.lines {
			if strings.Contains(s, sub) {
				l.mu.Unlock()
				return s
			}
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %q", sub)
		case <-l.added:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

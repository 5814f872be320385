// Package testenv starts the real servers that integration tests talk to —
// Redis, an S3-compatible object store (versitygw) and a CDN stand-in
// (Varnish) — each on a free loopback port inside the test's temporary
// directory, waits until it answers, and stops it when the test ends.
//
// A missing server binary skips the test with a message saying how to install
// it, unless RequireServers reports true (env CI or DANMAKU_REQUIRE_SERVERS
// set), in which case the test fails: CI must never pass by skipping.
//
// Every function may be called from parallel tests; each call starts its own
// server, so tests never share state through a server.
package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// readyTimeout bounds how long a server may take to answer after start:
	// a guard against a hung server, never a measure of its speed. Varnish
	// compiles its VCL with the C compiler first, the slowest of the three:
	// under a CPU hog beside a busy 2-core machine that took more than 15 s.
	readyTimeout = 90 * time.Second
	// readyPoll is the pause between readiness probes.
	readyPoll = 25 * time.Millisecond
	// stopTimeout is how long a server gets to exit after SIGTERM before its
	// process group is killed.
	stopTimeout = 5 * time.Second
	// startAttempts bounds retries when a server loses the race for the port
	// it was given (the port is free when chosen, not when bound).
	startAttempts = 3
)

// RequireServers reports whether a missing server binary must fail a test
// instead of skipping it: true when env CI or DANMAKU_REQUIRE_SERVERS is set
// to anything but "", "0" or "false".
func RequireServers() bool {
	return envTrue("CI") || envTrue("DANMAKU_REQUIRE_SERVERS")
}

func envTrue(name string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "", "0", "false", "no":
		return false
	}
	return true
}

// binary describes how to find one server program.
type binary struct {
	name    string   // program name looked up on PATH
	envVar  string   // overrides the lookup with an explicit path
	extra   []string // directories tried after PATH
	install string   // how to install it, for the skip message
}

var (
	redisBinary = binary{
		name:    "redis-server",
		envVar:  "DANMAKU_REDIS_SERVER",
		extra:   []string{"/usr/bin", "/usr/local/bin"},
		install: "Debian package redis-server",
	}
	versitygwBinary = binary{
		name:    "versitygw",
		envVar:  "DANMAKU_VERSITYGW",
		extra:   goBinDirs(),
		install: "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0",
	}
	varnishdBinary = binary{
		name:    "varnishd",
		envVar:  "DANMAKU_VARNISHD",
		extra:   []string{"/usr/sbin", "/usr/local/sbin"},
		install: "Debian package varnish",
	}
)

// goBinDirs lists where `go install` puts programs, without running the go
// command: $GOBIN, then the bin directory of each $GOPATH entry, then the
// default $HOME/go/bin.
func goBinDirs() []string {
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	for _, p := range filepath.SplitList(os.Getenv("GOPATH")) {
		if p != "" {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	return dirs
}

// find returns the program's path or an error saying where it looked.
func (b binary) find() (string, error) {
	if p := os.Getenv(b.envVar); p != "" {
		if isExecutable(p) {
			return p, nil
		}
		return "", fmt.Errorf("%s=%s is not an executable file", b.envVar, p)
	}
	if p, err := exec.LookPath(b.name); err == nil {
		return p, nil
	}
	for _, d := range b.extra {
		if p := filepath.Join(d, b.name); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in %s (set %s to its path)",
		b.name, strings.Join(b.extra, ", "), b.envVar)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// require returns the program's path, or skips or fails t when it is missing.
func (b binary) require(t testing.TB) string {
	t.Helper()
	p, err := b.find()
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("testenv: %v; run `make deps` to install it (%s)", err, b.install)
	if RequireServers() {
		t.Fatalf("%s [servers are required: CI or DANMAKU_REQUIRE_SERVERS is set]", msg)
	}
	t.Skip(msg)
	return ""
}

// process is one running server.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed
}

// startProcess runs bin with args in its own process group (so that a
// server's children — Varnish's worker — are stopped with it), output going
// to a log file in dir.
func startProcess(name, bin string, args []string, dir string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("testenv: create %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("testenv: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, waits stopTimeout, then sends
// SIGKILL; finally it kills whatever is left in the group (a worker whose
// parent died first).
func (p *process) stop() {
	pgid := p.cmd.Process.Pid
	if !p.exited() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// logTail returns the last lines of the server's output, for failure messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const maxLines = 40
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > maxLines {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return "(empty log)"
	}
	return strings.Join(lines, "\n")
}

// errExited is returned by waitReady when the server died while starting.
var errExited = errors.New("exited while starting")

// waitReady polls ready until it succeeds, the process exits or
// readyTimeout passes.
func (p *process) waitReady(ready func() error) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%s %w (%v)", p.name, errExited, p.waitErr)
		}
		if last = ready(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", p.name, readyTimeout, last)
		}
		time.Sleep(readyPoll)
	}
}

// serve starts a server on a fresh port, retrying when it exits while
// starting (typically because another process took the port), and registers
// its stop with t.Cleanup. args gets the port and the attempt's directory;
// ready probes the port.
func serve(t testing.TB, name, bin string, dir string, args func(port int, dir string) ([]string, error), ready func(port int) error) int {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := FreePort(t)
		adir := filepath.Join(dir, fmt.Sprintf("%s-%d", name, attempt))
		if err := os.MkdirAll(adir, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		a, err := args(port, adir)
		if err != nil {
			t.Fatalf("testenv: %s: %v", name, err)
		}
		p, err := startProcess(name, bin, a, adir)
		if err != nil {
			t.Fatal(err)
		}
		err = p.waitReady(func() error { return ready(port) })
		if err == nil {
			t.Cleanup(func() {
				p.stop()
				if t.Failed() {
					t.Logf("testenv: %s log (%s):\n%s", name, p.logPath, p.logTail())
				}
			})
			return port
		}
		p.stop()
		if errors.Is(err, errExited) && attempt < startAttempts {
			t.Logf("testenv: %v; retrying on another port; log:\n%s", err, p.logTail())
			continue
		}
		t.Fatalf("testenv: %v\ncommand: %s %s\nlog (%s):\n%s", err, bin, strings.Join(a, " "), p.logPath, p.logTail())
	}
}

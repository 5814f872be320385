// Package browsertest finds what the browser tests need — node, Debian's
// chromium and sdk/web's node_modules (playwright-core) — and runs their
// node scripts, which launch chromium through sdk/web/test/lib.mjs (never
// a downloaded browser). A test that needs them skips when they are
// missing, or fails under CI or DANMAKU_REQUIRE_SERVERS. It keeps no
// state; its functions are safe for concurrent use.
package browsertest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// WebDir is sdk/web, where the browser SDK, its tests and its npm packages
// are, found from the working directory upwards (a package's tests run in
// its own folder).
func WebDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		web := filepath.Join(dir, "sdk", "web")
		if _, err := os.Stat(filepath.Join(web, "package.json")); err == nil {
			return web
		}
		up := filepath.Dir(dir)
		if up == dir {
			tb.Fatal("browsertest: no sdk/web/package.json above the working directory")
		}
		dir = up
	}
}

// Chromium is the browser the tests launch: DANMAKU_CHROMIUM, or Debian's
// /usr/bin/chromium.
func Chromium() string {
	if p := os.Getenv("DANMAKU_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// Node finds node, and with browser also chromium and playwright-core,
// and returns node's path; it skips (or fails, see the package doc) when
// one is missing, naming the command that installs them.
func Node(tb testing.TB, browser bool) string {
	tb.Helper()
	web := WebDir(tb)
	var missing []string
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node")
	}
	need := []string{"node_modules/@msgpack/msgpack/package.json"}
	if browser {
		need = append(need, "node_modules/playwright-core/package.json")
		if _, err := os.Stat(Chromium()); err != nil {
			missing = append(missing, "chromium ("+Chromium()+")")
		}
	}
	for _, f := range need {
		if _, err := os.Stat(filepath.Join(web, f)); err != nil {
			missing = append(missing, "sdk/web/"+filepath.Dir(f))
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("missing %s: run `bash sdk/web/deps.sh` (Debian's chromium and nodejs/npm with apt-get, then npm ci in sdk/web; no browser is downloaded)", strings.Join(missing, ", "))
		if os.Getenv("CI") != "" || os.Getenv("DANMAKU_REQUIRE_SERVERS") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return node
}

// Run runs node with args in dir (sdk/web when empty), with env added to
// the environment and DANMAKU_CHROMIUM set, and fails unless it exits 0
// within timeout. It returns what the script printed.
func Run(tb testing.TB, node, dir string, env []string, timeout time.Duration, args ...string) string {
	tb.Helper()
	if dir == "" {
		dir = WebDir(tb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "DANMAKU_CHROMIUM="+Chromium()), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	tb.Logf("node %s:\n%s", strings.Join(args, " "), out.String())
	if err != nil {
		tb.Fatalf("node %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

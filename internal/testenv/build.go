package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Build is a Go main package built once per test binary, for tests that
// run it as its own process (a role, an operator's command). Declare one
// as a package variable, call Path from the tests that need it, and
// Remove from TestMain after m.Run: the binary lives in a directory of
// its own outside any test's TempDir, since every test of the package
// shares it.
type Build struct {
	// Pkg is the package's import path ("danmaku/cmd/danmaku").
	Pkg string
	// Tags are build tags (-tags).
	Tags []string
	// Env is added to the build's environment; set it before the first
	// Path (a GOEXPERIMENT, CGO_ENABLED).
	Env []string

	once      sync.Once
	dir, path string
	err       error
}

// Path builds the binary on its first call and returns its path; a
// failed build fails t, then and on every later call.
func (b *Build) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "danmaku-test-bin-")
		if b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, filepath.Base(b.Pkg))
		args := []string{"build"}
		if len(b.Tags) > 0 {
			args = append(args, "-tags", strings.Join(b.Tags, ","))
		}
		cmd := exec.Command("go", append(args, "-o", b.path, b.Pkg)...)
		cmd.Env = append(os.Environ(), b.Env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", b.Pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove deletes the binary, if it was built.
func (b *Build) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBuild: a Build compiles its package once, with its tags and
// environment, runs, and is gone after Remove.
func TestBuild(t *testing.T) {
	b := &Build{Pkg: "danmaku/internal/testenv/testdata/buildinfo", Tags: []string{"testtag"}, Env: []string{"CGO_ENABLED=0"}}
	p := b.Path(t)
	if again := b.Path(t); again != p {
		t.Fatalf("second Path %q, first %q: built twice", again, p)
	}
	out, err := exec.Command(p).CombinedOutput()
	if err != nil {
		t.Fatalf("running the build: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "tagged cgo=0" {
		t.Errorf("the binary says %q, want %q (its tag and environment)", got, "tagged cgo=0")
	}
	b.Remove()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("after Remove: %v, want the binary gone", err)
	}
}

package mobile

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBind runs bind.sh: gobind generates the Go, Java and Objective-C
// bindings, every exported name binds, and the Java compiles. It is the one
// place the bindings are checked, so `go test ./...` (and so `make test`)
// covers it without a separate step.
func TestBind(t *testing.T) {
	if testing.Short() {
		t.Skip("gobind type-checks the package and its dependencies from source")
	}
	// Most of its time is gobind type-checking: let the other tests run.
	t.Parallel()
	for _, prog := range []string{"go", "bash"} {
		if _, err := exec.LookPath(prog); err != nil {
			missing(t, prog+" not found on PATH")
		}
	}
	// The tool directive in sdk/go.mod pins gobind; resolving it builds it
	// (downloading the module when the cache lacks it).
	if out, err := exec.Command("go", "tool", "-n", "gobind").CombinedOutput(); err != nil {
		missing(t, "go tool gobind does not resolve ("+err.Error()+"): "+string(out)+
			"; install it with: go get -tool golang.org/x/mobile/cmd/gobind@<version>")
	}
	out, err := exec.Command("bash", "bind.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("bind.sh: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// missing skips t, or fails it where CI must not pass by skipping: when
// CI or DANMAKU_REQUIRE_SERVERS is set to anything but "", 0, false or no
// (as the server module's tests and bind.sh read them).
func missing(t *testing.T, msg string) {
	t.Helper()
	required := false
	for _, v := range []string{"CI", "DANMAKU_REQUIRE_SERVERS"} {
		switch strings.ToLower(strings.TrimSpace(os.Getenv(v))) {
		case "", "0", "false", "no":
		default:
			required = true
		}
	}
	if required {
		t.Fatalf("%s [required: CI or DANMAKU_REQUIRE_SERVERS is set]", msg)
	}
	t.Skip(msg)
}

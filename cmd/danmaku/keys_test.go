package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRolesRefuseWithoutKeys runs each role as an operator would, with no
// keys in the environment: each exits non-zero at once and says what to set.
func TestRolesRefuseWithoutKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := binary(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DANMAKU_") {
			env = append(env, kv)
		}
	}
	for role, want := range map[string][]string{
		"gslb":   {"DANMAKU_TICKET_KEY", "DANMAKU_MASTER_KEY", "DANMAKU_OPERATOR_KEYS"},
		"ingest": {"DANMAKU_GIFT_KEYS", "DANMAKU_MASTER_KEY"},
		"edge":   {"DANMAKU_MASTER_KEY"},
		"slicer": {"DANMAKU_OPERATOR_KEYS", "-s3-bucket"},
		"origin": {"-s3-bucket"},
	} {
		t.Run(role, func(t *testing.T) {
			// Port 0 everywhere: a role that did start would not collide.
			// An audit directory, which ingest and slicer need as well: the
			// keys are what this test takes away.
			cmd := exec.Command(bin, role, "-gslb", "127.0.0.1:0", "-ingest", "127.0.0.1:0", "-edge", "127.0.0.1:0", "-origin", "127.0.0.1:0", "-slicer", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-audit-dir", diskDir(t))
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s started without keys:\n%s", role, out)
			}
			for _, w := range want {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s's message does not name %s:\n%s", role, w, out)
				}
			}
		})
	}
}

package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestCalibrateCompare: danmaku calibrate -compare prints the spread of
// the profiles it is given and measures nothing; fewer than two profiles
// or a bad limit is a usage error.
func TestCalibrateCompare(t *testing.T) {
	profile := filepath.Join("..", "..", "infra", "profiles", "this-machine.json")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"calibrate", "-compare", profile, profile}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"ingest_admitted_per_s_per_core", "gslb_idle_cpu_cores", "0 %", "every measured figure within ±15 %"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("no %q in\n%s", want, stdout.String())
		}
	}
	for _, args := range [][]string{{"calibrate", "-compare", profile}, {"calibrate", "-compare", "-limit", "0", profile, profile}} {
		stderr.Reset()
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, stderr.String())
		}
	}
	if code := run([]string{"calibrate", "-compare", profile, filepath.Join(t.TempDir(), "none.json")}, &stdout, &stderr); code == 0 {
		t.Error("a missing profile compared")
	}
}

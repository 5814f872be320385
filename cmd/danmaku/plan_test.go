package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanCommand: danmaku plan on the 10M example and the shipped profile
// prints the table and writes the three files; a bad event is refused
// naming its field.
func TestPlanCommand(t *testing.T) {
	dir := t.TempDir()
	event := filepath.Join("..", "..", "infra", "terraform", "examples", "plan", "concert-10m.event.json")
	profile := filepath.Join("..", "..", "infra", "profiles", "this-machine.json")
	tf, quota, slo := filepath.Join(dir, "p.tfvars"), filepath.Join(dir, "q.md"), filepath.Join(dir, "slo.json")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"plan", "-event", event, "-profile", profile, "-tfvars", tf, "-quota", quota, "-slo-out", slo}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "binds first as the load grows:") {
		t.Errorf("table:\n%s", stdout.String())
	}
	b, err := os.ReadFile(slo)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil || s["gift_delivered_ratio"] != 1.0 {
		t.Errorf("slo %s: %v", b, err)
	}
	for _, f := range []string{tf, quota} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}

	eb, err := os.ReadFile(event)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, bytes.Replace(eb, []byte(`"headroom": 0.7`), []byte(`"headroom": 1.5`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{"plan", "-event", bad, "-profile", profile}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "out_of_range: headroom") {
		t.Errorf("bad event: exit %d, %s", code, stderr.String())
	}
	// A profile of the version before the idle figures is refused, saying
	// to calibrate again: it is never planned with an idle of 0.
	pb, err := os.ReadFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old.json")
	if err := os.WriteFile(old, bytes.Replace(pb, []byte(`"v": 2,`), []byte(`"v": 1,`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{"plan", "-event", event, "-profile", old}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "old_profile: v: profile version 1") || !strings.Contains(stderr.String(), "danmaku calibrate") {
		t.Errorf("old profile: exit %d, %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"plan", "-event", event}, &stdout, &stderr); code != 2 {
		t.Errorf("no -profile: exit %d, %s", code, stderr.String())
	}
}

package terraform_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"danmaku/internal/plan"
)

// The profile the repository ships (`danmaku calibrate` on the machine
// docs/benchmarks.md names), as `danmaku plan -profile` is given it from
// the repository's root.
const shippedProfile = "infra/profiles/this-machine.json"

// TestPlannedExamples: each examples/plan/NAME.event.json, planned on the
// shipped profile, gives exactly the examples/plan/NAME.tfvars and
// NAME.quota.md in the repository — what `danmaku plan` writes from the
// repository's root — so that the .tfvars TestModule plans with the mocked
// provider (test.sh) is the plan's. DANMAKU_UPDATE_PLANS=1 rewrites them.
func TestPlannedExamples(t *testing.T) {
	events, err := filepath.Glob("examples/plan/*.event.json")
	if err != nil || len(events) == 0 {
		t.Fatalf("no examples/plan/*.event.json (%v)", err)
	}
	pb, err := os.ReadFile(filepath.Join("..", "..", shippedProfile))
	if err != nil {
		t.Fatal(err)
	}
	profile, err := plan.DecodeProfile(pb)
	if err != nil {
		t.Fatalf("%s: %v", shippedProfile, err)
	}
	for _, ev := range events {
		name := strings.TrimSuffix(filepath.Base(ev), ".event.json")
		t.Run(name, func(t *testing.T) {
			eb, err := os.ReadFile(ev)
			if err != nil {
				t.Fatal(err)
			}
			event, err := plan.DecodeEvent(eb)
			if err != nil {
				t.Fatalf("%s: %v", ev, err)
			}
			pl, err := plan.New(event, profile)
			if err != nil {
				t.Fatal(err)
			}
			var tf, quota bytes.Buffer
			if err := pl.WriteTfvars(&tf, "infra/terraform/"+ev, shippedProfile); err != nil {
				t.Fatal(err)
			}
			if err := pl.WriteQuota(&quota); err != nil {
				t.Fatal(err)
			}
			for _, f := range []struct {
				path string
				want []byte
			}{{"examples/plan/" + name + ".tfvars", tf.Bytes()}, {"examples/plan/" + name + ".quota.md", quota.Bytes()}} {
				if os.Getenv("DANMAKU_UPDATE_PLANS") != "" {
					if err := os.WriteFile(f.path, f.want, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				got, err := os.ReadFile(f.path)
				if err != nil {
					t.Fatalf("%v (DANMAKU_UPDATE_PLANS=1 writes it)", err)
				}
				if !bytes.Equal(got, f.want) {
					t.Errorf("%s is not what danmaku plan writes from %s and %s (DANMAKU_UPDATE_PLANS=1 rewrites it); it writes:\n%s", f.path, ev, shippedProfile, f.want)
				}
			}
		})
	}
}

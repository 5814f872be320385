// Package observability_test checks the observability that ships with
// danmaku — the Prometheus recording and alert rules in rules/, their unit
// tests in tests/, the Grafana dashboards in dashboards/ — against
// Prometheus's own tools and against the code: promtool check and test
// rules, every PromQL expression through the PromQL parser, every metric
// an expression names registered by the roles, every runbook link an
// anchor of docs/operations.md. local_test.go runs the rules in a real
// Prometheus against a running stack.
//
// promtool and prometheus come from Debian's prometheus package (make
// deps). A missing one skips the tests that need it, unless
// testenv.RequireServers() says servers are required (CI); then it fails.
package observability_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"danmaku/internal/testenv"
)

// ruleFile is a Prometheus rule file, as far as these tests read it.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// ruleFiles returns the paths of the rule files, relative to this
// directory.
func ruleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("rules/*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files in rules/ (%v)", err)
	}
	return files
}

// rules reads every rule of every rule file.
func rules(t *testing.T) []rule {
	t.Helper()
	var out []rule
	for _, f := range ruleFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf ruleFile
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			out = append(out, g.Rules...)
		}
	}
	return out
}

func alerts(t *testing.T) []rule {
	var out []rule
	for _, r := range rules(t) {
		if r.Alert != "" {
			out = append(out, r)
		}
	}
	return out
}

// promtool runs promtool with args in this directory and fails t with its
// output when it fails.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin := testenv.Promtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestPromtoolCheckRules: the rule files are valid for Prometheus (syntax,
// expressions, templates, duplicate names).
func TestPromtoolCheckRules(t *testing.T) {
	t.Parallel()
	t.Log(promtool(t, append([]string{"check", "rules"}, ruleFiles(t)...)...))
}

// TestPromtoolTestRules runs the rules' unit tests: each alert fires on
// series that should trigger it, with its labels and annotations, and stays
// silent on healthy ones; the recording rules compute what they say.
func TestPromtoolTestRules(t *testing.T) {
	t.Parallel()
	tests, err := filepath.Glob("tests/*.test.yml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests in tests/ (%v)", err)
	}
	t.Log(promtool(t, append([]string{"test", "rules"}, tests...)...))
}

// alertTestFile is a promtool test file, as far as coverage needs it.
type alertTestFile struct {
	Tests []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryAlertTestedBothWays: every alert has at least one unit test in
// which it fires and one in which it must stay silent, and no test names an
// alert that does not exist.
func TestEveryAlertTestedBothWays(t *testing.T) {
	fires, silent := map[string]int{}, map[string]int{}
	files, _ := filepath.Glob("tests/*.test.yml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tf alertTestFile
		if err := yaml.Unmarshal(b, &tf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range tf.Tests {
			for _, at := range tc.AlertRuleTest {
				if len(at.ExpAlerts) > 0 {
					fires[at.Alertname]++
				} else {
					silent[at.Alertname]++
				}
			}
		}
	}
	names := map[string]bool{}
	for _, a := range alerts(t) {
		names[a.Alert] = true
		if fires[a.Alert] == 0 {
			t.Errorf("alert %s: no unit test in which it fires", a.Alert)
		}
		if silent[a.Alert] == 0 {
			t.Errorf("alert %s: no unit test in which it stays silent", a.Alert)
		}
	}
	for n := range fires {
		if !names[n] {
			t.Errorf("tests expect alert %s, which no rule file defines", n)
		}
	}
	for n := range silent {
		if !names[n] {
			t.Errorf("tests expect alert %s silent, but no rule file defines it", n)
		}
	}
}

// severities an alert may carry: critical pages, warning is acted on
// within the hour (docs/operations.md, "Alerts").
var severities = []string{"critical", "warning"}

// TestAlertsCarryRunbookAndSeverity: every alert has a severity, a summary,
// a description and a runbook_url naming a section of docs/operations.md
// that exists; every alert is described there.
func TestAlertsCarryRunbookAndSeverity(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := markdownAnchors(string(doc))
	for _, a := range alerts(t) {
		if !slices.Contains(severities, a.Labels["severity"]) {
			t.Errorf("alert %s: severity %q, want one of %v", a.Alert, a.Labels["severity"], severities)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(a.Annotations[k]) == "" {
				t.Errorf("alert %s: no %s annotation", a.Alert, k)
			}
		}
		u := a.Annotations["runbook_url"]
		const prefix = "docs/operations.md#"
		if !strings.HasPrefix(u, prefix) {
			t.Errorf("alert %s: runbook_url %q, want %s<anchor>", a.Alert, u, prefix)
			continue
		}
		if anchor := strings.TrimPrefix(u, prefix); !anchors[anchor] {
			t.Errorf("alert %s: runbook_url %q: docs/operations.md has no heading with anchor %q", a.Alert, u, anchor)
		}
		if want := strings.ToLower(a.Alert); strings.TrimPrefix(u, prefix) != want {
			t.Errorf("alert %s: runbook_url %q, want its own section %s%s", a.Alert, u, prefix, want)
		}
	}
}

var (
	headingRE    = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	anchorDropRE = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// markdownAnchors returns the anchors a Markdown renderer (GitHub's rules)
// gives the headings of doc: lower case, punctuation dropped, spaces to
// hyphens, repeats numbered.
func markdownAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		a := strings.ToLower(anchorDropRE.ReplaceAllString(strings.ReplaceAll(m[1], "`", ""), ""))
		a = strings.ReplaceAll(a, " ", "-")
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

package observability_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"

	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
)

// expression is one PromQL expression and where it was found.
type expression struct {
	where string
	expr  string
}

// dashboard is a Grafana dashboard, as far as its queries go.
type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
	// Templating variables may query Prometheus too (label_values).
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// grafanaVars stand in for the dashboards' variables, so that their
// queries are PromQL: $role, $instance, $event and $room are "All" (.*).
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "${role}", ".*", "$role", ".*", "${instance}", ".*", "$instance", ".*",
	"${event}", ".*", "$event", ".*", "${room}", ".*", "$room", ".*")

// labelValuesRE is Grafana's label_values(SELECTOR, LABEL) variable query.
var labelValuesRE = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

func dashboardFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in dashboards/ (%v)", err)
	}
	return files
}

func readDashboard(t *testing.T, file string) dashboard {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return d
}

// expressions returns every PromQL expression of the rules and the
// dashboards (panel targets and variable queries).
func expressions(t *testing.T) []expression {
	t.Helper()
	var out []expression
	for _, r := range rules(t) {
		out = append(out, expression{"rule " + r.Record + r.Alert, r.Expr})
	}
	for _, f := range dashboardFiles(t) {
		d := readDashboard(t, f)
		var walk func(ps []panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				for _, tg := range p.Targets {
					out = append(out, expression{f + ": panel " + p.Title, grafanaVars.Replace(tg.Expr)})
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			q, _ := v.Query.(map[string]any)["query"].(string)
			m := labelValuesRE.FindStringSubmatch(q)
			if m == nil {
				t.Errorf("%s: variable %s: query %q is not label_values(SELECTOR, LABEL)", f, v.Name, q)
				continue
			}
			out = append(out, expression{f + ": variable " + v.Name, grafanaVars.Replace(m[1])})
		}
	}
	return out
}

// metricNames parses expr and returns the metric names its selectors name.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" && m.Type.String() == "=" {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// builtins are series Prometheus makes itself for every target.
var builtins = map[string]bool{"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true}

// codeMetrics is what the code registers: every role of a process built
// the way `danmaku dev` builds it (all roles, one registry).
type codeMetrics struct {
	// families holds the gathered families by name; a vector with no child
	// yet is not gathered, so has asks the registry for those.
	families map[string]*dto.MetricFamily
	reg      prometheus.Registerer
}

var (
	codeOnce sync.Once
	code     *codeMetrics
)

// registered builds every role's registry once per test binary.
func registered(t *testing.T) *codeMetrics {
	t.Helper()
	codeOnce.Do(func() {
		st := stacktest.Start(t, stack.Config{})
		reg, ok := st.Gatherer().(prometheus.Registerer)
		if !ok {
			t.Fatalf("the stack's gatherer %T is not a registry", st.Gatherer())
		}
		mfs, err := st.Gatherer().Gather()
		if err != nil {
			t.Fatal(err)
		}
		code = &codeMetrics{families: map[string]*dto.MetricFamily{}, reg: reg}
		for _, mf := range mfs {
			code.families[mf.GetName()] = mf
		}
	})
	if code == nil {
		t.Fatal("the roles' registry could not be built (see the first test that tried)")
	}
	return code
}

var histogramUnitRE = regexp.MustCompile(`_(seconds|bytes|messages)$`)

// has reports whether the code registers a series named name: a gathered
// family's own name, or a histogram's or summary's _bucket, _sum, _count;
// else (a vector without children, which Gather leaves out) whether the
// registry refuses a new collector of that name because one is registered.
func (c *codeMetrics) has(name string) bool {
	if mf, ok := c.families[name]; ok {
		t := mf.GetType()
		return t != dto.MetricType_HISTOGRAM && t != dto.MetricType_GAUGE_HISTOGRAM
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if mf, ok := c.families[base]; ok {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				return true
			case dto.MetricType_SUMMARY:
				return suffix != "_bucket"
			}
			return false
		}
		// A histogram vector (or a custom collector's) with no child
		// yet is not gathered: its base name is registered, and is a
		// histogram's by its unit (TestMetricNamesAndHelp holds every
		// histogram to one).
		if histogramUnitRE.MatchString(base) && c.nameTaken(base) {
			return true
		}
	}
	return c.nameTaken(name)
}

// nameTaken asks the registry whether a collector named name is
// registered: it refuses a second descriptor of a registered name with
// other help or labels. The probe is removed again.
func (c *codeMetrics) nameTaken(name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "observability test probe: is " + name + " registered?"})
	err := c.reg.Register(probe)
	if err == nil {
		c.reg.Unregister(probe)
		return false
	}
	return strings.Contains(err.Error(), "same fully-qualified name")
}

// TestExpressionsParseAndNameRegisteredMetrics: every PromQL expression of
// the rules and dashboards parses, and every metric it names is one the
// code registers, a built-in series, or a recording rule's output. A
// renamed metric fails here, not during the show.
func TestExpressionsParseAndNameRegisteredMetrics(t *testing.T) {
	recorded := map[string]bool{}
	for _, r := range rules(t) {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	c := registered(t)
	exprs := expressions(t)
	used := map[string]bool{}
	for _, e := range exprs {
		names, err := metricNames(e.expr)
		if err != nil {
			t.Errorf("%s: does not parse: %v\n%s", e.where, err, e.expr)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: names no metric: %s", e.where, e.expr)
		}
		for _, n := range names {
			used[n] = true
			if n == "" {
				t.Errorf("%s: a selector without a metric name: %s", e.where, e.expr)
				continue
			}
			if !recorded[n] && !builtins[n] && !c.has(n) {
				t.Errorf("%s: metric %s is not registered by any role (renamed? a histogram's _bucket?)", e.where, n)
			}
		}
	}
	var unused []string
	for r := range recorded {
		if !used[r] {
			unused = append(unused, r)
		}
	}
	sort.Strings(unused)
	for _, r := range unused {
		t.Errorf("recording rule %s is used by no alert and no dashboard", r)
	}
	t.Logf("%d expressions, %d distinct metrics", len(exprs), len(used))
}

// TestMetricCheckCatchesRenames: the check above refuses what it must — a
// name no role registers, a histogram read without its suffix, a counter
// read as a histogram — and accepts a vector that has no child yet.
func TestMetricCheckCatchesRenames(t *testing.T) {
	c := registered(t)
	for name, want := range map[string]bool{
		"danmaku_slicer_behind_seconds":               true,
		"danmaku_slicer_segment_ready_seconds_bucket": true,
		"danmaku_slicer_segment_ready_seconds_count":  true,
		"danmaku_slicer_segment_ready_seconds":        false, // a histogram's own name is no series
		"danmaku_slicer_behind":                       false, // renamed
		"danmaku_ingest_rejected_total":               true,  // a vector with no child until a rejection
		"danmaku_ingest_rejected_total_bucket":        false,
		"danmaku_breaker_state":                       true,
	} {
		if got := c.has(name); got != want {
			t.Errorf("has(%s) = %v, want %v", name, got, want)
		}
	}
	if _, ok := c.families["danmaku_ingest_rejected_total"]; ok {
		t.Log("danmaku_ingest_rejected_total was gathered: the registry probe was not exercised by it")
	}
}

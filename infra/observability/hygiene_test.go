package observability_test

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"danmaku/internal/stack"
	"danmaku/internal/stack/stacktest"
)

// definition is one metric the code defines, found in its source.
type definition struct {
	name, kind, help string
	labels           []string
	pos              string
}

// constructors maps the client library's constructors to the kind of
// metric they make.
var constructors = map[string]string{
	"NewCounter": "counter", "NewCounterVec": "counter", "NewCounterFunc": "counter",
	"NewGauge": "gauge", "NewGaugeVec": "gauge", "NewGaugeFunc": "gauge",
	"NewHistogram": "histogram", "NewHistogramVec": "histogram",
	"NewSummary": "summary", "NewSummaryVec": "summary",
	"NewDesc": "desc", // a custom collector's; its kind is known when collected
}

// definitions reads every non-test Go file of the module and returns the
// metrics defined with the client library: each constructor call whose
// options (or NewDesc arguments) give the name as a string literal. A
// definition whose name is not a literal is reported as an error: the list
// could not be complete.
func definitions(t *testing.T) []definition {
	t.Helper()
	root := "../.."
	var defs []definition
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
				return true
			}
			kind, ok := constructors[sel.Sel.Name]
			if !ok || len(call.Args) == 0 {
				return true
			}
			d := definition{kind: kind, pos: fset.Position(call.Pos()).String()}
			if kind == "desc" {
				d.name = stringLit(call.Args[0])
				if len(call.Args) > 1 {
					d.help = stringLit(call.Args[1])
				}
				if len(call.Args) > 2 {
					d.labels = stringSlice(call.Args[2])
				}
			} else {
				opts, ok := call.Args[0].(*ast.CompositeLit)
				if !ok {
					t.Errorf("%s: prometheus.%s with options that are not a literal: the metric list cannot see its name", d.pos, sel.Sel.Name)
					return true
				}
				for _, el := range opts.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					switch kv.Key.(*ast.Ident).Name {
					case "Name":
						d.name = stringLit(kv.Value)
					case "Help":
						d.help = stringLit(kv.Value)
					}
				}
				if strings.HasSuffix(sel.Sel.Name, "Vec") && len(call.Args) > 1 {
					d.labels = stringSlice(call.Args[1])
				}
			}
			if d.name == "" {
				t.Errorf("%s: prometheus.%s: the name is not a string literal", d.pos, sel.Sel.Name)
				return true
			}
			defs = append(defs, d)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return defs
}

func stringLit(e ast.Expr) string {
	// A help text may be split over "..." + "..." for line length.
	if b, ok := e.(*ast.BinaryExpr); ok && b.Op == token.ADD {
		return stringLit(b.X) + stringLit(b.Y)
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}

func stringSlice(e ast.Expr) []string {
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var out []string
	for _, el := range cl.Elts {
		out = append(out, stringLit(el))
	}
	return out
}

// forbiddenLabels name values that come from clients without a bound. A
// room label would be bounded by its event (none exists today); users,
// addresses, tokens, texts and order ids never.
var forbiddenLabels = []string{"user", "user_id", "uid", "nick", "ip", "addr", "address", "client", "token", "ticket", "text", "order", "order_id", "id", "conn", "session", "path", "url"}

var (
	metricNameRE = regexp.MustCompile(`^danmaku_[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	// Units spelled out in base units (Prometheus naming): seconds, bytes.
	nonBaseUnitRE = regexp.MustCompile(`_(ms|msec|millis|milliseconds|us|micros|ns|nanos|minutes|hours|kb|mb|kib|mib|gb)(_|$)`)
)

// TestMetricNamesAndHelp holds every metric the code defines to
// Prometheus's naming conventions: a danmaku_ prefix, snake case, base
// units, counters (and only counters) ending in _total, histograms named
// by their unit, a help text that says what is counted, label names that
// carry no client-controlled value.
func TestMetricNamesAndHelp(t *testing.T) {
	defs := definitions(t)
	t.Logf("%d metric definitions in the source", len(defs))
	if len(defs) < 50 {
		t.Fatalf("found %d metric definitions; the source scan is broken", len(defs))
	}
	c := registered(t)
	seen := map[string]string{}
	for _, d := range defs {
		if prev, ok := seen[d.name]; ok {
			t.Errorf("%s: %s is defined again (first at %s)", d.pos, d.name, prev)
		}
		seen[d.name] = d.pos
		if !metricNameRE.MatchString(d.name) {
			t.Errorf("%s: %s: want danmaku_ and snake case", d.pos, d.name)
		}
		if nonBaseUnitRE.MatchString(d.name) {
			t.Errorf("%s: %s: use base units (seconds, bytes)", d.pos, d.name)
		}
		kind := d.kind
		if kind == "desc" {
			if mf, ok := c.families[d.name]; ok {
				kind = strings.ToLower(mf.GetType().String())
			}
		}
		switch isTotal := strings.HasSuffix(d.name, "_total"); {
		case kind == "counter" && !isTotal:
			t.Errorf("%s: counter %s: want the _total suffix", d.pos, d.name)
		case kind != "counter" && kind != "desc" && isTotal:
			t.Errorf("%s: %s %s: only counters end in _total", d.pos, kind, d.name)
		}
		if kind == "histogram" && !regexp.MustCompile(`_(seconds|bytes|messages)$`).MatchString(d.name) {
			t.Errorf("%s: histogram %s: name it by its unit (_seconds, _bytes, or what it counts)", d.pos, d.name)
		}
		if len(strings.TrimSpace(d.help)) < 10 || d.help != strings.TrimSpace(d.help) || !unicodeUpper(d.help) {
			t.Errorf("%s: %s: help %q: a sentence saying what is measured", d.pos, d.name, d.help)
		}
		for _, l := range d.labels {
			if slices.Contains(forbiddenLabels, l) {
				t.Errorf("%s: %s: label %q carries client-controlled values without a bound", d.pos, d.name, l)
			}
		}
		if !c.has(d.name) && !c.has(d.name+"_count") {
			t.Errorf("%s: %s is defined but no role registers it", d.pos, d.name)
		}
	}
}

func unicodeUpper(s string) bool {
	r := []rune(s)
	return len(r) > 0 && strings.ToUpper(string(r[0])) == string(r[0])
}

// TestNoLabelValueFromClients sends every role requests carrying values a
// client chooses — rooms, users, order ids, paths, headers, 40 of each,
// all distinct and marked — and then reads every label value of every
// series: none may hold a marker, and no family may have grown by a
// series per request. Label values come from the code's own sets.
func TestNoLabelValueFromClients(t *testing.T) {
	st := stacktest.Start(t, stack.Config{})
	before := seriesCount(t, st)
	hc := &http.Client{Timeout: 5 * time.Second}
	const n = 40
	do := func(method, u, body string, hdr map[string]string) {
		req, err := http.NewRequest(method, u, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range n {
		m := fmt.Sprintf("zzmark%02d", i)
		g, in, e, o := st.URLs[stack.RoleGSLB], st.URLs[stack.RoleIngest], strings.Replace(st.URLs[stack.RoleEdge], "ws://", "http://", 1), st.URLs[stack.RoleOrigin]
		do("GET", g+"/v1/entry?room="+m, "", map[string]string{"Authorization": "Bearer " + stacktest.Ticket(t, m, "")})
		do("GET", g+"/v1/entry?room="+m+"&ticket="+m, "", nil)
		do("GET", g+"/v1/"+m, "", map[string]string{"X-Forwarded-For": m})
		do("POST", in+"/v1/rooms/"+m+"/barrage", `{"text":"`+m+`"}`, map[string]string{"Authorization": "Bearer " + m})
		do("POST", in+"/v1/rooms/demo/barrage", `{"text":"`+m+`","`+m+`":1}`, nil)
		do("POST", in+"/v1/gifts", `{"order_id":"`+m+`","room":"`+m+`","user":"`+m+`","gift":"`+m+`","value":1}`, map[string]string{"Authorization": "Bearer " + stack.DevServiceKey})
		do("POST", in+"/v1/gifts", `{"order_id":"`+m+`","room":"demo","user":"`+m+`","gift":"`+m+`","value":1}`, map[string]string{"Authorization": "Bearer " + stack.DevServiceKey})
		do("PUT", in+"/v1/admin/bans/"+m, `{}`, map[string]string{"Authorization": "Bearer " + m})
		ws := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Authorization": "Bearer " + m}
		do("GET", e+"?room="+m+"&last="+m, "", ws) // e ends in /v1/ws
		do("GET", e+"?room="+m, "", ws)
		do("GET", o+"/"+m+"/rooms/"+m+"/manifest.json", "", nil)
	}
	mfs, err := st.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	after := map[string]int{}
	counted := map[string]float64{}
	for _, mf := range mfs {
		after[mf.GetName()] = len(mf.GetMetric())
		for _, m := range mf.GetMetric() {
			counted[mf.GetName()] += m.GetCounter().GetValue()
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if strings.Contains(strings.ToLower(lp.GetValue()), "zzmark") {
					t.Errorf("%s{%s=%q}: a label value a client chose", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	// The requests reached the code that labels them.
	for _, name := range []string{"danmaku_gslb_entries_total", "danmaku_ingest_rejected_total", "danmaku_edge_handshake_rejections_total"} {
		if counted[name] < n {
			t.Errorf("%s counts %v after %d refused requests: the probe did not reach it", name, counted[name], n)
		}
	}
	for name, k := range after {
		if grew := k - before[name]; grew >= n {
			t.Errorf("%s: %d new series for %d distinct client requests: a label follows the client", name, grew, n)
		}
	}
}

func seriesCount(t *testing.T, st *stack.Stack) map[string]int {
	t.Helper()
	mfs, err := st.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		out[mf.GetName()] = len(mf.GetMetric())
	}
	return out
}

// Metric reference: the table of docs/operations.md between these markers
// is generated from the code's definitions; -update rewrites it.
const (
	refBegin = "<!-- metric reference: generated by go test ./infra/observability -run TestMetricReference -update; do not edit -->"
	refEnd   = "<!-- end of metric reference -->"
)

// TestMetricReference: docs/operations.md lists every metric the code
// defines, with its type, labels and help, as the code says; and every
// danmaku_ metric the page names anywhere exists.
func TestMetricReference(t *testing.T) {
	defs := definitions(t)
	c := registered(t)
	slices.SortFunc(defs, func(a, b definition) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	b.WriteString(refBegin + "\n\n| metric | type | labels | help |\n|---|---|---|---|\n")
	for _, d := range defs {
		kind := d.kind
		if mf, ok := c.families[d.name]; ok {
			kind = strings.ToLower(mf.GetType().String())
		} else if kind == "desc" {
			// A custom collector with nothing to collect yet: its kind
			// by the naming conventions TestMetricNamesAndHelp holds.
			switch {
			case strings.HasSuffix(d.name, "_total"):
				kind = "counter"
			case histogramUnitRE.MatchString(d.name):
				kind = "histogram"
			default:
				kind = "gauge"
			}
		}
		labels := "—"
		if len(d.labels) > 0 {
			labels = "`" + strings.Join(d.labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.name, kind, labels, strings.ReplaceAll(d.help, "|", `\|`))
	}
	b.WriteString("\n" + refEnd)
	want := b.String()

	const path = "../../docs/operations.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, refBegin), strings.Index(doc, refEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no metric reference between %q and %q", path, refBegin, refEnd)
	}
	got := doc[i : j+len(refEnd)]
	if got != want {
		if *update {
			if err := os.WriteFile(path, []byte(doc[:i]+want+doc[j+len(refEnd):]), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: metric reference rewritten", path)
		} else {
			t.Errorf("%s: the metric reference differs from the code; run go test ./infra/observability -run TestMetricReference -update\n%s", path, lineDiff(got, want))
		}
	}

	// Every metric the page names, in tables and prose, exists.
	defined := map[string]bool{}
	for _, d := range defs {
		defined[d.name] = true
	}
	sc := bufio.NewScanner(strings.NewReader(doc))
	mentionRE := regexp.MustCompile("`(danmaku_[a-z0-9_{},…]+)")
	for line := 1; sc.Scan(); line++ {
		for _, m := range mentionRE.FindAllStringSubmatch(sc.Text(), -1) {
			for _, name := range expandBraces(m[1]) {
				if strings.Contains(name, "…") || strings.HasSuffix(name, "_") {
					continue // an elision of a family named in full nearby
				}
				if !defined[name] && !defined[strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count")] {
					t.Errorf("%s:%d: names %s, which the code does not define", path, line, name)
				}
			}
		}
	}
}

// expandBraces expands one {a,b,c} group within a name
// (x_{a,b}_total → x_a_total, x_b_total); braces after a whole name are
// its labels (x_total{layer,reason}) and are cut off.
func expandBraces(s string) []string {
	i := strings.Index(s, "{")
	if i < 0 {
		return []string{s}
	}
	j := strings.Index(s, "}")
	if !strings.HasSuffix(s[:i], "_") || j < i {
		return []string{s[:i]}
	}
	var out []string
	for _, alt := range strings.Split(s[i+1:j], ",") {
		out = append(out, s[:i]+alt+s[j+1:])
	}
	return out
}

func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var out []string
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}

var update = flag.Bool("update", false, "rewrite the metric reference in docs/operations.md")

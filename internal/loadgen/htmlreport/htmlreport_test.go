package htmlreport

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"danmaku/internal/browsertest"
	"danmaku/internal/loadgen"
)

var update = flag.Bool("update", false, "rewrite testdata/report.golden.html")

// fixture is a fixed report of a small run: ten seconds of comments and
// gifts, two nodes, drops and errors of every kind the page shows.
func fixture() *loadgen.Report {
	start := time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)
	r := &loadgen.Report{Version: loadgen.ReportVersion}
	r.Run = loadgen.RunInfo{ID: "fix01", GSLB: "http://127.0.0.1:7700", Room: "demo", Shards: 1, Pattern: loadgen.PatternSteady,
		Schedule: "steady 150/s", RatePerSec: 150, DurationSeconds: 10, GiftRatePerSec: 10, Throttle: "1.2s", ThrottleCapPerSec: 166,
		Concurrency: 256, SegmentMs: 1000, Start: start, End: start.Add(14 * time.Second), LoadSeconds: 10}
	r.Users = loadgen.UsersReport{Users: 200, Joined: 200, JoinSeconds: 4, JoinRatePerSec: 60, Joins: 220, JoinsPerSec: 55, EntryProbes: 50, EntryErrors: map[string]int64{"503 backend_unavailable": 2}}
	r.Barrage = loadgen.BarrageReport{Due: 1500, Attempted: 1500, OK: 1490, Errors: map[string]int64{"429 rate_limited": 7, "network: timeout": 3},
		AttemptedPerSec: 150, OKPerSec: 149, PeakPerSec: 151}
	r.Gifts = loadgen.GiftsReport{Orders: 100, Attempts: 101, Accepted: 100, Answers: map[string]int64{"200": 100, "503 backend_unavailable": 1}, OKPerSec: 10}
	r.Latency = loadgen.Latencies{
		Entry:        loadgen.Summary{Count: 250, P50Ms: 9.5, P90Ms: 30, P99Ms: 48, MaxMs: 60},
		EntryJoins:   loadgen.Summary{Count: 200, P50Ms: 9, P90Ms: 28, P99Ms: 45, MaxMs: 60},
		EntryOffer:   loadgen.Summary{Count: 50, P50Ms: 11, P90Ms: 35, P99Ms: 52, MaxMs: 55},
		BarragePost:  loadgen.Summary{Count: 1500, P50Ms: 70, P90Ms: 130, P99Ms: 160, MaxMs: 200},
		GiftPost:     loadgen.Summary{Count: 100, P50Ms: 2.5, P90Ms: 6, P99Ms: 40, MaxMs: 41},
		BarrageE2E:   loadgen.Summary{Count: 29800, P50Ms: 640, P90Ms: 1050, P99Ms: 1190, MaxMs: 1260},
		GiftE2E:      loadgen.Summary{Count: 2000, P50Ms: 3, P90Ms: 7, P99Ms: 50, MaxMs: 52},
		SendDelay:    loadgen.Summary{Count: 1500, P50Ms: 1, P90Ms: 3, P99Ms: 20, MaxMs: 60},
		GeneratorLag: loadgen.Summary{Count: 1400, P50Ms: 0.1, P90Ms: 1, P99Ms: 3, MaxMs: 9},
		BarrageSplit: loadgen.BarrageSplit{
			ToStore:      loadgen.Summary{Count: 29800, P50Ms: 80, P90Ms: 140, P99Ms: 170, MaxMs: 210},
			ToSlotEnd:    loadgen.Summary{Count: 29800, P50Ms: 500, P90Ms: 900, P99Ms: 990, MaxMs: 999},
			AfterSlotEnd: loadgen.Summary{Count: 29800, P50Ms: 60, P90Ms: 75, P99Ms: 110, MaxMs: 130},
		},
	}
	r.Generator = loadgen.GeneratorReport{Procs: 2, MachineCores: 2, WindowSeconds: 14, CPUSeconds: 7, CPUCores: 0.5}
	r.Delivery = loadgen.DeliveryReport{Pollers: 20, Joined: 20, Edge: true, CommentsAccepted: 1490, CommentsShown: 1490, CommentsShownByAll: 1488,
		CommentDecodes: 29800, GiftsAccepted: 100, GiftsShown: 100, GiftsShownByAll: 100, SegmentsFetched: 280, FirstPollHits: 280, FirstPollHitRatio: 1}
	r.Drops = loadgen.DropsReport{Endpoints: []string{"http://127.0.0.1:7701"}, Accepted: map[string]int64{"barrage": 1480, "gift": 100},
		Rejected:    []loadgen.Drop{{Layer: "gateway", Reason: "user_bucket", Count: 8}, {Layer: "antispam", Reason: "duplicate", Count: 2}},
		SilentDrops: 10, SlicerDropped: map[string]int64{"sampled": 5}, SlicerShown: map[string]int64{"barrage": 1475}}
	for i := range 10 {
		r.Timeline = append(r.Timeline, loadgen.Second{T: float64(i + 1), Due: 150, Attempted: 150, OK: 149, Errors: 1, GiftsOK: 10,
			PostP50Ms: 70 + float64(i), PostP99Ms: 150 + float64(i), Shown: 149,
			BarrageE2EP50Ms: 600 + float64(10*i), BarrageE2EP99Ms: 1100 + float64(10*i), GiftE2EP50Ms: 3, GiftE2EP99Ms: 40 + float64(i),
			EntryP50Ms: 9, EntryP99Ms: 30 + float64(i)})
	}
	r.Nodes = loadgen.NodesReport{EverySeconds: 1}
	for n, ep := range []string{"http://127.0.0.1:7701", "http://127.0.0.1:7702"} {
		node := loadgen.Node{Endpoint: ep, Roles: []string{"ingest", "slicer"}}
		if n == 1 {
			node.Roles = []string{"edge"}
		}
		for i := range 14 {
			s := loadgen.NodeSample{T: float64(i + 1), OK: true, CPUCores: 0.2 + 0.01*float64(i), RSSMiB: 40 + float64(i), Goroutines: 50}
			if n == 0 && i < 10 {
				s.AdmittedPerSec, s.GiftsPerSec, s.RejectedPerSec, s.EntriesPerSec = 148, 10, 1, 5
			}
			if n == 1 {
				s.EdgeConnections, s.EdgeFramesPerSec = 20, 3000
			}
			node.Samples = append(node.Samples, s)
		}
		r.Nodes.Nodes = append(r.Nodes.Nodes, node)
	}
	return r
}

func fixtureSLO() SLO {
	s := DefaultSLO(1000, true)
	s.AdmittedPerSec, s.BindingRole = 140, "edge"
	s.Roles = []RolePlan{
		{Role: "ingest", Nodes: 2, VCPU: 1, CoresPerNode: 0.02, Utilization: 0.03},
		{Role: "edge", Nodes: 2, VCPU: 1, CoresPerNode: 0.1, Utilization: 0.2, Unit: "frame written", UnitCPUUs: 9},
	}
	return s
}

// standIns replace the inlined files in the golden page, which is then
// the template's output alone.
var standIns = inlined{"/* vendor/chart.js */", "/* report.js */", "/* report.css */"}

// TestGolden renders the fixture and compares it with the golden page
// (go test -run TestGolden -update rewrites it).
func TestGolden(t *testing.T) {
	var b bytes.Buffer
	if err := write(&b, fixture(), fixtureSLO(), standIns); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.golden.html")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("the page differs from %s (go test -run TestGolden -update, then read the diff)", golden)
	}
}

// TestWriteInlinesEverything: the real page holds the library and the
// report's data, and refers to nothing outside itself.
func TestWriteInlinesEverything(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, fixture(), fixtureSLO()); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, chartJS[:200]) {
		t.Error("Chart.js is not inlined")
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=|@import|url\(`).FindString(page[:strings.Index(page, "<script>")]); m != "" {
		t.Errorf("the page refers to something outside itself: %q", m)
	}
	checkPage(t, page, fixture())
}

// checkPage checks that the page's elements are whole (three scripts,
// each closed) and that its data is the report, unchanged.
func checkPage(t *testing.T, page string, r *loadgen.Report) {
	t.Helper()
	if o, c := strings.Count(page, "<script"), strings.Count(page, "</script>"); o != 3 || c != 3 {
		t.Fatalf("%d <script and %d </script>, want 3 and 3", o, c)
	}
	const open = `<script id="report-data" type="application/json">`
	i := strings.Index(page, open)
	if i < 0 {
		t.Fatal("no report data")
	}
	data := page[i+len(open):]
	data = data[:strings.Index(data, "</script>")]
	var got loadgen.Report
	if err := json.Unmarshal([]byte(data), &got); err != nil {
		t.Fatalf("the report data does not parse: %v", err)
	}
	a, _ := json.Marshal(&got)
	b, _ := json.Marshal(r)
	if !bytes.Equal(a, b) {
		t.Errorf("the page's data is not the report:\n%s\n%s", a, b)
	}
}

// FuzzWrite writes any report a JSON file can hold: never an error or a
// panic, the page's elements whole and its data the report's.
func FuzzWrite(f *testing.F) {
	seed, _ := json.Marshal(fixture())
	f.Add(seed)
	f.Add([]byte(`{"run":{"room":"</script><script>alert(1)</script>","id":"<!--"},"barrage":{"errors":{"</script>":1}}}`))
	f.Add([]byte(`{"nodes":{"nodes":[{"endpoint":"x","samples":[{"ok":true,"cpu_cores":1e308}]}]}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var r loadgen.Report
		if json.Unmarshal(in, &r) != nil {
			return
		}
		var b bytes.Buffer
		if err := write(&b, &r, DefaultSLO(r.Run.SegmentMs, r.Delivery.Edge), standIns); err != nil {
			t.Fatal(err)
		}
		checkPage(t, b.String(), &r)
	})
}

// TestBrowser opens the page in headless chromium (check.mjs): every
// chart drawn, no console error, no network request.
func TestBrowser(t *testing.T) {
	node := browsertest.Node(t, true)
	dir := t.TempDir()
	file := filepath.Join(dir, "report.html")
	var b bytes.Buffer
	if err := Write(&b, fixture(), fixtureSLO()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	out := browsertest.Run(t, node, "", nil, 4*time.Minute, script, file)
	var res struct {
		Canvases, Drawn, Charts int
		Verdict                 string
		Errors, Requests        []string
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("check.mjs printed no result: %v", err)
	}
	if res.Canvases != 8 || res.Drawn != 8 || res.Charts != 8 {
		t.Errorf("%d canvases, %d drawn, %d charts; want 8 of each", res.Canvases, res.Drawn, res.Charts)
	}
	if len(res.Errors) > 0 || len(res.Requests) > 0 {
		t.Errorf("errors %q, requests %q; want none", res.Errors, res.Requests)
	}
	if res.Verdict != "PASS" {
		t.Errorf("verdict %q, want PASS", res.Verdict)
	}
}

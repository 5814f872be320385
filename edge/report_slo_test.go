package edge

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"danmaku/internal/clock"
	"danmaku/internal/event"
	"danmaku/sdk/wire"
)

// latJSON is a "lat" array of n buckets, each count c.
func latJSON(n int, c string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(c+",", n), ",") + "]"
}

// TestParseReportSLO: the service-level fields within their bounds are
// taken; each way out of them refuses the whole report (counted, not a
// protocol error).
func TestParseReportSLO(t *testing.T) {
	full := latJSON(wire.LatencyBuckets, "0")
	over := "[" + strconv.Itoa(wire.MaxReportLatencies) + "," + latJSON(wire.LatencyBuckets-1, "0")[1:]
	for _, tt := range []struct {
		name, in string
		ok       bool
	}{
		{"all fields", `{"drops":1,"segs":10,"hits":9,"lat":` + full + `}`, true},
		{"no lat", `{"segs":3,"hits":3}`, true},
		{"segs at the bound", `{"segs":` + strconv.Itoa(wire.MaxReportSegments) + `}`, true},
		{"lat at the bound", `{"lat":` + over + `}`, true},
		{"segs above the bound", `{"segs":` + strconv.Itoa(wire.MaxReportSegments+1) + `}`, false},
		{"hits above segs", `{"segs":3,"hits":4}`, false},
		{"negative segs", `{"segs":-1}`, false},
		{"lat too short", `{"lat":` + latJSON(wire.LatencyBuckets-1, "0") + `}`, false},
		{"lat too long", `{"lat":` + latJSON(wire.LatencyBuckets+1, "0") + `}`, false},
		{"lat null", `{"lat":null}`, false},
		{"lat not an array", `{"lat":5}`, false},
		{"lat fraction", `{"lat":` + latJSON(wire.LatencyBuckets, "0.5") + `}`, false},
		{"lat negative", `{"lat":` + latJSON(wire.LatencyBuckets, "-1") + `}`, false},
		{"lat above the bound", `{"lat":` + latJSON(wire.LatencyBuckets, strconv.Itoa(wire.MaxReportLatencies)) + `}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseReport([]byte(tt.in))
			if tt.ok != (err == nil) {
				t.Fatalf("parseReport(%s) = %+v, %v; want ok %v", tt.in, r, err, tt.ok)
			}
			if err != nil && (errors.Is(err, errReportSyntax) || r != (report{})) {
				t.Fatalf("refusal %v with %+v: want a counted, non-protocol refusal and no counts", err, r)
			}
		})
	}
}

// A report marshalled (as the edge's tests send one) reads back the same,
// with or without latencies.
func TestReportRoundTrip(t *testing.T) {
	for _, r := range []report{{Token: "t"}, {Segs: 2, Hits: 1, Lat: latencyCounts{n: [wire.LatencyBuckets]uint32{3, 0, 1}, set: true}},
		{Skew: latencyCounts{n: [wire.LatencyBuckets]uint32{0, 4}, set: true}}} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := parseReport(b); err != nil || got != r {
			t.Errorf("%s: parsed %+v, %v; want %+v", b, got, err, r)
		}
	}
}

// TestClientSLOReports: a report's segments, hits and latencies reach the
// metrics the registry serves; an out-of-range one is counted and changes
// nothing, and the connection lives on.
func TestClientSLOReports(t *testing.T) {
	reg := prometheus.NewRegistry()
	// One report per ReportEvery is taken: the fake clock spaces them.
	clk := clock.NewFake(time.Now())
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.Registerer = reg; c.Clock = clk }})
	ws := e.connect("r1", "")
	lat := make([]string, wire.LatencyBuckets)
	for i := range lat {
		lat[i] = strconv.Itoa(i) // bucket i holds i latencies
	}
	good := `{"segs":10,"hits":8,"lat":[` + strings.Join(lat, ",") + `],"skew":[` + strings.Join(lat, ",") + `]}`
	bad := `{"segs":10,"hits":11,"lat":[` + strings.Join(lat, ",") + `]}`
	for i, step := range []struct {
		frame      string
		hits, bads float64
	}{{good, 8, 0}, {bad, 8, 1}, {good, 16, 1}} {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(step.frame)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("report %d", i+1), func() bool {
			return counter(e.srv.m.firstPolls.WithLabelValues("hit", event.OtherLabel, event.OtherLabel)) == step.hits && counter(e.srv.m.badReports) == step.bads
		})
		clk.Advance(defaultReportEvery)
	}
	if got := counter(e.srv.m.firstPolls.WithLabelValues("miss", event.OtherLabel, event.OtherLabel)); got != 4 {
		t.Errorf("misses %v, want 4", got)
	}
	h := gatherHistogram(t, reg, "danmaku_client_barrage_latency_seconds")
	var want, wantSum float64
	for i := range wire.LatencyBuckets {
		want += float64(2 * i)
		wantSum += float64(2*i) * latencyValueMs(i) / 1000
	}
	if float64(h.GetSampleCount()) != want || h.GetSampleSum() < wantSum-1e-6 || h.GetSampleSum() > wantSum+1e-6 {
		t.Errorf("count %d sum %v, want %v and %v", h.GetSampleCount(), h.GetSampleSum(), want, wantSum)
	}
	var cum uint64
	for i, b := range h.GetBucket() {
		cum += uint64(2 * i)
		if b.GetUpperBound() != float64(wire.LatencyBoundsMs[i])/1000 || b.GetCumulativeCount() != cum {
			t.Errorf("bucket %d: le %v count %d, want le %v count %d", i, b.GetUpperBound(), b.GetCumulativeCount(), float64(wire.LatencyBoundsMs[i])/1000, cum)
		}
	}
	if len(h.GetBucket()) != len(wire.LatencyBoundsMs) {
		t.Errorf("%d buckets, want %d", len(h.GetBucket()), len(wire.LatencyBoundsMs))
	}
	// The display skew, from a client synchronised to its video, the same.
	if sk := gatherHistogram(t, reg, "danmaku_client_display_skew_seconds"); float64(sk.GetSampleCount()) != want {
		t.Errorf("skew count %d, want %v", sk.GetSampleCount(), want)
	}
	// Still open: a report out of range is not a protocol error.
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"segs":1}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the last report", func() bool {
		return counter(e.srv.m.firstPolls.WithLabelValues("miss", event.OtherLabel, event.OtherLabel)) == 5
	})
}

func gatherHistogram(t *testing.T, g prometheus.Gatherer, name string) *dto.Histogram {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("%s not gathered", name)
	return nil
}

// FuzzParseReportSLO: whatever the input, a taken report's service-level
// fields are within their bounds.
func FuzzParseReportSLO(f *testing.F) {
	for _, s := range []string{
		`{"segs":10,"hits":9}`, `{"segs":601}`, `{"hits":1}`, `{"lat":[]}`, `{"lat":null}`,
		`{"lat":` + latJSON(wire.LatencyBuckets, "1") + `}`, `{"lat":` + latJSON(wire.LatencyBuckets, "5000") + `}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseReport(b)
		if err != nil {
			return
		}
		var total uint64
		for _, n := range r.Lat.n {
			total += uint64(n)
		}
		if r.Segs > wire.MaxReportSegments || r.Hits > r.Segs || total > wire.MaxReportLatencies || (total > 0 && !r.Lat.set) {
			t.Fatalf("parseReport(%q) = %+v, out of bounds", b, r)
		}
	})
}

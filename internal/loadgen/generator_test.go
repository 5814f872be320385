package loadgen

import (
	"strings"
	"testing"
	"time"
)

// TestGeneratorBound: a run is generator-bound when its processes took
// most of the machine, their timers fired late or comments were taken up
// late; a run that kept its schedule names no reason.
func TestGeneratorBound(t *testing.T) {
	lat := func(d time.Duration, n int) HistogramData {
		var h Histogram
		for range n {
			h.Observe(d)
		}
		return h.Data()
	}
	mk := func(cpu float64, lag, send time.Duration) *Report {
		r := &Report{Version: ReportVersion, Generator: GeneratorReport{Procs: 2, MachineCores: 2, WindowSeconds: 10, CPUSeconds: 10 * cpu}}
		r.Generator.derive()
		r.Histograms.GeneratorLag = lat(lag, 100)
		r.Histograms.SendDelay = lat(send, 100)
		r.Latency = r.Histograms.latencies()
		return r
	}
	if why := mk(0.5, time.Millisecond, 2*time.Millisecond).GeneratorBound(); why != nil {
		t.Errorf("a run that kept its schedule: %q", why)
	}
	for _, c := range []struct {
		name string
		r    *Report
		want string
	}{
		{"cpu", mk(1.7, time.Millisecond, time.Millisecond), "1.70 of the machine's 2 cores"},
		{"lag", mk(0.5, 200*time.Millisecond, time.Millisecond), "timers fired p99"},
		{"send delay", mk(0.5, time.Millisecond, 300*time.Millisecond), "taken up p99"},
	} {
		why := c.r.GeneratorBound()
		if len(why) != 1 || !strings.Contains(why[0], c.want) {
			t.Errorf("%s: %q, want one reason with %q", c.name, why, c.want)
		}
	}
	// Merged, the processes' CPU adds up over the one window.
	m, err := Merge([]*Report{mk(0.5, time.Millisecond, time.Millisecond), mk(0.5, time.Millisecond, time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if g := m.Generator; g.Procs != 4 || g.CPUCores != 1 || g.MachineCores != 2 {
		t.Errorf("merged generator %+v", g)
	}
}

// TestSelfMeter: the meter measures this process and its lag probe fires.
func TestSelfMeter(t *testing.T) {
	var lag Histogram
	m := startSelfMeter(&lag)
	end := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(end); x++ {
		_ = x * x
	}
	var r GeneratorReport
	m.stop(&r)
	if r.Procs != 1 || r.MachineCores < 1 || r.WindowSeconds <= 0 || r.CPUSeconds <= 0 {
		t.Errorf("self meter %+v", r)
	}
}

package loadgen

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestParseNode reads one node's /metrics and turns two reads into an
// interval's rates; its roles are told by the families it serves.
func TestParseNode(t *testing.T) {
	page := func(cpu, admitted, frames float64) string {
		return strings.NewReplacer("CPU", ftoa(cpu), "ADM", ftoa(admitted), "FR", ftoa(frames)).Replace(`# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total CPU
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.048576e+08
# TYPE go_goroutines gauge
go_goroutines 42
# TYPE danmaku_ingest_accepted_total counter
danmaku_ingest_accepted_total{event="e",kind="barrage",room="a"} ADM
danmaku_ingest_accepted_total{event="e",kind="barrage",room="b"} ADM
danmaku_ingest_accepted_total{event="e",kind="gift",room="a"} 10
# TYPE danmaku_edge_connections gauge
danmaku_edge_connections 2000
# TYPE danmaku_edge_frames_sent_total counter
danmaku_edge_frames_sent_total FR
# TYPE danmaku_other_total counter
danmaku_other_total 5
`)
	}
	t0 := time.Unix(1000, 0)
	a, err := parseNode(strings.NewReader(page(1, 100, 1000)), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseNode(strings.NewReader(page(2.5, 400, 7000)), t0.Add(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ingest", "edge"}; !reflect.DeepEqual(b.roles, want) {
		t.Errorf("roles %q, want %q", b.roles, want)
	}
	got := b.sample(a, t0)
	want := NodeSample{T: 3, OK: true, CPUCores: 0.75, RSSMiB: 100, Goroutines: 42, AdmittedPerSec: 300, GiftsPerSec: 0,
		EdgeConnections: 2000, EdgeFramesPerSec: 3000}
	if got != want {
		t.Errorf("sample\n got %+v\nwant %+v", got, want)
	}
	// A restart (counters lower than before) reads as 0, never negative;
	// the first read has no rates.
	if s := a.sample(b, t0); s.CPUCores != 0 || s.AdmittedPerSec != 0 {
		t.Errorf("after a restart: %+v", s)
	}
	if s := a.sample(nil, t0); s.OK || s.CPUCores != 0 || s.RSSMiB != 100 {
		t.Errorf("first read: %+v", s)
	}
	// A standby slicer has written no segment: its rooms gauge tells it.
	if c, err := parseNode(strings.NewReader("process_cpu_seconds_total 1\ndanmaku_slicer_rooms 1\n"), t0); err != nil || !reflect.DeepEqual(c.roles, []string{"slicer"}) {
		t.Errorf("standby slicer: roles %v, %v", c.roles, err)
	}
	if _, err := parseNode(strings.NewReader("process_cpu_seconds_total{ 1\n"), t0); err == nil {
		t.Error("malformed metrics parsed")
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// TestHalveSamples: neighbours merge two by two, an odd last one stays.
func TestHalveSamples(t *testing.T) {
	in := []NodeSample{{T: 1, OK: true, CPUCores: 1}, {T: 2, OK: true, CPUCores: 3}, {T: 3, OK: false, CPUCores: 5}, {T: 4, OK: true, CPUCores: 7}, {T: 5, OK: true}}
	got := halveSamples(in)
	want := []NodeSample{{T: 2, OK: true, CPUCores: 2}, {T: 4, OK: false, CPUCores: 6}, {T: 5, OK: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestShownBySecond counts a comment in the second it was due in, once it
// was answered 200 and decoded.
func TestShownBySecond(t *testing.T) {
	start := time.Unix(5000, 0)
	var s seqStore
	at := func(sec float64) time.Time { return start.Add(time.Duration(sec * float64(time.Second))) }
	s.accept(0, at(0.2))
	s.decoded(0)
	s.accept(1, at(0.9))
	s.accept(2, at(1.5))
	s.decoded(2)
	s.decoded(2)
	s.decoded(3) // decoded, never answered 200
	s.accept(4, at(9))
	s.decoded(4) // past the last second: counted in it
	line := []Second{{T: 1}, {T: 2}, {T: 2.4}}
	s.shownBySecond(5, start, line)
	if got := []int64{line[0].Shown, line[1].Shown, line[2].Shown}; !reflect.DeepEqual(got, []int64{1, 1, 1}) {
		t.Errorf("shown by second %v, want [1 1 1]", got)
	}
}

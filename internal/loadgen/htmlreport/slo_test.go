package htmlreport

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"danmaku/internal/loadgen"
)

func TestReadSLO(t *testing.T) {
	const good = `{"v":1,"barrage_latency_p99_ms":1250,"gift_latency_p99_ms":100,"entry_latency_p99_ms":500,"gift_delivered_ratio":1,"barrage_shown_ratio":0.99,"admitted_per_s":160,"binding_role":"edge"}`
	s, err := ReadSLO(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if want := (SLO{V: 1, BarrageLatencyP99Ms: 1250, GiftLatencyP99Ms: 100, EntryLatencyP99Ms: 500, GiftDeliveredRatio: 1, BarrageShownRatio: 0.99, AdmittedPerSec: 160, BindingRole: "edge"}); !reflect.DeepEqual(s, want) {
		t.Errorf("got %+v, want %+v", s, want)
	}
	const role = `{"role":"edge","nodes":2,"vcpu":1,"cpu_cores_per_node":0.05,"utilization":0.1,"limit":"connections"}`
	withRoles, err := ReadSLO(strings.NewReader(good[:len(good)-1] + `,"roles":[` + role + `]}`))
	if err != nil || len(withRoles.Roles) != 1 || withRoles.Roles[0] != (RolePlan{Role: "edge", Nodes: 2, VCPU: 1, CoresPerNode: 0.05, Utilization: 0.1, Limit: "connections"}) {
		t.Errorf("roles: %+v, %v", withRoles.Roles, err)
	}
	for _, tc := range []struct{ name, in, says string }{
		{"not JSON", `{"v":1,`, "unexpected EOF"},
		{"unknown field", strings.Replace(good, `"v":1`, `"v":1,"barrage_p99":3`, 1), "barrage_p99"},
		{"no version", strings.Replace(good, `"v":1,`, ``, 1), "v is missing"},
		{"other version", strings.Replace(good, `"v":1`, `"v":2`, 1), "v 2"},
		{"missing figure", strings.Replace(good, `"entry_latency_p99_ms":500,`, ``, 1), "entry_latency_p99_ms is missing"},
		{"negative", strings.Replace(good, `"admitted_per_s":160`, `"admitted_per_s":-1`, 1), "admitted_per_s"},
		{"ratio above 1", strings.Replace(good, `"barrage_shown_ratio":0.99`, `"barrage_shown_ratio":99`, 1), "barrage_shown_ratio 99"},
		{"a string", strings.Replace(good, `1250`, `"1250"`, 1), "barrage_latency_p99_ms"},
		{"two values", good + good, "more than one"},
		{"too long", good[:len(good)-1] + `,"x":"` + strings.Repeat("a", maxSLOBytes) + `"}`, "larger than"},
		{"unknown role", good[:len(good)-1] + `,"roles":[{"role":"cdn","nodes":1,"vcpu":1,"cpu_cores_per_node":0.1,"utilization":0.1}]}`, `"cdn"`},
		{"role twice", good[:len(good)-1] + `,"roles":[` + role + `,` + role + `]}`, "twice"},
		{"role without vcpu", good[:len(good)-1] + `,"roles":[{"role":"edge","nodes":1,"vcpu":0,"cpu_cores_per_node":0.1,"utilization":0.1}]}`, "vcpu"},
		{"role cpu negative", good[:len(good)-1] + `,"roles":[{"role":"edge","nodes":1,"vcpu":1,"cpu_cores_per_node":-1,"utilization":0.1}]}`, "cpu_cores_per_node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadSLO(strings.NewReader(tc.in))
			if !errors.Is(err, ErrBadSLO) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %v: want ErrBadSLO saying %q", err, tc.says)
			}
		})
	}
}

// FuzzReadSLO: any input is read or refused with ErrBadSLO, and what is
// read is in range.
func FuzzReadSLO(f *testing.F) {
	f.Add(`{"v":1,"barrage_latency_p99_ms":1250,"gift_latency_p99_ms":100,"entry_latency_p99_ms":500,"gift_delivered_ratio":1,"barrage_shown_ratio":0.99,"admitted_per_s":160}`)
	f.Add(`{"v":1,"gift_delivered_ratio":1e400}`)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ReadSLO(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrBadSLO) {
				t.Fatalf("uncoded error %v", err)
			}
			return
		}
		if s.V != SLOVersion || s.GiftDeliveredRatio > 1 || s.BarrageShownRatio > 1 || s.BarrageLatencyP99Ms < 0 || s.AdmittedPerSec < 0 {
			t.Fatalf("read out of range: %+v", s)
		}
	})
}

// TestJudge: each line passes, fails or says it has no data by its own
// figure; one failing line fails the verdict.
func TestJudge(t *testing.T) {
	slo := fixtureSLO()
	v := Judge(fixture(), slo)
	if !v.Pass {
		t.Fatalf("the fixture fails: %+v", v.Lines)
	}
	want := []Status{Pass, Pass, Pass, Pass, Pass, Pass, Info, Info, Info, Info, Pass}
	for i, l := range v.Lines {
		if l.Status != want[i] {
			t.Errorf("line %d %q: %s, want %s", i, l.Name, l.Status, want[i])
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*fixtureRun)
		line   int
		want   Status
	}{
		{"barrage slow", func(f *fixtureRun) { f.r.Latency.BarrageE2E.P99Ms = 1401 }, 0, Fail},
		{"no barrage timed", func(f *fixtureRun) { f.r.Latency.BarrageE2E.Count = 0 }, 0, NoData},
		{"gift slow", func(f *fixtureRun) { f.r.Latency.GiftE2E.P99Ms = 101 }, 1, Fail},
		{"entry slow", func(f *fixtureRun) { f.r.Latency.Entry.P99Ms = 501 }, 2, Fail},
		{"a gift missed by one poller", func(f *fixtureRun) { f.r.Delivery.GiftsShownByAll = 99 }, 3, Fail},
		{"a gift order failed", func(f *fixtureRun) { f.r.Gifts.Failed = 1 }, 3, Fail},
		{"no pollers", func(f *fixtureRun) { f.r.Delivery.Joined = 0 }, 3, NoData},
		{"comments not shown", func(f *fixtureRun) { f.r.Delivery.CommentsShown = 1400 }, 4, Fail},
		{"admitted too few", func(f *fixtureRun) { f.r.Drops.Accepted["barrage"] = 1300 }, 5, Fail},
		{"no admitted floor", func(f *fixtureRun) { f.slo.AdmittedPerSec = 0 }, 5, Info},
		// The plan's 140/s over a 10 s offer is 1,400 comments; the pacer
		// ending 50 ms late offered no fewer (139.3/s over the load's time).
		{"admitted all, the pacer ending late", func(f *fixtureRun) { f.r.Drops.Accepted["barrage"], f.r.Run.LoadSeconds = 1400, 10.05 }, 5, Pass},
		// 1 % under the plan passes (floor 138.6/s), more does not.
		{"admitted within the tolerance", func(f *fixtureRun) { f.r.Drops.Accepted["barrage"] = 1387 }, 5, Pass},
		{"admitted under the tolerance", func(f *fixtureRun) { f.r.Drops.Accepted["barrage"] = 1385 }, 5, Fail},
		// A plan's rounding: 59.6/s planned is written 60; 59.5/s passes.
		{"admitted within the plan's rounding", func(f *fixtureRun) { f.slo.AdmittedPerSec, f.r.Drops.Accepted["barrage"] = 60, 595 }, 5, Pass},
		{"admitted a run cut short", func(f *fixtureRun) { f.r.Drops.Accepted["barrage"], f.r.Run.LoadSeconds = 700, 5 }, 5, Pass},
		{"generator starved", func(f *fixtureRun) { f.r.Latency.GeneratorLag.P99Ms = 400 }, 10, GeneratorBound},
		{"generator took the machine", func(f *fixtureRun) { f.r.Generator.CPUCores = 1.9 }, 10, GeneratorBound},
		{"generator not measured", func(f *fixtureRun) { f.r.Generator = loadgen.GeneratorReport{} }, 10, NoData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fixtureRun{fixture(), slo}
			tc.change(f)
			v := Judge(f.r, f.slo)
			if got := v.Lines[tc.line]; got.Status != tc.want {
				t.Errorf("line %q: %s (%s), want %s", got.Name, got.Status, got.Measured, tc.want)
			}
			if v.Pass == (tc.want == Fail || tc.want == GeneratorBound) {
				t.Errorf("verdict pass=%v with a line %s", v.Pass, tc.want)
			}
			if v.Inconclusive != (tc.want == GeneratorBound) {
				t.Errorf("verdict inconclusive=%v with a line %s", v.Inconclusive, tc.want)
			}
		})
	}
}

// TestJudgeRoles: the role measured binding first is the one whose
// busiest node used the largest share of its vCPU, set against the plan's;
// a node holding several roles is not attributed to any.
func TestJudgeRoles(t *testing.T) {
	v := Judge(fixture(), fixtureSLO())
	if v.BindingRole != "edge" || len(v.Roles) != 2 || v.Roles[0].Role != "edge" || v.Roles[1].Nodes != 0 {
		t.Fatalf("roles %+v, binding %q", v.Roles, v.BindingRole)
	}
	if l := v.Lines[6]; !strings.Contains(l.Measured, "edge binds first (the plan's)") {
		t.Errorf("binding line %+v", l)
	}
	if l := v.Lines[7]; !strings.Contains(l.Measured, "0.27 mean") || !strings.Contains(l.Measured, "2.65× the plan") {
		t.Errorf("edge line %+v", l)
	}
	// 0.265 cores over 3,000 frames/s: 88 µs a frame against the profile's 9.
	if l := v.Lines[8]; !strings.Contains(l.Measured, "88.3 µs") || !strings.Contains(l.Measured, "9.81× the profile") {
		t.Errorf("edge per-frame line %+v", l)
	}
	if l := v.Lines[9]; l.Measured != "no ingest node read" {
		t.Errorf("ingest line %+v", l)
	}
	slo := fixtureSLO()
	slo.BindingRole = "ingest"
	if l := Judge(fixture(), slo).Lines[6]; !strings.Contains(l.Measured, "not the plan's ingest") {
		t.Errorf("binding line against another plan %+v", l)
	}
}

type fixtureRun struct {
	r   *loadgen.Report
	slo SLO
}

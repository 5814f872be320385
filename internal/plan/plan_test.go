package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// testProfile has round figures, so that the expected plans below can be
// worked out by hand.
func testProfile() *Profile {
	p := &Profile{V: ProfileVersion, Taken: "2026-12-05T00:00:00Z", Machine: Machine{Cores: 2, Model: "test", Kernel: "Linux", Go: "go1", OSArch: "linux/amd64"}}
	for name, f := range DesignFigures() {
		p.Figures.Set(name, f)
	}
	for name, v := range map[string]float64{
		"edge_cpu_us_per_frame": 10, "edge_cpu_us_per_frame_tls": 20,
		"edge_bytes_per_conn": 1000, "edge_bytes_per_conn_tls": 20000,
		"edge_connects_per_s_per_core": 3000, "edge_connects_per_s_per_core_tls": 1000,
		"ingest_admitted_per_s_per_core": 5000, "entry_answers_per_s_per_core": 10000,
		"slicer_cpu_ms_per_room_s": 0.2, "slicer_redis_calls_per_room_s": 4, "slicer_redis_cmds_per_room_s": 9,
		"slicer_msgs_per_s_per_core": 50000, "segment_bytes_per_message": 100,
		"edge_idle_cpu_cores": 0.5, "ingest_idle_cpu_cores": 0.5, "gslb_idle_cpu_cores": 1, "slicer_idle_cpu_cores": 0.1,
	} {
		if !p.Figures.Set(name, Figure{Value: v, Unit: "u", Source: SourceMeasured, How: "test"}) {
			panic(name)
		}
	}
	return p
}

func testEvent() *Event {
	inst := func(t string, vcpu int) Instance {
		return Instance{Type: t, VCPU: vcpu, MemoryGiB: float64(vcpu) * 2, Alternates: []string{"c6i.4xlarge"}}
	}
	return &Event{
		V: 1, Name: "show-1m", Viewers: 1e6,
		Rooms:        []RoomGroup{{Name: "stage", Count: 1, ViewerShare: 1, SegmentMs: 1000}},
		CommentsPerS: 100000, GiftsPerS: 20, GiftPushShare: 0.5, JoinPerS: 100000,
		Zones: []string{"a", "b", "c"}, ZonesLost: 1, Headroom: 0.5, ScaleOutMargin: 0.15,
		Budget: 60, RoomRefillPerS: 1200, NodeTLS: true,
		Instances: Instances{Edge: inst("c6in.4xlarge", 16), Ingest: inst("c6in.4xlarge", 16), Gslb: inst("c7i.4xlarge", 16), Slicer: inst("c7i.xlarge", 4)},
		Redis:     RedisSpec{NodeType: "cache.r7g.large", ReplicasPerShard: 2},
	}
}

func TestSurvivors(t *testing.T) {
	for _, c := range []struct {
		need        float64
		zones, lost int
		want        int
	}{
		{0, 3, 1, 1},
		{1, 3, 1, 2},
		{2, 3, 1, 3},
		{26.3, 3, 1, 41},   // 41 - ceil(41/3)=14 = 27
		{300.1, 3, 1, 452}, // 451 - 151 = 300 is short
		{10, 2, 1, 20},
		{10, 3, 0, 10},
		{10, 4, 2, 20},
	} {
		if got := survivors(c.need, c.zones, c.lost); got != c.want {
			t.Errorf("survivors(%v, %d, %d) = %d, want %d", c.need, c.zones, c.lost, got, c.want)
		}
	}
}

// TestPlanArithmetic checks a plan against the arithmetic done by hand
// (the comments).
func TestPlanArithmetic(t *testing.T) {
	pl, err := New(testEvent(), testProfile())
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	type fleet struct {
		count, max int
		binding    string
		util       float64
	}
	for _, c := range []struct {
		role string
		want fleet
	}{
		// by CPU (16 x 0.5 - 0.5 idle) / (10 frames x 20 µs) = 37,500
		// (memory: 858,993); usable 35,625; 1e6/35,625 = 28.1 with a zone
		// of 3 lost -> 44; the surge needs 100,000 / (1,000 x 16 x 0.5) =
		// 12.5 -> 13. Connections (0.638) run out before the CPU (0.5 +
		// 22,727 x 10 x 20 µs = 5.05 of 8: 0.631).
		{"edge", fleet{44, 51, "CPU per frame written", 1e6 / (44 * 35625.0)}},
		// 100,000 / 5,000 = 20 cores over (16 x 0.5 - 0.5) = 7.5 a machine
		// = 2.7 machines -> 5; each at 0.5 + 20/5 = 4.5 of 8.
		{"ingest", fleet{5, 6, "CPU per post", 4.5 / 8}},
		// 100,000 / 10,000 = 10 cores over (8 - 1) = 1.4 machines -> 3;
		// each at 1 + 10/3 of 8.
		{"gslb", fleet{3, 4, "CPU per entry (join surge)", (1 + 10.0/3) / 8}},
		// 0.2 ms x 1 room + (1,200 + 20) / 50,000 = 0.0246 vCPU: a standby
		// binds; both idle at 0.1.
		{"slicer", fleet{2, 2, "a standby after 1 zone(s) lost", (2*0.1 + 0.0246) / 4}},
	} {
		f := pl.Fleet(c.role)
		got := fleet{f.Count, f.MaxCount, f.Binding, f.Utilization}
		if got.count != c.want.count || got.max != c.want.max || got.binding != c.want.binding || math.Abs(got.util-c.want.util) > 1e-9 {
			t.Errorf("%s: got %+v, want %+v", c.role, got, c.want)
		}
	}
	// The busiest machine's CPU at the peak, for the rehearsal, its idle
	// and its work: an edge writes 22,727 viewers x 10 frames x 20 µs;
	// 100,000 posts / 5,000 per core over 5 ingests; 100,000 entries /
	// 10,000 per core over 3 gslbs; one room's slicer work on its leader.
	for i, want := range []float64{0.5 + 22727*10*20e-6, 0.5 + 100000.0/5000/5, 1 + 100000.0/10000/3, 0.1 + 0.0246} {
		rc := pl.RoleCPU[i]
		near(rc.Role+" cpu per node", rc.CoresPerNode, want)
		if rc.Role != Roles[i] || rc.Nodes != pl.Fleet(rc.Role).Count || rc.Utilization != pl.Fleet(rc.Role).Utilization || (rc.UnitCPUUs > 0) != (rc.Role != "slicer") {
			t.Errorf("role cpu %d: %+v", i, rc)
		}
	}
	// ingest_capacity: 7.5 usable cores x 5,000 x 0.15 s = 5,625 -> 5,600.
	if pl.EdgeMaxConns != 37500 || pl.IngestCapacity != 5600 || pl.LoadBalancers != 1 || pl.LCUPerLB != 4000 {
		t.Errorf("edge_max_conns %d (want 37500), ingest_capacity %d (5600), ALBs %d (1), LCU %d (4000)", pl.EdgeMaxConns, pl.IngestCapacity, pl.LoadBalancers, pl.LCUPerLB)
	}
	// The room: 1,200 XADD + 5 ingests x 40 + 20 gifts x 9 + 9 (slicer) +
	// 44 edges x 10 reads = 2,029; reports (44 + 5) x 16 + syncs 3 x 3,200
	// x 0.98 (49 nodes' news a second x 4 syncs of 200) = 10,192.
	near("redis ops", pl.RedisOpsPerS, 2029+10192)
	if pl.RedisShards != 1 || pl.RedisNodes != 3 {
		t.Errorf("redis shards %d (want 1), nodes %d (3)", pl.RedisShards, pl.RedisNodes)
	}
	near("cdn requests", pl.CDNRequestsPerS, 1e6)
	// 60 messages x 100 B + 64 a second to each of 1e6 viewers, x 8 x 1.15.
	near("cdn Gbps", pl.CDNGbps, 1e6*6064*8*1.15/1e9)
	near("origin", pl.OriginGetsPerS, 1)
	near("s3 puts", pl.S3PutsPerS, 1)
	if pl.VCPU != 44*16+5*16+3*16+2*4 || pl.VCPUMax != 51*16+6*16+4*16+2*4 {
		t.Errorf("vCPU %d / %d", pl.VCPU, pl.VCPUMax)
	}
	// gift p99: 55 + 37,500 x 20 µs / 16 + 50 = 151.9 -> 152.
	want := SLO{V: 1, BarrageLatencyP99Ms: 1400, GiftLatencyP99Ms: 152, EntryLatencyP99Ms: 250,
		GiftDeliveredRatio: 1, BarrageShownRatio: 0.0004, AdmittedPerS: 1200, BindingRole: "edge"}
	if pl.SLO != want {
		t.Errorf("SLO %+v, want %+v", pl.SLO, want)
	}
	// Every line names a formula and at least one field.
	for _, l := range pl.Lines {
		if l.Formula == "" || len(l.Fields) == 0 {
			t.Errorf("line %s/%s names no formula or field", l.Section, l.Name)
		}
	}
}

// TestPlanBindings: each role binds where its load says.
func TestPlanBindings(t *testing.T) {
	for _, c := range []struct {
		name    string
		mod     func(*Event, *Profile)
		role    string
		binding string
		binds   string
	}{
		{"memory binds a plain edge with fat connections", func(e *Event, p *Profile) {
			e.NodeTLS = false
			p.Figures.EdgeBytesPerConn.Value = 2e6
		}, "edge", "memory per connection", "edge"},
		{"a join surge binds the edges", func(e *Event, p *Profile) {
			e.JoinPerS = 1.5e6
			p.Figures.EntryAnswersPerSCore.Value = 1e6
		}, "edge", "connects per second (join surge)", "edge"},
		{"slow entries bind the gslb", func(e *Event, p *Profile) {
			p.Figures.EntryAnswersPerSCore.Value = 1200 // at 900 so many gslbs that their syncs bind Redis first
		}, "gslb", "CPU per entry (join surge)", "gslb"},
		{"a small show: the gslb's idle binds first", func(e *Event, p *Profile) {
			e.Viewers, e.CommentsPerS, e.JoinPerS = 600, 60, 10
			for _, i := range []*Instance{&e.Instances.Edge, &e.Instances.Ingest, &e.Instances.Gslb, &e.Instances.Slicer} {
				i.VCPU, i.MemoryGiB = 1, 2
			}
			p.Figures.EdgeIdleCPUCores.Value, p.Figures.IngestIdleCPUCores.Value = 0.008, 0.011
			p.Figures.GslbIdleCPUCores.Value, p.Figures.SlicerIdleCPUCores.Value = 0.07, 0.003
		}, "gslb", "CPU per entry (join surge)", "gslb"},
		{"many rooms: the slicers' CPU", func(e *Event, p *Profile) {
			e.Rooms = []RoomGroup{{Name: "many", Count: 100000, ViewerShare: 1, SegmentMs: 250}}
		}, "slicer", "CPU of the rooms led", "redis"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, p := testEvent(), testProfile()
			c.mod(e, p)
			pl, err := New(e, p)
			if err != nil {
				t.Fatal(err)
			}
			if f := pl.Fleet(c.role); f.Binding != c.binding {
				t.Errorf("%s binds on %q, want %q", c.role, f.Binding, c.binding)
			}
			if pl.SLO.BindingRole != c.binds {
				t.Errorf("binds first: %s, want %s", pl.SLO.BindingRole, c.binds)
			}
		})
	}
}

func TestPlanInfeasible(t *testing.T) {
	e, p := testEvent(), testProfile()
	e.JoinPerS = 2e6 // 80,000 LCU: six ALBs
	_, err := New(e, p)
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeInfeasible || pe.Field != "join_per_s" {
		t.Fatalf("err = %v, want infeasible join_per_s", err)
	}
	for _, role := range []string{"edge", "ingest", "gslb", "slicer"} {
		p := testProfile()
		// Idle at the whole planned CPU of a 4-vCPU slicer or a 16-vCPU other.
		p.Figures.Set(role+"_idle_cpu_cores", Figure{Value: 8, Unit: "cores", Source: SourceMeasured, How: "test"})
		if _, err := New(testEvent(), p); !errors.As(err, &pe) || pe.Code != CodeInfeasible || pe.Field != "instances."+role {
			t.Fatalf("%s idle at 8 cores: err = %v, want infeasible instances.%s", role, err, role)
		}
	}
	p = testProfile()
	e = testEvent()
	e.GiftsPerS = 61 // above the budget of 60
	if _, err := New(e, p); !errors.As(err, &pe) || pe.Code != CodeInfeasible || pe.Field != "gifts_per_s" {
		t.Fatalf("err = %v, want infeasible gifts_per_s", err)
	}
	e = testEvent()
	e.Budget, e.GiftsPerS, e.RoomRefillPerS = 30000, 20000, 60000 // one room past a shard
	if _, err := New(e, p); !errors.As(err, &pe) || pe.Code != CodeInfeasible || pe.Field != "rooms" {
		t.Fatalf("err = %v, want infeasible rooms", err)
	}
}

// TestDecodeErrors: every bad document is refused with a code naming the
// field.
func TestDecodeErrors(t *testing.T) {
	good, err := json.Marshal(testEvent())
	if err != nil {
		t.Fatal(err)
	}
	// The Go field names are not the JSON names: encode through the tags.
	var m map[string]any
	if err := json.Unmarshal(good, &m); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		edit      func(m map[string]any)
		code, fld string
	}{
		{"version", func(m map[string]any) { m["v"] = 2 }, CodeBadVersion, "v"},
		{"unknown field", func(m map[string]any) { m["viewerz"] = 1 }, "bad_json", ""},
		{"no viewers", func(m map[string]any) { delete(m, "viewers") }, CodeMissing, "viewers"},
		{"headroom", func(m map[string]any) { m["headroom"] = 1.2 }, CodeRange, "headroom"},
		{"shares", func(m map[string]any) { m["rooms"].([]any)[0].(map[string]any)["viewer_share"] = 0.5 }, CodeRange, "rooms"},
		{"segment", func(m map[string]any) { m["rooms"].([]any)[0].(map[string]any)["segment_ms"] = 300 }, CodeRange, "rooms[0].segment_ms"},
		{"zones lost", func(m map[string]any) { m["zones_lost"] = 3 }, CodeRange, "zones_lost"},
		{"instance", func(m map[string]any) { m["instances"].(map[string]any)["edge"].(map[string]any)["vcpu"] = 0 }, CodeRange, "instances.edge.vcpu"},
		{"redis", func(m map[string]any) { m["redis"].(map[string]any)["node_type"] = "r7g.large" }, CodeRange, "redis.node_type"},
		{"string for a number", func(m map[string]any) { m["viewers"] = "many" }, "bad_json", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mm map[string]any
			_ = json.Unmarshal(good, &mm)
			c.edit(mm)
			b, _ := json.Marshal(mm)
			_, err := DecodeEvent(b)
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != c.code || (c.fld != "" && pe.Field != c.fld) {
				t.Fatalf("err = %v, want code %s field %s", err, c.code, c.fld)
			}
		})
	}
	if _, err := DecodeEvent(good); err != nil {
		t.Fatalf("the test event: %v", err)
	}

	pb, _ := json.Marshal(testProfile())
	if _, err := DecodeProfile(pb); err != nil {
		t.Fatalf("the test profile: %v", err)
	}
	for _, c := range []struct {
		name, from, to, code, fld string
	}{
		{"version", `"v":2`, `"v":0`, CodeBadVersion, "v"},
		{"newer version", `"v":2`, `"v":3`, CodeBadVersion, "v"},
		// A version 1 profile has no idle figures: re-run calibrate.
		{"old version", `"v":2`, `"v":1`, CodeOldProfile, "v"},
		{"zero figure", `"value":20000`, `"value":0`, CodeRange, "figures.edge_bytes_per_conn_tls.value"},
		{"source", `"source":"measured"`, `"source":"guessed"`, CodeRange, "figures.edge_cpu_us_per_frame.source"},
		{"unknown figure", `"figures":{`, `"figures":{"edge_magic":{},`, "bad_json", ""},
	} {
		t.Run("profile "+c.name, func(t *testing.T) {
			b := bytes.Replace(pb, []byte(c.from), []byte(c.to), 1)
			_, err := DecodeProfile(b)
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != c.code || (c.fld != "" && pe.Field != c.fld) {
				t.Fatalf("err = %v, want code %s field %s", err, c.code, c.fld)
			}
		})
	}
}

func TestOutputs(t *testing.T) {
	pl, err := New(testEvent(), testProfile())
	if err != nil {
		t.Fatal(err)
	}
	var tab, tf, q, slo bytes.Buffer
	for _, err := range []error{pl.WriteTable(&tab), pl.WriteTfvars(&tf, "e.json", "p.json"), pl.WriteQuota(&q), pl.WriteSLO(&slo)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"edge_max_conns", "binds first as the load grows: edge", "edge_cpu_us_per_frame_tls", "usable CPU", "edge_idle_cpu_cores", "gslb_idle_cpu_cores", "CPU of a standby"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	for _, want := range []string{
		`edge_fleet = { instance_type = "c6in.4xlarge", count = 44, max_count = 51, alternate_instance_types = ["c6i.4xlarge"] }`,
		"edge_max_conns      = 37500", "ingest_capacity     = 5600", "redis_shards             = 1", "default_segment_ms = 1000",
	} {
		if !strings.Contains(tf.String(), want) {
			t.Errorf("tfvars lack %q:\n%s", want, tf.String())
		}
	}
	if !strings.Contains(q.String(), "| EC2 vCPU") {
		t.Errorf("quota checklist:\n%s", q.String())
	}
	var back map[string]any
	if err := json.Unmarshal(slo.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "barrage_latency_p99_ms", "gift_latency_p99_ms", "entry_latency_p99_ms", "gift_delivered_ratio", "barrage_shown_ratio", "admitted_per_s", "binding_role", "roles"} {
		if _, ok := back[k]; !ok {
			t.Errorf("SLO JSON lacks %s: %s", k, slo.String())
		}
	}
	if roles, _ := back["roles"].([]any); len(roles) != 4 {
		t.Errorf("SLO JSON roles: %v, want the 4 machine roles", back["roles"])
	}
	if len(back) != 9 {
		t.Errorf("SLO JSON has %d keys: %s", len(back), slo.String())
	}
}

package htmlreport

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"danmaku/internal/loadgen"
)

// Status is a verdict line's outcome.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	// NoData: the run measured nothing this line could be judged on (no
	// pollers, no gifts…); it fails no verdict but says so.
	NoData Status = "no data"
	// Info is a line with no target: the plan's binding role.
	Info Status = "info"
	// GeneratorBound: the load generator could not keep its schedule; the
	// run measured the generator, and its verdict is inconclusive.
	GeneratorBound Status = "generator-bound"
)

// Line is one service level: its target, what the run measured, and the
// outcome.
type Line struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Status   Status `json:"status"`
}

// Verdict is the run judged against service levels: it passes when no
// line fails and the generator kept its schedule. A generator-bound run is
// Inconclusive: neither the servers' pass nor their fail.
type Verdict struct {
	Pass         bool   `json:"pass"`
	Inconclusive bool   `json:"inconclusive,omitempty"`
	Lines        []Line `json:"lines"`
	// Roles are the machine roles' CPU, measured against planned, the
	// busiest share first (when the service levels carry the plan's roles).
	Roles []RoleCPU `json:"roles,omitempty"`
	// BindingRole is the role measured binding first: the largest share
	// of its vCPU on its busiest node.
	BindingRole string `json:"binding_role,omitempty"`
}

// Word is the verdict in one word for the page's headline.
func (v Verdict) Word() string {
	switch {
	case v.Inconclusive:
		return "INCONCLUSIVE"
	case v.Pass:
		return "PASS"
	}
	return "FAIL"
}

// Judge judges r against s, one line per service level.
func Judge(r *loadgen.Report, s SLO) Verdict {
	var v Verdict
	latency := func(name string, sum loadgen.Summary, target float64) {
		l := Line{Name: name, Target: fmt.Sprintf("p99 ≤ %s ms", num(target))}
		if sum.Count == 0 {
			l.Measured, l.Status = "nothing measured", NoData
		} else {
			l.Measured = fmt.Sprintf("p99 %s ms (p50 %s, %d samples)", num(sum.P99Ms), num(sum.P50Ms), sum.Count)
			l.Status = status(sum.P99Ms <= target)
		}
		v.add(l)
	}
	via := "segments"
	if r.Delivery.Edge {
		via = "the edge"
	}
	latency("barrage end to end (via the CDN)", r.Latency.BarrageE2E, s.BarrageLatencyP99Ms)
	latency("gift end to end (via "+via+")", r.Latency.GiftE2E, s.GiftLatencyP99Ms)
	latency("entry (GET /v1/entry)", r.Latency.Entry, s.EntryLatencyP99Ms)
	if j, o := r.Latency.EntryJoins, r.Latency.EntryOffer; j.Count+o.Count > 0 {
		l := &v.Lines[len(v.Lines)-1]
		pace := "offered all at once"
		if r.Users.JoinRatePerSec > 0 {
			pace = "offered at " + num(r.Users.JoinRatePerSec) + "/s"
		}
		l.Measured += fmt.Sprintf("; joins p99 %s ms of %d (%s), during the offer p99 %s ms of %d", num(j.P99Ms), j.Count, pace, num(o.P99Ms), o.Count)
	}

	d, g := &r.Delivery, &r.Gifts
	gl := Line{Name: "gifts delivered to every poller", Target: "≥ " + pct(s.GiftDeliveredRatio)}
	if orders := d.GiftsAccepted + g.Failed; d.Joined == 0 || orders == 0 {
		gl.Measured, gl.Status = "no gift accepted and polled", NoData
	} else {
		ratio := float64(d.GiftsShownByAll) / float64(orders)
		gl.Measured = fmt.Sprintf("%s (%d of %d accepted gifts by all %d pollers, %d failed orders)", pct(ratio), d.GiftsShownByAll, d.GiftsAccepted, d.Joined, g.Failed)
		gl.Status = status(ratio >= s.GiftDeliveredRatio)
	}
	v.add(gl)

	bl := Line{Name: "barrage shown", Target: "≥ " + pct(s.BarrageShownRatio)}
	if d.Joined == 0 || d.CommentsAccepted == 0 {
		bl.Measured, bl.Status = "no comment accepted and polled", NoData
	} else {
		ratio := float64(d.CommentsShown) / float64(d.CommentsAccepted)
		bl.Measured = fmt.Sprintf("%s (%d of %d answered 200)", pct(ratio), d.CommentsShown, d.CommentsAccepted)
		bl.Status = status(ratio >= s.BarrageShownRatio)
	}
	v.add(bl)

	v.add(admittedLine(r, s))

	v.Roles = roleCPU(r.Nodes, s.Roles)
	v.BindingRole = v.addRoleLines(r, s)

	v.addGeneratorLine(r)

	v.Pass = !v.Inconclusive
	for _, l := range v.Lines {
		if l.Status == Fail {
			v.Pass = false
		}
	}
	return v
}

// admittedTolerance is how far under the plan's admitted rate a run may
// fall and pass: the plan's figure is rounded to the comment, and the
// schedule's first and last ticks, the client throttle's random refusals
// and a comment or two still in the ingest's flush window when the
// counters are read move a minute's rate by a few tenths of a comment a
// second.
const admittedTolerance = 0.01

// admittedLine judges the comments the ingests stored a second, over the
// offer as scheduled (Run.DurationSeconds, or less if the run was cut
// short): a run whose pacer ended a few milliseconds late offered no
// fewer comments for it.
func admittedLine(r *loadgen.Report, s SLO) Line {
	secs := r.Run.LoadSeconds
	if d := r.Run.DurationSeconds; d > 0 && d < secs {
		secs = d
	}
	admitted := float64(r.Drops.Accepted["barrage"]) / max(secs, 1e-3)
	floor := min(s.AdmittedPerSec*(1-admittedTolerance), s.AdmittedPerSec-0.5)
	al := Line{Name: "admitted comments/s (stored by the ingests)", Measured: fmt.Sprintf("%.1f/s (%d over %s s)", admitted, r.Drops.Accepted["barrage"], num(secs))}
	target := fmt.Sprintf("≥ %s/s (pass from %.1f/s: %s and the plan's rounding)", num(s.AdmittedPerSec), floor, pct(admittedTolerance))
	switch {
	case s.AdmittedPerSec == 0:
		al.Target, al.Status = "no floor", Info
	case len(r.Drops.Endpoints) == 0 || len(r.Drops.ScrapeErrors) > 0 && r.Drops.Accepted["barrage"] == 0:
		al.Target, al.Measured, al.Status = target, "the ingests' /metrics were not read", NoData
	default:
		al.Target, al.Status = target, status(admitted >= floor)
	}
	return al
}

// add appends a line to the verdict.
func (v *Verdict) add(l Line) { v.Lines = append(v.Lines, l) }

// addRoleLines adds the binding role's line and, per machine role, its
// busiest node's CPU against the plan and its CPU per unit of work against
// the profile; it returns the role that bound first ("" if no node of a
// planned role was read).
func (v *Verdict) addRoleLines(r *loadgen.Report, s SLO) (binding string) {
	rl := Line{Name: "binding role", Target: "plan: " + orDash(s.BindingRole), Status: Info, Measured: "no node read"}
	switch n, peak := busiest(r.Nodes); {
	case len(v.Roles) > 0 && v.Roles[0].Nodes > 0:
		b := v.Roles[0]
		binding = b.Role
		same := "the plan's"
		if b.Role != s.BindingRole {
			same = "not the plan's " + orDash(s.BindingRole)
		}
		rl.Measured = fmt.Sprintf("%s binds first (%s): its busiest node used %s of %d vCPU (%s), mean over the run", b.Role, same, num2(b.MeasuredCores), b.VCPU, pct(b.MeasuredCores/float64(b.VCPU)))
	case n != nil:
		rl.Measured = fmt.Sprintf("busiest node %s (%s): %s cores at its peak", n.Endpoint, n.RolesString(), num(peak))
	}
	v.add(rl)
	for _, rc := range v.Roles {
		l := Line{Name: "CPU of the busiest " + rc.Role + " node", Status: Info,
			Target: fmt.Sprintf("plan: %s cores of %d vCPU", num2(rc.PlannedCores), rc.VCPU)}
		if rc.When != "" {
			l.Target += " at " + rc.When
		}
		switch {
		case rc.Nodes == 0:
			l.Measured = "no " + rc.Role + " node read"
		case rc.PlannedCores > 0:
			l.Measured = fmt.Sprintf("%s mean, %s peak over %d node(s): %s× the plan", num2(rc.MeasuredCores), num2(rc.PeakCores), rc.Nodes, num2(rc.MeasuredCores/rc.PlannedCores))
		default:
			l.Measured = fmt.Sprintf("%s mean, %s peak over %d node(s)", num2(rc.MeasuredCores), num2(rc.PeakCores), rc.Nodes)
		}
		v.add(l)
		if rc.Unit == "" || rc.Nodes == 0 {
			continue
		}
		ul := Line{Name: "CPU per " + rc.Unit + " (" + rc.Role + ")", Status: Info,
			Target: fmt.Sprintf("profile: %s µs", num2(rc.PlannedUnitUs))}
		if rc.UnitsPerSec > 0 {
			ul.Measured = fmt.Sprintf("%s µs (%s cores over %s/s, every %s node): %s× the profile", num2(rc.MeasuredUnitUs), num2(rc.RoleCores), num(rc.UnitsPerSec), rc.Role, num2(rc.MeasuredUnitUs/max(rc.PlannedUnitUs, 1e-9)))
		} else {
			ul.Measured = fmt.Sprintf("no %s over the run (%s cores)", rc.Unit, num2(rc.RoleCores))
		}
		v.add(ul)
	}
	return binding
}

// addGeneratorLine adds whether the load generator kept its schedule; a
// generator-bound run is inconclusive, whatever the other lines say.
func (v *Verdict) addGeneratorLine(r *loadgen.Report) {
	gl2 := Line{Name: "load generator kept its schedule", Target: fmt.Sprintf("CPU < %s of the machine, timer lag p99 ≤ 50 ms, send delay p99 ≤ 100 ms", pct(0.8))}
	ge := &r.Generator
	switch why := r.GeneratorBound(); {
	case ge.MachineCores == 0:
		gl2.Measured, gl2.Status = "not measured", NoData
	case len(why) > 0:
		gl2.Measured, gl2.Status = strings.Join(why, "; "), GeneratorBound
		v.Inconclusive = true
	default:
		gl2.Measured = fmt.Sprintf("%d process(es), %s of %d cores, timer lag p99 %s ms, send delay p99 %s ms", ge.Procs, num2(ge.CPUCores), ge.MachineCores, num(r.Latency.GeneratorLag.P99Ms), num(r.Latency.SendDelay.P99Ms))
		gl2.Status = Pass
	}
	v.add(gl2)
}

// RoleCPU is one machine role's CPU, measured against planned.
type RoleCPU struct {
	Role string `json:"role"`
	VCPU int    `json:"vcpu"`
	When string `json:"when,omitempty"`
	// Nodes is how many nodes of this role alone were read.
	Nodes int `json:"nodes"`
	// PlannedCores is the plan's CPU of the busiest node at the peak;
	// MeasuredCores the busiest node's mean over its samples, PeakCores
	// its busiest sample.
	PlannedCores  float64 `json:"planned_cores"`
	MeasuredCores float64 `json:"measured_cores"`
	PeakCores     float64 `json:"peak_cores"`
	// Unit is the work the plan costs the role by; RoleCores and
	// UnitsPerSec are every node of the role's mean CPU and units a
	// second over the run, MeasuredUnitUs their quotient (fixed costs
	// included), PlannedUnitUs the profile's.
	Unit           string  `json:"unit,omitempty"`
	RoleCores      float64 `json:"role_cores,omitempty"`
	UnitsPerSec    float64 `json:"units_per_s,omitempty"`
	MeasuredUnitUs float64 `json:"measured_us_per_unit,omitempty"`
	PlannedUnitUs  float64 `json:"planned_us_per_unit,omitempty"`
}

// units is a sample's work in the unit the plan costs role by.
func units(role string, s loadgen.NodeSample) float64 {
	switch role {
	case "edge":
		return s.EdgeFramesPerSec
	case "ingest":
		return s.AdmittedPerSec + s.GiftsPerSec + s.RejectedPerSec
	case "gslb":
		return s.EntriesPerSec
	}
	return 0
}

// roleCPU sets each planned role against the nodes that serve that role
// alone (a process holding several, as `danmaku dev` does, cannot be
// split), busiest share of its vCPU first.
func roleCPU(nr loadgen.NodesReport, plan []RolePlan) []RoleCPU {
	var out []RoleCPU
	for _, p := range plan {
		rc := RoleCPU{Role: p.Role, VCPU: p.VCPU, When: p.When, PlannedCores: p.CoresPerNode, Unit: p.Unit, PlannedUnitUs: p.UnitCPUUs}
		for i := range nr.Nodes {
			n := &nr.Nodes[i]
			if len(n.Roles) != 1 || n.Roles[0] != p.Role {
				continue
			}
			var sum, k, peak, work float64
			for _, s := range n.Samples {
				if s.OK {
					sum, k, peak, work = sum+s.CPUCores, k+1, max(peak, s.CPUCores), work+units(p.Role, s)
				}
			}
			if k == 0 {
				continue
			}
			rc.Nodes++
			rc.RoleCores += sum / k
			rc.UnitsPerSec += work / k
			rc.MeasuredCores = max(rc.MeasuredCores, sum/k)
			rc.PeakCores = max(rc.PeakCores, peak)
		}
		if rc.UnitsPerSec > 0 {
			rc.MeasuredUnitUs = rc.RoleCores / rc.UnitsPerSec * 1e6
		}
		out = append(out, rc)
	}
	slices.SortStableFunc(out, func(a, b RoleCPU) int {
		return cmp.Compare(b.MeasuredCores/float64(b.VCPU), a.MeasuredCores/float64(a.VCPU))
	})
	return out
}

// num2 writes a CPU figure: two decimals below 10.
func num2(f float64) string {
	if f >= 10 {
		return num(f)
	}
	return fmt.Sprintf("%.2f", f)
}

// busiest is the node whose CPU peaked highest, and that peak.
func busiest(nr loadgen.NodesReport) (*loadgen.Node, float64) {
	var (
		best *loadgen.Node
		peak = -1.0
	)
	for i := range nr.Nodes {
		n := &nr.Nodes[i]
		for _, s := range n.Samples {
			if s.OK && s.CPUCores > peak {
				best, peak = n, s.CPUCores
			}
		}
	}
	return best, peak
}

func status(ok bool) Status {
	if ok {
		return Pass
	}
	return Fail
}

// num writes a figure for people: no decimals from 100 up, one below.
func num(f float64) string {
	if f >= 100 || f == float64(int64(f)) {
		return fmt.Sprintf("%.0f", f)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", f), ".0")
}

func pct(ratio float64) string {
	s := fmt.Sprintf("%.2f", 100*ratio)
	s = strings.TrimSuffix(strings.TrimSuffix(s, "0"), ".0")
	return s + " %"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

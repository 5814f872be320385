package htmlreport

import (
	"fmt"
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
// line fails.
type Verdict struct {
	Pass  bool   `json:"pass"`
	Lines []Line `json:"lines"`
}

// Judge judges r against s, one line per service level.
func Judge(r *loadgen.Report, s SLO) Verdict {
	var v Verdict
	add := func(l Line) { v.Lines = append(v.Lines, l) }
	latency := func(name string, sum loadgen.Summary, target float64) {
		l := Line{Name: name, Target: fmt.Sprintf("p99 ≤ %s ms", num(target))}
		if sum.Count == 0 {
			l.Measured, l.Status = "nothing measured", NoData
		} else {
			l.Measured = fmt.Sprintf("p99 %s ms (p50 %s, %d samples)", num(sum.P99Ms), num(sum.P50Ms), sum.Count)
			l.Status = status(sum.P99Ms <= target)
		}
		add(l)
	}
	via := "segments"
	if r.Delivery.Edge {
		via = "the edge"
	}
	latency("barrage end to end (via the CDN)", r.Latency.BarrageE2E, s.BarrageLatencyP99Ms)
	latency("gift end to end (via "+via+")", r.Latency.GiftE2E, s.GiftLatencyP99Ms)
	latency("entry (GET /v1/entry)", r.Latency.Entry, s.EntryLatencyP99Ms)

	d, g := &r.Delivery, &r.Gifts
	gl := Line{Name: "gifts delivered to every poller", Target: "≥ " + pct(s.GiftDeliveredRatio)}
	if orders := d.GiftsAccepted + g.Failed; d.Joined == 0 || orders == 0 {
		gl.Measured, gl.Status = "no gift accepted and polled", NoData
	} else {
		ratio := float64(d.GiftsShownByAll) / float64(orders)
		gl.Measured = fmt.Sprintf("%s (%d of %d accepted gifts by all %d pollers, %d failed orders)", pct(ratio), d.GiftsShownByAll, d.GiftsAccepted, d.Joined, g.Failed)
		gl.Status = status(ratio >= s.GiftDeliveredRatio)
	}
	add(gl)

	bl := Line{Name: "barrage shown", Target: "≥ " + pct(s.BarrageShownRatio)}
	if d.Joined == 0 || d.CommentsAccepted == 0 {
		bl.Measured, bl.Status = "no comment accepted and polled", NoData
	} else {
		ratio := float64(d.CommentsShown) / float64(d.CommentsAccepted)
		bl.Measured = fmt.Sprintf("%s (%d of %d answered 200)", pct(ratio), d.CommentsShown, d.CommentsAccepted)
		bl.Status = status(ratio >= s.BarrageShownRatio)
	}
	add(bl)

	admitted := float64(r.Drops.Accepted["barrage"]) / max(r.Run.LoadSeconds, 1e-3)
	al := Line{Name: "admitted comments/s (stored by the ingests)", Measured: num(admitted) + "/s"}
	switch {
	case s.AdmittedPerSec == 0:
		al.Target, al.Status = "no floor", Info
	case len(r.Drops.Endpoints) == 0 || len(r.Drops.ScrapeErrors) > 0 && r.Drops.Accepted["barrage"] == 0:
		al.Target, al.Measured, al.Status = "≥ "+num(s.AdmittedPerSec)+"/s", "the ingests' /metrics were not read", NoData
	default:
		al.Target, al.Status = "≥ "+num(s.AdmittedPerSec)+"/s", status(admitted >= s.AdmittedPerSec)
	}
	add(al)

	rl := Line{Name: "binding role", Target: "plan: " + orDash(s.BindingRole), Status: Info, Measured: "no node read"}
	if n, peak := busiest(r.Nodes); n != nil {
		rl.Measured = fmt.Sprintf("busiest node %s (%s): %s cores at its peak", n.Endpoint, n.RolesString(), num(peak))
	}
	add(rl)

	v.Pass = true
	for _, l := range v.Lines {
		if l.Status == Fail {
			v.Pass = false
		}
	}
	return v
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

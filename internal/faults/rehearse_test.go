package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"danmaku/internal/loadgen"
	"danmaku/internal/loadgen/htmlreport"
	"danmaku/internal/plan"
)

// The rehearsal's show and profile: the small show sized for this machine
// (every role a 1-vCPU machine, two zones of which one may be lost) and
// the profile `danmaku calibrate` took here.
// DANMAKU_REHEARSE_EVENT (make rehearse EVENT=file, relative to the
// repository's root) rehearses another show.
const rehearseProfile = "../../infra/profiles/this-machine.json"

var rehearseEvent = func() string {
	if ev := os.Getenv("DANMAKU_REHEARSE_EVENT"); ev != "" {
		if filepath.IsAbs(ev) {
			return ev
		}
		return filepath.Join("..", "..", ev)
	}
	return "../../infra/rehearse/small-show.event.json"
}()

// rehearseLoad is one run of the rehearsal, at scale times the plan's peak.
type rehearseLoad struct {
	name    string
	scale   float64
	pollers int
	senders int
	rate    float64 // comments/s
	gifts   float64 // gifts/s
	joins   float64 // joins/s: the plan's join_per_s, scaled
	offer   time.Duration
}

// TestRehearse plans the small show from the shipped event and profile,
// starts the local real stack with the plan's node counts (each role its
// own process, GOMAXPROCS as the plan's vCPU), and runs `danmaku loadgen
// -procs` at the plan's peak and at 1.5 times it, with the plan's service
// levels: each run's HTML report states the verdict, each role's busiest
// node's CPU against the plan's, and the role that bound first against the
// role the plan named. Generator-bound runs are called so.
//
// By default it runs a tiny load for seconds (the code path, in `make
// test`); DANMAKU_REHEARSE=1 (make rehearse) runs the show's load for 60 s
// a run and writes the reports to DANMAKU_REHEARSE_OUT.
func TestRehearse(t *testing.T) {
	heavy := os.Getenv("DANMAKU_REHEARSE") != ""
	out := os.Getenv("DANMAKU_REHEARSE_OUT")
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	sloPath, planTable := rehearsePlan(t, rehearseEvent, out, "")
	slo := readSLO(t, sloPath)
	ev := readEvent(t)
	vcpu := slo.Roles[0].VCPU
	counts := map[string]int{}
	for _, r := range slo.Roles {
		if r.VCPU != vcpu {
			t.Fatalf("the rehearsal gives every role the same GOMAXPROCS: %s has %d vCPU, %s %d", r.Role, r.VCPU, slo.Roles[0].Role, vcpu)
		}
		counts[r.Role] = r.Nodes
	}
	var runs []rehearseLoad
	for _, sc := range []struct {
		name  string
		scale float64
	}{{"1x", 1}, {"1.5x", 1.5}} {
		l := rehearseLoad{name: sc.name, scale: sc.scale, offer: 60 * time.Second,
			pollers: int(math.Round(ev.Viewers * sc.scale)), rate: ev.CommentsPerS * sc.scale, gifts: ev.GiftsPerS * sc.scale, joins: ev.JoinPerS * sc.scale}
		if !heavy {
			if sc.scale != 1 {
				continue // the code path once is enough
			}
			// The code path only: a fiftieth of the show for 3 s.
			l.offer, l.pollers, l.rate, l.gifts = 3*time.Second, max(4, l.pollers/50), max(3, l.rate/50), max(1, l.gifts/5)
		}
		// Senders post at most once per 1.2 s (the SDK's throttle): a
		// quarter more of them than the rate needs, in tens.
		l.senders = int(math.Ceil(l.rate*1.2*1.25/10)) * 10
		runs = append(runs, l)
	}
	// Each scale's service levels, planned even when only 1x runs: more
	// comments over the same budget show a smaller share, and the
	// ingests must store more.
	type runSLO struct {
		path string
		slo  htmlreport.SLO
	}
	slos := map[float64]runSLO{}
	for _, sc := range []float64{1, 1.5} {
		p, sl := scaledSLO(t, ev, sc, out, sloPath, slo)
		slos[sc] = runSLO{p, sl}
	}
	if hi, lo := slos[1.5].slo, slo; hi.BarrageShownRatio > lo.BarrageShownRatio || hi.AdmittedPerSec < lo.AdmittedPerSec || hi.BindingRole != lo.BindingRole {
		t.Errorf("the plan at 1.5x: shown %v (1x %v), admitted %v/s (1x %v/s), binding %q (1x %q)",
			hi.BarrageShownRatio, lo.BarrageShownRatio, hi.AdmittedPerSec, lo.AdmittedPerSec, hi.BindingRole, lo.BindingRole)
	}
	s := newStack(t, stackOpts{counts: counts, roleEnv: []string{"GOMAXPROCS=" + strconv.Itoa(vcpu)}})
	var summary strings.Builder
	fmt.Fprintf(&summary, "%s\n", planTable)
	for _, l := range runs {
		rs := slos[l.scale]
		r, v := s.rehearse(l, out, rs.path, rs.slo)
		fmt.Fprintf(&summary, "%s", rehearseSummary(l, r, v, rs.slo))
		if len(v.Roles) != len(slo.Roles) {
			t.Errorf("%s: the verdict sets %d roles against the plan, want %d", l.name, len(v.Roles), len(slo.Roles))
		}
		// Every node is read; on a loaded machine a short run may end
		// before a node's second read (its first rate), so a role may
		// count fewer nodes than it has, never more.
		total, read := 0, 0
		for _, rc := range v.Roles {
			total += counts[rc.Role]
			read += rc.Nodes
			if rc.Nodes > counts[rc.Role] || heavy && rc.Nodes != counts[rc.Role] {
				t.Errorf("%s: %d %s node(s) read, the plan's %d", l.name, rc.Nodes, rc.Role, counts[rc.Role])
			}
		}
		if len(r.Nodes.Nodes) != total || (read > 0) != (v.BindingRole != "") || r.Generator.Procs != rehearseProcs {
			t.Errorf("%s: %d nodes in the report (the plan's %d), binding role %q, generator %+v", l.name, len(r.Nodes.Nodes), total, v.BindingRole, r.Generator)
		}
	}
	t.Logf("rehearsal (reports in %s):\n%s", out, summary.String())
	if heavy {
		if err := os.WriteFile(filepath.Join(out, "summary.txt"), []byte(summary.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// rehearseProcs is how many processes the load is spread over: one
// process on a 2-core machine starves (it polls, decodes and sends for
// thousands of viewers) before the servers do.
const rehearseProcs = 2

// rehearsePlan runs `danmaku plan` on the show (event) and the shipped
// profile, as an operator does, writing the service levels (with the
// roles' counts and CPU) into out as slo<suffix>.json; it returns their
// path and the plan's summary (its fleets and the role it says binds
// first).
func rehearsePlan(t *testing.T, event, out, suffix string) (string, string) {
	t.Helper()
	sloPath := filepath.Join(out, "slo"+suffix+".json")
	b, err := exec.Command(danmakuBinary(t), "plan", "-event", event, "-profile", rehearseProfile, "-slo-out", sloPath).CombinedOutput()
	if err != nil {
		t.Fatalf("danmaku plan: %v\n%s", err, b)
	}
	table, _, _ := strings.Cut(string(b), "\nsection ")
	return sloPath, strings.TrimSpace(table)
}

// scaledSLO is the service levels a run at scale times the show is judged
// against: at 1 the plan's own; above, the plan's arithmetic on the show
// scaled (viewers, comments, gifts and joins a second; the same rooms,
// budget and machines), so that the shown ratio (the budget over more
// comments), the admitted floor and the latencies are what the model
// says for that load. The binding role stays the 1× plan's (the stack runs
// the 1× plan's fleet, and the question is which of its roles binds first
// under more load), and so do its roles' CPU unless the scaled plan has
// the same fleet. It returns the file loadgen -slo
// reads and its contents.
func scaledSLO(t *testing.T, ev *plan.Event, scale float64, out, basePath string, base htmlreport.SLO) (string, htmlreport.SLO) {
	t.Helper()
	if scale == 1 {
		return basePath, base
	}
	sc := *ev
	sc.Viewers, sc.CommentsPerS, sc.GiftsPerS, sc.JoinPerS = ev.Viewers*scale, ev.CommentsPerS*scale, ev.GiftsPerS*scale, ev.JoinPerS*scale
	b, err := json.Marshal(&sc)
	if err != nil {
		t.Fatal(err)
	}
	suffix := "-" + strconv.FormatFloat(scale, 'f', -1, 64) + "x"
	evPath := filepath.Join(out, "event"+suffix+".json")
	if err := os.WriteFile(evPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p, _ := rehearsePlan(t, evPath, out, suffix)
	slo := readSLO(t, p)
	// The scaled plan's CPU per role holds when it plans the same fleet
	// (its counts are the zones' floor); otherwise the 1× plan's.
	same := len(slo.Roles) == len(base.Roles)
	for i := 0; same && i < len(slo.Roles); i++ {
		same = slo.Roles[i].Role == base.Roles[i].Role && slo.Roles[i].Nodes == base.Roles[i].Nodes && slo.Roles[i].VCPU == base.Roles[i].VCPU
	}
	if !same {
		t.Logf("the plan at %gx has other fleets than at 1x: its run is judged against the 1x plan's CPU per role", scale)
		slo.Roles = base.Roles
	}
	slo.BindingRole = base.BindingRole
	b, err = json.Marshal(&slo)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, slo
}

func readSLO(t *testing.T, path string) htmlreport.SLO {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	slo, err := htmlreport.ReadSLO(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(slo.Roles) == 0 {
		t.Fatalf("%s names no roles", path)
	}
	return slo
}

// readEvent reads the show's load: viewers, comments and gifts a second.
func readEvent(t *testing.T) *plan.Event {
	t.Helper()
	b, err := os.ReadFile(rehearseEvent)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := plan.DecodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// metricURLs are the /metrics base URLs of the role's nodes; role "" the
// gslbs' and edges'.
func (s *stack) metricURLs(role string) []string {
	var out []string
	for _, n := range s.order {
		p := s.procs[n]
		if p.role == role || role == "" && (p.role == "gslb" || p.role == "edge") {
			out = append(out, "http://"+p.metrics)
		}
	}
	return out
}

// rehearse runs one load against the stack with `danmaku loadgen -procs`,
// writing NAME.json and NAME.html into out, and returns the merged report
// and its verdict. Redis's CPU and commands over the run are logged: no
// /metrics of the report covers it.
func (s *stack) rehearse(l rehearseLoad, out, sloPath string, slo htmlreport.SLO) (*loadgen.Report, htmlreport.Verdict) {
	t := s.t
	t.Helper()
	jsonPath, htmlPath := filepath.Join(out, "rehearsal-"+l.name+".json"), filepath.Join(out, "rehearsal-"+l.name+".html")
	ctx, cancel := context.WithTimeout(context.Background(), l.offer+5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "loadgen", "-gslb", "http://"+s.lb.Addr(), "-room", room,
		"-users", strconv.Itoa(l.senders), "-rate", strconv.FormatFloat(l.rate, 'f', 1, 64)+"/s",
		"-gifts", strconv.FormatFloat(l.gifts, 'f', 1, 64)+"/s", "-gift-ingest", "http://"+s.giftLB.Addr(),
		"-pollers", strconv.Itoa(l.pollers), "-poller-edge", "-duration", l.offer.String(),
		"-join-rate", strconv.FormatFloat(l.joins, 'f', 1, 64)+"/s",
		"-ingest-metrics", strings.Join(s.metricURLs("ingest"), ","), "-slicer-metrics", strings.Join(s.metricURLs("slicer"), ","),
		"-node-metrics", strings.Join(s.metricURLs(""), ","),
		"-user-prefix", "rh"+strings.ReplaceAll(l.name, ".", "")+"-",
		"-procs", strconv.Itoa(rehearseProcs), "-quiet", "-json", jsonPath, "-html", htmlPath, "-slo", sloPath)
	cmd.Env = append(os.Environ(), "DANMAKU_TICKET_KEY="+ticketKey, "DANMAKU_GIFT_KEY="+giftKey)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	redisBefore := s.redisCPU(ctx)
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: loadgen: %v\n%s", l.name, err, tail(stderr.String(), 40))
	}
	redisAfter := s.redisCPU(ctx)
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var r loadgen.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(htmlPath); err != nil || st.Size() == 0 {
		t.Fatalf("%s: no HTML report: %v", l.name, err)
	}
	window := r.Run.End.Sub(r.Run.Start).Seconds()
	t.Logf("%s: redis used %.3f cores and ran %.0f commands/s over the run (joins included)", l.name,
		(redisAfter.cpu-redisBefore.cpu)/window, (redisAfter.cmds-redisBefore.cmds)/window)
	return &r, htmlreport.Judge(&r, slo)
}

// redisReading is Redis's CPU seconds and commands processed so far.
type redisReading struct{ cpu, cmds float64 }

func (s *stack) redisCPU(ctx context.Context) redisReading {
	var rd redisReading
	for _, sec := range []string{"cpu", "stats"} {
		info, err := s.rdb.Info(ctx, sec).Result()
		if err != nil {
			s.t.Logf("redis INFO %s: %v", sec, err)
			continue
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				continue
			}
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "used_cpu_sys", "used_cpu_user":
				rd.cpu += f
			case "total_commands_processed":
				rd.cmds = f
			}
		}
	}
	return rd
}

// rehearseSummary is one run's lines for people.
func rehearseSummary(l rehearseLoad, r *loadgen.Report, v htmlreport.Verdict, slo htmlreport.SLO) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%.1fx the plan): %d pollers holding the edge, %d senders at %.0f/s, %.1f gifts/s for %v, joins offered at %.0f/s (made %.1f/s): verdict %s\n",
		l.name, l.scale, l.pollers, l.senders, l.rate, l.gifts, l.offer, l.joins, r.Users.JoinsPerSec, v.Word())
	for _, line := range v.Lines {
		fmt.Fprintf(&b, "  %-16s %s: %s (target %s)\n", line.Status, line.Name, line.Measured, line.Target)
	}
	sp := r.Latency.BarrageSplit
	fmt.Fprintf(&b, "  barrage p99 %.0f ms, split p50/p99: send→store %.0f/%.0f ms, store→slot end %.0f/%.0f ms, slot end→shown %.0f/%.0f ms; first polls hit %.1f %% (%d 404 retries), clock margin ≤ %d ms\n",
		r.Latency.BarrageE2E.P99Ms, sp.ToStore.P50Ms, sp.ToStore.P99Ms, sp.ToSlotEnd.P50Ms, sp.ToSlotEnd.P99Ms, sp.AfterSlotEnd.P50Ms, sp.AfterSlotEnd.P99Ms,
		100*r.Delivery.FirstPollHitRatio, r.Delivery.NotFoundRetries, r.Delivery.MaxClockMarginMs)
	fmt.Fprintf(&b, "  entry p99: joins %.0f ms of %d, during the offer %.0f ms of %d\n",
		r.Latency.EntryJoins.P99Ms, r.Latency.EntryJoins.Count, r.Latency.EntryOffer.P99Ms, r.Latency.EntryOffer.Count)
	fmt.Fprintf(&b, "  bound first: %s (plan: %s); generator %d processes, %.2f of %d cores, timer lag p99 %.0f ms\n",
		v.BindingRole, slo.BindingRole, r.Generator.Procs, r.Generator.CPUCores, r.Generator.MachineCores, r.Latency.GeneratorLag.P99Ms)
	return b.String()
}

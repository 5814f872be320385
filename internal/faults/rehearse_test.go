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
	sloPath, planTable := rehearsePlan(t, out)
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
			pollers: int(math.Round(ev.Viewers * sc.scale)), rate: ev.CommentsPerS * sc.scale, gifts: ev.GiftsPerS * sc.scale}
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
	s := newStack(t, stackOpts{counts: counts, roleEnv: []string{"GOMAXPROCS=" + strconv.Itoa(vcpu)}})
	var summary strings.Builder
	fmt.Fprintf(&summary, "%s\n", planTable)
	for _, l := range runs {
		r, v := s.rehearse(l, out, sloPath, slo)
		fmt.Fprintf(&summary, "%s", rehearseSummary(l, r, v, slo))
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

// rehearsePlan runs `danmaku plan` on the small show and the shipped
// profile, as an operator does, writing the service levels (with the
// roles' counts and CPU) into out; it returns their path and the plan's
// summary (its fleets and the role it says binds first).
func rehearsePlan(t *testing.T, out string) (string, string) {
	t.Helper()
	sloPath := filepath.Join(out, "slo.json")
	b, err := exec.Command(danmakuBinary(t), "plan", "-event", rehearseEvent, "-profile", rehearseProfile, "-slo-out", sloPath).CombinedOutput()
	if err != nil {
		t.Fatalf("danmaku plan: %v\n%s", err, b)
	}
	table, _, _ := strings.Cut(string(b), "\nsection ")
	return sloPath, strings.TrimSpace(table)
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
	fmt.Fprintf(&b, "%s (%.1fx the plan): %d pollers holding the edge, %d senders at %.0f/s, %.1f gifts/s for %v: verdict %s\n",
		l.name, l.scale, l.pollers, l.senders, l.rate, l.gifts, l.offer, v.Word())
	for _, line := range v.Lines {
		fmt.Fprintf(&b, "  %-16s %s: %s (target %s)\n", line.Status, line.Name, line.Measured, line.Target)
	}
	fmt.Fprintf(&b, "  bound first: %s (plan: %s); generator %d processes, %.2f of %d cores, timer lag p99 %.0f ms\n",
		v.BindingRole, slo.BindingRole, r.Generator.Procs, r.Generator.CPUCores, r.Generator.MachineCores, r.Latency.GeneratorLag.P99Ms)
	return b.String()
}

package calibrate

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"danmaku/auth"
	"danmaku/internal/testenv"
	"danmaku/internal/testwait"
)

// The idle stack's keys and names (loopback only, thrown away with it).
const (
	idleTicketKey = "calibrate-idle-ticket-key-0123456789"
	idleOpKey     = "calibrate-idle-op-key"
	idleRoom      = "idle"
	idleS3Prefix  = "idle/"
	// idleReady is what a role logs once it serves.
	idleReady = "press Ctrl-C to stop"
)

// idleRoles are the nodes of the idle stack: the fewest with which every
// role is live — two gslbs syncing the load table (which then names both
// edges and both ingests), two edges and two ingests reporting load, a
// slicer leading the one live room and its standby.
var idleRoles = []struct {
	role string
	n    int
}{{"gslb", 2}, {"ingest", 2}, {"edge", 2}, {"slicer", 2}}

// BenchmarkIdle measures each role's CPU with no load: the real stack
// (every role its own `danmaku` process, as production runs it, against
// redis-server and versitygw), one event with one live room and no viewer,
// post or gift; after every gslb hands out entries for the room and a
// slicer leads it, each process's own CPU time (its threads' run times,
// /proc/PID/task/*/schedstat) over DANMAKU_IDLE_WINDOW (default 10s), in cores: the
// mean of the role's nodes. The slicer's is the mean of the leader of the
// idle room and its standby. `danmaku calibrate` reads it as the profile's
// *_idle_cpu_cores.
func BenchmarkIdle(b *testing.B) {
	window := 10 * time.Second
	if v, err := time.ParseDuration(os.Getenv("DANMAKU_IDLE_WINDOW")); err == nil && v > 0 {
		window = v
	}
	t0 := time.Now()
	bin := idleBuild.Path(b)
	b.Logf("built in %v", time.Since(t0).Round(time.Second))
	for range b.N {
		t0 = time.Now()
		s := newIdleStack(b, bin)
		b.Logf("the idle stack live in %v", time.Since(t0).Round(time.Second))
		// Settle: the first load reports, syncs and leases are behind.
		time.Sleep(3 * time.Second)
		cpu0 := s.cpu(b)
		start := time.Now()
		time.Sleep(window)
		secs := time.Since(start).Seconds()
		cpu1 := s.cpu(b)
		for _, r := range idleRoles {
			var sum float64
			for i := 1; i <= r.n; i++ {
				name := fmt.Sprintf("%s-%d", r.role, i)
				sum += (cpu1[name] - cpu0[name]).Seconds()
			}
			b.ReportMetric(sum/secs/float64(r.n), r.role+"-idle-cores")
		}
		s.stop()
	}
}

// idleBuild is the danmaku command, built once for the test binary
// (-count runs the benchmark again) and removed by TestMain.
var idleBuild = &testenv.Build{Pkg: "danmaku/cmd/danmaku"}

func TestMain(m *testing.M) {
	code := m.Run()
	idleBuild.Remove()
	os.Exit(code)
}

type idleProc struct {
	cmd          *exec.Cmd
	addr, metric string
	log          string
	done         chan struct{}
}

type idleStack struct {
	bin   string
	env   []string
	procs map[string]*idleProc
	order []string
}

func newIdleStack(b *testing.B, bin string) *idleStack {
	b.Helper()
	s3 := testenv.S3(b)
	s := &idleStack{bin: bin, procs: map[string]*idleProc{}}
	s.env = append(os.Environ(),
		"DANMAKU_REDIS="+testenv.Redis(b),
		"DANMAKU_S3_BUCKET="+s3.Bucket, "DANMAKU_S3_ENDPOINT="+s3.Endpoint, "DANMAKU_S3_REGION="+s3.Region,
		"DANMAKU_S3_PATH_STYLE=true", "DANMAKU_S3_PREFIX="+idleS3Prefix,
		"DANMAKU_S3_ACCESS_KEY="+s3.AccessKey, "DANMAKU_S3_SECRET_KEY="+s3.SecretKey,
		"DANMAKU_GIFT_KEYS=calibrate-idle-gift-key", "DANMAKU_OPERATOR_KEYS="+idleOpKey,
		"DANMAKU_TICKET_KEY="+idleTicketKey,
		"DANMAKU_MASTER_KEY="+hex.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
	)
	b.Cleanup(s.stop)
	for _, r := range idleRoles {
		for i := 1; i <= r.n; i++ {
			var extra []string
			switch r.role {
			case "gslb":
				extra = []string{"-cdn", s3.Endpoint + "/" + s3.Bucket + "/" + idleS3Prefix, "-gslb-nodes", strconv.Itoa(r.n)}
			case "ingest", "slicer":
				extra = []string{"-audit-dir", b.TempDir()}
			case "edge":
				extra = []string{"-edge-drain", "1s"}
			}
			s.start(b, r.role, i, extra...)
		}
	}
	s.createEvent(b)
	s.awaitLive(b)
	return s
}

// start runs role number i as its own process and waits until it serves.
func (s *idleStack) start(b *testing.B, role string, i int, extra ...string) {
	b.Helper()
	name := fmt.Sprintf("%s-%d", role, i)
	p := &idleProc{addr: testenv.FreeAddr(b), metric: testenv.FreeAddr(b), log: filepath.Join(b.TempDir(), name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		b.Fatal(err)
	}
	args := append([]string{role, "-" + role, p.addr, "-metrics-addr", p.metric, "-node-id", name, "-log-level", "warn"}, extra...)
	p.cmd = exec.Command(s.bin, args...)
	p.cmd.Env = s.env
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		b.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	s.procs[name] = p
	s.order = append(s.order, name)
	testwait.For(b, name+" to serve", func() bool {
		out, _ := os.ReadFile(p.log)
		select {
		case <-p.done:
			b.Fatalf("%s exited:\n%s", name, out)
		default:
		}
		return strings.Contains(string(out), idleReady)
	})
}

// stop kills every process and waits for it (safe to call twice).
func (s *idleStack) stop() {
	for _, n := range s.order {
		p := s.procs[n]
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	s.order = nil
}

// createEvent provisions the live room as an operator does.
func (s *idleStack) createEvent(b *testing.B) {
	b.Helper()
	f := filepath.Join(b.TempDir(), "idle.yaml")
	ev := "id: idle\ntitle: idle\nstart: now\nend: +2h\nrooms:\n  - id: " + idleRoom + "\n    budget: 60\n"
	if err := os.WriteFile(f, []byte(ev), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(s.bin, "event", "create", "-gslb", "http://"+s.procs["gslb-1"].addr, "-f", f)
	cmd.Env = append(s.env, "DANMAKU_OPERATOR_KEY="+idleOpKey)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("event create: %v\n%s", err, out)
	}
}

// awaitLive waits until every gslb hands out entries for the room (it
// then knows an edge and an ingest) and a slicer leads it.
func (s *idleStack) awaitLive(b *testing.B) {
	b.Helper()
	ticket, err := auth.MintTicket([]byte(idleTicketKey), "probe", auth.Ticket{Nick: "probe"}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	wait := func(what string, ok func() bool) { testwait.For(b, "the idle stack: "+what, ok) }
	for _, n := range s.order {
		if !strings.HasPrefix(n, "gslb-") {
			continue
		}
		wait(n+"'s entry for the room", func() bool {
			req, _ := http.NewRequest(http.MethodGet, "http://"+s.procs[n].addr+"/v1/entry?room="+idleRoom, nil)
			req.Header.Set("Authorization", "Bearer "+ticket)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	wait("a slicer leading the room", func() bool {
		led := 0.0
		for _, n := range s.order {
			if strings.HasPrefix(n, "slicer-") {
				led += metricValue("http://"+s.procs[n].metric+"/metrics", "danmaku_slicer_rooms_led")
			}
		}
		return led == 1
	})
}

// cpu reads every process's CPU time (procCPU).
func (s *idleStack) cpu(b *testing.B) map[string]time.Duration {
	b.Helper()
	out := map[string]time.Duration{}
	for _, n := range s.order {
		d, err := procCPU(s.procs[n].cmd.Process.Pid)
		if err != nil {
			b.Fatalf("%s: %v", n, err)
		}
		out[n] = d
	}
	return out
}

// procCPU is a process's CPU time, all its threads: the sum of their
// run times in /proc/PID/task/*/schedstat (nanoseconds; an idle node's
// tenth of a core over a few seconds is a few clock ticks), or where that
// is not kept, utime+stime of /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err == nil && len(tasks) > 0 {
		var sum int64
		for _, t := range tasks {
			raw, err := os.ReadFile(t)
			if err != nil {
				continue // a thread gone between the glob and the read
			}
			f := strings.Fields(string(raw))
			if len(f) == 0 {
				return 0, fmt.Errorf("%s: %q", t, raw)
			}
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q", t, raw)
			}
			sum += ns
		}
		return time.Duration(sum), nil
	}
	return statCPU(pid)
}

// statCPU is utime+stime of /proc/PID/stat, all its threads.
func statCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after its closing one are state (3), ..., utime (14), stime (15).
	i := strings.LastIndexByte(string(raw), ')')
	f := strings.Fields(string(raw)[i+1:])
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	// USER_HZ is 100 on every Linux Go supports.
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// metricValue is the sum of a metric's samples on a /metrics page, 0 when
// unreadable.
func metricValue(url, name string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

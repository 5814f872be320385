// Package calibrate measures on the machine it runs on the per-node figures
// a plan needs (internal/plan's Profile), by running the repository's own
// benchmarks — the harnesses docs/benchmarks.md reports — at a bounded size
// and reading their metrics. It needs the module's source and a Go
// toolchain (the benchmarks are test code), redis-server on PATH (the
// ingest and slicer figures are taken on Redis, as production runs them)
// and versitygw (the idle figures: every role its own `danmaku` process on
// Redis and S3, with no load). Everything runs on loopback.
//
// A Run is sequential (one benchmark at a time, so that each has the
// machine to itself); Run is safe to call from one goroutine at a time.
package calibrate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"danmaku/internal/plan"
)

// Bench is one benchmark run: a package, a -bench pattern, its settings.
type Bench struct {
	Pkg       string
	Pattern   string
	Benchtime string
	Count     int    // -count, 0 for 1
	CPU       string // -cpu, empty for the default
	Env       []string
}

func (b Bench) count() string { return strconv.Itoa(max(b.Count, 1)) }

// Args are the go test arguments of b.
func (b Bench) Args() []string {
	a := []string{"test", "-run", "^$", "-bench", b.Pattern, "-benchtime", b.Benchtime, "-count", b.count(), "-timeout", "15m"}
	if b.CPU != "" {
		a = append(a, "-cpu", b.CPU)
	}
	return append(a, b.Pkg)
}

// binaryArgs are the arguments of the package's test binary for b.
func (b Bench) binaryArgs() []string {
	a := []string{"-test.run", "^$", "-test.bench", b.Pattern, "-test.benchtime", b.Benchtime, "-test.count", b.count(), "-test.timeout", "15m"}
	if b.CPU != "" {
		a = append(a, "-test.cpu", b.CPU)
	}
	return a
}

func (b Bench) String() string {
	env := strings.Join(b.Env, " ")
	if env != "" {
		env += " "
	}
	return env + "go " + strings.Join(b.Args(), " ")
}

// Result is one benchmark run: go test's standard output.
type Result struct {
	Out []byte
}

// Runner runs a benchmark.
type Runner func(ctx context.Context, b Bench) (Result, error)

// Config configures Run.
type Config struct {
	// Dir is the module's root (the directory of danmaku's go.mod).
	// Empty: the working directory.
	Dir string
	// Quick: smaller runs (about half the time), for a first look.
	Quick bool
	// Progress receives a line per benchmark. Nil: discarded.
	Progress io.Writer
	// Run runs a benchmark. Nil: `go test` in Dir.
	Run Runner
	// Now is the clock of Profile.Taken. Nil: time.Now.
	Now func() time.Time
	// Command is recorded in the profile.
	Command string
}

// ErrNotModule: Dir is not the root of the danmaku module.
var ErrNotModule = errors.New("calibrate: not the root of the danmaku module (run from a checkout, or give -src)")

// Metrics are the benchmark lines' metrics by unit, under their name: one
// value per line of that name (-count repeats a line).
type Metrics map[string]map[string][]float64

// Parse reads go test -bench output: each "BenchmarkX/sub-N  n  v unit  v
// unit ..." line appends v to Metrics["BenchmarkX/sub"][unit].
func Parse(out []byte) Metrics {
	m := Metrics{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || !strings.HasPrefix(fs[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fs[1]); err != nil {
			continue
		}
		name := fs[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		units := m[name]
		if units == nil {
			units = map[string][]float64{}
			m[name] = units
		}
		for i := 2; i+1 < len(fs); i += 2 {
			v, err := strconv.ParseFloat(fs[i], 64)
			if err != nil {
				break
			}
			units[fs[i+1]] = append(units[fs[i+1]], v)
		}
	}
	return m
}

// get returns the metric's values (one per run) or an error naming the
// benchmark and the unit.
func (m Metrics) get(name, unit string) ([]float64, error) {
	u, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("calibrate: no result line for %s", name)
	}
	vs := u[unit]
	if len(vs) == 0 {
		return nil, fmt.Errorf("calibrate: %s reported no %s", name, unit)
	}
	for _, v := range vs {
		if !(v > 0) {
			return nil, fmt.Errorf("calibrate: %s reported %s %v", name, unit, v)
		}
	}
	return vs, nil
}

// getAll returns the metrics of name in the order of units.
func (m Metrics) getAll(name string, units ...string) ([][]float64, error) {
	vs := make([][]float64, len(units))
	for i, u := range units {
		v, err := m.get(name, u)
		if err != nil {
			return nil, err
		}
		vs[i] = v
	}
	return vs, nil
}

// Median is the median of vs (the mean of the middle two of an even
// count); 0 for none.
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// step is one benchmark and the figures read from its metrics. Every CPU
// figure is a benchmark's own reading of the measured process's CPU time
// over the measured work (getrusage), so that setup (tickets, tokens,
// servers), the load client and Redis are left out.
type step struct {
	bench Bench
	take  func(m Metrics, how string, set func(name string, f plan.Figure)) error
}

func measured(v float64, unit, how string) plan.Figure {
	return plan.Figure{Value: v, Unit: unit, Source: plan.SourceMeasured, How: how, Runs: []float64{v}}
}

// measuredRuns is a figure of several runs, each run's value conv of its
// metric: the median of them, the runs kept.
func measuredRuns(metric []float64, conv func(float64) float64, unit, how string) plan.Figure {
	runs := make([]float64, len(metric))
	for i, v := range metric {
		runs[i] = conv(v)
	}
	return plan.Figure{Value: Median(runs), Unit: unit, Source: plan.SourceMeasured, How: how, Runs: runs}
}

func same(v float64) float64 { return v }

// perSecond turns µs per operation into operations per second.
func perSecond(us float64) float64 { return 1e6 / us }

// serverCPU is the environment of the HTTP benchmarks whose figure is
// the server's CPU alone (testenv.BenchHTTP's "server-cpu-µs/op").
//
// The load client runs in a child process and the benchmark's process,
// the server, reads its own CPU time (getrusage) over the timed requests
// only. That is chosen over subtracting a client's cost measured on its
// own: on a machine shared with other work the two measurements would be
// taken under different load, and their difference carries both errors,
// while one process's CPU time is one number the kernel keeps. The
// server's Redis (another process) is not in it either: Redis is sized by
// its commands. The earlier marginal method (two sizes, the difference in
// the process tree's CPU) counted the client and Redis and spread ±58 %.
const serverCPU = "DANMAKU_BENCH_CLIENT=process"

// serverStep is an HTTP benchmark run with serverCPU whose figure, field
// in unit, is 1e6 / server-cpu-µs/op of its median run.
func serverStep(b Bench, field, unit, what string) step {
	b.Env = append(b.Env, serverCPU)
	line := "Benchmark" + b.Pattern
	return step{bench: b, take: func(m Metrics, how string, set func(string, plan.Figure)) error {
		v, err := m.get(line, "server-cpu-µs/op")
		if err != nil {
			return err
		}
		set(field, measuredRuns(v, perSecond, unit, "1e6 / server-cpu-µs/op of "+how+", median run ("+what+")"))
		return nil
	}}
}

// steps are the benchmarks a calibration runs, smaller when quick. Each
// runs -count 3 (1 when quick) and takes the median run: one run on a
// shared machine spread ±15-23 % (the edge's CPU per frame and connect
// from load averages of 32 to 81).
func steps(quick bool) []step {
	conns, gifts, window, idleWindow := "2000", "30", "5s", "10s"
	entries, posts, slots, repeat := "10000x", "8000x", "6x", 3
	if quick {
		conns, gifts, window, idleWindow = "1000", "20", "3s", "5s"
		entries, posts, slots, repeat = "5000x", "4000x", "3x", 1
	}
	return []step{
		{
			bench: Bench{Pkg: "./edge", Pattern: "EdgeScale$", Benchtime: "1x", Count: repeat,
				Env: []string{"EDGE_SCALE_TLS=1", "EDGE_SCALE_CONNS=" + conns, "EDGE_SCALE_GIFTS=" + gifts, "EDGE_SCALE_SLOW_GIFTS=2"}},
			take: func(m Metrics, how string, set func(string, plan.Figure)) error {
				for _, side := range []struct{ sub, suffix, what string }{{"ws", "", "plain WebSocket"}, {"wss", "_tls", "the edge terminating TLS"}} {
					name := "BenchmarkEdgeScale/" + side.sub
					v, err := m.getAll(name, "cpu-µs/frame", "rss-B/conn", "cpu-µs/connect")
					if err != nil {
						return err
					}
					frame, rss, connect := v[0], v[1], v[2]
					h := how + " (" + side.what + "; " + conns + " connections, the load client in a child process)"
					set("edge_cpu_us_per_frame"+side.suffix, measuredRuns(frame, same, "µs/frame", "cpu-µs/frame of "+h))
					// The RSS growth of the first run only: a repeat reuses
					// the memory the run before it freed.
					set("edge_bytes_per_conn"+side.suffix, measuredRuns(rss[:1], same, "bytes/connection", "rss-B/conn (RSS growth per idle connection) of "+h+", the first run"))
					set("edge_connects_per_s_per_core"+side.suffix, measuredRuns(connect, perSecond, "connects/(s·core)", "1e6 / cpu-µs/connect (server CPU per accept, handshake, upgrade, token) of "+h))
				}
				return nil
			},
		},
		serverStep(Bench{Pkg: "./gslb", Pattern: "EntryHTTP/entry", Benchtime: entries, Count: repeat},
			"entry_answers_per_s_per_core", "entries/(s·core)",
			"entry: ticket, allocation, Ed25519 token, over loopback HTTP, 64 in flight; the gslb's CPU alone, the load client in a child process"),
		serverStep(Bench{Pkg: "./ingest", Pattern: "IngestHTTP/redis", Benchtime: posts, Count: repeat},
			"ingest_admitted_per_s_per_core", "comments/(s·core)",
			"every comment through token, bans, buckets, words, duplicates, audit, room gate, XADD on Redis; the ingest's CPU alone: the load client in a child process, Redis in its own"),
		{
			bench: Bench{Pkg: "./slicer", Pattern: "IdleRooms", Benchtime: "1x", Count: repeat,
				Env: []string{"DANMAKU_ROOMS=1,100", "DANMAKU_ROOMS_WINDOW=" + window}},
			take: func(m Metrics, how string, set func(string, plan.Figure)) error {
				name := "BenchmarkIdleRooms/rooms=100"
				v, err := m.getAll(name, "redis-calls/room/s", "redis-cmds/room/s", "cpu-ms/room/s")
				if err != nil {
					return err
				}
				one, err := m.get("BenchmarkIdleRooms/rooms=1", "cpu-ms/room/s")
				if err != nil {
					return err
				}
				calls, cmds, cpu := v[0], v[1], v[2]
				marginal, err := perRoom(one, cpu)
				if err != nil {
					return err
				}
				h := how + ", median run (100 live rooms, a leader and a standby, over " + window + ")"
				set("slicer_redis_calls_per_room_s", measuredRuns(calls, same, "calls/(room·s)", "redis-calls/room/s of "+h))
				set("slicer_redis_cmds_per_room_s", measuredRuns(cmds, same, "commands/(room·s)", "redis-cmds/room/s of "+h))
				set("slicer_cpu_ms_per_room_s", measuredRuns(marginal, same, "ms/(room·s)",
					"(100 x cpu-ms/room/s at 100 rooms - cpu-ms/room/s at 1 room) / 99, the process's CPU time over the window, of "+how+
						", median run (1 and 100 live rooms, a leader and a standby, over "+window+"): a room's own cost, the processes' fixed cost left to slicer_idle_cpu_cores"))
				return nil
			},
		},
		{
			bench: Bench{Pkg: "./internal/calibrate", Pattern: "Idle$", Benchtime: "1x", Count: repeat,
				Env: []string{"DANMAKU_IDLE_WINDOW=" + idleWindow}},
			take: func(m Metrics, how string, set func(string, plan.Figure)) error {
				h := how + ", median run (every role its own `danmaku` process against redis-server and versitygw, live with no load: 2 gslbs syncing the load table, 2 edges and 2 ingests reporting load, a slicer leading one idle room and its standby; each process's CPU time over " + idleWindow + ", the mean of the role's nodes)"
				for _, role := range []string{"edge", "ingest", "gslb", "slicer"} {
					v, err := m.get("BenchmarkIdle", role+"-idle-cores")
					if err != nil {
						return err
					}
					set(role+"_idle_cpu_cores", measuredRuns(v, same, "cores", role+"-idle-cores of "+h))
				}
				return nil
			},
		},
		{
			bench: Bench{Pkg: "./slicer", Pattern: "StreamToSegment/redis", Benchtime: slots, Count: repeat, CPU: "1"},
			take: func(m Metrics, how string, set func(string, plan.Figure)) error {
				v, err := m.get("BenchmarkStreamToSegment/redis/perSecond=12000", "cpu-µs/msg")
				if err != nil {
					return err
				}
				set("slicer_msgs_per_s_per_core", measuredRuns(v, perSecond, "messages/(s·core)", "1e6 / cpu-µs/msg of "+how+", median run (12,000 messages a slot: read, queue, sample, encode, PUT, ack; the slicer's CPU alone: the appends untimed, Redis in its own process)"))
				return nil
			},
		},
	}
}

// perRoom is each run's CPU of one more idle room in ms a second: from
// the process's CPU per room at 1 room and at 100 in the same run, so
// that the fixed cost (the leader's and the standby's loops, the lease)
// cancels — it is slicer_idle_cpu_cores, added per node by a plan.
func perRoom(one, hundred []float64) ([]float64, error) {
	if len(one) != len(hundred) {
		return nil, fmt.Errorf("calibrate: IdleRooms reported %d runs at 1 room and %d at 100", len(one), len(hundred))
	}
	out := make([]float64, len(one))
	for i := range one {
		out[i] = (100*hundred[i] - one[i]) / 99
		if !(out[i] > 0) {
			return nil, fmt.Errorf("calibrate: IdleRooms run %d: 100 rooms cost %.3g ms/s, 1 room %.3g: no room's own cost left (too loaded a machine?)", i+1, 100*hundred[i], one[i])
		}
	}
	return out, nil
}

// Run measures the figures and returns the profile.
func Run(ctx context.Context, cfg Config) (*plan.Profile, error) {
	if cfg.Dir == "" {
		cfg.Dir = "."
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Run == nil {
		if err := checkModule(cfg.Dir); err != nil {
			return nil, err
		}
		run, cleanup := goTest(cfg.Dir)
		defer cleanup()
		cfg.Run = run
	}
	m := Describe()
	p := &plan.Profile{V: plan.ProfileVersion, Taken: cfg.Now().UTC().Format(time.RFC3339), Command: cfg.Command, Machine: m}
	design := plan.DesignFigures()
	names := make([]string, 0, len(design))
	for n := range design {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p.Figures.Set(n, design[n])
	}
	var setErr error
	set := func(name string, f plan.Figure) {
		if !p.Figures.Set(name, f) && setErr == nil {
			setErr = fmt.Errorf("calibrate: no profile field %q", name)
		}
	}
	for _, s := range steps(cfg.Quick) {
		start := time.Now()
		how := "`" + s.bench.String() + "`"
		fmt.Fprintf(cfg.Progress, "calibrate: %s\n", s.bench)
		r, err := runChecked(ctx, cfg.Run, s.bench, cfg.Progress)
		if err != nil {
			return nil, err
		}
		if err := s.take(Parse(r.Out), how, set); err != nil {
			return nil, err
		}
		if setErr != nil {
			return nil, setErr
		}
		fmt.Fprintf(cfg.Progress, "calibrate:   done in %v\n", time.Since(start).Round(time.Second))
	}
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("calibrate: the profile measured is incomplete: %w", err)
	}
	return p, nil
}

func checkModule(dir string) error {
	b, err := os.ReadFile(dir + "/go.mod")
	if err != nil || !bytes.HasPrefix(bytes.TrimSpace(b), []byte("module danmaku\n")) {
		return ErrNotModule
	}
	return nil
}

// runChecked runs b and checks that its benchmark reported (a benchmark
// that skips prints no result line). A run that fails is run once more:
// on a loaded machine a benchmark's own servers time out now and then
// (the ingest's Redis dial at a load average of 25), which says nothing
// about the figures.
func runChecked(ctx context.Context, run Runner, b Bench, progress io.Writer) (Result, error) {
	r, err := run(ctx, b)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(progress, "calibrate:   failed, once more: %s\n", firstLine(err.Error()))
		r, err = run(ctx, b)
	}
	if err != nil {
		return Result{}, fmt.Errorf("calibrate: %s: %w", b, err)
	}
	want := "Benchmark" + strings.TrimSuffix(b.Pattern, "$")
	for name := range Parse(r.Out) {
		if strings.HasPrefix(name, want) {
			return r, nil
		}
	}
	return Result{}, fmt.Errorf("calibrate: %s reported no result (skipped? redis-server and versitygw must be on PATH):\n%s", b, tail(string(r.Out)))
}

// goTest builds each package's test binary once (go test -c) and runs it
// in the package's directory, as go test would.
func goTest(dir string) (Runner, func()) {
	tmp, err := os.MkdirTemp("", "danmaku-calibrate-")
	built := map[string]string{}
	run := func(ctx context.Context, b Bench) (Result, error) {
		if err != nil {
			return Result{}, err
		}
		bin, ok := built[b.Pkg]
		if !ok {
			bin = filepath.Join(tmp, strings.ReplaceAll(strings.Trim(b.Pkg, "./"), "/", "_")+".test")
			cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, b.Pkg)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				return Result{}, fmt.Errorf("go test -c %s: %v\n%s", b.Pkg, err, tail(string(out)))
			}
			built[b.Pkg] = bin
		}
		cmd := exec.CommandContext(ctx, bin, b.binaryArgs()...)
		cmd.Dir = filepath.Join(dir, b.Pkg)
		cmd.Env = append(os.Environ(), b.Env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return Result{}, fmt.Errorf("%v\n%s%s", err, tail(out.String()), tail(errb.String()))
		}
		return Result{Out: out.Bytes()}, nil
	}
	return run, func() { os.RemoveAll(tmp) }
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// Describe describes this machine: cores, CPU model, kernel, Go.
func Describe() plan.Machine {
	m := plan.Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OSArch: runtime.GOOS + "/" + runtime.GOARCH, Model: "unknown", Kernel: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			m.LoadAvg1m, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	return m
}

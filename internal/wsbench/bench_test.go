package wsbench

import (
	"bufio"
	"danmaku/internal/sysload"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Knobs (environment):
//
//	WSBENCH_CONNS       connections per candidate (default 500)
//	WSBENCH_BROADCASTS  broadcasts per run (default 20)
//	WSBENCH_INTERVAL    time between broadcasts (default 100ms)
//	WSBENCH_HEAPPROFILE heap profile of the idle connections, a path with %s for the candidate
const (
	childAddr   = "WSBENCH_CHILD_ADDR"
	childConns  = "WSBENCH_CHILD_CONNS"
	childBcasts = "WSBENCH_CHILD_BROADCASTS"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(childAddr); addr != "" {
		os.Exit(runChild(addr))
	}
	os.Exit(m.Run())
}

// runChild is the load client, in its own process so that the server's
// process holds only server sockets. It prints READY, waits for a line on
// stdin, then prints RESULT <json>.
func runChild(addr string) int {
	n, _ := strconv.Atoi(os.Getenv(childConns))
	bc, _ := strconv.Atoi(os.Getenv(childBcasts))
	start := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(start)
	}()
	res, err := RunClient(ClientConfig{
		Addr: addr, Conns: n, Broadcasts: bc, Timeout: time.Duration(bc)*time.Second + 30*time.Second,
		Ready: func() { fmt.Println("READY") },
		Start: start,
	})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	j, _ := json.Marshal(res)
	fmt.Println("RESULT", string(j))
	return 0
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDur(k string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkCandidates runs each candidate with WSBENCH_CONNS idle
// connections (memory), then WSBENCH_BROADCASTS broadcasts WSBENCH_INTERVAL
// apart (CPU per delivery and latency):
//
//	WSBENCH_CONNS=10000 WSBENCH_BROADCASTS=50 go test -run '^$' -bench . -benchtime 1x -count 3 ./internal/wsbench
func BenchmarkCandidates(b *testing.B) {
	n := envInt("WSBENCH_CONNS", 500)
	bc := envInt("WSBENCH_BROADCASTS", 20)
	every := envDur("WSBENCH_INTERVAL", 100*time.Millisecond)
	for _, cand := range Candidates {
		b.Run(cand.Name, func(b *testing.B) {
			for range b.N {
				runCandidate(b, cand.New, n, bc, every)
			}
		})
	}
}

func runCandidate(b *testing.B, newSrv func(Options) (Server, error), n, bc int, every time.Duration) {
	b.StopTimer()
	// Let the previous run's teardown finish before the baseline sample.
	for g, i := runtime.NumGoroutine(), 0; i < 50; i++ {
		time.Sleep(100 * time.Millisecond)
		if h := runtime.NumGoroutine(); h == g && i >= 10 {
			break
		} else {
			g = h
		}
	}
	srv, err := newSrv(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	before := SampleMemory()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childAddr+"="+srv.Addr(), childConns+"="+strconv.Itoa(n), childBcasts+"="+strconv.Itoa(bc))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(want string) string {
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, want) {
				b.Fatalf("client: want %s, got %q", want, l)
			}
			return strings.TrimSpace(strings.TrimPrefix(l, want))
		case <-time.After(3 * time.Minute):
			b.Fatalf("client: no %s", want)
		}
		return ""
	}
	b.StartTimer()
	next("READY")
	for deadline := time.Now().Add(30 * time.Second); srv.Conns() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("server has %d of %d connections", srv.Conns(), n)
		}
	}
	b.StopTimer()
	time.Sleep(500 * time.Millisecond) // let handshake goroutines and buffers go
	idle := SampleMemory()
	if p := os.Getenv("WSBENCH_HEAPPROFILE"); p != "" { // e.g. /tmp/heap-%s.pb.gz
		if f, err := os.Create(fmt.Sprintf(p, strings.ReplaceAll(b.Name(), "/", "_"))); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
	}

	cpu0 := sysload.ProcessTime()
	fmt.Fprintln(stdin, "GO")
	t := time.NewTicker(every)
	for i := range bc {
		srv.Broadcast(NewPayload(i))
		<-t.C
	}
	t.Stop()
	var res ClientResult
	if err := json.Unmarshal([]byte(next("RESULT")), &res); err != nil {
		b.Fatal(err)
	}
	cpu := sysload.ProcessTime() - cpu0
	if want := int64(n * bc); res.Deliveries != want {
		b.Errorf("delivered %d of %d (client errors %d)", res.Deliveries, want, res.Errors)
	}
	fn := float64(n)
	b.ReportMetric(float64(idle.RSS-before.RSS)/fn, "rss-B/conn")
	b.ReportMetric(float64(idle.HeapStack-before.HeapStack)/fn, "heap+stack-B/conn")
	b.ReportMetric(float64(idle.Goroutines-before.Goroutines)/fn, "goroutines/conn")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(max(res.Deliveries, 1)), "cpu-µs/delivery")
	b.ReportMetric(res.P50ms, "p50-ms")
	b.ReportMetric(res.P99ms, "p99-ms")
	b.ReportMetric(float64(res.Deliveries), "deliveries")
}

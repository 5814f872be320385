package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// HTTPLoad is the load BenchHTTP sends: request i (1..b.N) of worker w
// (0..inFlight-1) is Method base+Path, its body Body with every "{i}"
// replaced by i, and, when Auth is set, "Authorization: Bearer " +
// Auth[(i·Stride + w) mod len(Auth)]. It is data rather than a function so
// that a load client in another process can send it.
type HTTPLoad struct {
	Method      string   `json:"method"`
	Path        string   `json:"path"`
	Body        string   `json:"body,omitempty"`
	ContentType string   `json:"content_type,omitempty"`
	Auth        []string `json:"auth,omitempty"`
	Stride      int64    `json:"stride,omitempty"`
}

// BenchClientEnv chooses where BenchHTTP's load client runs: unset, in the
// benchmark's process; "process", in a child process (the same test
// binary), so that the benchmark's process is the server alone and its CPU
// time (getrusage) is the server's: BenchHTTP then also reports
// "server-cpu-µs/op". danmaku calibrate sets it.
const BenchClientEnv = "DANMAKU_BENCH_CLIENT"

// benchLoadEnv names the file of the child's load (benchLoadSpec); Main
// runs the child's client instead of the tests when it is set.
const benchLoadEnv = "DANMAKU_BENCH_HTTP_LOAD"

// benchLine prefixes the child's protocol lines on its standard output.
const benchLine = "benchhttp: "

// BenchHTTP serves h on a loopback listener and sends it b.N requests of
// load over keep-alive connections, inFlight at a time. Every answer must
// be 200; it reports "req/s". The throughput benchmarks that compare a
// handler with a bare one (ingest, gslb) run it for both sides in one run.
//
// With BenchClientEnv=process the requests come from a child process (the
// package's TestMain must be Main, which runs the child's client), and the
// benchmark also reports "server-cpu-µs/op": this process's user+system
// CPU over the timed requests ÷ b.N — the server's alone, the client's
// work (building, sending, reading) in the child.
func BenchHTTP(b *testing.B, h http.Handler, inFlight int, load HTTPLoad) {
	b.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	if os.Getenv(BenchClientEnv) == "process" {
		benchHTTPProcess(b, srv.URL, inFlight, load)
		return
	}
	b.ReportAllocs()
	b.ResetTimer()
	failed, firstErr := sendLoad(srv.URL, int64(b.N), inFlight, load)
	b.StopTimer()
	if failed > 0 {
		b.Fatalf("%d of %d requests failed (first: %v)", failed, b.N, firstErr)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// sendLoad sends requests 1..n of load to base, inFlight at a time, and
// returns how many failed (an error or a status other than 200) and the
// first failure.
func sendLoad(base string, n int64, inFlight int, load HTTPLoad) (int64, error) {
	tr := &http.Transport{MaxIdleConns: inFlight, MaxIdleConnsPerHost: inFlight, MaxConnsPerHost: inFlight}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	parts := strings.Split(load.Body, "{i}")
	var (
		next, failed atomic.Int64
		first        sync.Once
		firstErr     error
		wg           sync.WaitGroup
	)
	fail := func(err error) {
		failed.Add(1)
		first.Do(func() { firstErr = err })
	}
	for w := range inFlight {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				var r io.Reader
				if load.Body != "" {
					body := []byte(parts[0])
					for _, p := range parts[1:] {
						body = append(strconv.AppendInt(body, i, 10), p...)
					}
					r = bytes.NewReader(body)
				}
				req, err := http.NewRequest(load.Method, base+load.Path, r)
				if err != nil {
					fail(err)
					continue
				}
				if load.ContentType != "" {
					req.Header.Set("Content-Type", load.ContentType)
				}
				if len(load.Auth) > 0 {
					req.Header.Set("Authorization", "Bearer "+load.Auth[(i*load.Stride+int64(w))%int64(len(load.Auth))])
				}
				resp, err := client.Do(req)
				if err != nil {
					fail(err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					fail(fmt.Errorf("status %d", resp.StatusCode))
				}
			}
		})
	}
	wg.Wait()
	return failed.Load(), firstErr
}

// benchLoadSpec is what the parent hands the child client.
type benchLoadSpec struct {
	URL      string   `json:"url"`
	N        int64    `json:"n"`
	InFlight int      `json:"in_flight"`
	Load     HTTPLoad `json:"load"`
}

// benchHTTPProcess is BenchHTTP with the client in a child process. The
// child builds its client and says "ready"; the timer and the CPU reading
// start when it is told "go" and stop at its "done", so that neither
// process's start-up is counted.
func benchHTTPProcess(b *testing.B, url string, inFlight int, load HTTPLoad) {
	b.Helper()
	b.StopTimer()
	spec, err := json.Marshal(benchLoadSpec{URL: url, N: int64(b.N), InFlight: inFlight, Load: load})
	if err != nil {
		b.Fatal(err)
	}
	file := filepath.Join(b.TempDir(), "load.json")
	if err := os.WriteFile(file, spec, 0o600); err != nil {
		b.Fatal(err)
	}
	// -test.run/-test.bench ^$: a binary whose TestMain is not Main runs
	// nothing, says nothing, and the benchmark fails below.
	cmd, stdin, stdout := StartChild(b, []string{"-test.run=^$", "-test.bench=^$"}, []string{benchLoadEnv + "=" + file})
	defer func() {
		stdin.Close()
		_ = cmd.Process.Kill() // it has said "done" or failed: nothing to wait for
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	next := func(want string) string {
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), benchLine+want); ok {
				return strings.TrimSpace(l)
			}
		}
		b.Fatalf("the load client (a child process) exited before %q: is the package's TestMain testenv.Main? %v", want, sc.Err())
		return ""
	}
	next("ready")
	cpu0 := ProcessCPU()
	b.ResetTimer()
	b.StartTimer()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		b.Fatal(err)
	}
	done := next("done")
	b.StopTimer()
	cpu := ProcessCPU() - cpu0
	failed, firstErr, _ := strings.Cut(done, " ")
	if failed != "0" {
		b.Fatalf("%s of %d requests failed (first: %s)", failed, b.N, firstErr)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-cpu-µs/op")
}

// runBenchClient is the child's side of benchHTTPProcess: it reads the
// load from file, says "ready", sends it on "go" and says "done <failed>
// <first failure>". It returns the process's exit code.
func runBenchClient(file string, stdin io.Reader, stdout io.Writer) int {
	b, err := os.ReadFile(file)
	var spec benchLoadSpec
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err == nil && (spec.N < 0 || spec.InFlight < 1 || spec.URL == "") {
		err = errors.New("no url, n or in_flight")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchhttp: load %s: %v\n", file, err)
		return 2
	}
	fmt.Fprintln(stdout, benchLine+"ready")
	if line, err := bufio.NewReader(stdin).ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		fmt.Fprintf(os.Stderr, "benchhttp: want go, got %q (%v)\n", line, err)
		return 2
	}
	failed, firstErr := sendLoad(spec.URL, spec.N, spec.InFlight, spec.Load)
	fmt.Fprintf(stdout, "%sdone %d %v\n", benchLine, failed, firstErr)
	return 0
}

// StartChild starts this test binary again with args, env added to this
// process's environment and this process's standard error, and returns it
// with pipes to its standard input and output: a benchmark's load client
// in a process of its own.
func StartChild(tb testing.TB, args, env []string) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return cmd, stdin, stdout
}

// ProcessCPU is this process's user and system CPU time so far (all its
// threads; not its children's).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package edge

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"danmaku/auth"
	"danmaku/edge/edgetest"
	"danmaku/internal/hist"
	"danmaku/internal/redisx"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
	"danmaku/sdk/wire"
)

// BenchmarkEdgeScaleProcs is BenchmarkEdgeScale across processes, for more
// connections than one process may hold open here (20,000 files): the
// edges are EDGE_SCALE_PROCS child processes (this test binary re-executed
// as TestEdgeScaleServer) sharing one real Redis — the room's stream and
// the token keys, as in production — each with a load client of its own
// (TestEdgeScaleClient, connecting from its own 127.0.0.x source). This
// process only appends the gifts and adds up what the others measured:
//
//   - memory per idle connection: the edges' RSS and heap+stack growth,
//     summed, ÷ connections;
//
//   - server CPU per delivery: the edges' user+sys CPU over the 10/s phase
//     ÷ deliveries (Redis's CPU is not in it: one reader per room and
//     edge, not per connection);
//
//   - latency from append to receipt, percentiles over every client's
//     histogram.
//
//     EDGE_SCALE_CONNS=100000 go test -run '^$' -bench EdgeScaleProcs -benchtime 1x -timeout 30m ./edge
//
// Knobs: EDGE_SCALE_CONNS (2,000), EDGE_SCALE_PROCS (enough for 16,000
// connections each, at least 2), EDGE_SCALE_GIFTS, EDGE_SCALE_SLOW_GIFTS
// as BenchmarkEdgeScale's.
func BenchmarkEdgeScaleProcs(b *testing.B) {
	n := envInt("EDGE_SCALE_CONNS", 2000)
	procs := envInt("EDGE_SCALE_PROCS", max(2, (n+15_999)/16_000))
	fast := envInt("EDGE_SCALE_GIFTS", 20)
	slow := envInt("EDGE_SCALE_SLOW_GIFTS", 3)
	for range b.N {
		runEdgeScaleProcs(b, n, procs, fast, slow)
	}
}

// Environment of a TestEdgeScaleServer child.
const (
	scaleServerRedis = "EDGE_SCALE_SERVER_REDIS" // Redis address
	scaleServerPing  = "EDGE_SCALE_PING"         // the edges' ping interval (optional)
	scaleServerGrace = "EDGE_SCALE_GRACE"        // the edges' pong grace (optional; default 30 s)
)

// scaleSample is what a server child reports on SAMPLE.
type scaleSample struct {
	RSS        int64 `json:"rss"`
	HeapStack  int64 `json:"heap_stack"`
	Goroutines int64 `json:"goroutines"`
	Conns      int   `json:"conns"`
	CPUNs      int64 `json:"cpu_ns"`
	// Closes counts the connections the edge closed, by reason: none
	// should be, before the end.
	Closes map[string]float64 `json:"closes,omitempty"`
}

// scaleKey is the benchmark's master key: the edges and the signer derive
// the same epoch keys from it and the secrets in Redis.
var scaleKey = make([]byte, 32)

// TestEdgeScaleServer is one edge of BenchmarkEdgeScaleProcs; it does
// nothing unless the benchmark started this process. It prints its
// address, answers SAMPLE lines on stdin with a sample, and exits when
// stdin closes.
func TestEdgeScaleServer(t *testing.T) {
	addr := os.Getenv(scaleServerRedis)
	if addr == "" {
		t.Skip("an edge of BenchmarkEdgeScaleProcs")
	}
	if err := runScaleServer(addr); err != nil {
		fmt.Println(scaleLine+"ERROR", err)
		os.Exit(1)
	}
}

func runScaleServer(redisAddr string) error {
	ctx := context.Background()
	rdb, err := redisx.Connect(ctx, redisx.Config{URL: redisAddr})
	if err != nil {
		return err
	}
	store, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb})
	if err != nil {
		return err
	}
	keys, err := auth.NewKeyring(auth.KeyringConfig{Store: auth.NewRedisSecrets(rdb), MasterKey: scaleKey})
	if err != nil {
		return err
	}
	if err := keys.Refresh(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ping, _ := time.ParseDuration(os.Getenv(scaleServerPing)) // zero: the default
	// The load clients share 2 cores with every edge and fall seconds
	// behind at 100k (a ping waits behind the frames before it in the
	// socket); a real client answers within milliseconds. Dead-client
	// detection has its own tests; here it must not take a starved load
	// client for a dead one.
	grace := 30 * time.Second
	if g, err := time.ParseDuration(os.Getenv(scaleServerGrace)); err == nil && g > 0 {
		grace = g
	}
	srv, err := New(Config{
		Store: store, Verifier: keys, Addr: "ws://" + ln.Addr().String(),
		ConnectRate: -1, MaxConnsPerUser: -1, DrainPeriod: time.Millisecond,
		PingInterval: ping, PongGrace: grace,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	go func() { _ = (&http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}).Serve(ln) }()
	fmt.Println(scaleLine+"ADDR", ln.Addr().String())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var x scaleSample
		switch sc.Text() {
		case "SAMPLE": // memory after a GC; the CPU after it too
			settle()
			m := edgetest.SampleMemory()
			x = scaleSample{RSS: m.RSS, HeapStack: m.HeapStack, Goroutines: m.Goroutines}
		case "CPU": // the CPU alone, at once
		default:
			continue
		}
		x.Conns, x.CPUNs, x.Closes = srv.Load().Conns, cpuTime().Nanoseconds(), closesByReason(srv)
		j, _ := json.Marshal(x)
		fmt.Println(scaleLine+"SAMPLE", string(j))
	}
	os.Exit(0) // the parent is gone: no drain to wait for
	return nil
}

// scaleChild is a child process and its protocol lines.
type scaleChild struct {
	b     *testing.B
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// closesByReason is what the server's closes_total counts, by reason
// (nil: none).
func closesByReason(srv *Server) map[string]float64 {
	var m map[string]float64
	for _, r := range []string{reasonResume, reasonGap, reasonDraining, reasonPolicy, reasonGone, reasonEnded, reasonExpired} {
		if v := counter(srv.m.closes.WithLabelValues(r)); v > 0 {
			if m == nil {
				m = map[string]float64{}
			}
			m[r] = v
		}
	}
	return m
}

func startScaleChild(b *testing.B, name, test string, env []string) *scaleChild {
	cmd, stdin, stdout := testenv.StartChild(b, []string{"-test.run=^" + test + "$"}, env)
	c := &scaleChild{b: b, name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 4)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), scaleLine); ok {
				c.lines <- l
			}
		}
	}()
	// The child exits when its stdin closes.
	b.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return c
}

// next returns the payload of the child's next line, which must start
// with want.
func (c *scaleChild) next(want string, deadline time.Time) string {
	select {
	case l, ok := <-c.lines:
		if !ok || !strings.HasPrefix(l, want) {
			c.b.Fatalf("%s: want %s, got %q", c.name, want, l)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, want))
	case <-time.After(time.Until(deadline)):
		c.b.Fatalf("%s: no %s before the deadline", c.name, want)
	}
	return ""
}

func runEdgeScaleProcs(b *testing.B, n, procs, fast, slow int) {
	b.StopTimer()
	ctx := context.Background()
	redisAddr := testenv.Redis(b)
	rdb, err := redisx.Connect(ctx, redisx.Config{URL: redisAddr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rdb.Close() })
	secrets := auth.NewRedisSecrets(rdb)
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: scaleKey})
	if err != nil {
		b.Fatal(err)
	}
	if err := center.Publish(ctx); err != nil {
		b.Fatal(err)
	}
	signer, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: scaleKey})
	if err != nil {
		b.Fatal(err)
	}
	if err := signer.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	store, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb})
	if err != nil {
		b.Fatal(err)
	}

	budget := 60*time.Second + time.Duration(n)*2*time.Millisecond +
		time.Duration(fast)*100*time.Millisecond + time.Duration(slow)*time.Second
	deadline := time.Now().Add(budget)
	servers := make([]*scaleChild, procs)
	addrs := make([]string, procs)
	for i := range servers {
		servers[i] = startScaleChild(b, fmt.Sprintf("edge %d", i), "TestEdgeScaleServer", []string{scaleServerRedis + "=" + redisAddr, scaleServerPing + "=" + os.Getenv(scaleServerPing), scaleServerGrace + "=" + os.Getenv(scaleServerGrace)})
		addrs[i] = servers[i].next("ADDR", deadline)
	}
	sample := func(what string) (sum scaleSample) {
		for _, s := range servers {
			fmt.Fprintln(s.stdin, what)
		}
		for _, s := range servers {
			var x scaleSample
			if err := json.Unmarshal([]byte(s.next("SAMPLE", deadline)), &x); err != nil {
				b.Fatal(err)
			}
			sum.RSS += x.RSS
			sum.HeapStack += x.HeapStack
			sum.Goroutines += x.Goroutines
			sum.Conns += x.Conns
			sum.CPUNs += x.CPUNs
			for r, v := range x.Closes {
				if sum.Closes == nil {
					sum.Closes = map[string]float64{}
				}
				sum.Closes[r] += v
			}
		}
		return sum
	}
	before := sample("SAMPLE")

	dir := b.TempDir()
	clients := make([]*scaleChild, procs)
	for i := range clients {
		var sb strings.Builder
		for k := i; k < n; k += procs {
			tok, _, err := signer.Sign(auth.Claims{
				Room: "r1", Role: auth.RoleViewer, Addrs: []string{"http://ingest-0", "ws://" + addrs[i]}, Ingests: 1,
				RegisteredClaims: jwt.RegisteredClaims{Subject: fmt.Sprintf("scale-%d", k)},
			})
			if err != nil {
				b.Fatal(err)
			}
			sb.WriteString(tok)
			sb.WriteByte('\n')
		}
		file := filepath.Join(dir, fmt.Sprintf("tokens-%d", i))
		if err := os.WriteFile(file, []byte(sb.String()), 0o600); err != nil {
			b.Fatal(err)
		}
		clients[i] = startScaleChild(b, fmt.Sprintf("client %d", i), "TestEdgeScaleClient", []string{
			scaleChildAddr + "=" + addrs[i],
			scaleChildTokens + "=" + file,
			scaleChildPlan + "=" + strconv.Itoa(fast) + "," + strconv.Itoa(slow),
			scaleChildDeadline + "=" + strconv.FormatInt(deadline.UnixNano(), 10),
			scaleChildSource + "=" + fmt.Sprintf("127.0.0.%d", 10+i),
		})
	}
	results := func(phase, gifts int) (deliveries, frames int64, lat *hist.Histogram) {
		lat = new(hist.Histogram)
		for _, c := range clients {
			var r scaleResult
			if err := json.Unmarshal([]byte(c.next("RESULT", deadline)), &r); err != nil {
				b.Fatal(err)
			}
			if r.Phase != phase || r.Errors != 0 {
				b.Fatalf("%s phase %d: %d connections failed (first: %s); the edges closed %v", c.name, phase, r.Errors, r.FirstErr, sample("CPU").Closes)
			}
			deliveries += r.Deliveries
			frames += r.Frames
			lat.Add(r.Hist)
		}
		if want := int64(n * gifts); deliveries != want {
			b.Fatalf("phase %d: delivered %d of %d", phase, deliveries, want)
		}
		return deliveries, frames, lat
	}
	appendGifts := func(phase, count int, every time.Duration) {
		t := time.NewTicker(every)
		defer t.Stop()
		for i := range count {
			if i > 0 {
				<-t.C
			}
			m := gift(500, 1)
			m.Text = scaleGiftText(phase, i, time.Now())
			if _, err := store.Append(ctx, stream.Key{Room: "r1", Lane: stream.Live}, []wire.Message{m}); err != nil {
				b.Fatal(err)
			}
		}
	}

	// 1. Idle.
	b.StartTimer()
	for _, c := range clients {
		c.next("READY", deadline)
	}
	b.StopTimer()
	idle := sample("SAMPLE")
	if idle.Conns != n {
		b.Fatalf("the edges hold %d connections, want %d", idle.Conns, n)
	}

	// 2. 10 gifts/s.
	b.StartTimer()
	appendGifts(0, fast, 100*time.Millisecond)
	d10, f10, h10 := results(0, fast)
	b.StopTimer()
	busy := sample("CPU")

	// 3. 1 gift/s, then the end marker.
	b.StartTimer()
	appendGifts(1, slow, time.Second)
	end := sys(scaleEnd)
	if _, err := store.Append(ctx, stream.Key{Room: "r1", Lane: stream.Live}, []wire.Message{end}); err != nil {
		b.Fatal(err)
	}
	_, _, h1 := results(1, slow)
	b.StopTimer()

	fn := float64(n)
	cpu := float64(busy.CPUNs - idle.CPUNs)
	b.ReportMetric(float64(procs), "edges")
	b.ReportMetric(float64(idle.RSS-before.RSS)/fn, "rss-B/conn")
	b.ReportMetric(float64(idle.HeapStack-before.HeapStack)/fn, "heap+stack-B/conn")
	b.ReportMetric(float64(idle.Goroutines-before.Goroutines)/fn, "goroutines/conn")
	b.ReportMetric(cpu/1e3/float64(d10), "cpu-µs/delivery")
	b.ReportMetric(cpu/1e3/float64(max(f10, 1)), "cpu-µs/frame")
	b.ReportMetric(float64(d10)/float64(max(f10, 1)), "msgs/frame")
	b.ReportMetric(hist.Ms(h10.Quantile(0.50)), "p50-ms")
	b.ReportMetric(hist.Ms(h10.Quantile(0.99)), "p99-ms")
	b.ReportMetric(hist.Ms(h1.Quantile(0.50)), "p50-ms@1/s")
	b.ReportMetric(hist.Ms(h1.Quantile(0.99)), "p99-ms@1/s")
}

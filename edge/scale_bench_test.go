package edge

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"danmaku/edge/edgetest"
	"danmaku/internal/tlsx"
	"danmaku/internal/tlsx/tlsxtest"
)

// BenchmarkEdgeScale measures the real edge (Server, memory stream store)
// with EDGE_SCALE_CONNS connections of distinct users in one room, the
// load client in a child process (see scale_client_test.go) so that what
// is measured in this process is the server's alone. It is the harness of
// the WebSocket candidates' comparison (docs/benchmarks.md) applied to the
// edge itself, so that a new edge can be compared with today's on the same
// terms.
//
// Phases and metrics:
//
//  1. idle: every connection handshaken and pinged; VmRSS and
//     HeapInuse+StackInuse growth ÷ connections after a GC ("rss-B/conn",
//     "heap+stack-B/conn", "goroutines/conn"), and the server's CPU ÷
//     connections while they connect ("cpu-µs/connect": accept, TLS
//     handshake if any, upgrade, token check; the client's half is in the
//     child);
//  2. EDGE_SCALE_GIFTS gifts 100 ms apart (10/s): server user+sys CPU ÷
//     deliveries ("cpu-µs/delivery") and ÷ frames received over all
//     connections ("cpu-µs/frame"), append → client receipt latency
//     ("p50-ms", "p99-ms"), and gifts per frame ("msgs/frame": above 1
//     the flusher fell a gift interval behind and batched gifts);
//  3. EDGE_SCALE_SLOW_GIFTS gifts 1 s apart (1/s: each one a quiet window's
//     first message, sent at once): "p50-ms@1/s", "p99-ms@1/s".
//
// Every gift must reach every connection exactly once and in order (the
// client checks each connection's sequence and an end marker after the
// last gift), or the benchmark fails.
//
//	EDGE_SCALE_CONNS=10000 go test -run '^$' -bench EdgeScale -benchtime 1x -count 3 -timeout 20m ./edge
//
// Knobs: EDGE_SCALE_CONNS (300), EDGE_SCALE_GIFTS (50), EDGE_SCALE_SLOW_GIFTS
// (10 from 1,000 connections, else 3: the defaults stay CI-sized, ~10 s),
// EDGE_SCALE_HEAPPROFILE (a file: the heap with every connection idle).
//
// EDGE_SCALE_TLS=1 measures plain WebSocket against the edge terminating
// TLS itself, in the same run: sub-benchmarks "ws" and "wss", one after
// the other (-count repeats each sub-benchmark in a row: for pairs, run
// -count 1 in a loop, as make bench-edge does). The TLS edge is
// served as the stack serves it (internal/tlsx's configuration, a
// self-signed ECDSA P-256 certificate, TLS 1.3 negotiated), and every
// client connection does a full handshake. A TLS socket cannot be read by
// an epoll loop of the client's, so in this mode both sides' clients read
// with a goroutine per connection: the two edges face the same client,
// and both give it 30 s to answer a ping or take a write.
//
//	for i in 1 2 3; do EDGE_SCALE_TLS=1 EDGE_SCALE_CONNS=10000 go test -run '^$' -bench 'EdgeScale$' -benchtime 1x -timeout 40m ./edge; done
func BenchmarkEdgeScale(b *testing.B) {
	n := envInt("EDGE_SCALE_CONNS", 300)
	fast := envInt("EDGE_SCALE_GIFTS", 50)
	slowDef := 3
	if n >= 1000 {
		slowDef = 10
	}
	slow := envInt("EDGE_SCALE_SLOW_GIFTS", slowDef)
	if os.Getenv("EDGE_SCALE_TLS") == "" {
		for range b.N {
			runEdgeScale(b, scaleRunOpts{conns: n, fast: fast, slow: slow})
		}
		return
	}
	for _, wss := range []bool{false, true} {
		name := "ws"
		if wss {
			name = "wss"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				runEdgeScale(b, scaleRunOpts{conns: n, fast: fast, slow: slow, tls: wss, goReaders: true})
			}
		})
	}
}

// scaleRunOpts is one run of BenchmarkEdgeScale.
type scaleRunOpts struct {
	conns, fast, slow int
	// tls: the edge terminates TLS (the client then reads with goroutines).
	tls bool
	// goReaders: the client reads with a goroutine per connection even
	// where its epoll loop could.
	goReaders bool
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func runEdgeScale(b *testing.B, o scaleRunOpts) {
	n, fast, slow := o.conns, o.fast, o.slow
	b.StopTimer()
	// Admission is not what is measured: every client connects at once.
	eo := envOpts{cfg: func(c *Config) {
		c.ConnectRate, c.MaxConnsPerUser = -1, -1
		if o.goReaders {
			// 10,000 reading goroutines on a shared machine answer pings
			// and drain their sockets seconds late at times: the edge gives
			// them 30 s (a real client answers within milliseconds), so
			// that the run measures delivery, not dead-client detection.
			c.PongGrace, c.WriteTimeout = 30*time.Second, 30*time.Second
		}
	}}
	var childEnv []string
	if o.tls {
		cert := tlsxtest.Write(b, b.TempDir(), "edge-scale")
		pair, err := tlsx.New(tlsx.Config{CertFile: cert.CertFile, KeyFile: cert.KeyFile, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		eo.wrap = func(l net.Listener) net.Listener { return tls.NewListener(l, pair.ServerConfig()) }
		childEnv = append(childEnv, scaleChildTLS+"="+cert.CertFile)
	}
	if o.goReaders {
		childEnv = append(childEnv, scaleChildReaders+"=go")
	}
	e := newEnv(b, eo)
	// Tokens are signed here and handed over in a file: one keyring, no
	// clock agreement needed between the processes.
	tokFile := filepath.Join(b.TempDir(), "tokens")
	var sb strings.Builder
	for i := range n {
		sb.WriteString(e.tokenFor(fmt.Sprintf("scale-%d", i), "r1"))
		sb.WriteByte('\n')
	}
	if err := os.WriteFile(tokFile, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	sb = strings.Builder{}
	settle()
	before := edgetest.SampleMemory()

	// Bounds the whole run: connecting (generously, 2 ms a connection;
	// 10 ms with a TLS handshake on both sides of a shared machine), both
	// phases, and a margin for a loaded machine.
	perConn := 2 * time.Millisecond
	if o.tls {
		perConn = 10 * time.Millisecond
	}
	budget := 30*time.Second + time.Duration(n)*perConn +
		time.Duration(fast)*100*time.Millisecond + time.Duration(slow)*time.Second
	deadline := time.Now().Add(budget)
	// From here until every connection is in, this process does the
	// server's half of each connect: TCP accept, (TLS handshake,) the
	// upgrade, the token's verification, the first ping's pong.
	cpuConnect0 := cpuTime()
	child := startScaleChild(b, "client", "TestEdgeScaleClient", append([]string{
		scaleChildAddr + "=" + e.ts.Listener.Addr().String(),
		scaleChildTokens + "=" + tokFile,
		scaleChildPlan + "=" + strconv.Itoa(fast) + "," + strconv.Itoa(slow),
		scaleChildDeadline + "=" + strconv.FormatInt(deadline.UnixNano(), 10),
	}, childEnv...))
	next := func(want string) string { return child.next(want, deadline) }
	result := func(phase, gifts int) scaleResult {
		var r scaleResult
		if err := json.Unmarshal([]byte(next("RESULT")), &r); err != nil {
			b.Fatal(err)
		}
		if want := int64(n * gifts); r.Phase != phase || r.Deliveries != want || r.Errors != 0 {
			b.Fatalf("phase %d: delivered %d of %d, %d connections failed (first: %s); the edge's closes %v", r.Phase, r.Deliveries, want, r.Errors, r.FirstErr, closesByReason(e.srv))
		}
		return r
	}

	// 1. Idle.
	b.StartTimer()
	next("READY")
	waitFor(b, "every connection", func() bool { return e.srv.Load().Conns == n })
	cpuConnect := cpuTime() - cpuConnect0
	b.StopTimer()
	settle()
	idle := edgetest.SampleMemory()
	writeHeapProfile(b, o.tls)

	// 2. 10 gifts/s. CPU from the first append until the client has the
	// last one: the server's work plus what it waits on, nothing else runs
	// here meanwhile.
	b.StartTimer()
	cpu0 := cpuTime()
	fan0 := histCounts(b, e.srv.m.fanout)
	appendEvery(e, 0, fast, 100*time.Millisecond)
	r10 := result(0, fast)
	cpu := cpuTime() - cpu0
	fan10 := histDiff(histCounts(b, e.srv.m.fanout), fan0)

	// 3. 1 gift/s, then the end marker the client reads after the last
	// gift (anything between would be a duplicate).
	fan0 = histCounts(b, e.srv.m.fanout)
	appendEvery(e, 1, slow, time.Second)
	e.append("r1", sys(scaleEnd))
	r1 := result(1, slow)
	b.StopTimer()
	fan1 := histDiff(histCounts(b, e.srv.m.fanout), fan0)

	if d := counter(e.srv.m.slow); d != 0 {
		b.Fatalf("%v slow disconnects", d)
	}
	fn := float64(n)
	b.ReportMetric(float64(idle.RSS-before.RSS)/fn, "rss-B/conn")
	b.ReportMetric(float64(idle.HeapStack-before.HeapStack)/fn, "heap+stack-B/conn")
	b.ReportMetric(float64(idle.Goroutines-before.Goroutines)/fn, "goroutines/conn")
	b.ReportMetric(float64(cpuConnect.Nanoseconds())/1e3/fn, "cpu-µs/connect")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(r10.Deliveries), "cpu-µs/delivery")
	// Per frame written to a connection: comparable across edges whether
	// or not they batch gifts (a saturated one does, which lowers the
	// per-delivery figure), and with the candidates of docs/benchmarks.md (one message a frame).
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(max(r10.Frames, 1)), "cpu-µs/frame")
	b.ReportMetric(r10.P50ms, "p50-ms")
	b.ReportMetric(r10.P99ms, "p99-ms")
	b.ReportMetric(r1.P50ms, "p50-ms@1/s")
	b.ReportMetric(r1.P99ms, "p99-ms@1/s")
	// The server's share of the latency: writing a batch to every
	// connection (upper bound of the histogram bucket holding the
	// quantile); the rest is the stream read and the client.
	b.ReportMetric(fan10.quantile(0.99)*1e3, "fanout-p99-ms")
	b.ReportMetric(fan1.quantile(0.99)*1e3, "fanout-p99-ms@1/s")
	// Above 1, the flusher fell more than a gift interval behind and
	// batched gifts into one frame: the fan-out is saturated.
	b.ReportMetric(float64(r10.Deliveries)/float64(max(r10.Frames, 1)), "msgs/frame")
	b.ReportMetric(float64(r10.Deliveries+r1.Deliveries), "deliveries")
	// Shutdown closes every connection: no need to spread it out.
	e.srv.cfg.DrainPeriod = time.Millisecond
}

// writeHeapProfile writes the heap as it is with every connection idle to
// EDGE_SCALE_HEAPPROFILE (".tls" added for the TLS edge), when it is set:
// where a connection's bytes are (go tool pprof -sample_index=inuse_space).
// Goroutine stacks are not in it: they are StackInuse.
func writeHeapProfile(b *testing.B, tls bool) {
	path := os.Getenv("EDGE_SCALE_HEAPPROFILE")
	if path == "" {
		return
	}
	if tls {
		path += ".tls"
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// appendEvery appends count gifts of phase to r1, every apart, each
// stamped with its append time.
func appendEvery(e *testEnv, phase, count int, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for i := range count {
		if i > 0 {
			<-t.C
		}
		m := gift(500, 1)
		m.Text = scaleGiftText(phase, i, time.Now())
		e.append("r1", m)
	}
}

// settle waits for the goroutine count to stop changing (handshake and
// teardown goroutines ending) so that a sample counts what is held.
func settle() {
	for g, i := runtime.NumGoroutine(), 0; i < 50; i++ {
		time.Sleep(100 * time.Millisecond)
		if h := runtime.NumGoroutine(); h == g && i >= 5 {
			return
		} else {
			g = h
		}
	}
}

// histSnap is a histogram's cumulative bucket counts.
type histSnap struct {
	bounds []float64
	counts []uint64
}

func histCounts(b *testing.B, h prometheus.Histogram) histSnap {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		b.Fatal(err)
	}
	var s histSnap
	for _, bk := range m.GetHistogram().GetBucket() {
		s.bounds = append(s.bounds, bk.GetUpperBound())
		s.counts = append(s.counts, bk.GetCumulativeCount())
	}
	s.bounds = append(s.bounds, math.Inf(1))
	s.counts = append(s.counts, m.GetHistogram().GetSampleCount())
	return s
}

func histDiff(a, b histSnap) histSnap {
	d := histSnap{bounds: a.bounds, counts: make([]uint64, len(a.counts))}
	for i := range a.counts {
		d.counts[i] = a.counts[i] - b.counts[i]
	}
	return d
}

// quantile is the upper bound of the bucket holding the q-quantile.
func (s histSnap) quantile(q float64) float64 {
	total := s.counts[len(s.counts)-1]
	if total == 0 {
		return 0
	}
	for i, c := range s.counts {
		if float64(c) >= q*float64(total) {
			return s.bounds[i]
		}
	}
	return math.Inf(1)
}

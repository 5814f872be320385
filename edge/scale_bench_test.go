package edge

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"danmaku/internal/wsbench"
)

// BenchmarkEdgeScale measures the real edge (Server, memory stream store)
// with EDGE_SCALE_CONNS connections of distinct users in one room, the
// load client in a child process (see scale_client_test.go) so that what
// is measured in this process is the server's alone. It is the harness of
// internal/wsbench applied to the edge itself, so that a new edge can be
// compared with today's on the same terms.
//
// Phases and metrics:
//
//  1. idle: every connection handshaken and pinged; VmRSS and
//     HeapInuse+StackInuse growth ÷ connections after a GC ("rss-B/conn",
//     "heap+stack-B/conn", "goroutines/conn");
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
// (10 from 1,000 connections, else 3: the defaults stay CI-sized, ~10 s).
func BenchmarkEdgeScale(b *testing.B) {
	n := envInt("EDGE_SCALE_CONNS", 300)
	fast := envInt("EDGE_SCALE_GIFTS", 50)
	slowDef := 3
	if n >= 1000 {
		slowDef = 10
	}
	slow := envInt("EDGE_SCALE_SLOW_GIFTS", slowDef)
	for range b.N {
		runEdgeScale(b, n, fast, slow)
	}
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func runEdgeScale(b *testing.B, n, fast, slow int) {
	b.StopTimer()
	// Admission is not what is measured: every client connects at once.
	e := newEnv(b, envOpts{cfg: func(c *Config) { c.ConnectRate, c.MaxConnsPerUser = -1, -1 }})
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
	before := wsbench.SampleMemory()

	// Bounds the whole run: connecting (generously, 2 ms a connection),
	// both phases, and a margin for a loaded machine.
	budget := 30*time.Second + time.Duration(n)*2*time.Millisecond +
		time.Duration(fast)*100*time.Millisecond + time.Duration(slow)*time.Second
	deadline := time.Now().Add(budget)
	child := startScaleChild(b, "client", "TestEdgeScaleClient", []string{
		scaleChildAddr + "=" + e.ts.Listener.Addr().String(),
		scaleChildTokens + "=" + tokFile,
		scaleChildPlan + "=" + strconv.Itoa(fast) + "," + strconv.Itoa(slow),
		scaleChildDeadline + "=" + strconv.FormatInt(deadline.UnixNano(), 10),
	})
	next := func(want string) string { return child.next(want, deadline) }
	result := func(phase, gifts int) scaleResult {
		var r scaleResult
		if err := json.Unmarshal([]byte(next("RESULT")), &r); err != nil {
			b.Fatal(err)
		}
		if want := int64(n * gifts); r.Phase != phase || r.Deliveries != want || r.Errors != 0 {
			b.Fatalf("phase %d: delivered %d of %d, %d connections failed (first: %s)", r.Phase, r.Deliveries, want, r.Errors, r.FirstErr)
		}
		return r
	}

	// 1. Idle.
	b.StartTimer()
	next("READY")
	waitFor(b, "every connection", func() bool { return e.srv.Load().Conns == n })
	b.StopTimer()
	settle()
	idle := wsbench.SampleMemory()

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
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(r10.Deliveries), "cpu-µs/delivery")
	// Per frame written to a connection: comparable across edges whether
	// or not they batch gifts (a saturated one does, which lowers the
	// per-delivery figure), and with internal/wsbench (one message a frame).
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

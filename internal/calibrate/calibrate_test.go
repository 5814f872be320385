package calibrate

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"danmaku/internal/plan"
)

// output is what each benchmark prints, shaped as go test prints it.
var output = map[string]string{
	"./edge": `goos: linux
BenchmarkEdgeScale/ws-2         	       1	25000000000 ns/op	        10.0 cpu-µs/frame	       600.0 rss-B/conn	       400.0 cpu-µs/connect
BenchmarkEdgeScale/ws-2         	       1	25000000000 ns/op	        10.0 cpu-µs/frame	       9999 rss-B/conn	       400.0 cpu-µs/connect
BenchmarkEdgeScale/wss-2        	       1	29000000000 ns/op	        20.0 cpu-µs/frame	     20000 rss-B/conn	      1600 cpu-µs/connect
PASS`,
	// Three runs (-count 3): the figure is the median's.
	"./gslb": "BenchmarkEntryHTTP/entry-2 \t 10000 \t 50000 ns/op \t 20000 req/s \t 40.00 server-cpu-µs/op\n" +
		"BenchmarkEntryHTTP/entry-2 \t 10000 \t 50000 ns/op \t 20000 req/s \t 80.00 server-cpu-µs/op\n" +
		"BenchmarkEntryHTTP/entry-2 \t 10000 \t 50000 ns/op \t 20000 req/s \t 50.00 server-cpu-µs/op\n",
	"./ingest": "BenchmarkIngestHTTP/redis-2 \t 8000 \t 70000 ns/op \t 13000 req/s \t 125.0 server-cpu-µs/op\n",
	// 1 and 100 rooms: a room's own cost is (100 x 0.15 - 5.1) / 99 = 0.1.
	"./slicer IdleRooms": "BenchmarkIdleRooms/rooms=1-2 1 5000000000 ns/op 4.0 redis-calls/room/s 9.5 redis-cmds/room/s 5.1 cpu-ms/room/s 80 heap-KiB/room\n" +
		"BenchmarkIdleRooms/rooms=100-2 1 5000000000 ns/op 3.6 redis-calls/room/s 9.0 redis-cmds/room/s 0.15 cpu-ms/room/s 80 heap-KiB/room\n",
	"./internal/calibrate": "BenchmarkIdle-2 1 13000000000 ns/op 0.007 edge-idle-cores 0.08 gslb-idle-cores 0.01 ingest-idle-cores 0.003 slicer-idle-cores\n" +
		"BenchmarkIdle-2 1 13000000000 ns/op 0.009 edge-idle-cores 0.06 gslb-idle-cores 0.012 ingest-idle-cores 0.002 slicer-idle-cores\n" +
		"BenchmarkIdle-2 1 13000000000 ns/op 0.008 edge-idle-cores 0.07 gslb-idle-cores 0.011 ingest-idle-cores 0.004 slicer-idle-cores\n",
	"./slicer StreamToSegment/redis": "BenchmarkStreamToSegment/redis/perSecond=12000 6 200000000 ns/op 20.00 cpu-µs/msg 60000 msgs/s\n",
}

func fake(_ context.Context, b Bench) (Result, error) {
	if (b.Pkg == "./gslb" || b.Pkg == "./ingest") && !slices.Contains(b.Env, "DANMAKU_BENCH_CLIENT=process") {
		return Result{}, errors.New("the HTTP benchmarks must run their client in a child process")
	}
	if o, ok := output[b.Pkg]; ok {
		return Result{Out: []byte(o)}, nil
	}
	if o, ok := output[b.Pkg+" "+b.Pattern]; ok {
		return Result{Out: []byte(o)}, nil
	}
	return Result{}, errors.New("no such benchmark")
}

func TestParse(t *testing.T) {
	m := Parse([]byte(output["./edge"]))
	if v := m["BenchmarkEdgeScale/wss"]["cpu-µs/connect"]; !slices.Equal(v, []float64{1600}) {
		t.Fatalf("wss cpu-µs/connect = %v, metrics %v", v, m)
	}
	if _, err := m.get("BenchmarkEdgeScale/ws", "p99-ms"); err == nil {
		t.Fatal("a missing metric is an error")
	}
	m = Parse([]byte(output["./gslb"]))
	if v := m["BenchmarkEntryHTTP/entry"]["server-cpu-µs/op"]; !slices.Equal(v, []float64{40, 80, 50}) {
		t.Fatalf("repeated lines: %v", v)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{9, 1, 5}, 5}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestRunAssemblesAProfile(t *testing.T) {
	now := time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)
	var progress bytes.Buffer
	p, err := Run(context.Background(), Config{Run: fake, Now: func() time.Time { return now }, Progress: &progress, Command: "danmaku calibrate"})
	if err != nil {
		t.Fatal(err)
	}
	f := p.Figures
	for _, c := range []struct {
		name string
		got  plan.Figure
		want float64
	}{
		{"edge frame tls", f.EdgeCPUUsPerFrameTLS, 20},
		{"edge bytes", f.EdgeBytesPerConn, 600}, // the first run's: a repeat reuses freed memory
		{"connects tls", f.EdgeConnectsPerSCoreTLS, 1e6 / 1600},
		{"entry", f.EntryAnswersPerSCore, 20000}, // 1e6 / the median 50 µs of the server's CPU
		{"ingest", f.IngestAdmittedPerSCore, 8000},
		{"slicer cpu", f.SlicerCPUMsPerRoomS, 0.1},   // a room's own: the fixed cost is the idle figure's
		{"slicer msgs", f.SlicerMsgsPerSCore, 50000}, // 20 µs a message
		// The median of three runs of each role's idle CPU.
		{"edge idle", f.EdgeIdleCPUCores, 0.008},
		{"ingest idle", f.IngestIdleCPUCores, 0.011},
		{"gslb idle", f.GslbIdleCPUCores, 0.07},
		{"slicer idle", f.SlicerIdleCPUCores, 0.003},
	} {
		if math.Abs(c.got.Value-c.want) > 1e-12 || c.got.Source != plan.SourceMeasured {
			t.Errorf("%s = %+v, want %v measured", c.name, c.got, c.want)
		}
	}
	if !slices.Equal(f.GslbIdleCPUCores.Runs, []float64{0.08, 0.06, 0.07}) || f.GslbIdleCPUCores.Unit != "cores" {
		t.Errorf("gslb idle %+v", f.GslbIdleCPUCores)
	}
	if !slices.Equal(f.EntryAnswersPerSCore.Runs, []float64{25000, 12500, 20000}) {
		t.Errorf("entry runs %v", f.EntryAnswersPerSCore.Runs)
	}
	if f.S3PutsPerRoomSegment.Source != plan.SourceDesign || p.Taken != "2026-12-05T21:00:00Z" {
		t.Errorf("design figures or time: %+v %s", f.S3PutsPerRoomSegment, p.Taken)
	}
	if !strings.Contains(progress.String(), "EDGE_SCALE_TLS=1") {
		t.Errorf("progress names no command:\n%s", progress.String())
	}
}

func TestRunRetriesAFailedBenchmarkOnce(t *testing.T) {
	failures := 1
	flaky := func(ctx context.Context, b Bench) (Result, error) {
		if b.Pkg == "./ingest" && failures > 0 {
			failures--
			return Result{}, errors.New("exit status 1\n1800 of 16000 requests failed")
		}
		return fake(ctx, b)
	}
	var progress bytes.Buffer
	if _, err := Run(context.Background(), Config{Run: flaky, Progress: &progress}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "failed, once more: exit status 1") {
		t.Errorf("progress:\n%s", progress.String())
	}
	failures = 2
	if _, err := Run(context.Background(), Config{Run: flaky}); err == nil || !strings.Contains(err.Error(), "requests failed") {
		t.Fatalf("err = %v after two failures", err)
	}
}

func TestRunRefusesAMissingMetric(t *testing.T) {
	broken := func(ctx context.Context, b Bench) (Result, error) {
		if b.Pkg == "./slicer" && b.Pattern == "IdleRooms" {
			return Result{Out: []byte("BenchmarkIdleRooms/rooms=100-2 1 5000000000 ns/op 3.6 redis-calls/room/s\n")}, nil
		}
		return fake(ctx, b)
	}
	_, err := Run(context.Background(), Config{Run: broken})
	if err == nil || !strings.Contains(err.Error(), "redis-cmds/room/s") {
		t.Fatalf("err = %v, want one naming redis-cmds/room/s", err)
	}
	// A room's own cost is what 100 rooms cost above 1: none left is refused.
	noRoom := func(ctx context.Context, b Bench) (Result, error) {
		if b.Pkg == "./slicer" && b.Pattern == "IdleRooms" {
			return Result{Out: []byte("BenchmarkIdleRooms/rooms=1-2 1 5 ns/op 4 redis-calls/room/s 9 redis-cmds/room/s 20 cpu-ms/room/s\n" +
				"BenchmarkIdleRooms/rooms=100-2 1 5 ns/op 4 redis-calls/room/s 9 redis-cmds/room/s 0.15 cpu-ms/room/s\n")}, nil
		}
		return fake(ctx, b)
	}
	if _, err := Run(context.Background(), Config{Run: noRoom}); err == nil || !strings.Contains(err.Error(), "no room's own cost left") {
		t.Fatalf("err = %v, want one saying no room's own cost is left", err)
	}
	skipped := func(ctx context.Context, b Bench) (Result, error) {
		if b.Pkg == "./ingest" {
			return Result{Out: []byte("--- SKIP: BenchmarkIngestHTTP/redis\nPASS\n")}, nil
		}
		return fake(ctx, b)
	}
	if _, err := Run(context.Background(), Config{Run: skipped}); err == nil || !strings.Contains(err.Error(), "reported no result") {
		t.Fatalf("err = %v, want one saying the benchmark reported nothing", err)
	}
}

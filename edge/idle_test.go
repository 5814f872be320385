package edge

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"danmaku/internal/loadtable"
	"danmaku/internal/redisx/redistest"

	"github.com/redis/go-redis/v9"
)

// BenchmarkIdleEdgeCPU is what an edge with no client costs its process:
// CPU per second of wall time over DANMAKU_IDLE_SECONDS (default 2 s; 1x
// in make test), reporting its load to a real Redis. "every-5ms" reports
// whether or not anything changed (the reporter before it reported on
// change); "on-change" is the default (a report when the allocators would
// decide differently, at least every 250 ms; loadtable.ReportGate). Both in one run.
func BenchmarkIdleEdgeCPU(b *testing.B) {
	rdb := redistest.Client(b)
	idle := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DANMAKU_IDLE_SECONDS")); err == nil && d > 0 {
		idle = d
	}
	for _, tc := range []struct {
		name string
		max  time.Duration
	}{{"every-5ms", time.Nanosecond}, {"on-change", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			table := loadtable.NewRedisTable(rdb)
			var cpuMs, reports float64
			for b.Loop() {
				e := newEnv(b, envOpts{cfg: func(c *Config) {
					c.LoadTable, c.NodeID, c.ReportMaxInterval = table, "idle-"+tc.name, tc.max
				}})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- e.srv.Run(ctx) }()
				time.Sleep(200 * time.Millisecond) // settle
				before, n0 := processCPU(), redisCalls(b, rdb)
				time.Sleep(idle)
				after, n1 := processCPU(), redisCalls(b, rdb)
				cancel()
				<-done
				cpuMs += float64(after-before) / float64(time.Millisecond) / idle.Seconds()
				reports += float64(n1-n0) / idle.Seconds()
			}
			b.ReportMetric(cpuMs/float64(b.N), "cpu-ms/s")
			b.ReportMetric(reports/float64(b.N), "redis-cmds/s")
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCalls is the server's count of commands processed so far.
func redisCalls(b *testing.B, rdb redis.UniversalClient) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no total_commands_processed in INFO stats")
	return 0
}

package gslb_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/gslb"
	"danmaku/internal/loadtable"
	"danmaku/internal/redisx/redistest"
)

// BenchmarkIdleGSLBCPU is what a gslb's allocator costs its process while
// the show is quiet: CPU per second of wall time over DANMAKU_IDLE_SECONDS
// (default 2 s), syncing a real Redis load table that four edges and two
// ingests report to through their real reporters (loadtable.Reporter, in
// this process too: idle, so they write a keep-alive every 250 ms), and
// Redis commands per second. "reporters" runs the reporters alone, what
// the other two include; "every-5ms" syncs every 5 ms whatever changed
// (the allocator before it backed off: MaxSync below Sync); "on-change"
// is the default. All three in one run.
func BenchmarkIdleGSLBCPU(b *testing.B) {
	rdb := redistest.Client(b)
	idle := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DANMAKU_IDLE_SECONDS")); err == nil && d > 0 {
		idle = d
	}
	for _, tc := range []struct {
		name  string
		alloc bool
		cfg   gslb.AllocatorConfig
	}{
		{"reporters", false, gslb.AllocatorConfig{}},
		{"every-5ms", true, gslb.AllocatorConfig{MaxSync: time.Nanosecond}},
		{"on-change", true, gslb.AllocatorConfig{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var cpuMs, cmds float64
			for b.Loop() {
				if err := rdb.FlushAll(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				table := loadtable.NewRedisTable(rdb)
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for i := range 6 {
					l := loadtable.NodeLoad{ID: fmt.Sprintf("edge-%d", i), Kind: loadtable.KindEdge,
						Addr: fmt.Sprintf("ws://10.0.0.%d:8080", i), Conns: 100 + i, Capacity: 10000, CPU: 0.02}
					if i >= 4 {
						l = loadtable.NodeLoad{ID: fmt.Sprintf("ingest-%d", i), Kind: loadtable.KindIngest,
							Addr: fmt.Sprintf("http://10.0.1.%d:8080", i), Capacity: 1000, CPU: 0.01}
					}
					r := &loadtable.Reporter{Table: table, Load: func() loadtable.NodeLoad { return l }}
					wg.Go(func() { _ = r.Run(ctx) })
				}
				if tc.alloc {
					cfg := tc.cfg
					cfg.Table = table
					a, err := gslb.NewAllocator(cfg)
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() { _ = a.Run(ctx) })
				}
				time.Sleep(200 * time.Millisecond) // settle
				before, n0 := processCPU(), redisCalls(b, rdb)
				time.Sleep(idle)
				after, n1 := processCPU(), redisCalls(b, rdb)
				cancel()
				wg.Wait()
				cpuMs += float64(after-before) / float64(time.Millisecond) / idle.Seconds()
				cmds += float64(n1-n0) / idle.Seconds()
			}
			b.ReportMetric(cpuMs/float64(b.N), "cpu-ms/s")
			b.ReportMetric(cmds/float64(b.N), "redis-cmds/s")
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

package gslb_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/auth"
	"danmaku/gslb"
	ingestpkg "danmaku/ingest"
	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/internal/sysload"
)

// BenchmarkIdleGSLBCPU is what a gslb's allocator costs its process while
// the show is quiet: CPU per second of wall time over DANMAKU_IDLE_SECONDS
// (default 2 s), syncing a real Redis load table that four edges and two
// ingests report to through their real reporters (loadtable.Reporter, in
// this process too: idle, so they write a keep-alive every 250 ms), and
// the process's Redis round trips per second. "reporters" runs the
// reporters alone, which the other two include; "every-5ms" syncs every
// 5 ms whatever it read (the allocator before it backed off: MaxSync below
// Sync); "on-change" is the default. All three in one run.
func BenchmarkIdleGSLBCPU(b *testing.B) {
	rdb := redistest.Client(b)
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
			measureIdle(b, func(ctx context.Context, wg *sync.WaitGroup) {
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				table := loadtable.NewRedisTable(rdb)
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
			})
		})
	}
}

// BenchmarkIdleIngestCPU is the same measure for an ingest node with no
// client (its stream store, room gate and gift log in a real Redis, its
// load reported to and the online counts read from the Redis load table):
// the gslb's neighbour at a quiet show, here to share the measure.
func BenchmarkIdleIngestCPU(b *testing.B) {
	rdb := redistest.Client(b)
	ctx := context.Background()
	secrets, master := auth.NewMemorySecrets(), []byte("idle-bench-master-key-0123456789-abcdef")
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: master, Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: master, Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	if err := center.Publish(ctx); err != nil {
		b.Fatal(err)
	}
	if err := ring.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	measureIdle(b, func(ctx context.Context, wg *sync.WaitGroup) {
		rs, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		gate, err := ingestpkg.NewRedisRoomGate(ingestpkg.RedisRoomGateConfig{Client: rdb, Streams: rs, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		gifts, err := ingestpkg.NewRedisGiftLog(ingestpkg.RedisGiftLogConfig{Client: rdb, Streams: rs, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		srv, err := ingestpkg.New(ingestpkg.Config{
			Streams: rs, Keyring: ring, Addr: "http://ingest-idle", NodeID: "ingest-idle",
			Load: loadtable.NewRedisTable(rdb), Gate: gate, Gifts: gifts,
			Registerer: prometheus.NewRegistry(), Clock: clock.Real{}, Logger: discard,
		})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = srv.Run(ctx) })
	})
}

// measureIdle runs what start starts (goroutines in wg, stopped with ctx)
// once per iteration, lets it settle, and reports the process's CPU and
// Redis round trips per second of wall time over DANMAKU_IDLE_SECONDS.
func measureIdle(b *testing.B, start func(ctx context.Context, wg *sync.WaitGroup)) {
	idle := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DANMAKU_IDLE_SECONDS")); err == nil && d > 0 {
		idle = d
	}
	var cpuMs, trips float64
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		start(ctx, &wg)
		time.Sleep(200 * time.Millisecond) // settle
		cpu0, trips0 := sysload.ProcessTime(), redisx.RoundTrips()
		time.Sleep(idle)
		cpu1, trips1 := sysload.ProcessTime(), redisx.RoundTrips()
		cancel()
		wg.Wait()
		cpuMs += float64(cpu1-cpu0) / float64(time.Millisecond) / idle.Seconds()
		trips += (trips1 - trips0) / idle.Seconds()
	}
	b.ReportMetric(cpuMs/float64(b.N), "cpu-ms/s")
	b.ReportMetric(trips/float64(b.N), "redis-trips/s")
}

package ingest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"danmaku/auth"
	"danmaku/internal/clock"
	"danmaku/internal/loadtable"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
)

// BenchmarkIdleIngestCPU is what an ingest node with no client costs its
// process: CPU per second of wall time over DANMAKU_IDLE_SECONDS (default
// 2 s), with its stream store, room gate and gift log in a real Redis and
// its load reported to (and the online counts read from) the Redis load
// table, and Redis commands per second. A baseline for the gslb's
// (BenchmarkIdleGSLBCPU): nothing here changed with it.
func BenchmarkIdleIngestCPU(b *testing.B) {
	rdb := redistest.Client(b)
	idle := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DANMAKU_IDLE_SECONDS")); err == nil && d > 0 {
		idle = d
	}
	secrets := auth.NewMemorySecrets()
	center, err := auth.NewCenter(auth.CenterConfig{Store: secrets, MasterKey: testMaster, Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	ring, err := auth.NewKeyring(auth.KeyringConfig{Store: secrets, MasterKey: testMaster, Logger: discard})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := center.Publish(ctx); err != nil {
		b.Fatal(err)
	}
	if err := ring.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	var cpuMs, cmds float64
	for b.Loop() {
		rs, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		gate, err := NewRedisRoomGate(RedisRoomGateConfig{Client: rdb, Streams: rs, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		gifts, err := NewRedisGiftLog(RedisGiftLogConfig{Client: rdb, Streams: rs, Logger: discard})
		if err != nil {
			b.Fatal(err)
		}
		srv, err := New(Config{
			Streams: rs, Keyring: ring, Addr: "http://ingest-idle", NodeID: "ingest-idle",
			Load: loadtable.NewRedisTable(rdb), Gate: gate, Gifts: gifts,
			Registerer: prometheus.NewRegistry(), Clock: clock.Real{}, Logger: discard,
		})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = srv.Run(runCtx) })
		time.Sleep(200 * time.Millisecond) // settle
		before, n0 := idleProcessCPU(), idleRedisCalls(b, rdb)
		time.Sleep(idle)
		after, n1 := idleProcessCPU(), idleRedisCalls(b, rdb)
		cancel()
		wg.Wait()
		cpuMs += float64(after-before) / float64(time.Millisecond) / idle.Seconds()
		cmds += float64(n1-n0) / idle.Seconds()
	}
	b.ReportMetric(cpuMs/float64(b.N), "cpu-ms/s")
	b.ReportMetric(cmds/float64(b.N), "redis-cmds/s")
}

func idleProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idleRedisCalls is the server's count of commands processed so far.
func idleRedisCalls(b *testing.B, rdb redis.UniversalClient) int64 {
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

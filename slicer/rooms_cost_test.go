package slicer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"danmaku/internal/event"
	"danmaku/internal/objstore"
	"danmaku/internal/redisx"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/stream"
	"danmaku/internal/testenv"
)

// roomsRig runs slicers on one real Redis for an event of n rooms.
type roomsRig struct {
	rdb     redis.UniversalClient
	lease   Lease
	calls   *callCounter
	streams *stream.RedisStore
	dir     *event.Directory
	rooms   []string
}

func newRoomsRig(tb testing.TB, n int) *roomsRig {
	tb.Helper()
	addr := testenv.Redis(tb)
	// As the stack opens them: a pool wide enough for a blocking read per
	// room, and the leases on a client of their own.
	rdb := redistest.Dial(tb, redisx.Config{URL: addr, PoolSize: 2048})
	leaseRDB := redistest.Dial(tb, redisx.Config{URL: addr})
	calls := &callCounter{}
	rdb.AddHook(calls)
	leaseRDB.AddHook(calls)
	streams, err := stream.NewRedisStore(stream.RedisConfig{Client: rdb})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	ev := event.Event{ID: "many", Start: now.Add(-time.Second), End: now.Add(time.Hour)}
	r := &roomsRig{rdb: rdb, lease: NewRedisLease(leaseRDB), calls: calls, streams: streams}
	for i := range n {
		id := fmt.Sprintf("room-%d", i)
		ev.Rooms = append(ev.Rooms, event.Room{ID: id})
		r.rooms = append(r.rooms, id)
	}
	store := event.NewMemoryStore()
	if err := store.Create(context.Background(), ev); err != nil {
		tb.Fatal(err)
	}
	if r.dir, err = event.NewDirectory(event.DirectoryConfig{Store: store}); err != nil {
		tb.Fatal(err)
	}
	if err := r.dir.Refresh(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return r
}

// start runs a slicer named node until the test ends.
func (r *roomsRig) start(tb testing.TB, node string, objects objstore.Store) *Slicer {
	tb.Helper()
	s, err := New(Config{Streams: r.streams, Objects: objects, Lease: r.lease, Events: r.dir, NodeID: node,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	return s
}

// callCounter counts what a client sends Redis: one per command, one per
// pipeline (a round trip). Commands a script runs inside Redis are not
// calls of the client.
type callCounter struct{ n atomic.Int64 }

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

func (r *roomsRig) commands(tb testing.TB) int64 {
	info, err := r.rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	tb.Fatal("no total_commands_processed")
	return 0
}

func led(s ...*Slicer) int {
	n := 0
	for _, x := range s {
		n += int(gaugeValue(x.m.leaderFor))
	}
	return n
}

// manifestsOnly keeps manifests and drops segments: the benchmark measures
// the slicer, not an in-memory bucket growing by a segment a room a second.
type manifestsOnly struct{ objstore.Store }

func (o manifestsOnly) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (string, error) {
	if strings.HasSuffix(key, "live.json") {
		return o.Store.Put(ctx, key, body, opts)
	}
	return `"seg"`, nil
}

// slowObjects holds every Put while held is set, until released: a
// process whose rooms' loops are stuck (a hung store, a starved CPU) for
// as long as the test wants, with the loops stuck in it counted.
type slowObjects struct {
	objstore.Store
	mu       sync.Mutex
	held     chan struct{} // nil: Puts pass
	inflight atomic.Int64
}

func (o *slowObjects) hold() {
	o.mu.Lock()
	o.held = make(chan struct{})
	o.mu.Unlock()
}

func (o *slowObjects) release() {
	o.mu.Lock()
	if o.held != nil {
		close(o.held)
		o.held = nil
	}
	o.mu.Unlock()
}

func (o *slowObjects) Put(ctx context.Context, key string, body []byte, opts objstore.PutOptions) (string, error) {
	o.mu.Lock()
	held := o.held
	o.mu.Unlock()
	if held != nil {
		o.inflight.Add(1)
		defer o.inflight.Add(-1)
		select {
		case <-held:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return o.Store.Put(ctx, key, body, opts)
}

// TestLeasesOutliveBusyLoops: a leader whose rooms' loops are all stuck —
// every segment write hanging, goroutines burning the CPU — keeps renewing
// every lease past two lease lifetimes, because renewal runs apart from the
// rooms' work, and the standby takes no room meanwhile. The test counts
// renewals rather than timing them: each lease's last renewal must move two
// TTLs past the moment every loop was stuck, which only the renewer can do
// (a stuck loop renews nothing). On a machine starved for longer than a
// TTL at once, a lease may lapse and the standby rightly take the room:
// that is logged, not failed (it failed so under a CPU hog beside a whole
// -race suite, load ~40 on 2 cores).
func TestLeasesOutliveBusyLoops(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real Redis for several seconds")
	}
	const n = 20
	r := newRoomsRig(t, n)
	slow := &slowObjects{Store: objstore.NewMemoryStore()}
	a := r.start(t, "a", slow)
	waitUntil(t, "a to lead every room", func() bool { return led(a) == n })
	b := r.start(t, "b", objstore.NewMemoryStore())
	waitUntil(t, "b to stand by for every room", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.rooms) == n
	})

	slow.hold()
	defer slow.release()
	waitUntil(t, "every room's loop stuck in a write", func() bool { return slow.inflight.Load() == n })
	stuck := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	for range runtime.GOMAXPROCS(0) * 2 {
		go func() { // hog the CPU meanwhile
			for {
				select {
				case <-stop:
					return
				//lint:ignore SA5004 the loop spins on purpose: it hogs the CPU
				default:
				}
			}
		}()
	}
	lapsed := 0
	waitUntil(t, "every lease renewed two TTLs after the loops stuck", func() bool {
		if got := led(b); got > lapsed {
			lapsed = got
		}
		a.leasesMu.Lock()
		defer a.leasesMu.Unlock()
		renewed := 0
		for _, l := range a.leases {
			if !l.lost.Load() && l.at().Sub(stuck) >= 2*defaultLeaseTTL {
				renewed++
			}
		}
		return renewed == n-lapsed
	})
	if slow.inflight.Load() != n {
		t.Fatalf("%d of %d loops still stuck: the renewals could be theirs", slow.inflight.Load(), n)
	}
	if lapsed > 0 {
		t.Logf("the standby took %d rooms: the leader's renewer was starved for a lease's life (a loaded machine)", lapsed)
	} else if got := led(b); got != 0 {
		t.Fatalf("the standby took %d rooms while the leader renewed every lease", got)
	}
	slow.release()
	if lapsed == 0 && led(a) != n {
		t.Fatalf("the leader holds %d of %d rooms", led(a), n)
	}
}

// BenchmarkIdleRooms measures what a live room without traffic costs a
// leader and its standby together on real Redis: calls to Redis per room per
// second (a command or a pipeline the slicers send), the commands Redis runs
// for them (scripts' inner commands included), slicer CPU per room per second (both slicers, one process)
// and heap per room. `make test` runs 10 rooms once; `make bench-rooms`
// runs DANMAKU_ROOMS=10,100,1000 (docs/benchmarks.md). Segments go to an
// in-memory object store: PUTs are counted, not timed.
func BenchmarkIdleRooms(b *testing.B) {
	counts := []int{10}
	if v := strings.TrimSpace(envOr("DANMAKU_ROOMS", "")); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("DANMAKU_ROOMS=%q", v)
			}
			counts = append(counts, n)
		}
	}
	window := 10 * time.Second
	if v, err := time.ParseDuration(envOr("DANMAKU_ROOMS_WINDOW", "")); err == nil {
		window = v
	}
	for _, n := range counts {
		b.Run(fmt.Sprintf("rooms=%d", n), func(b *testing.B) {
			for range b.N {
				r := newRoomsRig(b, n)
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				rss0 := rssBytes()
				objects := manifestsOnly{objstore.NewMemoryStore()}
				la := r.start(b, "a", objects)
				waitUntil(b, fmt.Sprintf("a to lead every room (%d/%d)", led(la), n), func() bool { return led(la) == n })
				lb := r.start(b, "b", objects)
				time.Sleep(2 * time.Second) // settle: b a standby, every room caught up
				cmd0, calls0, cpu0, written0 := r.commands(b), r.calls.n.Load(), cpuTime(), counterValue(la.m.written.WithLabelValues("written"))
				start := time.Now()
				time.Sleep(window)
				secs := time.Since(start).Seconds()
				calls := float64(r.calls.n.Load()-calls0-1) / secs / float64(n)
				cmds := float64(r.commands(b)-cmd0-2) / secs / float64(n)
				cpu := (cpuTime() - cpu0).Seconds() / secs / float64(n)
				puts := (counterValue(la.m.written.WithLabelValues("written")) - written0) / secs / float64(n)
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				heap := float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / float64(n)
				rss := float64(rssBytes()-rss0) / float64(n)
				if led(lb) != 0 {
					b.Fatalf("the standby leads %d rooms", led(lb))
				}
				b.ReportMetric(calls, "redis-calls/room/s")
				b.ReportMetric(cmds, "redis-cmds/room/s")
				b.ReportMetric(cpu*1e3, "cpu-ms/room/s")
				b.ReportMetric(heap/1024, "heap-KiB/room")
				b.ReportMetric(rss/1024, "rss-KiB/room")
				b.ReportMetric(puts, "segments/room/s")
			}
		})
	}
}

// rssBytes is the process's resident set (Linux), 0 where unknown.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envOr(name, def string) string {
	if v, ok := lookupEnv(name); ok {
		return v
	}
	return def
}

func lookupEnv(name string) (string, bool) { return os.LookupEnv(name) }

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	_ = g.Write(&m)
	return m.GetGauge().GetValue()
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
